"""ACLs in a three-node cluster, on Raft and on ZooKeeper: the nodes (PLAINTEXT links,
so User:ANONYMOUS, a super user) replicate, elect and mark transactions with every check
on; a user with ACLs made at one node writes transactionally with acks=all at another
and reads back in a group, and a user without them is refused everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from client_helpers import CLIENT_TIMEOUT_S, unique_topic, wait_until
from cluster import free_ports, running_cluster
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from zookeeper import kazoo_client

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    + ";"
)


def _conf(port: int, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def _allow(kind: ResourceType, name: str, operation: AclOperation) -> AclBinding:
    return AclBinding(
        kind,
        name,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        operation,
        AclPermissionType.ALLOW,
    )


def test_a_cluster_works_with_every_check_on(tmp_path: Path, store: str | None) -> None:
    ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
    with running_cluster(
        tmp_path,
        3,
        zookeeper=store,
        settings=[
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users=User:ANONYMOUS",
            "sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
            "min.insync.replicas=2",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
        ],
        more_listeners={n: f"SASL_PLAINTEXT://localhost:{p}" for n, p in ports.items()},
    ) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.address(2)})
        topic = unique_topic("acl-cluster")
        admin.create_topics([NewTopic(topic, 3, 3)])[topic].result(CLIENT_TIMEOUT_S)
        grants = [
            _allow(ResourceType.TOPIC, topic, AclOperation.WRITE),
            _allow(ResourceType.TOPIC, topic, AclOperation.READ),
            _allow(ResourceType.TRANSACTIONAL_ID, "tx-1", AclOperation.WRITE),
            _allow(ResourceType.GROUP, "readers", AclOperation.READ),
        ]
        for future in admin.create_acls(grants).values():  # made at node 2
            future.result(CLIENT_TIMEOUT_S)

        alice = _conf(ports[3], "alice")
        producer = Producer({**alice, "transactional.id": "tx-1", "acks": "all"})
        producer.init_transactions(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, f"v{i}".encode(), partition=i % 3)
        producer.commit_transaction(CLIENT_TIMEOUT_S)

        consumer = Consumer(
            {
                **_conf(ports[1], "alice"),
                "group.id": "readers",
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        values: set[bytes] = set()
        try:
            consumer.subscribe([topic])
            wait_until(
                lambda: (
                    values.update(
                        m.value() for m in consumer.consume(100, 0.5) if m.error() is None
                    )
                    or len(values) == 30
                ),
                CLIENT_TIMEOUT_S,
                "alice's committed records read back in her group",
            )
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert values == {f"v{i}".encode() for i in range(30)}

        errors: list[KafkaError | None] = []
        bob = Producer({**_conf(ports[1], "bob"), "message.timeout.ms": 5000, "retries": 0})
        bob.produce(topic, b"x", on_delivery=lambda error, _m: errors.append(error))
        bob.flush(CLIENT_TIMEOUT_S)
        assert errors and errors[0] is not None
        assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        logs = cluster.logs()
        assert "may not use strom's node-to-node" not in logs, logs
        if store is not None:
            _grant_by_hand(store, topic)
            wait_until(
                lambda: _produce_error(_conf(ports[2], "bob"), topic) is None,
                CLIENT_TIMEOUT_S,
                "bob's grant, written into ZooKeeper by hand, taken in",
            )


def _grant_by_hand(store: str, topic: str) -> None:
    """As Kafka's ZooKeeper-era tools did: the resource's znode, then a change notice."""
    entry = {"principal": "User:bob", "permissionType": "Allow", "operation": "Write", "host": "*"}
    with kazoo_client(store) as zk:
        path = f"/kafka-acl/Topic/{topic}"
        data = json.dumps({"version": 1, "acls": [entry]}).encode()
        if zk.exists(path):
            current = json.loads(zk.get(path)[0])
            data = json.dumps({"version": 1, "acls": [*current["acls"], entry]}).encode()
            zk.set(path, data)
        else:
            zk.create(path, data)
        zk.create("/kafka-acl-changes/acl_changes_", f"Topic:{topic}".encode(), sequence=True)


def _produce_error(conf: dict[str, Any], topic: str) -> str | None:
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 5000, "retries": 0})
    producer.produce(topic, b"x", on_delivery=lambda error, _m: errors.append(error))
    producer.flush(CLIENT_TIMEOUT_S)
    return None if not errors or errors[0] is None else str(errors[0].name())
