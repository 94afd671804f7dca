"""The share coordinator's keys (share.coordinator.*): its `__share_group_state` topic,
how often it writes a snapshot and how often it prunes the topic. Kafka's names and
defaults (ShareCoordinatorConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from strom.config.schema import AtLeast, Between, ConfigKey, ConfigType
from strom.config.typed_values import TypedValues

__all__ = ["SHARE_COORDINATOR_KEYS", "ShareCoordinatorSettings", "share_coordinator_settings"]

INT = ConfigType.INT

SHARE_COORDINATOR_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "share.coordinator.state.topic.num.partitions",
        INT,
        "50",
        "Partitions of __share_group_state.",
        AtLeast(1),
    ),
    ConfigKey(
        "share.coordinator.state.topic.replication.factor",
        INT,
        "3",
        "Replication factor of __share_group_state, capped at the live brokers.",
        Between(1, 32767),
    ),
    ConfigKey(
        "share.coordinator.state.topic.min.isr",
        INT,
        "2",
        "min.insync.replicas of __share_group_state, capped at its replication factor.",
        AtLeast(1),
    ),
    ConfigKey(
        "share.coordinator.state.topic.segment.bytes",
        INT,
        "104857600",
        "Segment size of __share_group_state.",
        Between(14, 2**31 - 1),
    ),
    ConfigKey(
        "share.coordinator.snapshot.update.records.per.snapshot",
        INT,
        "500",
        "Updates of a share-partition written between two snapshots of it.",
        Between(0, 500),
    ),
    ConfigKey(
        "share.coordinator.write.timeout.ms",
        INT,
        "5000",
        "How long a share coordinator's write waits to be committed.",
        AtLeast(1),
    ),
    ConfigKey(
        "share.coordinator.state.topic.prune.interval.ms",
        INT,
        "300000",
        "Time between two prunings of __share_group_state (records no state needs deleted).",
        AtLeast(1),
    ),
)


@dataclass(frozen=True, slots=True)
class ShareCoordinatorSettings:
    state_topic_num_partitions: int = 50
    state_topic_replication_factor: int = 3
    state_topic_min_isr: int = 2
    state_topic_segment_bytes: int = 104857600
    snapshot_update_records_per_snapshot: int = 500
    write_timeout_ms: int = 5000
    state_topic_prune_interval_ms: int = 300000


def share_coordinator_settings(v: TypedValues) -> ShareCoordinatorSettings:
    return ShareCoordinatorSettings(
        state_topic_num_partitions=v.integer("share.coordinator.state.topic.num.partitions"),
        state_topic_replication_factor=v.integer(
            "share.coordinator.state.topic.replication.factor"
        ),
        state_topic_min_isr=v.integer("share.coordinator.state.topic.min.isr"),
        state_topic_segment_bytes=v.integer("share.coordinator.state.topic.segment.bytes"),
        snapshot_update_records_per_snapshot=v.integer(
            "share.coordinator.snapshot.update.records.per.snapshot"
        ),
        write_timeout_ms=v.integer("share.coordinator.write.timeout.ms"),
        state_topic_prune_interval_ms=v.integer("share.coordinator.state.topic.prune.interval.ms"),
    )
