"""The records of consumer groups (KIP-848) in `__consumer_offsets`, in Kafka's layout.

They share the topic with the classic group's records (key versions 0-2,
`strom.group.records`), told apart by the key's version:

    key 3  group metadata               key: group     value: the group epoch
    key 4  partition metadata           key: group     value: the subscribed topics
    key 5  member metadata              key: group, member   value: its subscription
    key 6  target assignment metadata   key: group     value: the assignment epoch
    key 7  target assignment of a member key: group, member  value: its partitions
    key 8  current assignment of a member key: group, member value: epochs, state,
                                                             assigned and revoking

Keys are not flexible (int16 version, then int16-length strings). Values are version 0
of a flexible layout: an int16 version, compact strings and arrays (length + 1 as an
unsigned varint, 0 for null), a tagged-field section after every struct. Unknown tagged
fields are skipped on read; the one written is the member metadata's tag 0, the
session timeout and protocols of a member using the classic protocol (a nullable struct:
an unsigned varint 1 before it, as Kafka writes a tagged nullable struct).
A null value is a tombstone. docs/groups.md lists the fields.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from strom.group import records as classic
from strom.group.member_layout import (
    Assignment,
    decode_member_key,
    encode_member_key,
    read_assignment,
    write_assignment,
)
from strom.protocol.layout import LayoutReader, LayoutWriter, RecordLayoutError

__all__ = [
    "Assignment",
    "ClassicMetadata",
    "ConsumerGroupEpochKey",
    "ConsumerGroupEpochValue",
    "ConsumerKey",
    "ConsumerValue",
    "CurrentAssignmentKey",
    "CurrentAssignmentValue",
    "MemberSubscriptionKey",
    "MemberSubscriptionValue",
    "PartitionMetadataKey",
    "PartitionMetadataValue",
    "TargetAssignmentEpochKey",
    "TargetAssignmentEpochValue",
    "TargetAssignmentKey",
    "TargetAssignmentValue",
    "TopicMetadata",
    "decode_consumer_key",
    "decode_consumer_value",
    "encode_consumer_key",
    "encode_consumer_value",
    "is_consumer_key_version",
]

EPOCH_KEY_VERSION = 3
PARTITION_METADATA_KEY_VERSION = 4
MEMBER_KEY_VERSION = 5
TARGET_EPOCH_KEY_VERSION = 6
TARGET_MEMBER_KEY_VERSION = 7
CURRENT_ASSIGNMENT_KEY_VERSION = 8
VALUE_VERSION = 0

T = TypeVar("T")


class ConsumerRecordError(ValueError):
    """A consumer group record that does not parse."""


def is_consumer_key_version(version: int) -> bool:
    return EPOCH_KEY_VERSION <= version <= CURRENT_ASSIGNMENT_KEY_VERSION


def is_consumer_key(data: bytes) -> bool:
    """Whether a `__consumer_offsets` key is one of a consumer group's (version 3-8)."""
    return len(data) >= 2 and is_consumer_key_version(int.from_bytes(data[:2], "big", signed=True))


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpochKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class PartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class MemberSubscriptionKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class TargetAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class CurrentAssignmentKey:
    group_id: str
    member_id: str


ConsumerKey = (
    ConsumerGroupEpochKey
    | PartitionMetadataKey
    | MemberSubscriptionKey
    | TargetAssignmentEpochKey
    | TargetAssignmentKey
    | CurrentAssignmentKey
)

_KEY_VERSIONS: dict[type, int] = {
    ConsumerGroupEpochKey: EPOCH_KEY_VERSION,
    PartitionMetadataKey: PARTITION_METADATA_KEY_VERSION,
    MemberSubscriptionKey: MEMBER_KEY_VERSION,
    TargetAssignmentEpochKey: TARGET_EPOCH_KEY_VERSION,
    TargetAssignmentKey: TARGET_MEMBER_KEY_VERSION,
    CurrentAssignmentKey: CURRENT_ASSIGNMENT_KEY_VERSION,
}

# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class ConsumerGroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    topic_id: uuid.UUID
    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadata, ...]


@dataclass(frozen=True, slots=True)
class ClassicMetadata:
    """What a member using the classic protocol joined with: its session timeout and its
    protocols (name, subscription bytes), in its order of preference."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol it gets (the first it offers: the group takes them all)."""
        return self.protocols[0][0] if self.protocols else ""


@dataclass(frozen=True, slots=True)
class MemberSubscriptionValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic: ClassicMetadata | None = None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    """`MemberState` as Kafka numbers it (0 stable, 1 unrevoked, 2 unreleased)."""
    assigned: Assignment
    pending_revocation: Assignment


ConsumerValue = (
    ConsumerGroupEpochValue
    | PartitionMetadataValue
    | MemberSubscriptionValue
    | TargetAssignmentEpochValue
    | TargetAssignmentValue
    | CurrentAssignmentValue
)

_VALUE_OF_KEY: dict[type, type] = {
    ConsumerGroupEpochKey: ConsumerGroupEpochValue,
    PartitionMetadataKey: PartitionMetadataValue,
    MemberSubscriptionKey: MemberSubscriptionValue,
    TargetAssignmentEpochKey: TargetAssignmentEpochValue,
    TargetAssignmentKey: TargetAssignmentValue,
    CurrentAssignmentKey: CurrentAssignmentValue,
}

_CONSUMER_KEYS = (
    ConsumerGroupEpochKey,
    PartitionMetadataKey,
    MemberSubscriptionKey,
    TargetAssignmentEpochKey,
    TargetAssignmentKey,
    CurrentAssignmentKey,
)
_CONSUMER_VALUES = (
    ConsumerGroupEpochValue,
    PartitionMetadataValue,
    MemberSubscriptionValue,
    TargetAssignmentEpochValue,
    TargetAssignmentValue,
    CurrentAssignmentValue,
)

# --------------------------------------------------------------------------- writing


def encode_record(key: object, value: object) -> tuple[bytes, bytes | None]:
    """Key and value bytes of any `__consumer_offsets` record, classic or consumer."""
    if isinstance(key, _CONSUMER_KEYS):
        assert value is None or isinstance(value, _CONSUMER_VALUES)
        value_bytes = None if value is None else encode_consumer_value(value)
        return encode_consumer_key(key), value_bytes
    assert isinstance(key, classic.OffsetCommitKey | classic.GroupMetadataKey)
    assert value is None or isinstance(
        value, classic.OffsetCommitValue | classic.GroupMetadataValue
    )
    return classic.encode_key(key), None if value is None else classic.encode_value(value)


def encode_consumer_key(key: ConsumerKey) -> bytes:
    member_id = (
        key.member_id
        if isinstance(key, MemberSubscriptionKey | TargetAssignmentKey | CurrentAssignmentKey)
        else None
    )
    try:
        return encode_member_key(_KEY_VERSIONS[type(key)], key.group_id, member_id)
    except RecordLayoutError as exc:
        raise ConsumerRecordError(str(exc)) from None


def encode_consumer_value(value: ConsumerValue) -> bytes:
    w = LayoutWriter()
    w.i16(VALUE_VERSION)
    tags: dict[int, bytes] = {}
    try:
        _write_value(w, value)
        if isinstance(value, MemberSubscriptionValue) and value.classic is not None:
            tags[CLASSIC_TAG] = _classic_bytes(value.classic)
    except RecordLayoutError as exc:
        raise ConsumerRecordError(str(exc)) from None
    w.tagged_fields(tags)
    return w.bytes()


CLASSIC_TAG = 0


def _classic_bytes(classic: ClassicMetadata) -> bytes:
    w = LayoutWriter()
    w.uvarint(1)  # present: a tagged nullable struct
    w.i32(classic.session_timeout_ms)
    w.array_length(len(classic.protocols), compact=True)
    for name, metadata in classic.protocols:
        w.string(name, compact=True)
        w.compact_blob(metadata)
        w.tagged_fields({})
    w.tagged_fields({})
    return w.bytes()


def _read_classic(data: bytes) -> ClassicMetadata | None:
    r = LayoutReader(data)
    if r.uvarint() <= 0:
        return None
    session_timeout_ms = r.i32()
    protocols = []
    for _ in range(r.array_length(compact=True) or 0):
        name = r.string(compact=True)
        metadata = r.compact_blob()
        r.tagged_fields()
        protocols.append((name, metadata))
    r.tagged_fields()
    return ClassicMetadata(session_timeout_ms, tuple(protocols))


def _write_value(w: LayoutWriter, value: ConsumerValue) -> None:
    if isinstance(value, ConsumerGroupEpochValue):
        w.i32(value.epoch)
    elif isinstance(value, TargetAssignmentEpochValue):
        w.i32(value.assignment_epoch)
    elif isinstance(value, PartitionMetadataValue):
        w.array_length(len(value.topics), compact=True)
        for topic in value.topics:
            w.out += topic.topic_id.bytes
            w.string(topic.name, compact=True)
            w.i32(topic.partitions)
            w.array_length(0, compact=True)  # per-partition racks: unused since Kafka 4.0
            w.tagged_fields({})
    elif isinstance(value, MemberSubscriptionValue):
        w.string(value.instance_id, compact=True)
        w.string(value.rack_id, compact=True)
        w.string(value.client_id, compact=True)
        w.string(value.client_host, compact=True)
        w.array_length(len(value.subscribed_topic_names), compact=True)
        for name in value.subscribed_topic_names:
            w.string(name, compact=True)
        w.string(value.subscribed_topic_regex, compact=True)
        w.i32(value.rebalance_timeout_ms)
        w.string(value.server_assignor, compact=True)
    elif isinstance(value, TargetAssignmentValue):
        write_assignment(w, value.partitions)
    else:
        w.i32(value.member_epoch)
        w.i32(value.previous_member_epoch)
        w.i8(value.state)
        write_assignment(w, value.assigned)
        write_assignment(w, value.pending_revocation)


# --------------------------------------------------------------------------- reading


_GROUP_KEYS: dict[int, Callable[[str], ConsumerKey]] = {
    EPOCH_KEY_VERSION: ConsumerGroupEpochKey,
    PARTITION_METADATA_KEY_VERSION: PartitionMetadataKey,
    TARGET_EPOCH_KEY_VERSION: TargetAssignmentEpochKey,
}
_MEMBER_KEYS: dict[int, Callable[[str, str], ConsumerKey]] = {
    MEMBER_KEY_VERSION: MemberSubscriptionKey,
    TARGET_MEMBER_KEY_VERSION: TargetAssignmentKey,
    CURRENT_ASSIGNMENT_KEY_VERSION: CurrentAssignmentKey,
}


def decode_consumer_key(data: bytes) -> ConsumerKey:
    try:
        key = decode_member_key(data, _GROUP_KEYS, _MEMBER_KEYS)
    except RecordLayoutError as exc:
        raise ConsumerRecordError(str(exc)) from None
    if isinstance(key, int):
        raise ConsumerRecordError(f"not a consumer group key version: {key}")
    return key


def decode_consumer_value(key: ConsumerKey, data: bytes) -> ConsumerValue:
    r = LayoutReader(data)
    try:
        version = r.i16()
        if version != VALUE_VERSION:
            raise ConsumerRecordError(f"unknown value version {version} for {type(key).__name__}")
        value = _read_value(r, _VALUE_OF_KEY[type(key)])
        tags = r.tagged_fields()
        if isinstance(value, MemberSubscriptionValue) and CLASSIC_TAG in tags:
            value = replace(value, classic=_read_classic(tags[CLASSIC_TAG]))
    except RecordLayoutError as exc:
        raise ConsumerRecordError(str(exc)) from None
    return value


def _read_value(r: LayoutReader, kind: type) -> ConsumerValue:
    if kind is ConsumerGroupEpochValue:
        return ConsumerGroupEpochValue(r.i32())
    if kind is TargetAssignmentEpochValue:
        return TargetAssignmentEpochValue(r.i32())
    if kind is PartitionMetadataValue:
        return PartitionMetadataValue(tuple(_items(r, _read_topic)))
    if kind is MemberSubscriptionValue:
        return MemberSubscriptionValue(
            instance_id=r.nullable_string(compact=True),
            rack_id=r.nullable_string(compact=True),
            client_id=r.string(compact=True),
            client_host=r.string(compact=True),
            subscribed_topic_names=tuple(_items(r, lambda x: x.string(compact=True))),
            subscribed_topic_regex=r.nullable_string(compact=True),
            rebalance_timeout_ms=r.i32(),
            server_assignor=r.nullable_string(compact=True),
        )
    if kind is TargetAssignmentValue:
        return TargetAssignmentValue(read_assignment(r))
    return CurrentAssignmentValue(
        member_epoch=r.i32(),
        previous_member_epoch=r.i32(),
        state=r.i8(),
        assigned=read_assignment(r),
        pending_revocation=read_assignment(r),
    )


def _items(r: LayoutReader, item: Callable[[LayoutReader], T]) -> list[T]:
    return r.array(item, compact=True) or []


def _read_topic(r: LayoutReader) -> TopicMetadata:
    topic_id = uuid.UUID(bytes=r.take(16))
    name = r.string(compact=True)
    partitions = r.i32()
    for _ in range(r.array_length(compact=True) or 0):  # racks per partition: skipped
        r.i32()
        for _ in range(r.array_length(compact=True) or 0):
            r.string(compact=True)
        r.tagged_fields()
    r.tagged_fields()
    return TopicMetadata(topic_id, name, partitions)
