"""The records of share groups (KIP-932) in `__consumer_offsets`, in Kafka's layout.

They share the topic with the classic groups' records (key versions 0-2) and the
consumer groups' (3-8); a key's version says which record it is:

    key 10  member metadata              key: group, member  value: its subscription
    key 11  group metadata               key: group     value: the group epoch and the
                                                        hash of the subscribed topics
    key 12  target assignment metadata   key: group     value: the assignment epoch
    key 13  target assignment of a member key: group, member value: its partitions
    key 14  current assignment of a member key: group, member value: epochs, state,
                                                             assigned partitions
    key 15  state partition metadata     key: group     value: the topics whose
                                                        share-partition state is being
                                                        initialized, is initialized, or
                                                        is being deleted

As Kafka 4.1+ writes them: the partition metadata record of Kafka 4.0 (key 9) is gone,
the group metadata value carries a metadata hash instead. Keys are not flexible (int16
version, then int16-length strings); values are version 0 of a flexible layout (compact
strings and arrays, a tagged-field section after every struct). The target assignment
metadata's tag 0 (KIP-1263's assignment timestamp, Kafka 4.3) is read and written when
set; other unknown tagged fields are skipped. A null value is a tombstone.

Written by hand on `strom.protocol.layout`, as the consumer groups' records are: kio
has the request schemas, not the coordinator's record schemas.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

from strom.group.member_layout import (
    Assignment,
    decode_member_key,
    encode_member_key,
    read_assignment,
    write_assignment,
)
from strom.protocol.layout import LayoutReader, LayoutWriter, RecordLayoutError

__all__ = [
    "ShareAssignment",
    "ShareCurrentAssignmentKey",
    "ShareCurrentAssignmentValue",
    "ShareGroupEpochKey",
    "ShareGroupEpochValue",
    "ShareKey",
    "ShareMemberKey",
    "ShareMemberValue",
    "ShareRecordError",
    "ShareStatePartitionsKey",
    "ShareStatePartitionsValue",
    "ShareStateTopic",
    "ShareTargetEpochKey",
    "ShareTargetEpochValue",
    "ShareTargetKey",
    "ShareTargetValue",
    "ShareValue",
    "decode_share_key",
    "decode_share_value",
    "encode_share_key",
    "encode_share_value",
    "is_share_key",
]

ShareAssignment = Assignment
"""Topic id -> partitions (`strom.group.member_layout.Assignment`)."""

MEMBER_KEY_VERSION = 10
EPOCH_KEY_VERSION = 11
TARGET_EPOCH_KEY_VERSION = 12
TARGET_MEMBER_KEY_VERSION = 13
CURRENT_ASSIGNMENT_KEY_VERSION = 14
STATE_PARTITIONS_KEY_VERSION = 15
VALUE_VERSION = 0
ASSIGNMENT_TIMESTAMP_TAG = 0


class ShareRecordError(ValueError):
    """A share group record that does not parse."""


def is_share_key(data: bytes) -> bool:
    """Whether a `__consumer_offsets` key is one of a share group's (version 10-15)."""
    if len(data) < 2:
        return False
    version = int.from_bytes(data[:2], "big", signed=True)
    return MEMBER_KEY_VERSION <= version <= STATE_PARTITIONS_KEY_VERSION


# --------------------------------------------------------------------------- keys


@dataclass(frozen=True, slots=True)
class ShareMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupEpochKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareTargetEpochKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareTargetKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareCurrentAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareStatePartitionsKey:
    group_id: str


ShareKey = (
    ShareMemberKey
    | ShareGroupEpochKey
    | ShareTargetEpochKey
    | ShareTargetKey
    | ShareCurrentAssignmentKey
    | ShareStatePartitionsKey
)

_KEY_VERSIONS: dict[type, int] = {
    ShareMemberKey: MEMBER_KEY_VERSION,
    ShareGroupEpochKey: EPOCH_KEY_VERSION,
    ShareTargetEpochKey: TARGET_EPOCH_KEY_VERSION,
    ShareTargetKey: TARGET_MEMBER_KEY_VERSION,
    ShareCurrentAssignmentKey: CURRENT_ASSIGNMENT_KEY_VERSION,
    ShareStatePartitionsKey: STATE_PARTITIONS_KEY_VERSION,
}
_MEMBER_KEYS = (ShareMemberKey, ShareTargetKey, ShareCurrentAssignmentKey)

# --------------------------------------------------------------------------- values


@dataclass(frozen=True, slots=True)
class ShareMemberValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupEpochValue:
    epoch: int
    metadata_hash: int
    """A hash of the subscribed topics (int64): a change bumps the group epoch."""


@dataclass(frozen=True, slots=True)
class ShareTargetEpochValue:
    assignment_epoch: int
    assignment_timestamp_ms: int = 0
    """KIP-1263's tagged field 0; 0 (the default) is not written."""


@dataclass(frozen=True, slots=True)
class ShareTargetValue:
    partitions: ShareAssignment


@dataclass(frozen=True, slots=True)
class ShareCurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int
    """Kafka's `MemberState` number; a share member is always 0 (stable)."""
    assigned: ShareAssignment


@dataclass(frozen=True, slots=True)
class ShareStateTopic:
    topic_id: uuid.UUID
    name: str
    partitions: frozenset[int] | None
    """None in the deleting list, whose entries have no partitions."""


@dataclass(frozen=True, slots=True)
class ShareStatePartitionsValue:
    initializing: tuple[ShareStateTopic, ...] = ()
    initialized: tuple[ShareStateTopic, ...] = ()
    deleting: tuple[ShareStateTopic, ...] = ()


ShareValue = (
    ShareMemberValue
    | ShareGroupEpochValue
    | ShareTargetEpochValue
    | ShareTargetValue
    | ShareCurrentAssignmentValue
    | ShareStatePartitionsValue
)

_VALUE_OF_KEY: dict[type, type] = {
    ShareMemberKey: ShareMemberValue,
    ShareGroupEpochKey: ShareGroupEpochValue,
    ShareTargetEpochKey: ShareTargetEpochValue,
    ShareTargetKey: ShareTargetValue,
    ShareCurrentAssignmentKey: ShareCurrentAssignmentValue,
    ShareStatePartitionsKey: ShareStatePartitionsValue,
}

# --------------------------------------------------------------------------- writing


def encode_share_key(key: ShareKey) -> bytes:
    member_id = key.member_id if isinstance(key, _MEMBER_KEYS) else None
    try:
        return encode_member_key(_KEY_VERSIONS[type(key)], key.group_id, member_id)
    except RecordLayoutError as exc:
        raise ShareRecordError(str(exc)) from None


def encode_share_value(value: ShareValue) -> bytes:
    w = LayoutWriter()
    w.i16(VALUE_VERSION)
    tags: dict[int, bytes] = {}
    try:
        if isinstance(value, ShareMemberValue):
            w.string(value.rack_id, compact=True)
            w.string(value.client_id, compact=True)
            w.string(value.client_host, compact=True)
            w.array_length(len(value.subscribed_topic_names), compact=True)
            for name in value.subscribed_topic_names:
                w.string(name, compact=True)
        elif isinstance(value, ShareGroupEpochValue):
            w.i32(value.epoch)
            w.i64(value.metadata_hash)
        elif isinstance(value, ShareTargetEpochValue):
            w.i32(value.assignment_epoch)
            if value.assignment_timestamp_ms != 0:
                tags[ASSIGNMENT_TIMESTAMP_TAG] = value.assignment_timestamp_ms.to_bytes(
                    8, "big", signed=True
                )
        elif isinstance(value, ShareTargetValue):
            write_assignment(w, value.partitions)
        elif isinstance(value, ShareCurrentAssignmentValue):
            w.i32(value.member_epoch)
            w.i32(value.previous_member_epoch)
            w.i8(value.state)
            write_assignment(w, value.assigned)
        else:
            _write_topics(w, value.initializing, with_partitions=True)
            _write_topics(w, value.initialized, with_partitions=True)
            _write_topics(w, value.deleting, with_partitions=False)
    except RecordLayoutError as exc:
        raise ShareRecordError(str(exc)) from None
    w.tagged_fields(tags)
    return w.bytes()


def _write_topics(
    w: LayoutWriter, topics: tuple[ShareStateTopic, ...], *, with_partitions: bool
) -> None:
    w.array_length(len(topics), compact=True)
    for topic in topics:
        w.out += topic.topic_id.bytes
        w.string(topic.name, compact=True)
        if with_partitions:
            partitions = sorted(topic.partitions or ())
            w.array_length(len(partitions), compact=True)
            for partition in partitions:
                w.i32(partition)
        w.tagged_fields({})


# --------------------------------------------------------------------------- reading


_GROUP_KEYS: dict[int, Callable[[str], ShareKey]] = {
    EPOCH_KEY_VERSION: ShareGroupEpochKey,
    TARGET_EPOCH_KEY_VERSION: ShareTargetEpochKey,
    STATE_PARTITIONS_KEY_VERSION: ShareStatePartitionsKey,
}
_MEMBER_KEY_TYPES: dict[int, Callable[[str, str], ShareKey]] = {
    MEMBER_KEY_VERSION: ShareMemberKey,
    TARGET_MEMBER_KEY_VERSION: ShareTargetKey,
    CURRENT_ASSIGNMENT_KEY_VERSION: ShareCurrentAssignmentKey,
}


def decode_share_key(data: bytes) -> ShareKey:
    try:
        key = decode_member_key(data, _GROUP_KEYS, _MEMBER_KEY_TYPES)
    except RecordLayoutError as exc:
        raise ShareRecordError(str(exc)) from None
    if isinstance(key, int):
        raise ShareRecordError(f"not a share group key version: {key}")
    return key


def decode_share_value(key: ShareKey, data: bytes) -> ShareValue:
    r = LayoutReader(data)
    try:
        version = r.i16()
        if version != VALUE_VERSION:
            raise ShareRecordError(f"unknown value version {version} for {type(key).__name__}")
        value = _read_value(r, _VALUE_OF_KEY[type(key)])
        tags = r.tagged_fields()
    except RecordLayoutError as exc:
        raise ShareRecordError(str(exc)) from None
    if isinstance(value, ShareTargetEpochValue) and ASSIGNMENT_TIMESTAMP_TAG in tags:
        raw = tags[ASSIGNMENT_TIMESTAMP_TAG]
        if len(raw) != 8:
            raise ShareRecordError("assignment timestamp is not an int64")
        value = ShareTargetEpochValue(
            value.assignment_epoch, int.from_bytes(raw, "big", signed=True)
        )
    return value


def _read_value(r: LayoutReader, kind: type) -> ShareValue:
    if kind is ShareMemberValue:
        rack_id = r.nullable_string(compact=True)
        client_id = r.string(compact=True)
        client_host = r.string(compact=True)
        names = tuple(r.string(compact=True) for _ in range(r.array_length(compact=True) or 0))
        return ShareMemberValue(rack_id, client_id, client_host, names)
    if kind is ShareGroupEpochValue:
        epoch = r.i32()
        return ShareGroupEpochValue(epoch, r.i64())
    if kind is ShareTargetEpochValue:
        return ShareTargetEpochValue(r.i32())
    if kind is ShareTargetValue:
        return ShareTargetValue(read_assignment(r))
    if kind is ShareCurrentAssignmentValue:
        member_epoch = r.i32()
        previous = r.i32()
        state = r.i8()
        return ShareCurrentAssignmentValue(member_epoch, previous, state, read_assignment(r))
    initializing = _read_topics(r, with_partitions=True)
    initialized = _read_topics(r, with_partitions=True)
    deleting = _read_topics(r, with_partitions=False)
    return ShareStatePartitionsValue(initializing, initialized, deleting)


def _read_topics(r: LayoutReader, *, with_partitions: bool) -> tuple[ShareStateTopic, ...]:
    topics: list[ShareStateTopic] = []
    for _ in range(r.array_length(compact=True) or 0):
        topic_id = uuid.UUID(bytes=r.take(16))
        name = r.string(compact=True)
        partitions: frozenset[int] | None = None
        if with_partitions:
            partitions = frozenset(r.i32() for _ in range(r.array_length(compact=True) or 0))
        r.tagged_fields()
        topics.append(ShareStateTopic(topic_id, name, partitions))
    return tuple(topics)
