"""Which `__share_group_state` partition holds a share-partition's state: Kafka's rule,
so the state lives in the same partition number on strom as on Kafka.

The coordinator key is "<group id>:<topic id>:<partition>", the topic id in Kafka's text
form (URL-safe base64, no padding), and the partition is abs(Java hashCode of that key)
mod the topic's partition count (`share.coordinator.state.topic.num.partitions`, 50).
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid

from strom.group.placement import partition_for

__all__ = [
    "SHARE_STATE_TOPIC",
    "parse_share_coordinator_key",
    "share_coordinator_key",
    "share_state_partition",
]

SHARE_STATE_TOPIC = "__share_group_state"
DEFAULT_STATE_PARTITIONS = 50


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    topic_text = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"{group_id}:{topic_text}:{partition}"


def share_state_partition(
    group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int
) -> int:
    return partition_for(share_coordinator_key(group_id, topic_id, partition), num_partitions)


_PARTITION = re.compile(r"[+-]?[0-9]{1,10}")


def parse_share_coordinator_key(key: str) -> tuple[str, uuid.UUID, int] | None:
    """FindCoordinator's share key "<group id>:<topic id>:<partition>" read as Kafka reads
    it (SharePartitionKey.getInstance): from the right, so the group id may hold colons;
    None where Kafka refuses it (no three parts, a blank group id, a topic id that is not
    16 bytes of URL-safe base64, a partition that is not an int32)."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0].strip():
        return None
    group_id, topic_text, partition_text = parts
    if len(topic_text) > 24 or not _PARTITION.fullmatch(partition_text):
        return None
    try:
        padding = "" if "=" in topic_text else "=" * (-len(topic_text) % 4)
        raw = base64.b64decode(topic_text + padding, b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    partition = int(partition_text)
    if len(raw) != 16 or not -(2**31) <= partition < 2**31:
        return None
    return group_id, uuid.UUID(bytes=raw), partition
