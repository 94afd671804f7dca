"""A three-node cluster of combined broker+controller processes, disturbed on purpose.

Every node is a real `strom serve` process; clients are confluent-kafka and strom's own
asyncio client (for DescribeQuorum). Sessions are shortened (broker.session.timeout.ms)
so fencing happens within seconds; the controller election uses the defaults.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)

sys.path.insert(0, str(Path(__file__).parent))

from cluster import TestCluster, free_ports, running_cluster

from conftest import store_settings
from strom.cli.dev_cluster import LocalCluster
from strom.cli.dev_plan import NodePlan
from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey

FAST_SESSIONS = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "default.replication.factor=3",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=6",
    "group.initial.rebalance.delay.ms=0",
    "leader.imbalance.check.interval.seconds=2",  # preferred leaders back soon
]


@pytest.fixture
def cluster(tmp_path: Path, store: str | None) -> Iterator[TestCluster]:
    """Three nodes on each metadata store (the `store` fixture: Raft, then ZooKeeper)."""
    settings = [*FAST_SESSIONS, *store_settings(store, 3000)]
    with running_cluster(tmp_path, 3, settings=settings, zookeeper=store) as started:
        yield started


def admin(cluster: TestCluster, node_id: int | None = None) -> AdminClient:
    bootstrap = cluster.bootstrap if node_id is None else cluster.address(node_id)
    return AdminClient({"bootstrap.servers": bootstrap})


def partitions_of(cluster: TestCluster, topic: str, node_id: int) -> dict[int, Any]:
    metadata = admin(cluster, node_id).list_topics(topic, timeout=5)
    return {p.id: p for p in metadata.topics[topic].partitions.values()}


def controller_seen_by(cluster: TestCluster, node_id: int) -> int:
    return int(admin(cluster, node_id).list_topics(timeout=3).controller_id)


def controller_agreed(cluster: TestCluster, node_ids: list[int]) -> int:
    """The controller every node in `node_ids` names, or 0 while they differ. One node's
    answer alone proves nothing: a broker that knows no live controller names itself (as
    Kafka's KRaft brokers do), so only agreement between nodes shows who was elected."""
    seen = {controller_seen_by(cluster, node_id) for node_id in node_ids}
    (found,) = seen if len(seen) == 1 else (0,)
    return found if found in cluster.node_ids else 0


def strom_request(host_port: str, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    async def ask() -> Any:
        host, port = host_port.rsplit(":", 1)
        connection = await KafkaConnection.connect(host, int(port), timeout_s=3.0)
        try:
            return await connection.request(api_key, version, fields, timeout_s=20.0)
        finally:
            connection.close()

    return asyncio.run(ask())


def describe_quorum(host_port: str) -> Any:
    partitions = [{"partition_index": 0}]
    return strom_request(
        host_port,
        ApiKey.DESCRIBE_QUORUM,
        2,
        {"topics": [{"topic_name": "__cluster_metadata", "partitions": partitions}]},
    )


def create_topic(cluster: TestCluster, name: str, partitions: int, replication: int) -> None:
    client = admin(cluster)  # kept alive until the answer is in
    futures = client.create_topics([NewTopic(name, partitions, replication)])
    futures[name].result(30)


def test_replicas_spread_and_every_broker_agrees(cluster: TestCluster) -> None:
    create_topic(cluster, "spread", 6, 3)

    def same_everywhere() -> dict[int, tuple[int, list[int], list[int]]] | None:
        views = []
        for node_id in cluster.node_ids:
            md = admin(cluster, node_id).list_topics("spread", timeout=5)
            views.append(
                (
                    md.controller_id,
                    sorted(md.brokers),
                    {
                        p.id: (p.leader, list(p.replicas), list(p.isrs))
                        for p in md.topics["spread"].partitions.values()
                    },
                )
            )
        return views[0][2] if all(view == views[0] for view in views) else None

    partitions = cluster.wait_until(same_everywhere, 10, "the same metadata on every broker")
    assert len(partitions) == 6
    assert {leader for leader, _, _ in partitions.values()} == {1, 2, 3}
    for leader, replicas, isr in partitions.values():
        assert sorted(replicas) == [1, 2, 3] and leader == replicas[0] and sorted(isr) == [1, 2, 3]

    # Clients work across the cluster: each partition's leader takes its writes and a
    # consumer group (coordinated by a __consumer_offsets leader) reads them all.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(300):
        producer.produce("spread", key=str(i).encode(), value=f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "spread-readers",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["spread"])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 30
    while len(seen) < 300 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.add(message.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert len(seen) == 300


def test_controller_killed_another_takes_over(cluster: TestCluster) -> None:
    before = cluster.wait_until(
        lambda: controller_agreed(cluster, cluster.node_ids), 10, "an active controller"
    )
    survivors = [n for n in cluster.node_ids if n != before]
    started = time.monotonic()
    cluster.kill(before)
    new = cluster.wait_until(
        lambda: (c := controller_agreed(cluster, survivors)) != before and c,
        15,
        "a new active controller both survivors name",
        interval_s=0.05,
    )
    took_s = time.monotonic() - started
    print(f"\ncontroller {before} killed; node {new} took over after {took_s:.2f} s")
    assert new in survivors

    create_topic(cluster, "after-failover", 3, 2)
    assert len(partitions_of(cluster, "after-failover", survivors[1])) == 3

    # The killed node comes back as a follower: the leader stays, and the quorum shows it
    # caught up.
    cluster.start(before)
    if cluster.zookeeper is not None:  # no quorum to show: it follows the new controller
        cluster.wait_until(
            lambda: controller_seen_by(cluster, before) == new, 20, f"node {before} to follow"
        )
        return

    def rejoined() -> bool:
        quorum = describe_quorum(cluster.address(survivors[0]))
        partition = quorum.topics[0].partitions[0]
        ends = {v.replica_id: int(v.log_end_offset) for v in partition.current_voters}
        return bool(
            partition.leader_id == new and ends.get(before, -1) >= int(partition.high_watermark)
        )

    def quorum_seen() -> str:
        partition = describe_quorum(cluster.address(survivors[0])).topics[0].partitions[0]
        ends = {v.replica_id: int(v.log_end_offset) for v in partition.current_voters}
        return f"leader {partition.leader_id}, high watermark {partition.high_watermark}, {ends=}"

    cluster.wait_until(
        rejoined, 20, f"node {before} to rejoin the quorum as a follower", seen=quorum_seen
    )
    cluster.wait_until(
        lambda: controller_seen_by(cluster, before) == new, 10, f"node {before} to name {new}"
    )


def test_killed_broker_is_fenced_and_comes_back(cluster: TestCluster) -> None:
    create_topic(cluster, "fencing", 6, 3)
    controller = cluster.wait_until(
        lambda: controller_agreed(cluster, cluster.node_ids),
        10,
        "an active controller",
    )
    victim = next(n for n in (3, 2, 1) if n != controller)
    witness = next(n for n in cluster.node_ids if n != victim)
    led = {i for i, p in partitions_of(cluster, "fencing", witness).items() if p.leader == victim}
    assert led, "the victim leads some partitions"
    cluster.kill(victim)

    def moved() -> bool:
        md = admin(cluster, witness).list_topics("fencing", timeout=3)
        partitions = md.topics["fencing"].partitions.values()
        return victim not in md.brokers and all(
            p.leader not in (victim, -1) and victim not in p.isrs for p in partitions
        )

    cluster.wait_until(moved, 15, f"broker {victim} fenced and its partitions led elsewhere")

    cluster.start(victim)

    def back() -> bool:
        md = admin(cluster, witness).list_topics("fencing", timeout=3)
        by_id = {p.id: p for p in md.topics["fencing"].partitions.values()}
        return victim in md.brokers and all(by_id[i].leader == victim for i in led)

    cluster.wait_until(back, 20, f"broker {victim} unfenced and its preferred leaderships back")


def _describe(client: AdminClient, resource: ConfigResource) -> dict[str, Any]:
    return dict(client.describe_configs([resource])[resource].result(10))


def test_dynamic_configs_take_effect_and_survive_a_restart(cluster: TestCluster) -> None:
    create_topic(cluster, "tuned", 1, 3)
    client = admin(cluster)
    topic = ConfigResource(ConfigResource.Type.TOPIC, "tuned")
    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("segment.bytes", "2048", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    client.incremental_alter_configs([change])[change].result(10)
    # librdkafka refuses the empty name of the cluster-wide default; strom's client sends it.
    answer = strom_request(
        cluster.address(2),
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "",
                    "configs": [
                        {"name": "log.retention.ms", "config_operation": 0, "value": "7200000"}
                    ],
                }
            ],
            "validate_only": False,
        },
    )
    assert answer.responses[0].error_code == 0, answer

    # In effect at once: the leader rolls segments at 2 KiB for new writes.
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
    for _ in range(60):
        producer.produce("tuned", value=b"x" * 200)
        producer.flush(10)
    leader = partitions_of(cluster, "tuned", 1)[0].leader
    directory = cluster.plan(leader).data_dir / "tuned-0"
    assert len(list(directory.glob("*.log"))) >= 4

    def sources(resource: ConfigResource) -> dict[str, tuple[str, int]]:
        entries = _describe(admin(cluster), resource)  # _describe waits for the answer
        return {name: (e.value, e.source) for name, e in entries.items()}

    dynamic_topic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    dynamic_default = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    seen = sources(topic)
    assert seen["segment.bytes"] == ("2048", dynamic_topic)
    assert seen["retention.ms"] == ("7200000", dynamic_default)

    # A static broker setting cannot change at run time, and the reason says so.
    static = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.dirs", "/elsewhere", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    node_admin = admin(cluster, 1)
    with pytest.raises(KafkaException, match="static"):
        node_admin.incremental_alter_configs([static])[static].result(10)

    cluster.stop_all()
    cluster.start_all()
    seen = cluster.wait_until(
        lambda: (s := sources(topic)) and s["segment.bytes"][0] == "2048" and s,
        20,
        "the configs after a full restart",
    )
    assert seen["retention.ms"] == ("7200000", dynamic_default)


def test_controller_only_and_broker_only_nodes(tmp_path: Path) -> None:
    """One node that only controls and two that only serve clients: the brokers pull the
    metadata from the controller, forward admin requests to it, and serve clients."""
    client_ports = free_ports(3)
    controller_port = client_ports.pop()
    voters = f"1@127.0.0.1:{controller_port}"
    plans = [
        NodePlan(
            node_id=1,
            host="127.0.0.1",
            client_port=controller_port,
            controller_port=controller_port,
            data_dir=tmp_path / "node-1",
            config_path=tmp_path / "node-1.properties",
            log_path=tmp_path / "node-1.log",
            properties=(
                ("process.roles", "controller"),
                ("node.id", "1"),
                ("listeners", f"CONTROLLER://127.0.0.1:{controller_port}"),
                ("controller.listener.names", "CONTROLLER"),
                ("controller.quorum.voters", voters),
                ("log.dirs", str(tmp_path / "node-1")),
            ),
        )
    ]
    for node_id, port in zip((2, 3), client_ports, strict=True):
        plans.append(
            NodePlan(
                node_id=node_id,
                host="127.0.0.1",
                client_port=port,
                controller_port=controller_port,
                data_dir=tmp_path / f"node-{node_id}",
                config_path=tmp_path / f"node-{node_id}.properties",
                log_path=tmp_path / f"node-{node_id}.log",
                properties=(
                    ("process.roles", "broker"),
                    ("node.id", str(node_id)),
                    ("listeners", f"PLAINTEXT://127.0.0.1:{port}"),
                    ("advertised.listeners", f"PLAINTEXT://127.0.0.1:{port}"),
                    ("controller.listener.names", "CONTROLLER"),
                    ("controller.quorum.voters", voters),
                    ("log.dirs", str(tmp_path / f"node-{node_id}")),
                    ("default.replication.factor", "2"),
                ),
            )
        )
    with LocalCluster(plans) as nodes:
        nodes.start()
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in client_ports)
        client = AdminClient({"bootstrap.servers": bootstrap})
        client.create_topics([NewTopic("split", 4, 2)])["split"].result(30)
        metadata = client.list_topics("split", timeout=10)
        assert sorted(metadata.brokers) == [2, 3]  # the controller serves no clients
        assert metadata.controller_id in (2, 3)  # a broker that forwards to it
        partitions = metadata.topics["split"].partitions.values()
        assert {p.leader for p in partitions} == {2, 3}
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i in range(100):
            producer.produce("split", key=str(i).encode(), value=b"v")
        assert producer.flush(30) == 0
        quorum = describe_quorum(f"127.0.0.1:{client_ports[0]}")
        assert quorum.topics[0].partitions[0].leader_id == 1
