"""Which `__consumer_offsets` partition holds a group: Kafka's rule, so a group lives in
the same partition number on strom as on Kafka.

The partition is abs(hashCode(group id)) mod the partition count, where hashCode is
Java's String.hashCode over UTF-16 code units and abs maps Integer.MIN_VALUE to 0.
"""

from __future__ import annotations

from functools import lru_cache

OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(text: str) -> int:
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@lru_cache(maxsize=65536)
def partition_for(group_id: str, num_partitions: int) -> int:
    """Cached: every request of a group asks again, and the hash walks the whole id."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % num_partitions
