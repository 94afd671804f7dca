"""Partition replication across three real nodes: followers catch up, rejoin the ISR,
truncate a diverged log, and end up holding exactly the leader's records.

The logs are compared byte for byte after a clean stop of every node: a follower copies
its leader's batches unchanged, so every replica of a partition must hold the same
batches at the same offsets.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))

from cluster import TestCluster, running_cluster

from conftest import store_settings
from strom.client import KafkaConnection
from strom.log.config import LogConfig
from strom.log.partition_log import PartitionLog
from strom.protocol.apis import ApiKey

SETTINGS = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "replica.lag.time.max.ms=2000",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=3",
]
TOPIC = "replicated"


def admin(cluster: TestCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create_topic(cluster: TestCluster, partitions: int = 1) -> None:
    client = admin(cluster)  # kept alive until the result is in
    futures = client.create_topics(
        [
            NewTopic(
                TOPIC,
                num_partitions=partitions,
                replication_factor=3,
                config={"min.insync.replicas": "2"},
            )
        ]
    )
    futures[TOPIC].result(timeout=20)


def state(cluster: TestCluster, partition: int = 0) -> tuple[int, list[int]]:
    """(leader, ISR) of a partition, as the cluster reports it."""
    metadata = admin(cluster).list_topics(TOPIC, timeout=5)
    found = metadata.topics[TOPIC].partitions[partition]
    return int(found.leader), sorted(int(b) for b in found.isrs)


def produce(cluster: TestCluster, count: int, *, acks: str = "all", prefix: str = "v") -> int:
    """Produce `count` records; the number acknowledged."""
    acked = 0

    def delivered(error: Any, _message: Any) -> None:
        nonlocal acked
        if error is None:
            acked += 1

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
            "message.timeout.ms": 20_000,
        }
    )
    for i in range(count):
        producer.produce(TOPIC, f"{prefix}{i}".encode(), partition=0, on_delivery=delivered)
        producer.poll(0)
    producer.flush(30)
    return acked


def consume_all(cluster: TestCluster, at_least: int = 0) -> list[bytes]:
    """Every record of TOPIC-0, from the start to the high watermark, once the high
    watermark has reached `at_least` (a new leader's may lag the old one's for a moment)."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"check-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        high = -1
        while high < at_least and time.monotonic() < deadline:
            _low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        last = -1
        while last + 1 < high and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(bytes(message.value()))
                last = message.offset()
    finally:
        consumer.close()
    return values


def batches_on_disk(cluster: TestCluster, node_id: int) -> list[tuple[int, bytes]]:
    """Every batch of the node's replica of TOPIC-0: (base offset, bytes)."""
    directory = cluster.plan(node_id).data_dir / f"{TOPIC}-0"
    partition_log = PartitionLog.open(directory, LogConfig(), now_ms=0, create=False)
    out: list[tuple[int, bytes]] = []
    try:
        offset = partition_log.log_start_offset
        while offset < partition_log.log_end_offset:
            result = partition_log.read(offset, 1 << 20)
            data = result.read_bytes()
            if not data:
                break
            out.append((offset, data))
            offset = result.next_offset
    finally:
        partition_log.close(clean=True)
    return out


def assert_replicas_identical(cluster: TestCluster) -> list[tuple[int, bytes]]:
    cluster.stop_all()
    logs = {node: batches_on_disk(cluster, node) for node in cluster.node_ids}
    first = logs[cluster.node_ids[0]]
    for node, found in logs.items():
        assert found == first, f"node {node}'s replica differs from node {cluster.node_ids[0]}'s"
    return first


def test_a_follower_that_was_down_catches_up_and_rejoins_the_isr(
    tmp_path: Path, store: str | None
) -> None:
    settings = [*SETTINGS, *store_settings(store, 3000)]
    with running_cluster(tmp_path, 3, settings=settings, zookeeper=store) as cluster:
        create_topic(cluster)
        leader, isr = state(cluster)
        assert isr == [1, 2, 3]
        follower = next(n for n in cluster.node_ids if n != leader)
        cluster.kill(follower)
        cluster.wait_until(
            lambda: follower not in state(cluster)[1], 20, f"node {follower} to leave the ISR"
        )
        assert produce(cluster, 3_000) == 3_000  # two in-sync replicas: min.insync.replicas
        cluster.start(follower)
        cluster.wait_until(
            lambda: state(cluster)[1] == [1, 2, 3], 30, f"node {follower} to rejoin the ISR"
        )
        values = consume_all(cluster, 3_000)
        assert values == [f"v{i}".encode() for i in range(3_000)]
        on_disk = assert_replicas_identical(cluster)
        assert on_disk, "the replicas are empty"


def test_a_diverged_follower_truncates_to_its_leader(tmp_path: Path, store: str | None) -> None:
    # Small follower fetches, so a fetch answered while its follower was stopped carries
    # only the first of the records written then.
    settings = [*SETTINGS, "replica.fetch.max.bytes=512", "replica.fetch.response.max.bytes=512"]
    # The followers' pause must stay shorter than the lag limit (and, on ZooKeeper, than
    # their sessions) even on a loaded machine, or the ISR shrinks to the old leader alone.
    settings += ["replica.lag.time.max.ms=10000", *store_settings(store, 10000)]
    with running_cluster(tmp_path, 3, settings=settings, zookeeper=store) as cluster:
        create_topic(cluster)
        assert produce(cluster, 100, prefix="a") == 100
        old_leader, _ = state(cluster)
        followers = [n for n in cluster.node_ids if n != old_leader]
        # The followers stop for a moment (shorter than any timeout, so they stay in the
        # ISR) while the leader acknowledges acks=1 records one by one; then the leader
        # dies. A new leader from the ISR carries on without most of those records.
        for node in followers:
            cluster.pause(node)
        try:
            for i in range(30):
                assert produce(cluster, 1, acks="1", prefix=f"lost{i}-") == 1
        finally:
            cluster.kill(old_leader)
            for node in followers:
                cluster.resume(node)
        cluster.wait_until(
            lambda: state(cluster)[0] in followers, 30, "a new leader among the followers"
        )
        assert produce(cluster, 100, prefix="b") == 100
        cluster.start(old_leader)
        cluster.wait_until(
            lambda: state(cluster)[1] == [1, 2, 3], 30, f"node {old_leader} to rejoin the ISR"
        )
        values = consume_all(cluster)
        kept = [v for v in values if v.startswith(b"lost")]
        assert values == [f"a{i}".encode() for i in range(100)] + kept + [
            f"b{i}".encode() for i in range(100)
        ]
        assert kept == [f"lost{i}-0".encode() for i in range(len(kept))]
        assert len(kept) < 30, "every record reached a follower: nothing diverged"
        truncated = cluster.log_path(old_leader).read_text()
        assert "to match leader" in truncated, "the old leader did not truncate its log"
        assert_replicas_identical(cluster)


def strom_request(cluster: TestCluster, api_key: int, fields: dict[str, Any]) -> Any:
    async def ask() -> Any:
        host, port = cluster.address(cluster.node_ids[0]).rsplit(":", 1)
        connection = await KafkaConnection.connect(host, int(port), timeout_s=3.0)
        try:
            return await connection.request(api_key, 0, fields, timeout_s=20.0)
        finally:
            connection.close()

    return asyncio.run(ask())


def replicas_of(cluster: TestCluster) -> list[int]:
    metadata = admin(cluster).list_topics(TOPIC, timeout=5)
    return [int(b) for b in metadata.topics[TOPIC].partitions[0].replicas]


def pending_reassignments(cluster: TestCluster) -> list[Any]:
    response = strom_request(
        cluster, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"timeout": 10_000, "topics": None}
    )
    assert response.error_code == 0
    return [p for topic in response.topics for p in topic.partitions]


def test_a_reassignment_copies_the_data_before_removing_the_old_replica(
    tmp_path: Path, store: str | None
) -> None:
    settings = [*SETTINGS, *store_settings(store, 3000)]
    with running_cluster(tmp_path, 3, settings=settings, zookeeper=store) as cluster:
        client = admin(cluster)
        futures = client.create_topics(
            [
                NewTopic(
                    TOPIC,
                    1,
                    replica_assignment=[[1, 2]],
                    config={"min.insync.replicas": "1"},
                )
            ]
        )
        futures[TOPIC].result(timeout=20)
        assert produce(cluster, 2_000) == 2_000
        response = strom_request(
            cluster,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            {
                "timeout": 10_000,
                "topics": [
                    {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [2, 3]}]}
                ],
            },
        )
        assert response.error_code == 0
        assert [p.error_code for t in response.responses for p in t.partitions] == [0]
        cluster.wait_until(
            lambda: replicas_of(cluster) == [2, 3] and not pending_reassignments(cluster),
            30,
            "the reassignment to complete",
        )
        assert state(cluster)[1] == [2, 3]
        cluster.wait_until(
            lambda: not (cluster.plan(1).data_dir / f"{TOPIC}-0").exists(),
            20,
            "node 1 to delete its replica",
        )
        assert consume_all(cluster, 2_000) == [f"v{i}".encode() for i in range(2_000)]
        cluster.stop_all()
        assert batches_on_disk(cluster, 3) == batches_on_disk(cluster, 2)
