"""The records a group coordinator keeps in `__consumer_offsets`, in Kafka's byte layout.

Two kinds of record share the topic, told apart by the key's version:

    key version 0 or 1  offset commit    key: group, topic, partition
    key version 2       group metadata   key: group

A record with a null value is a tombstone: the offset (or the group) was deleted, and
compaction removes both the tombstone and everything before it with the same key.
Values are written in the newest non-flexible layouts (offset commit value v3, group
metadata value v3) and read in all of v0-v3, so a log written by Kafka can be read too.
Every integer is big-endian; strings are an int16 length and UTF-8 bytes (length -1 for
null); byte fields are an int32 length and the bytes. docs/groups.md lists the fields.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberRecord",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "RecordFormatError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
NO_EXPIRE_TIMESTAMP = -1


class RecordFormatError(ValueError):
    """A `__consumer_offsets` record that does not parse."""


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = NO_EXPIRE_TIMESTAMP
    """Only in v1 values (a client-chosen retention); -1 otherwise."""


@dataclass(frozen=True, slots=True)
class MemberRecord:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberRecord, ...]


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue


# ----------------------------------------------------------------------------- writing


class _Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, value: int) -> None:
        self.out += _I16.pack(value)

    def i32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.i16(-1)
            return
        data = value.encode()
        if len(data) > 0x7FFF:
            raise RecordFormatError(f"string of {len(data)} bytes is too long for a record")
        self.i16(len(data))
        self.out += data

    def bytes_(self, value: bytes) -> None:
        self.i32(len(value))
        self.out += value


def encode_key(key: Key) -> bytes:
    w = _Writer()
    if isinstance(key, OffsetCommitKey):
        w.i16(OFFSET_KEY_VERSION)
        w.string(key.group_id)
        w.string(key.topic)
        w.i32(key.partition)
    else:
        w.i16(GROUP_KEY_VERSION)
        w.string(key.group_id)
    return bytes(w.out)


def encode_value(value: Value) -> bytes:
    w = _Writer()
    if isinstance(value, OffsetCommitValue):
        w.i16(OFFSET_VALUE_VERSION)
        w.i64(value.offset)
        w.i32(value.leader_epoch)
        w.string(value.metadata)
        w.i64(value.commit_timestamp_ms)
        return bytes(w.out)
    w.i16(GROUP_VALUE_VERSION)
    w.string(value.protocol_type)
    w.i32(value.generation_id)
    w.string(value.protocol_name)
    w.string(value.leader_id)
    w.i64(value.current_state_timestamp_ms)
    w.i32(len(value.members))
    for member in value.members:
        w.string(member.member_id)
        w.string(member.group_instance_id)
        w.string(member.client_id)
        w.string(member.client_host)
        w.i32(member.rebalance_timeout_ms)
        w.i32(member.session_timeout_ms)
        w.bytes_(member.subscription)
        w.bytes_(member.assignment)
    return bytes(w.out)


# ----------------------------------------------------------------------------- reading


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise RecordFormatError("record ends early")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_string(self) -> str | None:
        size = self.i16()
        if size == -1:
            return None
        try:
            return self._take(size).decode()
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        size = self.i32()
        return b"" if size == -1 else self._take(size)


def decode_key(data: bytes) -> Key:
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(), r.string(), r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupMetadataKey(r.string())
    raise RecordFormatError(f"unknown key version {version}")


def decode_value(key: Key, data: bytes) -> Value:
    r = _Reader(data)
    version = r.i16()
    if isinstance(key, OffsetCommitKey):
        return _offset_value(r, version)
    return _group_value(r, version)


def _offset_value(r: _Reader, version: int) -> OffsetCommitValue:
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    commit_ms = r.i64()
    expire_ms = r.i64() if version == 1 else NO_EXPIRE_TIMESTAMP
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ms, expire_ms)


def _group_value(r: _Reader, version: int) -> GroupMetadataValue:
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ms = r.i64() if version >= 2 else -1
    members: list[MemberRecord] = []
    for _ in range(r.i32()):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_ms = r.i32() if version >= 1 else -1
        session_ms = r.i32()
        subscription = r.bytes_()
        assignment = r.bytes_()
        if rebalance_ms == -1:
            rebalance_ms = session_ms
        members.append(
            MemberRecord(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_ms,
                session_ms,
                subscription,
                assignment,
            )
        )
    return GroupMetadataValue(protocol_type, generation, protocol, leader, state_ms, tuple(members))
