"""strom's private node-to-node payloads (server/private.py): round trips and bad input."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from strom.raft.messages import Entry, Snapshot
from strom.server.private import (
    FORWARD_NOT_CONTROLLER,
    ForwardedRequest,
    MetadataFetchRequest,
    MetadataFetchResponse,
    PrivatePayloadError,
    decode_fetch_request,
    decode_fetch_response,
    decode_forward_request,
    decode_forward_response,
    decode_hello,
    encode_fetch_request,
    encode_fetch_response,
    encode_forward_request,
    encode_forward_response,
    encode_hello,
)

offsets = st.integers(min_value=0, max_value=2**63 - 1)


@given(offset=offsets, frame=st.binary(max_size=64))
def test_a_forward_answer_round_trips(offset: int, frame: bytes) -> None:
    assert decode_forward_response(encode_forward_response(offset, frame)) == (offset, frame)


texts = st.text(max_size=40)


@given(frame=st.binary(max_size=64), principal=texts.filter(bool), host=texts)
@example(frame=b"", principal="User:\udc80", host="")  # a lone surrogate survives too
def test_a_forwarded_clients_request_round_trips(frame: bytes, principal: str, host: str) -> None:
    carried = ForwardedRequest(frame, principal, host)
    assert carried.version == 1
    assert decode_forward_request(1, encode_forward_request(carried)) == carried


@given(frame=st.binary(max_size=64))
def test_a_nodes_own_forward_is_the_bare_frame(frame: bytes) -> None:
    own = ForwardedRequest(frame)
    assert own.version == 0 and encode_forward_request(own) == frame
    assert decode_forward_request(0, frame) == own


@given(payload=st.binary(max_size=80))
def test_any_bytes_as_a_clients_forward_decode_or_are_refused(payload: bytes) -> None:
    try:
        carried = decode_forward_request(1, payload)
    except PrivatePayloadError:
        return
    assert carried.principal and encode_forward_request(carried) == payload


@pytest.mark.parametrize(
    ("version", "payload", "message"),
    [
        (1, b"\x00", "truncated before its principal"),
        (1, b"\x00\x05User", "truncated principal"),
        (1, b"\xff\xffUser", "truncated principal"),
        (1, b"\x00\x01A\x00", "truncated before its client host"),
        (1, b"\x00\x01\xff\x00\x00", "principal is not UTF-8"),
        (1, b"\x00\x00\x00\x00frame", "empty principal"),
        (7, b"", "unknown FORWARD version 7"),
    ],
)
def test_a_bad_forward_request_is_refused(version: int, payload: bytes, message: str) -> None:
    with pytest.raises(PrivatePayloadError, match=message):
        decode_forward_request(version, payload)


def test_not_the_controller_is_an_answer_of_its_own() -> None:
    payload = encode_forward_response(FORWARD_NOT_CONTROLLER, b"")
    assert decode_forward_response(payload) == (FORWARD_NOT_CONTROLLER, b"")


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\x00\x00\x00", "forward response shorter than its header"),
        (encode_forward_response(-2, b"x"), "forward response with offset -2"),
    ],
)
def test_bad_forward_answers_are_refused(payload: bytes, message: str) -> None:
    with pytest.raises(PrivatePayloadError, match=message):
        decode_forward_response(payload)


def test_hello_round_trips_and_refuses_wrong_types() -> None:
    assert decode_hello(encode_hello(3, "q1Sh")) == (3, "q1Sh")
    assert decode_hello(encode_hello(1, None)) == (1, None)
    for bad in (b"{", b'{"node_id": "3", "cluster_id": null}', b"[]"):
        with pytest.raises(PrivatePayloadError):
            decode_hello(bad)


def test_fetch_request_round_trips_and_refuses_out_of_range() -> None:
    request = MetadataFetchRequest(node_id=2, from_index=17, max_wait_ms=500)
    assert decode_fetch_request(encode_fetch_request(request)) == request
    with pytest.raises(PrivatePayloadError, match="out of range"):
        decode_fetch_request(encode_fetch_request(MetadataFetchRequest(2, 0, 500)))
    with pytest.raises(PrivatePayloadError, match="of 3 bytes"):
        decode_fetch_request(b"abc")


entries = st.lists(st.builds(Entry, offsets, offsets, st.binary(max_size=32)), max_size=5).map(
    tuple
)
snapshots = st.none() | st.builds(Snapshot, offsets, offsets, st.binary(max_size=32))


@given(
    leader=st.integers(min_value=-1, max_value=2**31 - 1),
    term=offsets,
    commit=offsets,
    snapshot=snapshots,
    entries=entries,
)
def test_fetch_response_round_trips(
    leader: int,
    term: int,
    commit: int,
    snapshot: Snapshot | None,
    entries: tuple[Entry, ...],
) -> None:
    response = MetadataFetchResponse(leader, term, commit, snapshot, entries)
    assert decode_fetch_response(encode_fetch_response(response)) == response


@given(data=st.binary(max_size=80))
@example(data=bytes(26))  # a whole empty response and one byte more
@example(data=bytes(20) + b"\x02" + bytes(4))  # a snapshot flag that is neither 0 nor 1
def test_fetch_response_garbage_is_refused_or_is_exactly_a_response(data: bytes) -> None:
    try:
        response = decode_fetch_response(data)
    except PrivatePayloadError:
        return
    assert encode_fetch_response(response) == data
