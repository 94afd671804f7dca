"""Which `__transaction_state` partition holds a transactional id: Kafka's rule, the same
abs(String.hashCode) mod the partition count that places a group in `__consumer_offsets`
(group/placement.py), so an id lives in the same partition number on strom as on Kafka."""

from __future__ import annotations

from strom.group.placement import partition_for

__all__ = ["TRANSACTION_STATE_TOPIC", "partition_for"]

TRANSACTION_STATE_TOPIC = "__transaction_state"
