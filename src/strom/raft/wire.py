"""strom's binary encoding of the Raft messages between controllers.

Written by hand: the messages are strom's own (not a Kafka API), and a struct layout is
the smallest and fastest encoding for them.

Every message is one frame body (the controller listener frames it), integers
big-endian, node ids int32 and terms and indexes int64, none of them negative:

    [version u8 = 1][type u8][sender i32][recipient i32][term i64] then, by type:

    1 VoteRequest     [last_log_index i64][last_log_term i64]
                      [flags u8: 1 = pre_vote, 2 = leadership_transfer]
    2 VoteResponse    [flags u8: 1 = granted, 2 = pre_vote]
    3 AppendRequest   [prev_index i64][prev_term i64][commit i64][entry count u32]
                      then per entry: [index i64][term i64][data length u32][data]
                      (indexes consecutive from prev_index + 1)
    4 AppendResponse  [match_index i64][hint_index i64][flags u8: 1 = success]
    5 SnapshotRequest [index i64][term i64][data length u32][data]
    6 TimeoutNow      (nothing more)

Nothing may follow the message. `decode` raises `WireError` for any input that is not
exactly one well-formed message, and never allocates more than the input's size.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable

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

__all__ = ["VERSION", "WireError", "decode", "encode"]

VERSION = 1

_VOTE_REQUEST = 1
_VOTE_RESPONSE = 2
_APPEND_REQUEST = 3
_APPEND_RESPONSE = 4
_SNAPSHOT_REQUEST = 5
_TIMEOUT_NOW = 6

_FLAG_1 = 1
_FLAG_2 = 2

_HEADER = struct.Struct(">BBiiq")  # version, type, sender, recipient, term
_VOTE_REQUEST_BODY = struct.Struct(">qqB")
_VOTE_RESPONSE_BODY = struct.Struct(">B")
_APPEND_REQUEST_BODY = struct.Struct(">qqqI")
_ENTRY = struct.Struct(">qqI")
_APPEND_RESPONSE_BODY = struct.Struct(">qqB")
_SNAPSHOT_BODY = struct.Struct(">qqI")

_H = _HEADER.size
_ENTRY_BYTES = _ENTRY.size


def _entry_maker() -> Callable[[int, int, bytes], Entry]:
    """`Entry` without its frozen dataclass `__init__`, which costs about 3x as much per
    entry when decoding; the plain constructor if `Entry` ever changes shape."""
    names = tuple(field.name for field in dataclasses.fields(Entry))
    if names != ("index", "term", "data") or hasattr(Entry, "__post_init__"):
        return Entry
    set_index, set_term, set_data = (Entry.__dict__[name].__set__ for name in names)
    new = object.__new__

    def make(index: int, term: int, data: bytes) -> Entry:
        entry: Entry = new(Entry)
        set_index(entry, index)
        set_term(entry, term)
        set_data(entry, data)
        return entry

    return make


_make_entry = _entry_maker()


_MESSAGE_TYPES = (
    VoteRequest,
    VoteResponse,
    AppendRequest,
    AppendResponse,
    SnapshotRequest,
    TimeoutNow,
)


class WireError(ValueError):
    """Bytes that are not one well-formed Raft message (or a message that cannot be sent)."""


# --- encoding ---------------------------------------------------------------------------


def encode(message: Message) -> bytes:
    """The frame body for `message`; WireError if a field is negative or out of range."""
    try:
        return _encode(message)
    except struct.error as exc:
        raise WireError(f"cannot encode {type(message).__name__}: {exc}") from None


def _encode(message: Message) -> bytes:
    if not isinstance(message, _MESSAGE_TYPES):
        raise WireError(f"not a Raft message: {type(message).__name__}")
    _non_negative(message.sender, message.recipient, message.term)
    if isinstance(message, AppendRequest):
        return _encode_append_request(message)
    if isinstance(message, VoteRequest):
        _non_negative(message.last_log_index, message.last_log_term)
        flags = (_FLAG_1 if message.pre_vote else 0) | (
            _FLAG_2 if message.leadership_transfer else 0
        )
        body = _VOTE_REQUEST_BODY.pack(message.last_log_index, message.last_log_term, flags)
        return _header(_VOTE_REQUEST, message) + body
    if isinstance(message, VoteResponse):
        flags = (_FLAG_1 if message.granted else 0) | (_FLAG_2 if message.pre_vote else 0)
        return _header(_VOTE_RESPONSE, message) + _VOTE_RESPONSE_BODY.pack(flags)
    if isinstance(message, AppendResponse):
        _non_negative(message.match_index, message.hint_index)
        body = _APPEND_RESPONSE_BODY.pack(
            message.match_index, message.hint_index, _FLAG_1 if message.success else 0
        )
        return _header(_APPEND_RESPONSE, message) + body
    if isinstance(message, SnapshotRequest):
        snapshot = message.snapshot
        _non_negative(snapshot.index, snapshot.term)
        body = _SNAPSHOT_BODY.pack(snapshot.index, snapshot.term, len(snapshot.data))
        return b"".join((_header(_SNAPSHOT_REQUEST, message), body, snapshot.data))
    return _header(_TIMEOUT_NOW, message)


def _header(kind: int, message: Message) -> bytes:
    return _HEADER.pack(VERSION, kind, message.sender, message.recipient, message.term)


def _encode_append_request(message: AppendRequest) -> bytes:
    _non_negative(message.prev_index, message.prev_term, message.commit)
    entries = message.entries
    parts: list[bytes] = [
        _header(_APPEND_REQUEST, message),
        _APPEND_REQUEST_BODY.pack(
            message.prev_index, message.prev_term, message.commit, len(entries)
        ),
    ]
    pack = _ENTRY.pack
    append = parts.append
    expected = message.prev_index + 1
    for entry in entries:
        if entry.index != expected:
            raise WireError(f"entry index {entry.index} where {expected} was expected")
        if entry.term < 0:
            raise WireError(f"negative term {entry.term}")
        append(pack(expected, entry.term, len(entry.data)))
        append(entry.data)
        expected += 1
    return b"".join(parts)


def _non_negative(*values: int) -> None:
    for value in values:
        if value < 0:
            raise WireError(f"negative field {value}")


# --- decoding ---------------------------------------------------------------------------


def decode(data: bytes | bytearray | memoryview) -> Message:
    """The message in `data`; WireError unless it is exactly one well-formed message."""
    try:
        return _decode(data if isinstance(data, bytes) else bytes(data))
    except struct.error as exc:  # the length checks come first; this is a second net
        raise WireError(f"malformed Raft message: {exc}") from None


def _decode(data: bytes) -> Message:
    if len(data) < _H:
        raise WireError(f"{len(data)} bytes: shorter than a message header ({_H})")
    version, kind, sender, recipient, term = _HEADER.unpack_from(data)
    if version != VERSION:
        raise WireError(f"unsupported Raft wire version {version}")
    _check(0, 0, sender, recipient, term)
    if kind == _APPEND_REQUEST:
        return _decode_append_request(data, sender, recipient, term)
    if kind == _VOTE_REQUEST:
        last_index, last_term, flags = _body(_VOTE_REQUEST_BODY, data)
        _check(_FLAG_1 | _FLAG_2, flags, last_index, last_term)
        return VoteRequest(
            sender,
            recipient,
            term,
            last_index,
            last_term,
            pre_vote=bool(flags & _FLAG_1),
            leadership_transfer=bool(flags & _FLAG_2),
        )
    if kind == _VOTE_RESPONSE:
        (flags,) = _body(_VOTE_RESPONSE_BODY, data)
        _check(_FLAG_1 | _FLAG_2, flags)
        return VoteResponse(
            sender, recipient, term, granted=bool(flags & _FLAG_1), pre_vote=bool(flags & _FLAG_2)
        )
    if kind == _APPEND_RESPONSE:
        match_index, hint_index, flags = _body(_APPEND_RESPONSE_BODY, data)
        _check(_FLAG_1, flags, match_index, hint_index)
        return AppendResponse(sender, recipient, term, bool(flags), match_index, hint_index)
    if kind == _SNAPSHOT_REQUEST:
        return _decode_snapshot_request(data, sender, recipient, term)
    if kind == _TIMEOUT_NOW:
        if len(data) != _H:
            raise WireError(f"{len(data) - _H} bytes after a TimeoutNow")
        return TimeoutNow(sender, recipient, term)
    raise WireError(f"unknown Raft message type {kind}")


def _body(body: struct.Struct, data: bytes) -> tuple[int, ...]:
    if len(data) != _H + body.size:
        raise WireError(f"{len(data)} bytes for a message of {_H + body.size}")
    values: tuple[int, ...] = body.unpack_from(data, _H)
    return values


def _check(allowed_flags: int, flags: int, *values: int) -> None:
    if flags & ~allowed_flags:
        raise WireError(f"unknown flags {flags:#x}")
    for value in values:
        if value < 0:
            raise WireError(f"negative field {value}")


def _decode_append_request(data: bytes, sender: int, recipient: int, term: int) -> AppendRequest:
    size = len(data)
    position = _H + _APPEND_REQUEST_BODY.size
    if size < position:
        raise WireError(f"{size} bytes: shorter than an AppendRequest header")
    prev_index, prev_term, commit, count = _APPEND_REQUEST_BODY.unpack_from(data, _H)
    _check(0, 0, prev_index, prev_term, commit)
    if count * _ENTRY_BYTES > size - position:
        raise WireError(f"{count} entries cannot fit in {size - position} bytes")
    unpack = _ENTRY.unpack_from
    make_entry = _make_entry
    entries: list[Entry] = []
    append = entries.append
    expected = prev_index + 1
    for _ in range(count):
        if size - position < _ENTRY_BYTES:
            raise WireError(f"an entry header cut short at byte {position}")
        index, entry_term, length = unpack(data, position)
        position += _ENTRY_BYTES
        end = position + length
        if end > size:
            raise WireError(f"entry {index} claims {length} bytes, {size - position} remain")
        if index != expected:
            raise WireError(f"entry index {index} where {expected} was expected")
        if entry_term < 0:
            raise WireError(f"entry {index} has the negative term {entry_term}")
        append(make_entry(index, entry_term, data[position:end]))
        position = end
        expected += 1
    if position != size:
        raise WireError(f"{size - position} bytes after the last entry")
    return AppendRequest(sender, recipient, term, prev_index, prev_term, tuple(entries), commit)


def _decode_snapshot_request(
    data: bytes, sender: int, recipient: int, term: int
) -> SnapshotRequest:
    start = _H + _SNAPSHOT_BODY.size
    if len(data) < start:
        raise WireError(f"{len(data)} bytes: shorter than a SnapshotRequest header")
    index, snapshot_term, length = _SNAPSHOT_BODY.unpack_from(data, _H)
    _check(0, 0, index, snapshot_term)
    if len(data) != start + length:
        raise WireError(f"snapshot data of {length} bytes in {len(data) - start}")
    snapshot = Snapshot(index, snapshot_term, bytes(data[start:]))
    return SnapshotRequest(sender, recipient, term, snapshot)
