"""The settings of one share-partition: Kafka's share-group configs and strom's own.

Kafka's (group configs; the broker defaults are the `group.share.*` names):

    share.record.lock.duration.ms     30000  how long an acquisition lock lasts
    share.delivery.count.limit        5      deliveries before a record is archived
    share.partition.max.record.locks  2000   records in flight (SPSO..SPEO) at most
    share.auto.offset.reset           latest where a new share-partition starts
    share.renew.acknowledge.enable    true   whether RENEW (KIP-1222) is accepted
    errors.deadletterqueue.topic.name ""     the group's dead-letter topic (KIP-1191)

strom's own (topic configs, beyond Kafka; docs/share-groups.md):

    strom.share.delivery.delay.ms        0      a record is acquirable only from its
                                                timestamp + this delay
    strom.share.redelivery.backoff.ms    0      a released or timed-out record waits
                                                this long times 2**(deliveries - 1)
    strom.share.redelivery.backoff.max.ms 60000 ... but never longer than this
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["AutoOffsetReset", "SharePartitionConfig"]


class AutoOffsetReset(enum.Enum):
    LATEST = "latest"
    EARLIEST = "earliest"
    BY_DURATION = "by_duration"
    """Start at the first record whose timestamp is at most a duration old; the shell
    finds that offset in the log's time index and passes it in."""


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    record_lock_duration_ms: int = 30_000
    delivery_count_limit: int = 5
    max_record_locks: int = 2000
    auto_offset_reset: AutoOffsetReset = AutoOffsetReset.LATEST
    renew_acknowledge_enable: bool = True
    dead_letter_topic: str | None = None
    delivery_delay_ms: int = 0
    redelivery_backoff_ms: int = 0
    redelivery_backoff_max_ms: int = 60_000
    snapshot_update_records: int = 500
    """Updates written between two snapshots (Kafka's
    `share.coordinator.snapshot.update.records.per.snapshot`)."""

    def __post_init__(self) -> None:
        if self.record_lock_duration_ms <= 0:
            raise ValueError("share.record.lock.duration.ms must be positive")
        if not 1 <= self.delivery_count_limit <= 0x7FFF:
            raise ValueError("share.delivery.count.limit must be in 1..32767")
        if self.max_record_locks <= 0:
            raise ValueError("share.partition.max.record.locks must be positive")
        if self.delivery_delay_ms < 0 or self.redelivery_backoff_ms < 0:
            raise ValueError("strom.share delays must not be negative")
        if self.redelivery_backoff_max_ms < self.redelivery_backoff_ms:
            raise ValueError("strom.share.redelivery.backoff.max.ms is below the backoff")
        if self.snapshot_update_records <= 0:
            raise ValueError("snapshot_update_records must be positive")

    def redelivery_backoff(self, delivery_count: int) -> int:
        """How long a record delivered `delivery_count` times waits after its release or
        lock expiry before it is acquirable again: doubling per delivery, capped."""
        if self.redelivery_backoff_ms == 0 or delivery_count <= 0:
            return 0
        exponent = min(delivery_count - 1, 62)
        return min(self.redelivery_backoff_ms << exponent, self.redelivery_backoff_max_ms)
