"""What a node is like at one moment, as the metrics collector reads it (plain values, so
the collector never touches the broker's objects while it renders)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class PartitionStats:
    """One replica on this node."""

    topic: str
    partition: int
    leader: bool
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int
    size_bytes: int
    segments: int
    replicas: int
    in_sync_replicas: int
    min_insync_replicas: int

    @property
    def under_replicated(self) -> bool:
        """Led here with fewer replicas in sync than assigned (Kafka's UnderReplicated)."""
        return self.leader and self.in_sync_replicas < self.replicas

    @property
    def under_min_isr(self) -> bool:
        return self.leader and self.in_sync_replicas < self.min_insync_replicas

    @property
    def at_min_isr(self) -> bool:
        return self.leader and self.in_sync_replicas == self.min_insync_replicas


@dataclass(frozen=True, slots=True)
class ClusterStats:
    """The committed metadata as the active controller sees it."""

    topics: int
    partitions: int
    offline_partitions: int
    """Partitions without a leader (Kafka's OfflinePartitionsCount)."""
    active_brokers: int
    fenced_brokers: int


@dataclass(frozen=True, slots=True)
class NodeStats:
    partitions: list[PartitionStats] = field(default_factory=list)
    connections: dict[str, int] = field(default_factory=dict)
    """Open connections per listener name."""
    active_controller: bool = False
    cluster: ClusterStats | None = None
    """Set on the active controller only, as Kafka reports its controller metrics."""
    metadata_offset: int = -1
    """The offset of the last metadata record this node applied."""
