"""The records of `__share_group_state`, in Kafka's byte layout (Kafka 4.x).

Two kinds of record share the topic. A key opens with an int16 record type, which is
the discriminator (the key schemas are at version 0 and the version is not written):

    type 0  ShareSnapshot  the whole durable state of one share-partition
    type 1  ShareUpdate    what changed since the previous record of that partition

Both keys hold the group id (int16-length string), the topic id (16 bytes) and the
partition (int32). A value opens with an int16 value version (0) followed by the
flexible encoding of its schema: compact arrays, a tagged-field section after each
state batch and after the value itself. `DeliveryCompleteCount` (KIP-1226) is the
value's tagged field 0, written only when it is not -1.

    ShareSnapshotValue  snapshot_epoch i32, state_epoch i32, leader_epoch i32,
                        start_offset i64, create_timestamp i64, write_timestamp i64,
                        state_batches
    ShareUpdateValue    snapshot_epoch i32, leader_epoch i32, start_offset i64
                        (-1: unchanged), state_batches
    StateBatch          first_offset i64, last_offset i64, delivery_state i8
                        (0 AVAILABLE, 2 ACKNOWLEDGED, 3 ARCHIVING, 4 ARCHIVED),
                        delivery_count i16

Written by hand against `strom.protocol.layout` because kio has no schema for the
coordinators' internal records.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

from strom.protocol.layout import LayoutReader, LayoutWriter, RecordLayoutError

__all__ = [
    "SNAPSHOT_RECORD_TYPE",
    "UPDATE_RECORD_TYPE",
    "ShareSnapshotKey",
    "ShareSnapshotValue",
    "ShareStateFormatError",
    "ShareUpdateKey",
    "ShareUpdateValue",
    "StateBatch",
    "decode_share_key",
    "decode_share_record",
    "decode_share_value",
    "encode_share_key",
    "encode_share_record",
    "encode_share_value",
]

SNAPSHOT_RECORD_TYPE = 0
UPDATE_RECORD_TYPE = 1
VALUE_VERSION = 0
NO_START_OFFSET = -1
"""An update's start offset when the update does not move it."""
DELIVERY_COMPLETE_COUNT_TAG = 0
_I32 = struct.Struct(">i")


class ShareStateFormatError(ValueError):
    """A `__share_group_state` record that does not parse."""


@dataclass(frozen=True, slots=True)
class ShareSnapshotKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareUpdateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: int
    """The durable `RecordState` value: 0, 2, 3 or 4."""
    delivery_count: int


@dataclass(frozen=True, slots=True)
class ShareSnapshotValue:
    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    create_timestamp_ms: int
    write_timestamp_ms: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class ShareUpdateValue:
    snapshot_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


ShareKey = ShareSnapshotKey | ShareUpdateKey
ShareValue = ShareSnapshotValue | ShareUpdateValue


# ----------------------------------------------------------------------------- writing


def encode_share_key(key: ShareKey) -> bytes:
    w = LayoutWriter()
    w.i16(SNAPSHOT_RECORD_TYPE if isinstance(key, ShareSnapshotKey) else UPDATE_RECORD_TYPE)
    try:
        w.string(key.group_id, compact=False)
    except RecordLayoutError as exc:
        raise ShareStateFormatError(str(exc)) from None
    w.out += key.topic_id.bytes
    w.i32(key.partition)
    return w.bytes()


def encode_share_value(value: ShareValue) -> bytes:
    w = LayoutWriter()
    w.i16(VALUE_VERSION)
    w.i32(value.snapshot_epoch)
    if isinstance(value, ShareSnapshotValue):
        w.i32(value.state_epoch)
        w.i32(value.leader_epoch)
        w.i64(value.start_offset)
        w.i64(value.create_timestamp_ms)
        w.i64(value.write_timestamp_ms)
    else:
        w.i32(value.leader_epoch)
        w.i64(value.start_offset)
    w.array_length(len(value.state_batches), compact=True)
    for batch in value.state_batches:
        w.i64(batch.first_offset)
        w.i64(batch.last_offset)
        w.i8(batch.delivery_state)
        w.i16(batch.delivery_count)
        w.tagged_fields({})
    tagged: dict[int, bytes] = {}
    if value.delivery_complete_count != -1:
        tagged[DELIVERY_COMPLETE_COUNT_TAG] = _I32.pack(value.delivery_complete_count)
    w.tagged_fields(tagged)
    return w.bytes()


def encode_share_record(
    group_id: str, topic_id: uuid.UUID, partition: int, value: ShareValue
) -> tuple[bytes, bytes]:
    """The key and value bytes of one record a share-partition's decision asks for."""
    key: ShareKey
    if isinstance(value, ShareSnapshotValue):
        key = ShareSnapshotKey(group_id, topic_id, partition)
    else:
        key = ShareUpdateKey(group_id, topic_id, partition)
    return encode_share_key(key), encode_share_value(value)


# ----------------------------------------------------------------------------- reading


def decode_share_key(data: bytes) -> ShareKey:
    try:
        r = LayoutReader(data)
        record_type = r.i16()
        if record_type not in (SNAPSHOT_RECORD_TYPE, UPDATE_RECORD_TYPE):
            raise ShareStateFormatError(f"unknown share state record type {record_type}")
        group_id = r.string(compact=False)
        topic_id = uuid.UUID(bytes=r.take(16))
        partition = r.i32()
    except RecordLayoutError as exc:
        raise ShareStateFormatError(str(exc)) from None
    if r.pos != len(data):
        raise ShareStateFormatError("bytes after the end of a share state key")
    if record_type == SNAPSHOT_RECORD_TYPE:
        return ShareSnapshotKey(group_id, topic_id, partition)
    return ShareUpdateKey(group_id, topic_id, partition)


def decode_share_value(key: ShareKey, data: bytes) -> ShareValue:
    try:
        return _decode_value(key, LayoutReader(data))
    except RecordLayoutError as exc:
        raise ShareStateFormatError(str(exc)) from None


def _decode_value(key: ShareKey, r: LayoutReader) -> ShareValue:
    version = r.i16()
    if version != VALUE_VERSION:
        raise ShareStateFormatError(f"unknown share state value version {version}")
    snapshot_epoch = r.i32()
    if isinstance(key, ShareSnapshotKey):
        state_epoch, leader_epoch, start_offset = r.i32(), r.i32(), r.i64()
        created_ms, written_ms = r.i64(), r.i64()
        batches = _batches(r)
        complete = _delivery_complete_count(r)
        return ShareSnapshotValue(
            snapshot_epoch,
            state_epoch,
            leader_epoch,
            start_offset,
            created_ms,
            written_ms,
            batches,
            complete,
        )
    leader_epoch, start_offset = r.i32(), r.i64()
    batches = _batches(r)
    complete = _delivery_complete_count(r)
    return ShareUpdateValue(snapshot_epoch, leader_epoch, start_offset, batches, complete)


def _batches(r: LayoutReader) -> tuple[StateBatch, ...]:
    def one(item: LayoutReader) -> StateBatch:
        batch = StateBatch(item.i64(), item.i64(), item.i8(), item.i16())
        item.tagged_fields()
        return batch

    batches = r.array(one, compact=True)
    if batches is None:
        raise ShareStateFormatError("null state batches")
    return tuple(batches)


def _delivery_complete_count(r: LayoutReader) -> int:
    tagged = r.tagged_fields()
    if r.pos != len(r.data):
        raise ShareStateFormatError("bytes after the end of a share state value")
    raw = tagged.get(DELIVERY_COMPLETE_COUNT_TAG)
    if raw is None:
        return -1
    if len(raw) != 4:
        raise ShareStateFormatError("DeliveryCompleteCount is not an int32")
    return int(_I32.unpack(raw)[0])


def decode_share_record(
    key_data: bytes, value_data: bytes | None
) -> tuple[ShareKey, ShareValue | None]:
    """A record read back from `__share_group_state`; a null value is a tombstone (the
    share-partition's state was deleted)."""
    key = decode_share_key(key_data)
    return key, None if value_data is None else decode_share_value(key, value_data)
