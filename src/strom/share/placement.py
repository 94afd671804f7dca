"""Which `__share_group_state` partition holds a share-partition's state: Kafka's rule,
so the state lives in the same partition number on strom as on Kafka.

The coordinator key is "<group id>:<topic id>:<partition>", the topic id in Kafka's text
form (URL-safe base64, no padding), and the partition is abs(Java hashCode of that key)
mod the topic's partition count (`share.coordinator.state.topic.num.partitions`, 50).
"""

from __future__ import annotations

import base64
import uuid

from strom.group.placement import partition_for

__all__ = ["SHARE_STATE_TOPIC", "share_coordinator_key", "share_state_partition"]

SHARE_STATE_TOPIC = "__share_group_state"
DEFAULT_STATE_PARTITIONS = 50


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    topic_text = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()
    return f"{group_id}:{topic_text}:{partition}"


def share_state_partition(
    group_id: str, topic_id: uuid.UUID, partition: int, num_partitions: int
) -> int:
    return partition_for(share_coordinator_key(group_id, topic_id, partition), num_partitions)
