"""strom's private node-to-node payloads (server/private.py): round trips and bad input."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from strom.raft.messages import Entry, Snapshot
from strom.server.private import (
    FORWARD_NOT_CONTROLLER,
    MetadataFetchRequest,
    MetadataFetchResponse,
    PrivatePayloadError,
    decode_fetch_request,
    decode_fetch_response,
    decode_forward_response,
    decode_hello,
    encode_fetch_request,
    encode_fetch_response,
    encode_forward_response,
    encode_hello,
)

offsets = st.integers(min_value=0, max_value=2**63 - 1)


@given(offset=offsets, frame=st.binary(max_size=64))
def test_a_forward_answer_round_trips(offset: int, frame: bytes) -> None:
    assert decode_forward_response(encode_forward_response(offset, frame)) == (offset, frame)


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
