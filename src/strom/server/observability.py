"""What a node shows about itself (strom.metrics), wired to the broker: the snapshot its
metrics collector reads, the state /ready decides from, and the HTTP endpoint serving
both when `metrics.listener` is set. Kept apart so that broker.py stays about the
node's lifecycle."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from strom.metrics.health import NodeState, readiness
from strom.metrics.http import MetricsEndpoint
from strom.metrics.snapshot import (
    ClusterStats,
    GroupStats,
    NodeStats,
    PartitionStats,
    StoreStats,
)
from strom.metrics.traffic import NodeCounters

if TYPE_CHECKING:
    from strom.group.state import Group
    from strom.metrics.node import NodeMetrics
    from strom.server.broker import Broker
    from strom.server.connection import RequestObserver
    from strom.server.partition import Partition

log = logging.getLogger(__name__)


class Observability:
    """created -> start() (serving /metrics, /health, /ready if configured) -> stop()"""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.counters = NodeCounters()
        """Counted always: the hot paths add to it whether metrics are served or not."""
        self.metrics: NodeMetrics | None = None
        """The Prometheus registry, made only when `metrics.listener` is set: neither its
        histograms on the request path nor prometheus-client's import (150 ms) are paid
        by a node that serves no metrics."""
        self.endpoint: MetricsEndpoint | None = None

    async def start(self) -> None:
        """Serve the endpoint if `metrics.listener` is set; OSError if it cannot bind."""
        address = self._broker.config.metrics_listener
        if address is None:
            return
        from strom.metrics.node import NodeMetrics

        host, port = address
        self.metrics = NodeMetrics(self._broker.node_id, self.counters)
        self.endpoint = MetricsEndpoint(
            host,
            port,
            node_id=self._broker.node_id,
            ready=self.ready,
            metrics=self.render,
        )
        await self.endpoint.start()
        log.info(
            "[node %d] metrics on http://%s:%d/metrics (and /health, /ready)",
            self._broker.node_id,
            host or "0.0.0.0",
            self.endpoint.port,
        )

    async def stop(self) -> None:
        if self.endpoint is not None:
            await self.endpoint.stop()

    @property
    def request_observer(self) -> RequestObserver | None:
        """What a connection reports each request's timings to; None without metrics."""
        return None if self.metrics is None else self.metrics.observe_request

    def observe_fsync(self, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_fsync(seconds)

    async def render(self) -> bytes:
        """/metrics: the node's state read here, on the loop; the text written in a
        worker thread, so that a large node does not hold up the loop while it is."""
        assert self.metrics is not None  # the endpoint exists only with the metrics
        stats = self.stats()
        return await asyncio.get_running_loop().run_in_executor(None, self.metrics.render, stats)

    def ready(self) -> tuple[bool, str]:
        broker = self._broker
        lifecycle = broker.lifecycle
        return readiness(
            NodeState(
                is_broker=broker.is_broker,
                is_controller=broker.is_controller,
                stopping=broker.stopping,
                failed=broker.fatal_reason if broker.fatal.is_set() else None,
                cluster_formed=bool(broker.metadata.image.cluster_id),
                registered=lifecycle is not None and lifecycle.epoch is not None,
                unfenced=lifecycle is not None and lifecycle.unfenced.is_set(),
                serving=broker.serving,
                metadata_leader_known=broker.channel.leader_id is not None,
            )
        )

    def stats(self) -> NodeStats:
        broker = self._broker
        controller = broker.controller
        active = controller is not None and controller.active
        return NodeStats(
            partitions=[_partition_stats(p) for p in broker.partitions] if broker.serving else [],
            groups=[_group_stats(group) for group in broker.groups.core.groups.values()],
            connections=dict(broker.connections.counts),
            active_controller=active,
            cluster=_cluster_stats(broker) if active else None,
            metadata_offset=broker.metadata.image.offset,
            store=_store_stats(broker),
            fetch_sessions=len(broker.fetch_sessions),
            fetch_session_partitions=broker.fetch_sessions.partitions,
            fetch_session_evictions=broker.fetch_sessions.evictions,
        )


def _partition_stats(partition: Partition) -> PartitionStats:
    log_ = partition.log
    return PartitionStats(
        topic=partition.topic,
        partition=partition.index,
        leader=partition.is_leader,
        log_start_offset=log_.log_start_offset,
        log_end_offset=log_.log_end_offset,
        high_watermark=partition.high_watermark,
        last_stable_offset=partition.last_stable_offset,
        size_bytes=log_.size_bytes,
        segments=len(log_.segments),
        replicas=len(partition.replicas),
        in_sync_replicas=len(partition.isr),
        min_insync_replicas=partition.min_insync_replicas,
    )


def _store_stats(broker: Broker) -> StoreStats | None:
    store = broker.store
    if store is None:
        return None
    leader = -1 if store.leader_id is None else store.leader_id
    quorum = store.describe_quorum()
    latency = store.commit_timer.snapshot()
    if quorum is None:
        return StoreStats(store.term, leader, commit_latency=latency)
    ends = tuple((voter.node_id, voter.log_end_offset) for voter in quorum.voters)
    return StoreStats(store.term, leader, quorum.high_watermark, ends, latency)


def _group_stats(group: Group) -> GroupStats:
    return GroupStats(
        group_id=group.group_id,
        state=group.state.value,
        members=len(group.members),
        offsets=tuple((tp.topic, tp.partition, v.offset) for tp, v in group.offsets.items()),
    )


def _cluster_stats(broker: Broker) -> ClusterStats:
    image = broker.metadata.image
    partitions = list(image.partitions())
    fenced = sum(1 for b in image.brokers.values() if b.fenced)
    return ClusterStats(
        topics=len(image.topics_by_name),
        partitions=len(partitions),
        offline_partitions=sum(1 for _, p in partitions if p.leader < 0),
        active_brokers=len(image.brokers) - fenced,
        fenced_brokers=fenced,
    )
