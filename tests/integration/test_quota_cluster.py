"""Client quotas on a real three-node cluster, on both metadata stores, through the wire
with strom's own client (neither confluent-kafka nor kafka-python 3.0 has the APIs):
AlterClientQuotas sent to a node that is not the active controller is forwarded there,
every node describes the result, and the quotas outlive the active controller (on
ZooKeeper the new one reads them back from Kafka's znodes, where a quota written by hand
with a change notice is taken too). Then `strom quota set|get` against one broker."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess
from cli_runner import strom
from cluster import TestCluster, running_cluster
from zookeeper import kazoo_client

from conftest import store_settings
from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey

SETTINGS = ["broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=300"]
TIMEOUT_S = 30.0
Entity = tuple[tuple[str, str | None], ...]


@pytest.fixture
def cluster(tmp_path: Path, store: str | None) -> Iterator[TestCluster]:
    settings = [*SETTINGS, *store_settings(store, 3000)]
    with running_cluster(tmp_path, 3, settings=settings, zookeeper=store) as started:
        yield started


def ask(address: str, api_key: ApiKey, version: int, fields: dict[str, Any]) -> Any:
    async def call() -> Any:
        host, port = address.rsplit(":", 1)
        connection = await KafkaConnection.connect(host, int(port), timeout_s=3.0)
        try:
            return await connection.request(api_key, version, fields, timeout_s=TIMEOUT_S)
        finally:
            connection.close()

    return asyncio.run(call())


def entry(entity: dict[str, str | None], **ops: float | None) -> dict[str, Any]:
    return {
        "entity": [{"entity_type": k, "entity_name": v} for k, v in entity.items()],
        "ops": [
            {"key": k, "value": 0.0 if v is None else v, "remove": v is None}
            for k, v in ops.items()
        ],
    }


def alter(address: str, *entries: dict[str, Any]) -> list[tuple[int, str | None]]:
    fields = {"entries": list(entries), "validate_only": False}
    answer = ask(address, ApiKey.ALTER_CLIENT_QUOTAS, 1, fields)
    return [(int(e.error_code), e.error_message) for e in answer.entries]


def described(address: str) -> dict[Entity, dict[str, float]]:
    answer = ask(address, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False})
    assert int(answer.error_code) == 0, answer
    return {
        tuple((e.entity_type, e.entity_name) for e in item.entity): {
            v.key: v.value for v in item.values
        }
        for item in answer.entries
    }


def active_controller(cluster: TestCluster, node_id: int) -> int:
    fields = {"include_cluster_authorized_operations": False}
    return int(ask(cluster.address(node_id), ApiKey.DESCRIBE_CLUSTER, 0, fields).controller_id)


def everywhere(
    cluster: TestCluster, nodes: list[int], wanted: dict[Entity, dict[str, float]], what: str
) -> None:
    cluster.wait_until(
        lambda: all(described(cluster.address(n)) == wanted for n in nodes), TIMEOUT_S, what
    )


ALICE_APP: Entity = (("user", "alice"), ("client-id", "app"))
USERS: Entity = (("user", None),)
IPS: Entity = (("ip", None),)
CLIENT_APP: Entity = (("client-id", "app"),)
BOB: Entity = (("user", "bob"),)


def test_quotas_are_forwarded_described_everywhere_and_survive_the_controller(
    cluster: TestCluster, store: str | None
) -> None:
    controller = cluster.wait_until(
        lambda: active_controller(cluster, 1) > 0, TIMEOUT_S, "an active controller"
    )
    other = next(n for n in cluster.node_ids if n != controller)
    answers = alter(
        cluster.address(other),
        entry({"user": "alice", "client-id": "app"}, producer_byte_rate=1048576),
        entry({"user": "bob"}, consumer_byte_rate=100),
        entry({"user": None}, request_percentage=50),
        entry({"ip": None}, connection_creation_rate=10),
        entry({"client-id": "x"}, no_such_key=1),
    )
    assert answers[:4] == [(0, None)] * 4
    assert answers[4] == (42, "Invalid configuration key no_such_key")
    wanted = {
        ALICE_APP: {"producer_byte_rate": 1048576.0},
        BOB: {"consumer_byte_rate": 100.0},
        USERS: {"request_percentage": 50.0},
        IPS: {"connection_creation_rate": 10.0},
    }
    everywhere(cluster, cluster.node_ids, wanted, "every node to describe the quotas")

    if store is not None:
        with kazoo_client(store) as zk:
            # What Kafka's tools leave behind once an entity's last quota is gone: the
            # controller that read it at takeover sets it rather than creating it.
            zk.create("/config/clients/left", b'{"version":1,"config":{}}')
            # ... and under a user strom knows, children it does not: the next
            # controller deletes them, so that deleting the user's znode works.
            zk.create("/config/users/alice/clients/old", b'{"version":1,"config":{}}')
            data, _ = zk.get("/config/users/alice/clients/app")
            assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "1048576"}}
            data, _ = zk.get("/config/users/<default>")
            assert json.loads(data)["config"] == {"request_percentage": "50.0"}
            # kafka-configs.sh --zookeeper's way: the config, then a change notice.
            zk.create(
                "/config/clients/app",
                b'{"version":1,"config":{"consumer_byte_rate":"2048"}}',
            )
            zk.create(
                "/config/changes/config_change_",
                b'{"version":2,"entity_path":"clients/app"}',
                sequence=True,
            )
        wanted[CLIENT_APP] = {"consumer_byte_rate": 2048.0}
        everywhere(cluster, cluster.node_ids, wanted, "the hand-written quota to be taken")

    cluster.kill(controller)
    survivors = [n for n in cluster.node_ids if n != controller]
    cluster.wait_until(
        lambda: active_controller(cluster, survivors[0]) in survivors,
        TIMEOUT_S,
        "a new active controller",
    )
    everywhere(cluster, survivors, wanted, "the survivors to keep the quotas")
    # The new controller decides against what it holds: removing the last key of an
    # entity removes the entity (and on ZooKeeper its znodes, alice's included).
    assert (
        alter(
            cluster.address(survivors[1]),
            entry({"user": None}, request_percentage=None),
            entry({"user": "alice", "client-id": "app"}, producer_byte_rate=None),
        )
        == [(0, None)] * 2
    )
    del wanted[USERS], wanted[ALICE_APP]
    if store is not None:
        left = entry({"client-id": "left"}, producer_byte_rate=5)
        assert alter(cluster.address(survivors[0]), left) == [(0, None)]
        wanted[(("client-id", "left"),)] = {"producer_byte_rate": 5.0}
    everywhere(cluster, survivors, wanted, "the changes on the new controller")
    if store is not None:
        with kazoo_client(store) as zk:
            assert zk.exists("/config/users/alice") is None
            assert zk.exists("/config/users/bob") is not None


def test_strom_quota_set_get_and_remove(broker: BrokerProcess) -> None:
    b = ["-b", broker.bootstrap]
    done = strom(
        "quota", "set", "--user", "alice", "--client-id", "app", "producer_byte_rate=1048576", *b
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "set producer_byte_rate=1048576 for user=alice, client-id=app\n"
    done = strom("quota", "set", "--user-default", "request_percentage=12.5", *b)
    assert done.returncode == 0, done.stderr

    shown = strom("quota", "get", *b)
    assert shown.returncode == 0, shown.stderr
    assert [line.split() for line in shown.stdout.splitlines()] == [
        ["ENTITY", "KEY", "VALUE"],
        ["user=<default>", "request_percentage", "12.5"],
        ["user=alice,", "client-id=app", "producer_byte_rate", "1048576"],
    ]
    only = strom("quota", "get", "--user", "alice", "--strict", *b)
    assert only.returncode == 0 and only.stdout == "" and "no client quotas match" in only.stderr

    refused = strom("quota", "set", "--user", "alice", "producer_byte_rate=1.5", *b)
    assert refused.returncode == 1
    assert "INVALID_REQUEST: producer_byte_rate cannot be a fractional value." in refused.stderr

    done = strom("quota", "set", "--user-default", "--remove", "request_percentage", *b)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "removed request_percentage of user=<default>\n"
    left = strom("quota", "get", "--user-default", *b)
    assert left.returncode == 0 and left.stdout == "" and "no client quotas match" in left.stderr
