"""The consumer protocol embedded in classic group requests, as far as the broker reads it.

Consumers in a classic group (protocol type "consumer") send a subscription as their
JoinGroup protocol metadata and get an assignment back in SyncGroup; both are opaque to
a classic coordinator. Kafka's layouts (ConsumerProtocolSubscription and
ConsumerProtocolAssignment, versions 0-3, not flexible), each after an int16 version:

    subscription  topics [string], user data (nullable bytes),
                  v1+ owned partitions [topic string, partitions [int32]],
                  v2+ generation id int32, v3+ rack id (nullable string)
    assignment    assigned partitions [topic string, partitions [int32]],
                  user data (nullable bytes)

Strings are int16-length UTF-8 (-1 null), arrays and bytes int32-length (-1 null). A
version above 3 is read as version 3 (Kafka's rule: later versions only append fields).

The classic coordinator reads the topic names to know which committed offsets a live
group still uses (offset expiry, OffsetDelete). A consumer group with members on the
classic protocol (KIP-848's migration) reads whole subscriptions and writes assignments.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "ConsumerSubscription",
    "EmbeddedProtocolError",
    "decode_assignment",
    "decode_subscription",
    "embedded_version",
    "encode_assignment",
    "encode_subscription",
    "subscription_topics",
]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
LATEST_VERSION = 3


class EmbeddedProtocolError(ValueError):
    """Bytes that are not a consumer protocol subscription or assignment."""


@dataclass(frozen=True, slots=True)
class ConsumerSubscription:
    version: int
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Topic name -> partitions the member owns (v1+; a cooperative member's)."""
    generation_id: int = -1
    rack_id: str | None = None


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: struct.Struct) -> int:
        try:
            (value,) = fmt.unpack_from(self.data, self.pos)
        except struct.error:
            raise EmbeddedProtocolError("the consumer protocol bytes end early") from None
        self.pos += fmt.size
        return int(value)

    def i16(self) -> int:
        return self._unpack(_I16)

    def i32(self) -> int:
        return self._unpack(_I32)

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise EmbeddedProtocolError("the consumer protocol bytes end early")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return bytes(chunk)

    def string(self) -> str | None:
        size = self.i16()
        if size < 0:
            return None
        try:
            return self.take(size).decode()
        except UnicodeDecodeError:
            raise EmbeddedProtocolError("a topic name is not UTF-8") from None

    def count(self) -> int:
        size = self.i32()
        if size > len(self.data) - self.pos:
            raise EmbeddedProtocolError(f"an array of {size} items in fewer bytes")
        return max(size, 0)

    def nullable_bytes(self) -> bytes | None:
        size = self.i32()
        return None if size < 0 else self.take(size)

    def version(self) -> int:
        version = self.i16()
        if version < 0:
            raise EmbeddedProtocolError(f"version {version}")
        return min(version, LATEST_VERSION)

    def topic_partitions(self) -> dict[str, tuple[int, ...]]:
        result: dict[str, tuple[int, ...]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            result[topic] = tuple(self.i32() for _ in range(self.count()))
        return result


def embedded_version(metadata: bytes) -> int:
    """The version a subscription or assignment starts with (above 3: 3; 0 when the bytes
    have none): the version to answer a member's subscription in."""
    try:
        return _Reader(metadata).version()
    except EmbeddedProtocolError:
        return 0


def decode_subscription(metadata: bytes) -> ConsumerSubscription:
    """Raises EmbeddedProtocolError."""
    r = _Reader(metadata)
    version = r.version()
    topics = tuple(r.string() or "" for _ in range(r.count()))
    user_data = r.nullable_bytes()
    owned: dict[str, tuple[int, ...]] = {}
    generation_id, rack_id = -1, None
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation_id = r.i32()
    if version >= 3:
        rack_id = r.string()
    return ConsumerSubscription(version, topics, user_data, owned, generation_id, rack_id)


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a subscription; None when the bytes are not one."""
    try:
        r = _Reader(metadata)
        r.version()
        return frozenset(r.string() or "" for _ in range(r.count()))
    except EmbeddedProtocolError:
        return None


def decode_assignment(data: bytes) -> tuple[dict[str, tuple[int, ...]], bytes | None]:
    """The assigned partitions by topic name and the user data. Raises
    EmbeddedProtocolError."""
    r = _Reader(data)
    r.version()
    partitions = r.topic_partitions()
    return partitions, r.nullable_bytes()


def _string(out: bytearray, text: str | None) -> None:
    if text is None:
        out += _I16.pack(-1)
        return
    data = text.encode()
    out += _I16.pack(len(data)) + data


def _topic_partitions(out: bytearray, partitions: Mapping[str, tuple[int, ...]]) -> None:
    out += _I32.pack(len(partitions))
    for topic in sorted(partitions):
        _string(out, topic)
        out += _I32.pack(len(partitions[topic]))
        for partition in sorted(partitions[topic]):
            out += _I32.pack(partition)


def encode_assignment(partitions: Mapping[str, tuple[int, ...]], version: int = 0) -> bytes:
    """An assignment with no user data, in `version` (its fields are the same in 0-3)."""
    out = bytearray(_I16.pack(min(max(version, 0), LATEST_VERSION)))
    _topic_partitions(out, partitions)
    out += _I32.pack(-1)
    return bytes(out)


def encode_subscription(
    topics: list[str],
    user_data: bytes = b"",
    *,
    version: int = 0,
    owned: Mapping[str, tuple[int, ...]] | None = None,
    generation_id: int = -1,
    rack_id: str | None = None,
) -> bytes:
    """A subscription in `version` (for tests and tools)."""
    out = bytearray(_I16.pack(version))
    out += _I32.pack(len(topics))
    for topic in topics:
        _string(out, topic)
    out += _I32.pack(len(user_data)) + user_data
    if version >= 1:
        _topic_partitions(out, owned or {})
    if version >= 2:
        out += _I32.pack(generation_id)
    if version >= 3:
        _string(out, rack_id)
    return bytes(out)
