"""Three strom brokers keeping their metadata in a real ZooKeeper, inspected with kazoo.

Every node is a real `strom serve` process with `zookeeper.connect` pointing at the test
session's private ZooKeeper server (Debian's package), each test in a chroot of its own.
The ZooKeeper session timeout is 4 s, so a killed broker's znodes go within seconds.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.admin import NewTopic as KafkaNewTopic
from kazoo.client import KazooClient

sys.path.insert(0, str(Path(__file__).parent))

from cluster import TestCluster, free_ports, running_cluster
from prometheus import scrape
from zookeeper import ZooKeeperServer, ensure_chroot, kazoo_client
from zookeeper_fixtures import zk_chroot, zk_connect, zookeeper_server  # noqa: F401

SESSION_TIMEOUT_MS = 4000
SETTINGS = [
    f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}",
    "broker.heartbeat.interval.ms=300",
    "default.replication.factor=3",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=6",
    "group.initial.rebalance.delay.ms=0",
    "replica.lag.time.max.ms=3000",
    "leader.imbalance.check.interval.seconds=2",  # preferred leaders back soon
]


@pytest.fixture
def zk(zk_connect: str) -> Iterator[KazooClient]:  # noqa: F811
    with kazoo_client(zk_connect) as client:
        yield client


@pytest.fixture
def metrics_ports() -> list[int]:
    return free_ports(3)


@pytest.fixture
def cluster(
    tmp_path: Path,
    zk_connect: str,  # noqa: F811
    metrics_ports: list[int],
) -> Iterator[TestCluster]:
    """Three brokers, each serving its metrics on one of `metrics_ports`."""
    listeners = {i + 1: [f"metrics.listener=127.0.0.1:{p}"] for i, p in enumerate(metrics_ports)}
    with running_cluster(
        tmp_path, 3, settings=SETTINGS, zookeeper=zk_connect, node_settings=listeners
    ) as started:
        yield started


def read_json(zk: KazooClient, path: str) -> Any:
    data, _stat = zk.get(path)
    return json.loads(data)


def controller_id(zk: KazooClient) -> int | None:
    if zk.exists("/controller") is None:
        return None
    return int(read_json(zk, "/controller")["brokerid"])


def partition_states(zk: KazooClient, topic: str) -> dict[int, dict[str, Any]]:
    base = f"/brokers/topics/{topic}/partitions"
    return {
        int(p): read_json(zk, f"{base}/{p}/state")
        for p in zk.get_children(base)
        if zk.exists(f"{base}/{p}/state")
    }


def admin(cluster: TestCluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def create_topic(cluster: TestCluster, name: str, partitions: int, replication: int) -> None:
    client = admin(cluster)  # kept alive until the answer is in
    futures = client.create_topics(
        [KafkaNewTopic(name, partitions, replication)], operation_timeout=20
    )
    futures[name].result(30)


def produce(cluster: TestCluster, topic: str, values: list[str]) -> None:
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all"}
    )
    errors: list[str] = []
    for value in values:
        producer.produce(
            topic,
            value.encode(),
            on_delivery=lambda err, _msg: errors.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0
    assert errors == []


def consume_all(cluster: TestCluster, topic: str, count: int, group: str) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe([topic])
    seen: list[str] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            seen.append(message.value().decode())
    finally:
        consumer.close()
    return seen


def test_brokers_register_elect_a_controller_and_keep_topics_in_the_classic_layout(
    cluster: TestCluster, zk: KazooClient, metrics_ports: list[int]
) -> None:
    cluster.wait_until(
        lambda: sorted(zk.get_children("/brokers/ids")) == ["1", "2", "3"],
        20,
        "every broker registered under /brokers/ids",
    )
    for broker_id in (1, 2, 3):
        registration = read_json(zk, f"/brokers/ids/{broker_id}")
        host, port = cluster.address(broker_id).rsplit(":", 1)
        assert (registration["host"], registration["port"]) == (host, int(port))
        assert registration["endpoints"] == [f"PLAINTEXT://{host}:{port}"]
        assert zk.exists(f"/brokers/ids/{broker_id}").ephemeralOwner != 0
    active = controller_id(zk)
    assert active in (1, 2, 3)
    assert zk.exists("/controller").ephemeralOwner != 0
    assert int(zk.get("/controller_epoch")[0]) >= 1
    cluster_json = read_json(zk, "/cluster/id")
    assert len(cluster_json["id"]) == 22

    create_topic(cluster, "orders", 6, 3)
    topic = read_json(zk, "/brokers/topics/orders")
    assert sorted(topic["partitions"]) == [str(p) for p in range(6)]
    assert all(sorted(replicas) == [1, 2, 3] for replicas in topic["partitions"].values())
    states = partition_states(zk, "orders")
    assert sorted(states) == list(range(6))
    assert {state["leader"] for state in states.values()} == {1, 2, 3}
    assert all(sorted(state["isr"]) == [1, 2, 3] for state in states.values())
    assert read_json(zk, "/config/topics/orders") == {"version": 1, "config": {}}
    assert active is not None
    got = scrape(f"http://127.0.0.1:{metrics_ports[active - 1]}")
    assert got[("strom_metadata_term", ())] == int(zk.get("/controller_epoch")[0])
    assert got[("strom_metadata_leader", ())] == active
    assert got[("strom_metadata_commit_latency_seconds_count", ())] >= 1  # the topic's writes

    # Every broker answers with the same leaders, which are those in ZooKeeper.
    for broker_id in (1, 2, 3):
        client = AdminClient({"bootstrap.servers": cluster.address(broker_id)})
        metadata = client.list_topics("orders", timeout=10)
        leaders = {p.id: p.leader for p in metadata.topics["orders"].partitions.values()}
        assert leaders == {p: state["leader"] for p, state in states.items()}
        assert metadata.controller_id == active

    values = [f"order-{i}" for i in range(300)]
    produce(cluster, "orders", values)
    assert sorted(consume_all(cluster, "orders", 300, "readers")) == sorted(values)


def test_the_killed_controller_is_replaced_within_the_session_timeout(
    cluster: TestCluster, zk: KazooClient
) -> None:
    create_topic(cluster, "before", 3, 3)
    old = controller_id(zk)
    assert old is not None
    old_epoch = int(zk.get("/controller_epoch")[0])
    cluster.kill(old)
    killed_at = time.monotonic()
    cluster.wait_until(
        lambda: controller_id(zk) not in (None, old), 30, "another broker to hold /controller"
    )
    took_s = time.monotonic() - killed_at
    print(f"new controller {controller_id(zk)} {took_s:.2f} s after kill -9 of {old}")
    assert took_s < SESSION_TIMEOUT_MS / 1000 + 5
    # The new holder of /controller bumps the epoch just after creating it.
    cluster.wait_until(
        lambda: int(zk.get("/controller_epoch")[0]) > old_epoch, 10, "a higher controller epoch"
    )
    cluster.wait_until(
        lambda: str(old) not in zk.get_children("/brokers/ids"), 10, "its registration to go"
    )
    create_topic(cluster, "after", 3, 2)
    states = partition_states(zk, "after")
    assert all(old not in state["isr"] for state in states.values())
    cluster.start(old)
    cluster.wait_until(
        lambda: str(old) in zk.get_children("/brokers/ids"), 30, "the restarted broker's znode"
    )
    cluster.wait_until(
        lambda: all(
            sorted(state["isr"]) == [1, 2, 3] for state in partition_states(zk, "before").values()
        ),
        30,
        "the restarted broker back in every ISR of 'before'",
    )


def test_a_killed_broker_loses_its_leaderships_and_gets_them_back(
    cluster: TestCluster, zk: KazooClient
) -> None:
    create_topic(cluster, "moving", 6, 3)
    active = controller_id(zk)
    victim = next(b for b in (1, 2, 3) if b != active)
    led = [p for p, s in partition_states(zk, "moving").items() if s["leader"] == victim]
    assert led
    cluster.kill(victim)
    cluster.wait_until(
        lambda: all(
            s["leader"] != victim and victim not in s["isr"]
            for s in partition_states(zk, "moving").values()
        ),
        30,
        f"broker {victim}'s partitions to move",
    )
    values = [f"v{i}" for i in range(50)]
    produce(cluster, "moving", values)
    cluster.start(victim)
    cluster.wait_until(
        lambda: all(partition_states(zk, "moving")[p]["leader"] == victim for p in led),
        60,
        f"broker {victim} to lead its preferred partitions again",
    )
    assert sorted(consume_all(cluster, "moving", 50, "after-move")) == sorted(values)


def test_config_changes_go_through_zookeeper_both_ways(
    cluster: TestCluster, zk: KazooClient
) -> None:
    create_topic(cluster, "tuned", 1, 3)
    client = admin(cluster)
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        "tuned",
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    client.incremental_alter_configs([resource])[resource].result(20)
    assert read_json(zk, "/config/topics/tuned")["config"] == {"retention.ms": "3600000"}
    changes = [
        read_json(zk, f"/config/changes/{name}") for name in zk.get_children("/config/changes")
    ]
    assert {"version": 2, "entity_path": "topics/tuned"} in changes

    # An operator writes the config first and then the notification, Kafka's way.
    zk.set(
        "/config/topics/tuned",
        json.dumps({"version": 1, "config": {"segment.bytes": "1048576"}}).encode(),
    )
    zk.create(
        "/config/changes/config_change_",
        json.dumps({"version": 2, "entity_path": "topics/tuned"}).encode(),
        sequence=True,
    )

    def described() -> dict[str, str]:
        plain = ConfigResource(ConfigResource.Type.TOPIC, "tuned")
        entries = client.describe_configs([plain])[plain].result(10)
        return {k: e.value for k, e in entries.items() if not e.is_default}

    cluster.wait_until(
        lambda: described().get("segment.bytes") == "1048576" and "retention.ms" not in described(),
        20,
        "the hand-written config to take effect",
    )


def test_a_topic_written_into_zookeeper_by_hand_is_adopted(
    cluster: TestCluster, zk: KazooClient
) -> None:
    zk.create(
        "/brokers/topics/handmade",
        json.dumps({"version": 1, "partitions": {"0": [1, 2], "1": [2, 3]}}).encode(),
    )
    cluster.wait_until(
        lambda: len(partition_states(zk, "handmade")) == 2, 20, "state znodes for 'handmade'"
    )
    topic = read_json(zk, "/brokers/topics/handmade")
    assert topic["partitions"] == {"0": [1, 2], "1": [2, 3]}
    assert uuid.UUID(bytes=_kafka_uuid_bytes(topic["topic_id"]))
    states = partition_states(zk, "handmade")
    assert states[0]["leader"] == 1 and states[1]["leader"] == 2
    produce(cluster, "handmade", ["by", "hand"])
    assert sorted(consume_all(cluster, "handmade", 2, "hand")) == ["by", "hand"]


def test_a_decision_larger_than_zookeepers_request_limit_is_written_in_parts(
    tmp_path: Path,
    zk: KazooClient,
    zk_connect: str,  # noqa: F811
    zookeeper_server: ZooKeeperServer,  # noqa: F811
) -> None:
    """4,000 partitions in one CreateTopics are about 1.3 MB of znode writes, more than
    ZooKeeper's 1 MiB jute.maxbuffer: the controller cuts them into multi-ops that fit,
    and deleting the topic does the same."""
    log_before = zookeeper_server.log_path.read_text(errors="replace")
    settings = [f"zookeeper.session.timeout.ms={SESSION_TIMEOUT_MS}"]
    with running_cluster(tmp_path, 1, settings=settings, zookeeper=zk_connect) as cluster:
        create_topic(cluster, "wide", 4000, 1)
        partitions = zk.get_children("/brokers/topics/wide/partitions")
        assert sorted(map(int, partitions)) == list(range(4000))
        assert set(read_json(zk, "/brokers/topics/wide")["partitions"]) == {
            str(i) for i in range(4000)
        }
        for index in [*range(0, 4000, 97), 3999]:
            state = read_json(zk, f"/brokers/topics/wide/partitions/{index}/state")
            assert (state["leader"], state["isr"]) == (1, [1])
        client = admin(cluster)  # kept alive until the answers are in
        metadata = client.list_topics("wide", timeout=20)
        assert len(metadata.topics["wide"].partitions) == 4000

        client.delete_topics(["wide"], operation_timeout=30)["wide"].result(40)
        assert zk.exists("/brokers/topics/wide") is None
    written = zookeeper_server.log_path.read_text(errors="replace")[len(log_before) :]
    assert "Len error" not in written


def _kafka_uuid_bytes(text: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def test_zookeeper_restarted_under_load_loses_no_acknowledged_record(tmp_path: Path) -> None:
    with ZooKeeperServer(tmp_path / "zookeeper") as server:
        chroot = "/restart"
        ensure_chroot(server.connect_string, chroot)
        connect = server.connect_string + chroot
        settings = [s for s in SETTINGS if not s.startswith("zookeeper.session")]
        settings.append("zookeeper.session.timeout.ms=10000")
        with running_cluster(tmp_path / "nodes", 3, settings=settings, zookeeper=connect) as c:
            create_topic(c, "steady", 3, 3)
            producer = Producer(
                {
                    "bootstrap.servers": c.bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                }
            )
            acked: list[str] = []

            def delivered(err: Any, message: Any) -> None:
                if err is None:
                    acked.append(message.value().decode())

            sent = 0
            restarted = False
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                producer.produce("steady", f"r{sent}".encode(), on_delivery=delivered)
                sent += 1
                producer.poll(0.002)
                if not restarted and time.monotonic() > deadline - 15:
                    server.restart(hard=True)  # kill -9, then the same data and port
                    restarted = True
            assert producer.flush(30) == 0
            assert len(acked) > 1000
            with kazoo_client(connect) as zk:
                c.wait_until(
                    lambda: controller_id(zk) is not None, 30, "a controller after the restart"
                )
            read = consume_all(c, "steady", len(acked), "steady-readers")
            assert sorted(set(read)) == sorted(read), "a record was read twice"
            assert set(acked) <= set(read)
