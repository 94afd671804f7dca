"""What a node is like at one moment, as the metrics collector reads it (plain values, so
the collector never touches the broker's objects while it renders)."""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.metrics.latency import LatencySnapshot


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
class GroupStats:
    """One consumer group this node coordinates."""

    group_id: str
    state: str
    """Kafka's state name: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead."""
    members: int
    offsets: tuple[tuple[str, int, int], ...]
    """(topic, partition, committed offset) for each partition with a committed offset."""


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
    groups: list[GroupStats] = field(default_factory=list)
    connections: dict[str, int] = field(default_factory=dict)
    """Open connections per listener name."""
    active_controller: bool = False
    cluster: ClusterStats | None = None
    """Set on the active controller only, as Kafka reports its controller metrics."""
    metadata_offset: int = -1
    """The offset of the last metadata record this node applied."""
    store: StoreStats | None = None
    """A controller's view of the metadata store; None on a broker-only node."""
    fetch_sessions: int = 0
    """Incremental fetch sessions (KIP-227) held."""
    fetch_session_partitions: int = 0
    """Partitions held over all fetch sessions."""
    fetch_session_evictions: int = 0
    """Fetch sessions evicted to make place for others, since start."""


@dataclass(frozen=True, slots=True)
class StoreStats:
    """The metadata store as a controller sees it."""

    term: int
    """The Raft term, or the controller epoch on ZooKeeper."""
    leader: int
    """The active controller's node id; -1 when none is known."""
    high_watermark: int = -1
    """The Raft quorum's commit offset, on its leader only; -1 elsewhere."""
    voter_ends: tuple[tuple[int, int], ...] = ()
    """(voter, log end offset) as the Raft leader sees each voter; empty elsewhere."""
    commit_latency: LatencySnapshot | None = None
    """How long this node's proposals took to commit, over every time it led."""
