"""A node's metrics as Prometheus reads them: names, labels, values and types."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from strom.metrics.latency import CommitTimer
from strom.metrics.node import NodeMetrics, api_label
from strom.metrics.snapshot import (
    ClusterStats,
    GroupStats,
    NodeStats,
    PartitionStats,
    StoreStats,
)
from strom.metrics.traffic import NodeCounters


def samples(
    metrics: NodeMetrics, stats: NodeStats | None = None
) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    parsed = text_string_to_metric_families(metrics.render(stats or NodeStats()).decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in parsed for s in f.samples}


def partition(topic: str, index: int, *, leader: bool, isr: int) -> PartitionStats:
    return PartitionStats(
        topic=topic,
        partition=index,
        leader=leader,
        log_start_offset=5,
        log_end_offset=120,
        high_watermark=110,
        last_stable_offset=100,
        size_bytes=4096,
        segments=2,
        replicas=3,
        in_sync_replicas=isr,
        min_insync_replicas=2,
    )


def test_api_labels_are_kafkas_request_names() -> None:
    assert api_label("PRODUCE") == "Produce"
    assert api_label("INIT_PRODUCER_ID") == "InitProducerId"
    assert api_label("API_VERSIONS") == "ApiVersions"


def test_partition_state_and_the_counts_derived_from_it() -> None:
    stats = NodeStats(
        partitions=[
            partition("orders", 0, leader=True, isr=3),
            partition("orders", 1, leader=True, isr=1),  # under min ISR
            partition("orders", 2, leader=True, isr=2),  # at min ISR
            partition("orders", 3, leader=False, isr=1),  # a follower: not counted
        ],
        connections={"PLAINTEXT": 4, "CONTROLLER": 2},
        metadata_offset=77,
        fetch_sessions=2,
        fetch_session_partitions=9,
        fetch_session_evictions=5,
    )
    metrics = NodeMetrics(1, NodeCounters())
    metrics.counters.isr_changed(True, False)
    metrics.counters.isr_changed(True, False)
    metrics.counters.isr_changed(True, True)  # one replica swapped for another
    metrics.counters.isr_changed(False, True)
    got = samples(metrics, stats)
    key = (("partition", "1"), ("topic", "orders"))
    assert got[("strom_partition_log_end_offset", key)] == 120
    assert got[("strom_partition_high_watermark", key)] == 110
    assert got[("strom_partition_last_stable_offset", key)] == 100
    assert got[("strom_partition_size_bytes", key)] == 4096
    assert got[("strom_partition_under_replicated", key)] == 1
    follower = (("partition", "3"), ("topic", "orders"))
    assert got[("strom_partition_leader", follower)] == 0
    assert got[("strom_partition_under_replicated", follower)] == 0
    assert got[("strom_partitions", ())] == 4
    assert got[("strom_leader_partitions", ())] == 3
    assert got[("strom_under_replicated_partitions", ())] == 2
    assert got[("strom_under_min_isr_partitions", ())] == 1
    assert got[("strom_at_min_isr_partitions", ())] == 1
    assert got[("strom_isr_shrinks_total", ())] == 3
    assert got[("strom_isr_expands_total", ())] == 2
    assert got[("strom_connections", (("listener", "PLAINTEXT"),))] == 4
    assert got[("strom_metadata_applied_offset", ())] == 77
    assert got[("strom_fetch_sessions", ())] == 2
    assert got[("strom_fetch_session_partitions", ())] == 9
    assert got[("strom_fetch_session_evictions_total", ())] == 5
    assert got[("strom_active_controller", ())] == 0
    assert ("strom_offline_partitions", ()) not in got  # the active controller's only


def test_groups_coordinated_here_with_their_offsets_members_and_states() -> None:
    stats = NodeStats(
        groups=[
            GroupStats("billing", "Stable", 2, (("orders", 0, 40), ("orders", 1, 7))),
            GroupStats("audit", "Empty", 0, (("orders", 0, 12),)),
            GroupStats("new", "Empty", 0, ()),
        ]
    )
    got = samples(NodeMetrics(1, NodeCounters()), stats)
    offset = "strom_group_committed_offset"
    assert got[(offset, (("group", "billing"), ("partition", "1"), ("topic", "orders")))] == 7
    assert got[(offset, (("group", "audit"), ("partition", "0"), ("topic", "orders")))] == 12
    assert len([key for key in got if key[0] == offset]) == 3
    assert got[("strom_group_members", (("group", "billing"),))] == 2
    assert got[("strom_groups", (("state", "Empty"),))] == 2
    assert got[("strom_groups", (("state", "Stable"),))] == 1
    assert got[("strom_groups", (("state", "PreparingRebalance"),))] == 0


def test_the_metadata_store_as_a_controller_sees_it() -> None:
    follower = samples(
        NodeMetrics(2, NodeCounters()), NodeStats(store=StoreStats(term=7, leader=1))
    )
    assert follower[("strom_metadata_term", ())] == 7
    assert follower[("strom_metadata_leader", ())] == 1
    assert not any(name == "strom_metadata_voter_lag" for name, _ in follower)
    leader = samples(
        NodeMetrics(1, NodeCounters()),
        NodeStats(store=StoreStats(7, 1, 118, ((1, 120), (2, 120), (3, 95), (4, -1)))),
    )
    assert leader[("strom_metadata_high_watermark", ())] == 118
    lag = "strom_metadata_voter_lag"
    assert [leader[(lag, (("voter", str(v)),))] for v in (1, 2, 3, 4)] == [0, 0, 25, 120]
    assert ("strom_metadata_term", ()) not in samples(NodeMetrics(3, NodeCounters()), NodeStats())


def test_the_commit_latency_of_the_metadata_store_is_a_histogram() -> None:
    timer = CommitTimer((0.01, 0.1))
    timer.observe(0.005)
    timer.observe(0.05)
    timer.observe(0.2)
    stats = NodeStats(store=StoreStats(3, 1, commit_latency=timer.snapshot()))
    got = samples(NodeMetrics(1, NodeCounters()), stats)
    name = "strom_metadata_commit_latency_seconds"
    assert got[(f"{name}_bucket", (("le", "0.01"),))] == 1
    assert got[(f"{name}_bucket", (("le", "0.1"),))] == 2
    assert got[(f"{name}_bucket", (("le", "+Inf"),))] == 3
    assert got[(f"{name}_count", ())] == 3
    assert got[(f"{name}_sum", ())] == pytest.approx(0.255)


def test_the_active_controller_reports_the_cluster() -> None:
    stats = NodeStats(active_controller=True, cluster=ClusterStats(4, 12, 2, 3, 1))
    got = samples(NodeMetrics(1, NodeCounters()), stats)
    assert got[("strom_active_controller", ())] == 1
    assert got[("strom_cluster_topics", ())] == 4
    assert got[("strom_cluster_partitions", ())] == 12
    assert got[("strom_offline_partitions", ())] == 2
    assert got[("strom_active_brokers", ())] == 3
    assert got[("strom_fenced_brokers", ())] == 1


def test_traffic_requests_and_fsyncs() -> None:
    metrics = NodeMetrics(1, NodeCounters())
    metrics.counters.traffic.produced.add("orders", 1000, 10)
    metrics.counters.traffic.produced.add("orders", 500, 5)
    metrics.counters.traffic.consumed.add("orders", 700, 7)
    metrics.counters.traffic.replicated_out.add("orders", 1500, 15)
    metrics.counters.traffic.replicated_in.add("audit", 20, 1)
    metrics.observe_request("PRODUCE", 10.0, 10.001, 10.011, 10.012, 10.0125)
    metrics.observe_request("PRODUCE", 20.0, 20.0, 20.5, 20.5, 20.5)
    metrics.observe_fsync(0.003)
    got = samples(metrics)
    orders = (("topic", "orders"),)
    assert got[("strom_topic_in_bytes_total", orders)] == 1500
    assert got[("strom_topic_in_records_total", orders)] == 15
    assert got[("strom_topic_out_bytes_total", orders)] == 700
    assert got[("strom_replication_out_records_total", orders)] == 15
    assert got[("strom_replication_in_bytes_total", (("topic", "audit"),))] == 20
    produce = (("api", "Produce"),)
    assert got[("strom_request_seconds_count", produce)] == 2
    assert abs(got[("strom_request_seconds_sum", produce)] - 0.5125) < 1e-9
    assert abs(got[("strom_request_handle_seconds_sum", produce)] - 0.51) < 1e-9
    assert abs(got[("strom_response_send_seconds_sum", produce)] - 0.0005) < 1e-9
    # 10 ms of handling falls in the 0.01 bucket, 500 ms in the 0.5 one.
    assert got[("strom_request_handle_seconds_bucket", (*produce, ("le", "0.01")))] == 1
    assert got[("strom_request_handle_seconds_bucket", (*produce, ("le", "0.5")))] == 2
    assert got[("strom_fsync_seconds_count", ())] == 1


def test_the_grafana_dashboard_asks_only_for_metrics_strom_serves() -> None:
    dashboard = json.loads(
        (Path(__file__).parents[3] / "docs" / "grafana-dashboard.json").read_text()
    )
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"strom_[a-z_]+", target["expr"])
    }
    stats = NodeStats(
        partitions=[partition("t", 0, leader=True, isr=3)],
        connections={"PLAINTEXT": 1},
        groups=[GroupStats("g", "Stable", 1, (("t", 0, 1),))],
        active_controller=True,
        cluster=ClusterStats(1, 1, 0, 1, 0),
        store=StoreStats(1, 1, 5, ((1, 6),), CommitTimer().snapshot()),
    )
    metrics = NodeMetrics(1, NodeCounters())
    metrics.counters.traffic.produced.add("t", 1, 1)
    metrics.counters.traffic.consumed.add("t", 1, 1)
    metrics.counters.traffic.replicated_in.add("t", 1, 1)
    metrics.observe_request("PRODUCE", 0, 0, 0, 0, 0)
    metrics.observe_fsync(0.001)
    served = {name for name, _ in samples(metrics, stats)}
    assert asked and asked <= served, asked - served
