"""Metrics, /health and /ready on real nodes: a broker's counters and gauges after real
clients produced and consumed, hostile HTTP on the metrics port, and a real Prometheus
(Debian's package) scraping a three-node cluster while a node is killed and comes back.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess
from cluster import free_ports, running_cluster
from prometheus import PrometheusServer, get, prometheus_missing, scrape

RECORDS = 500
DOCS = Path(__file__).parents[2] / "docs"


def lag(group: str, topic: str) -> str:
    """A group's lag on a topic (its partitions' high watermarks minus its committed
    offsets), with the query docs/metrics.md gives."""
    where = f'{{topic="{topic}"}}'
    return (
        f"sum(max by (topic, partition) (strom_partition_high_watermark{where}"
        f" * strom_partition_leader{where})"
        " - on (topic, partition) group_right max by (group, topic, partition)"
        f' (strom_group_committed_offset{{group="{group}", topic="{topic}"}}))'
    )


def produce_and_consume(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    produce(bootstrap, topic, count, partitions)
    consume(bootstrap, topic, count)


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    """`count` records, spread evenly over the topic's `partitions` (so that every
    partition has records, and a group reading them commits an offset for each)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"v" * 90 + b"%010d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def consume(bootstrap: str, topic: str, count: int) -> None:
    """`count` more records of `topic` as the group "metrics", committed when it closes."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "metrics", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    seen, deadline = 0, time.monotonic() + 30
    try:
        while seen < count:
            assert time.monotonic() < deadline, f"consumed {seen} of {count}"
            seen += sum(1 for m in consumer.consume(500, 0.5) if m.error() is None)
    finally:
        consumer.close()


def test_a_broker_counts_what_real_clients_move(metered: tuple[BrokerProcess, str]) -> None:
    broker, url = metered
    assert "metrics on port" in broker.ready_line
    assert get(f"{url}/health") == (200, "ok\n")
    assert get(f"{url}/ready") == (200, "ready\n")
    produce_and_consume(broker.bootstrap, "metered", RECORDS)

    got = scrape(url)
    topic = (("topic", "metered"),)
    assert got[("strom_topic_in_records_total", topic)] == RECORDS
    assert got[("strom_topic_in_bytes_total", topic)] >= RECORDS * 100  # payloads and framing
    assert got[("strom_topic_out_records_total", topic)] >= RECORDS
    assert got[("strom_topic_out_bytes_total", topic)] >= got[("strom_topic_in_bytes_total", topic)]
    partition = (("partition", "0"), ("topic", "metered"))
    for name in ("log_end_offset", "high_watermark", "last_stable_offset"):
        assert got[(f"strom_partition_{name}", partition)] == RECORDS, name
    assert got[("strom_partition_size_bytes", partition)] > RECORDS * 100
    assert got[("strom_partition_segments", partition)] == 1
    assert got[("strom_partition_leader", partition)] == 1
    for api in ("Produce", "Fetch", "Metadata", "ApiVersions", "JoinGroup", "OffsetCommit"):
        assert got[("strom_request_seconds_count", (("api", api),))] >= 1, api
    assert got[("strom_fsync_seconds_count", ())] >= 1
    assert got[("strom_active_controller", ())] == 1
    assert got[("strom_offline_partitions", ())] == 0
    assert got[("strom_active_brokers", ())] == 1
    assert got[("strom_under_replicated_partitions", ())] == 0
    group = (("group", "metrics"), ("partition", "0"), ("topic", "metered"))
    assert got[("strom_group_committed_offset", group)] == RECORDS  # committed on close
    assert got[("strom_group_members", (("group", "metrics"),))] == 0
    assert got[("strom_groups", (("state", "Empty"),))] == 1
    assert got[("strom_metadata_term", ())] >= 1
    assert got[("strom_metadata_leader", ())] == 1
    assert got[("strom_metadata_voter_lag", (("voter", "1"),))] == 0
    assert got[("strom_metadata_high_watermark", ())] >= 1
    assert got[("strom_metadata_commit_latency_seconds_count", ())] >= 1  # the topic's records

    # An open connection is counted on its listener.
    with socket.create_connection(("127.0.0.1", broker.port)):
        deadline = time.monotonic() + 10
        while scrape(url).get(("strom_connections", (("listener", "PLAINTEXT"),))) != 1:
            assert time.monotonic() < deadline, "the open connection was not counted"
            time.sleep(0.1)


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := conn.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_hostile_http_gets_a_status_and_the_broker_keeps_serving(
    metered: tuple[BrokerProcess, str],
) -> None:
    broker, url = metered
    port = int(url.rsplit(":", 1)[1])
    assert raw(port, b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20_000).startswith(
        b"HTTP/1.1 431 "
    )
    assert raw(port, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n").startswith(
        b"HTTP/1.1 400 "
    )  # a TLS hello
    assert raw(port, b"DELETE /ready HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 ")
    assert raw(port, b"GET /../../etc/passwd HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
    assert raw(port, b"GET / HTTP/1.1\r") == b""  # the peer went away mid-head

    # A flood of idle connections: the endpoint serves a bounded number, the Kafka
    # listener is untouched, and the endpoint answers again once they go.
    flood = []
    try:
        for _ in range(200):
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        produce_and_consume(broker.bootstrap, "during-flood", 50)
    finally:
        for conn in flood:
            conn.close()
    deadline = time.monotonic() + 15
    while True:
        try:
            assert get(f"{url}/health") == (200, "ok\n")
            break
        except OSError:
            assert time.monotonic() < deadline, "the endpoint did not come back"
            time.sleep(0.2)
    assert scrape(url)[("strom_topic_in_records_total", (("topic", "during-flood"),))] == 50


FAST = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=3000",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=3",
]


def test_prometheus_sees_traffic_and_an_under_replicated_partition_come_and_go(
    tmp_path: Path,
) -> None:
    missing = prometheus_missing()
    if missing:
        pytest.skip(missing)
    ports = free_ports(3)
    node_settings = {i + 1: [f"metrics.listener=127.0.0.1:{ports[i]}"] for i in range(3)}
    with running_cluster(tmp_path, 3, settings=FAST, node_settings=node_settings) as cluster:
        prometheus = PrometheusServer(tmp_path, [f"127.0.0.1:{port}" for port in ports])
        prometheus.start()
        try:
            prometheus.wait_for('count(up{job="strom"} == 1)', "==", 3)
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic("watched", 3, 3)])["watched"].result(30)
            produce_and_consume(cluster.bootstrap, "watched", RECORDS, 3)

            # The group's lag: what was written since its last commit, then nothing.
            behind = lag("metrics", "watched")
            prometheus.wait_for(behind, "==", 0)
            produce(cluster.bootstrap, "watched", RECORDS, 3)
            prometheus.wait_for(behind, "==", RECORDS)
            consume(cluster.bootstrap, "watched", RECORDS)
            prometheus.wait_for(behind, "==", 0)

            # Every record is counted once where it was appended, and copied twice.
            total = 2 * RECORDS
            prometheus.wait_for('sum(strom_topic_in_records_total{topic="watched"})', "==", total)
            prometheus.wait_for(
                'sum(strom_replication_in_records_total{topic="watched"})', "==", 2 * total
            )
            prometheus.wait_for("sum(strom_active_controller)", "==", 1)
            prometheus.wait_for('count(count_values("leader", strom_metadata_leader))', "==", 1)
            prometheus.wait_for("max(strom_metadata_voter_lag)", "<=", 5)
            prometheus.wait_for("sum(strom_under_replicated_partitions)", "==", 0)
            # Followers fetch in sessions (KIP-227): a leader holds one per follower, with
            # the partitions it leads for that follower (6 partitions, 2 followers each).
            prometheus.wait_for("sum(strom_fetch_sessions)", ">=", 2)
            prometheus.wait_for("sum(strom_fetch_session_partitions)", ">=", 12)

            # Node 3 killed: the partitions it was a replica of shrink their ISRs.
            cluster.kill(3)
            prometheus.wait_for("sum(strom_under_replicated_partitions)", ">=", 3)
            prometheus.wait_for("sum(strom_isr_shrinks_total)", ">=", 3)
            prometheus.wait_for(f'up{{instance="127.0.0.1:{ports[2]}"}}', "==", 0)
            prometheus.wait_for("max(strom_active_brokers)", "==", 2)

            # Back: it catches up, the ISRs expand, nothing is under-replicated.
            cluster.start(3)
            prometheus.wait_for("sum(strom_under_replicated_partitions)", "==", 0, 60)
            prometheus.wait_for("sum(strom_isr_expands_total)", ">=", 3)
            prometheus.wait_for("max(strom_active_brokers)", "==", 3)

            # Every query of the Grafana dashboard is valid PromQL and finds its series.
            dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text())
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    assert prometheus.query(target["expr"]), (panel["title"], target["expr"])
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{prometheus.log()}\n{cluster.logs()}") from None
        finally:
            prometheus.stop()
