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

from dataclasses import dataclass

from strom.protocol.layout import LayoutReader, LayoutWriter, RecordLayoutError

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


def encode_key(key: Key) -> bytes:
    try:
        return _encode_key(key)
    except RecordLayoutError as exc:
        raise RecordFormatError(str(exc)) from None


def _encode_key(key: Key) -> bytes:
    w = LayoutWriter()
    if isinstance(key, OffsetCommitKey):
        w.i16(OFFSET_KEY_VERSION)
        w.string(key.group_id, compact=False)
        w.string(key.topic, compact=False)
        w.i32(key.partition)
    else:
        w.i16(GROUP_KEY_VERSION)
        w.string(key.group_id, compact=False)
    return w.bytes()


def encode_value(value: Value) -> bytes:
    try:
        return _encode_value(value)
    except RecordLayoutError as exc:
        raise RecordFormatError(str(exc)) from None


def _encode_value(value: Value) -> bytes:
    w = LayoutWriter()
    if isinstance(value, OffsetCommitValue):
        w.i16(OFFSET_VALUE_VERSION)
        w.i64(value.offset)
        w.i32(value.leader_epoch)
        w.string(value.metadata, compact=False)
        w.i64(value.commit_timestamp_ms)
        return w.bytes()
    w.i16(GROUP_VALUE_VERSION)
    w.string(value.protocol_type, compact=False)
    w.i32(value.generation_id)
    w.string(value.protocol_name, compact=False)
    w.string(value.leader_id, compact=False)
    w.i64(value.current_state_timestamp_ms)
    w.i32(len(value.members))
    for member in value.members:
        w.string(member.member_id, compact=False)
        w.string(member.group_instance_id, compact=False)
        w.string(member.client_id, compact=False)
        w.string(member.client_host, compact=False)
        w.i32(member.rebalance_timeout_ms)
        w.i32(member.session_timeout_ms)
        w.blob(member.subscription)
        w.blob(member.assignment)
    return w.bytes()


# ----------------------------------------------------------------------------- reading


def decode_key(data: bytes) -> Key:
    try:
        return _decode_key(LayoutReader(data))
    except RecordLayoutError as exc:
        raise RecordFormatError(str(exc)) from None


def _decode_key(r: LayoutReader) -> Key:
    version = r.i16()
    if version in (0, 1):
        return OffsetCommitKey(r.string(compact=False), r.string(compact=False), r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupMetadataKey(r.string(compact=False))
    raise RecordFormatError(f"unknown key version {version}")


def decode_value(key: Key, data: bytes) -> Value:
    try:
        return _decode_value(key, LayoutReader(data))
    except RecordLayoutError as exc:
        raise RecordFormatError(str(exc)) from None


def _decode_value(key: Key, r: LayoutReader) -> Value:
    version = r.i16()
    if isinstance(key, OffsetCommitKey):
        return _offset_value(r, version)
    return _group_value(r, version)


def _offset_value(r: LayoutReader, version: int) -> OffsetCommitValue:
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string(compact=False)
    commit_ms = r.i64()
    expire_ms = r.i64() if version == 1 else NO_EXPIRE_TIMESTAMP
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ms, expire_ms)


def _group_value(r: LayoutReader, version: int) -> GroupMetadataValue:
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type = r.string(compact=False)
    generation = r.i32()
    protocol = r.nullable_string(compact=False)
    leader = r.nullable_string(compact=False)
    state_ms = r.i64() if version >= 2 else -1
    members: list[MemberRecord] = []
    for _ in range(r.i32()):
        member_id = r.string(compact=False)
        instance_id = r.nullable_string(compact=False) if version >= 3 else None
        client_id = r.string(compact=False)
        client_host = r.string(compact=False)
        rebalance_ms = r.i32() if version >= 1 else None
        session_ms = r.i32()
        subscription = r.blob()
        assignment = r.blob()
        if rebalance_ms is None:  # v0 has none: Kafka takes the session timeout
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
