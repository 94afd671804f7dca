"""One node's Prometheus metrics: what the request path and the flusher observe as they go
(histograms), and what is read off the node when Prometheus scrapes (a NodeStats
snapshot, taken on the event loop and rendered with everything else in a worker thread:
the text of a node with many partitions takes milliseconds to write).

Each node has a registry of its own (several nodes may run in one process, as in
strom.testing). Names follow Prometheus' conventions (seconds, bytes, `_total`); the
Kafka metric each matches is in its help text and in docs/metrics.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from strom.group.state import GroupState
from strom.metrics.snapshot import NodeStats
from strom.metrics.traffic import NodeCounters, Tally, TopicTraffic

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series: noise

# From 100 µs (an in-memory answer) to 30 s (a long poll or a slow fsync).
LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
_PHASES = (
    ("strom_request_queue_seconds", "From reading a request to starting it (RequestQueueTimeMs)"),
    (
        "strom_request_handle_seconds",
        "Handling a request, waits for fsync and replicas included (LocalTimeMs + RemoteTimeMs)",
    ),
    (
        "strom_response_queue_seconds",
        "From a response being ready to its turn on the connection (ResponseQueueTimeMs)",
    ),
    ("strom_response_send_seconds", "Writing a response to the socket (ResponseSendTimeMs)"),
    ("strom_request_seconds", "A request from read to sent; _count counts them (TotalTimeMs)"),
)


def api_label(name: str) -> str:
    """Kafka's request name for an API key's name: PRODUCE -> Produce,
    INIT_PRODUCER_ID -> InitProducerId."""
    return "".join(word.capitalize() for word in name.split("_"))


class NodeMetrics:
    """The registry of one node, and the calls its hot paths make."""

    def __init__(self, node_id: int, counters: NodeCounters) -> None:
        self.node_id = node_id
        self.counters = counters
        self.registry = CollectorRegistry(auto_describe=True)
        self._phases = [
            Histogram(name, doc, ["api"], registry=self.registry, buckets=LATENCY_BUCKETS)
            for name, doc in _PHASES
        ]
        self._by_api: dict[str, list[Any]] = {}
        self._fsync = Histogram(
            "strom_fsync_seconds",
            "One group-commit round of fsyncs (LogFlushRateAndTimeMs)",
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )

    def observe_request(
        self,
        api_name: str,
        read_at: float,
        started_at: float,
        handled_at: float,
        dequeued_at: float,
        sent_at: float,
    ) -> None:
        """One request's phases, from perf_counter() readings along its way."""
        children = self._by_api.get(api_name)
        if children is None:
            label = api_label(api_name)
            children = self._by_api[api_name] = [h.labels(label) for h in self._phases]
        queue, handle, response_queue, send, total = children
        queue.observe(started_at - read_at)
        handle.observe(handled_at - started_at)
        response_queue.observe(dequeued_at - handled_at)
        send.observe(sent_at - dequeued_at)
        total.observe(sent_at - read_at)

    def observe_fsync(self, seconds: float) -> None:
        self._fsync.observe(seconds)

    def render(self, stats: NodeStats) -> bytes:
        """The text exposition of everything, for /metrics; safe in a worker thread."""
        return generate_latest(self.registry) + generate_latest(_Scrape(self, stats))


class _Scrape(Collector):
    """What one scrape reads besides the histograms: per-topic traffic, partition state,
    connections, the controller's view."""

    def __init__(self, metrics: NodeMetrics, stats: NodeStats) -> None:
        self._metrics = metrics
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        counters = self._metrics.counters
        yield from _traffic_families(counters.traffic)
        stats = self._stats
        yield from _partition_families(stats)
        yield from _group_families(stats)
        yield from _node_families(stats)
        yield CounterMetricFamily(
            "strom_isr_shrinks",
            "ISR changes of partitions led here that removed replicas (IsrShrinksPerSec)",
            counters.isr_shrinks,
        )
        yield CounterMetricFamily(
            "strom_isr_expands",
            "ISR changes of partitions led here that added replicas (IsrExpandsPerSec)",
            counters.isr_expands,
        )


def _traffic_families(traffic: TopicTraffic) -> Iterator[Any]:
    def pair(tally: Tally, name: str, what: str, kafka: str) -> Iterator[Any]:
        size = CounterMetricFamily(f"{name}_bytes", f"Bytes {what} ({kafka})", labels=["topic"])
        records = CounterMetricFamily(f"{name}_records", f"Records {what}", labels=["topic"])
        for topic, total_bytes, total_records in tally.items():
            size.add_metric([topic], total_bytes)
            records.add_metric([topic], total_records)
        yield size
        yield records

    yield from pair(traffic.produced, "strom_topic_in", "appended by producers", "BytesInPerSec")
    yield from pair(
        traffic.consumed,
        "strom_topic_out",
        "sent to consumers; records as offsets passed",
        "BytesOutPerSec",
    )
    yield from pair(
        traffic.replicated_out,
        "strom_replication_out",
        "sent to followers",
        "ReplicationBytesOutPerSec",
    )
    yield from pair(
        traffic.replicated_in,
        "strom_replication_in",
        "copied from leaders",
        "ReplicationBytesInPerSec",
    )


_PARTITION_GAUGES = (
    ("log_start_offset", "First offset kept (Log LogStartOffset)"),
    ("log_end_offset", "Offset the next record gets (Log LogEndOffset)"),
    ("high_watermark", "Offset below which every in-sync replica has the records"),
    ("last_stable_offset", "Offset below which read_committed consumers read"),
    ("size_bytes", "Bytes of the partition's segments (Log Size)"),
    ("segments", "Segments of the partition's log (Log NumLogSegments)"),
    ("replicas", "Replicas assigned (Partition ReplicasCount)"),
    ("in_sync_replicas", "Replicas in the ISR (Partition InSyncReplicasCount)"),
)


def _partition_families(stats: NodeStats) -> Iterator[Any]:
    labels = ["topic", "partition"]
    gauges = [
        (
            field,
            GaugeMetricFamily(f"strom_partition_{field}", doc, labels=labels),
        )
        for field, doc in _PARTITION_GAUGES
    ]
    leader = GaugeMetricFamily(
        "strom_partition_leader", "1 if this node leads the partition", labels=labels
    )
    under = GaugeMetricFamily(
        "strom_partition_under_replicated",
        "1 if led here with fewer in-sync replicas than replicas (Partition UnderReplicated)",
        labels=labels,
    )
    for p in stats.partitions:
        key = [p.topic, str(p.partition)]
        for field, family in gauges:
            family.add_metric(key, getattr(p, field))
        leader.add_metric(key, 1 if p.leader else 0)
        under.add_metric(key, 1 if p.under_replicated else 0)
    for _, family in gauges:
        yield family
    yield leader
    yield under


def _store_families(stats: NodeStats) -> Iterator[Any]:
    store = stats.store
    if store is None:
        return
    yield GaugeMetricFamily(
        "strom_metadata_term",
        "The metadata quorum's Raft term, or the controller epoch on ZooKeeper (current-epoch)",
        value=store.term,
    )
    yield GaugeMetricFamily(
        "strom_metadata_leader",
        "The active controller's node id, -1 if none is known (current-leader)",
        value=store.leader,
    )
    latency = store.commit_latency
    if latency is not None:
        yield HistogramMetricFamily(
            "strom_metadata_commit_latency_seconds",
            "From the active controller proposing a metadata record to the store committing it"
            " (commit-latency-avg and -max)",
            buckets=latency.cumulative(),
            sum_value=latency.total_seconds,
        )
    if not store.voter_ends:
        return
    yield GaugeMetricFamily(
        "strom_metadata_high_watermark",
        "The Raft quorum's committed offset, on its leader (high-watermark)",
        value=store.high_watermark,
    )
    lag = GaugeMetricFamily(
        "strom_metadata_voter_lag",
        "Entries a voter's log is behind the leader's, on the leader (follower lag)",
        labels=["voter"],
    )
    leader_end = max(end for _, end in store.voter_ends)
    for voter, end in store.voter_ends:
        lag.add_metric([str(voter)], leader_end - end if end >= 0 else leader_end)
    yield lag


GROUP_STATES = tuple(state.value for state in GroupState)


def _group_families(stats: NodeStats) -> Iterator[Any]:
    """The groups coordinated here: committed offsets (lag is the partition's high
    watermark minus these, docs/metrics.md), members, and how many are in each state."""
    committed = GaugeMetricFamily(
        "strom_group_committed_offset",
        "A group's committed offset of a partition, on its coordinator",
        labels=["group", "topic", "partition"],
    )
    members = GaugeMetricFamily(
        "strom_group_members", "Members of a group, on its coordinator", labels=["group"]
    )
    states = dict.fromkeys(GROUP_STATES, 0)
    for group in stats.groups:
        states[group.state] = states.get(group.state, 0) + 1
        members.add_metric([group.group_id], group.members)
        for topic, partition, offset in group.offsets:
            committed.add_metric([group.group_id, topic, str(partition)], offset)
    yield committed
    yield members
    by_state = GaugeMetricFamily(
        "strom_groups",
        "Groups coordinated here, by state (NumGroups, NumGroupsStable, ...)",
        labels=["state"],
    )
    for state, count in states.items():
        by_state.add_metric([state], count)
    yield by_state


def _node_families(stats: NodeStats) -> Iterator[Any]:
    parts = stats.partitions

    def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
        return GaugeMetricFamily(name, doc, value=value)

    yield gauge("strom_partitions", "Replicas on this node (PartitionCount)", len(parts))
    yield gauge(
        "strom_leader_partitions", "Partitions led here (LeaderCount)", sum(p.leader for p in parts)
    )
    yield gauge(
        "strom_under_replicated_partitions",
        "Partitions led here with a replica out of sync (UnderReplicatedPartitions)",
        sum(p.under_replicated for p in parts),
    )
    yield gauge(
        "strom_under_min_isr_partitions",
        "Partitions led here whose ISR is below min.insync.replicas (UnderMinIsrPartitionCount)",
        sum(p.under_min_isr for p in parts),
    )
    yield gauge(
        "strom_at_min_isr_partitions",
        "Partitions led here whose ISR is at min.insync.replicas (AtMinIsrPartitionCount)",
        sum(p.at_min_isr for p in parts),
    )
    connections = GaugeMetricFamily(
        "strom_connections", "Open connections (connection-count)", labels=["listener"]
    )
    for listener, count in sorted(stats.connections.items()):
        connections.add_metric([listener], count)
    yield connections
    yield gauge(
        "strom_active_controller",
        "1 on the active controller (ActiveControllerCount)",
        1 if stats.active_controller else 0,
    )
    yield gauge(
        "strom_metadata_applied_offset",
        "Offset of the last metadata record applied here (last-applied-record-offset)",
        stats.metadata_offset,
    )
    yield gauge(
        "strom_fetch_sessions",
        "Incremental fetch sessions held (NumIncrementalFetchSessions)",
        stats.fetch_sessions,
    )
    yield gauge(
        "strom_fetch_session_partitions",
        "Partitions held over all fetch sessions (NumIncrementalFetchPartitionsCached)",
        stats.fetch_session_partitions,
    )
    yield CounterMetricFamily(
        "strom_fetch_session_evictions",
        "Fetch sessions evicted for new ones (IncrementalFetchSessionEvictionsPerSec)",
        value=stats.fetch_session_evictions,
    )
    yield from _store_families(stats)
    cluster = stats.cluster
    if cluster is None:
        return
    yield gauge("strom_cluster_topics", "Topics (GlobalTopicCount)", cluster.topics)
    yield gauge("strom_cluster_partitions", "Partitions (GlobalPartitionCount)", cluster.partitions)
    yield gauge(
        "strom_offline_partitions",
        "Partitions without a leader (OfflinePartitionsCount)",
        cluster.offline_partitions,
    )
    yield gauge(
        "strom_active_brokers",
        "Registered, unfenced brokers (ActiveBrokerCount)",
        cluster.active_brokers,
    )
    yield gauge(
        "strom_fenced_brokers",
        "Registered, fenced brokers (FencedBrokerCount)",
        cluster.fenced_brokers,
    )
