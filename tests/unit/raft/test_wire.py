"""strom.raft.wire: every message round-trips; any other input raises only WireError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.raft import wire
from strom.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    Message,
    Snapshot,
    SnapshotRequest,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from strom.raft.wire import WireError, decode, encode

node_ids = st.integers(min_value=0, max_value=2**31 - 1)
counters = st.integers(min_value=0, max_value=2**63 - 1)
small_counters = st.integers(min_value=0, max_value=10**6)
payloads = st.binary(max_size=64)


@st.composite
def append_requests(draw: st.DrawFn) -> AppendRequest:
    prev_index = draw(small_counters)
    terms = draw(st.lists(small_counters, max_size=8))
    entries = tuple(Entry(prev_index + 1 + i, term, draw(payloads)) for i, term in enumerate(terms))
    return AppendRequest(
        draw(node_ids),
        draw(node_ids),
        draw(counters),
        prev_index,
        draw(counters),
        entries,
        draw(counters),
    )


messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        VoteRequest, node_ids, node_ids, counters, counters, counters, st.booleans(), st.booleans()
    ),
    st.builds(VoteResponse, node_ids, node_ids, counters, st.booleans(), st.booleans()),
    append_requests(),
    st.builds(AppendResponse, node_ids, node_ids, counters, st.booleans(), counters, counters),
    st.builds(
        SnapshotRequest,
        node_ids,
        node_ids,
        counters,
        st.builds(Snapshot, counters, counters, st.binary(max_size=200)),
    ),
    st.builds(TimeoutNow, node_ids, node_ids, counters),
)


def decode_or_wire_error(data: bytes) -> Message | None:
    """decode, which may only fail with WireError; a success must re-encode to `data`."""
    try:
        message = decode(data)
    except WireError:
        return None
    assert encode(message) == data  # the encoding is canonical: one message, one encoding
    return message


@settings(max_examples=200, deadline=None)
@given(messages)
def test_every_message_round_trips(message: Message) -> None:
    data = encode(message)
    assert data[0] == wire.VERSION
    assert decode(data) == message
    assert decode(bytearray(data)) == message
    assert decode(memoryview(data)) == message


@settings(max_examples=60, deadline=None)
@given(messages)
def test_every_truncation_raises_wire_error(message: Message) -> None:
    data = encode(message)
    for cut in range(len(data)):
        with pytest.raises(WireError):
            decode(data[:cut])
    with pytest.raises(WireError):
        decode(data + b"\x00")


@settings(max_examples=200, deadline=None)
@given(messages, st.data())
def test_bit_flips_raise_wire_error_or_decode_canonically(
    message: Message, data: st.DataObject
) -> None:
    encoded = bytearray(encode(message))
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        position = data.draw(st.integers(min_value=0, max_value=len(encoded) - 1))
        encoded[position] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
    decode_or_wire_error(bytes(encoded))


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200))
def test_garbage_raises_wire_error(data: bytes) -> None:
    decode_or_wire_error(data)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=6), st.binary(max_size=120))
def test_garbage_after_a_valid_header_raises_wire_error(kind: int, body: bytes) -> None:
    decode_or_wire_error(struct.pack(">BBiiq", wire.VERSION, kind, 1, 2, 3) + body)


def test_hostile_lengths_are_refused_without_allocating() -> None:
    header = struct.pack(">BBiiq", wire.VERSION, 3, 1, 2, 3)
    huge_count = header + struct.pack(">qqqI", 0, 0, 0, 2**32 - 1)
    with pytest.raises(WireError, match="cannot fit"):
        decode(huge_count)
    huge_entry = header + struct.pack(">qqqI", 0, 0, 0, 1) + struct.pack(">qqI", 1, 1, 2**32 - 1)
    with pytest.raises(WireError, match="claims"):
        decode(huge_entry)
    snapshot = struct.pack(">BBiiq", wire.VERSION, 5, 1, 2, 3) + struct.pack(
        ">qqI", 1, 1, 2**32 - 1
    )
    with pytest.raises(WireError, match="snapshot data"):
        decode(snapshot)


def test_wrong_version_type_flags_and_negative_fields_are_refused() -> None:
    good = encode(VoteResponse(1, 2, 3, granted=True, pre_vote=False))
    with pytest.raises(WireError, match="version"):
        decode(bytes([2]) + good[1:])
    with pytest.raises(WireError, match="unknown Raft message type"):
        decode(good[:1] + bytes([99]) + good[2:])
    with pytest.raises(WireError, match="flags"):
        decode(good[:-1] + bytes([4]))
    with pytest.raises(WireError, match="flags"):
        decode(encode(AppendResponse(1, 2, 3, True, 4, 5))[:-1] + bytes([2]))
    with pytest.raises(WireError, match="negative"):
        decode(struct.pack(">BBiiq", wire.VERSION, 6, 1, 2, -1))


def test_append_request_entries_must_follow_prev_index() -> None:
    message = AppendRequest(1, 2, 3, 10, 2, (Entry(11, 3, b"a"), Entry(12, 3, b"b")), 9)
    data = bytearray(encode(message))
    second_index = len(data) - 1 - 20
    struct.pack_into(">q", data, second_index, 13)
    with pytest.raises(WireError, match="expected"):
        decode(bytes(data))
    with pytest.raises(WireError, match="expected"):
        encode(AppendRequest(1, 2, 3, 10, 2, (Entry(12, 3, b""),), 9))


def test_encode_refuses_what_it_cannot_represent() -> None:
    with pytest.raises(WireError):
        encode(TimeoutNow(-1, 2, 3))
    with pytest.raises(WireError):
        encode(TimeoutNow(2**31, 2, 3))
    with pytest.raises(WireError):
        encode(VoteRequest(1, 2, 3, 2**63, 0, pre_vote=False, leadership_transfer=False))
    with pytest.raises(WireError):
        encode(AppendRequest(1, 2, 3, 0, 0, (Entry(1, -1, b""),), 0))
    with pytest.raises(WireError):
        encode("not a message")  # type: ignore[arg-type]


def test_a_large_append_request_round_trips() -> None:
    entries = tuple(Entry(101 + i, 7, bytes([i % 256]) * 200) for i in range(5_000))
    message = AppendRequest(1, 2, 7, 100, 6, entries, 90)
    data = encode(message)
    assert len(data) == 2 + 16 + 28 + 5_000 * (20 + 200)
    decoded = decode(data)
    assert decoded == message
    assert all(type(entry) is Entry for entry in decoded.entries)
    assert hash(decoded.entries[0]) == hash(entries[0])
