"""What the broker reads of the consumer protocol's opaque member metadata.

Consumers in a group (protocol type "consumer") send a subscription as their protocol
metadata: int16 version, then an array (int32 count) of topic names (int16 length +
UTF-8), then fields the broker does not need. The coordinator reads the topic names to
know which committed offsets a live group still uses (offset expiry, OffsetDelete).
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscription_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a subscription; None when the bytes are not one."""
    try:
        (version,) = _I16.unpack_from(metadata, 0)
        if version < 0:
            return None
        (count,) = _I32.unpack_from(metadata, 2)
        if count < 0 or count > len(metadata):
            return None
        pos = 6
        topics: set[str] = set()
        for _ in range(count):
            (size,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if size < 0 or pos + size > len(metadata):
                return None
            topics.add(metadata[pos : pos + size].decode())
            pos += size
        return frozenset(topics)
    except (struct.error, UnicodeDecodeError):
        return None


def encode_subscription(topics: list[str], user_data: bytes = b"") -> bytes:
    """A version 0 subscription (for tests and tools)."""
    out = bytearray(_I16.pack(0))
    out += _I32.pack(len(topics))
    for topic in topics:
        data = topic.encode()
        out += _I16.pack(len(data)) + data
    out += _I32.pack(len(user_data)) + user_data
    return bytes(out)
