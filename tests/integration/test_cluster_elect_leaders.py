"""ElectLeaders on a real three-node cluster, on both metadata stores: confluent-kafka's
`AdminClient.elect_leaders` gives a partition back to its preferred replica, and a node
that is not the active controller forwards the request there.

The partition's leader stops being its preferred replica through a reassignment that
only reorders its replicas (complete at once, the leader unchanged), so no node has to
die. auto.leader.rebalance.enable is off, so only ElectLeaders moves the leader.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).parent))

from cluster import TestCluster, running_cluster

from conftest import store_settings
from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey

SETTINGS = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "auto.leader.rebalance.enable=false",
]
TOPIC = "elected"
TIMEOUT_S = 20.0


@pytest.fixture
def cluster(tmp_path: Path, store: str | None) -> Iterator[TestCluster]:
    settings = [*SETTINGS, *store_settings(store, 3000)]
    with running_cluster(tmp_path, 3, settings=settings, zookeeper=store) as started:
        yield started


def admin(cluster: TestCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def strom_request(address: str, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    async def ask() -> Any:
        host, port = address.rsplit(":", 1)
        connection = await KafkaConnection.connect(host, int(port), timeout_s=3.0)
        try:
            return await connection.request(api_key, version, fields, timeout_s=TIMEOUT_S)
        finally:
            connection.close()

    return asyncio.run(ask())


def seen_by_all(cluster: TestCluster) -> dict[int, tuple[int, list[int], list[int]]] | None:
    """TOPIC's partitions, each as (leader, replicas, sorted ISR), if every node reports
    the same."""
    views = []
    for node_id in cluster.node_ids:
        client = AdminClient({"bootstrap.servers": cluster.address(node_id)})
        found = client.list_topics(TOPIC, timeout=5).topics[TOPIC].partitions
        views.append(
            {
                index: (int(p.leader), list(p.replicas), sorted(int(b) for b in p.isrs))
                for index, p in found.items()
            }
        )
    return views[0] if all(view == views[0] for view in views) else None


def wait_for(cluster: TestCluster, leaders: list[int], replicas: list[int], what: str) -> None:
    """Until every node reports partition i of TOPIC led by leaders[i], with `replicas`
    and every replica in sync."""
    expected = {i: (leader, replicas, [1, 2, 3]) for i, leader in enumerate(leaders)}
    cluster.wait_until(lambda: seen_by_all(cluster) == expected, TIMEOUT_S, what)


def elect(cluster: TestCluster, election_type: ElectionType, *partitions: int) -> dict[Any, Any]:
    client = admin(cluster)  # kept alive until the answer is in
    asked = [TopicPartition(TOPIC, p) for p in partitions] if partitions else None
    # No request_timeout: confluent-kafka 2.16.1 fails any keyword argument of
    # elect_leaders with a SystemError (its C binding's keyword list is short).
    future = client.elect_leaders(election_type, asked)
    result: dict[Any, Any] = future.result(timeout=TIMEOUT_S)
    return {(tp.topic, tp.partition): error for tp, error in result.items()}


def produce(cluster: TestCluster, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[Any] = []
    for value in values:
        producer.produce(
            TOPIC, value, partition=0, on_delivery=lambda e, _m: e is not None and errors.append(e)
        )
    assert producer.flush(TIMEOUT_S) == 0 and not errors, errors


def consume(cluster: TestCluster, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "elect-check"})
    got: list[bytes] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                got.append(bytes(message.value()))
    finally:
        consumer.close()
    return got


def test_a_preferred_election_gives_partitions_back_to_their_first_replica(
    cluster: TestCluster,
) -> None:
    client = admin(cluster)
    assignment = [[1, 2, 3], [1, 2, 3]]
    client.create_topics([NewTopic(TOPIC, 2, replica_assignment=assignment)])[TOPIC].result(
        TIMEOUT_S
    )
    wait_for(cluster, [1, 1], [1, 2, 3], "TOPIC in sync")
    produce(cluster, [b"before-%d" % i for i in range(10)])

    reordered = [{"partition_index": p, "replicas": [2, 1, 3]} for p in (0, 1)]
    reassigned = strom_request(
        cluster.address(1),
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        {"timeout": 10_000, "topics": [{"name": TOPIC, "partitions": reordered}]},
    )
    assert [p.error_code for t in reassigned.responses for p in t.partitions] == [0, 0]
    wait_for(cluster, [1, 1], [2, 1, 3], "replica 2 preferred, 1 still leading")

    assert elect(cluster, ElectionType.PREFERRED, 0) == {(TOPIC, 0): None}
    wait_for(cluster, [2, 1], [2, 1, 3], "the preferred replica 2 leading partition 0")
    produce(cluster, [b"after-%d" % i for i in range(10)])
    assert consume(cluster, 20) == [b"before-%d" % i for i in range(10)] + [
        b"after-%d" % i for i in range(10)
    ]

    for election_type in ElectionType:
        [(where, error)] = elect(cluster, election_type, 0).items()
        assert where == (TOPIC, 0)
        # A KafkaError per partition (the docstring says KafkaException; 2.16.1 gives this).
        assert isinstance(error, KafkaError), error
        assert error.code() == KafkaError.ELECTION_NOT_NEEDED, election_type

    # Every partition (null): only the election made is reported, not partition 0.
    assert elect(cluster, ElectionType.PREFERRED) == {(TOPIC, 1): None}
    wait_for(cluster, [2, 2], [2, 1, 3], "the preferred replica 2 leading both partitions")
    assert elect(cluster, ElectionType.PREFERRED) == {}
    assert elect(cluster, ElectionType.UNCLEAN) == {}

    # A node that is not the active controller forwards the request (here at v0).
    controller = int(client.list_topics(timeout=5).controller_id)
    other = next(n for n in cluster.node_ids if n != controller)
    answer = strom_request(
        cluster.address(other),
        ApiKey.ELECT_LEADERS,
        0,
        {"topic_partitions": [{"topic": TOPIC, "partitions": [0, 5]}], "timeout": 10_000},
    )
    [result] = answer.replica_election_results
    assert result.topic == TOPIC
    assert [(p.partition_id, p.error_code) for p in result.partition_result] == [
        (0, ErrorCode.election_not_needed),
        (5, ErrorCode.unknown_topic_or_partition),
    ]
