"""ACLs with real clients: a broker with authorizer.class.name set denies by default; a
super user makes ACLs with confluent-kafka's admin client; a user may then produce and
consume what they name, and nothing else; the names of topics a user may not describe do
not leak; deleted ACLs stop counting at once; without an authorizer the ACL APIs answer
SECURITY_DISABLED."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import kafka
import pytest
from broker import BrokerProcess, free_port
from client_helpers import CLIENT_TIMEOUT_S, unique_topic, wait_until
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    + ";"
)
ANY_FILTER = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


class AclBroker:
    def __init__(self, process: BrokerProcess, port: int) -> None:
        self.process = process
        self.port = port

    def conf(self, user: str, **more: Any) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"localhost:{self.port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": user,
            "sasl.password": USERS[user],
            **more,
        }


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclBroker]:
    port = free_port()
    settings = [
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin",
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        "auto.create.topics.enable=false",
    ]
    process = BrokerProcess(
        tmp_path_factory.mktemp("acl-broker") / "data",
        more_listeners=[f"SASL_PLAINTEXT://localhost:{port}"],
        extra=[part for setting in settings for part in ("--set", setting)],
    )
    process.start()
    try:
        yield AclBroker(process, port)
    finally:
        process.kill()


def _binding(
    kind: ResourceType,
    name: str,
    user: str,
    operation: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    return AclBinding(kind, name, pattern, f"User:{user}", "*", operation, AclPermissionType.ALLOW)


def _produce_error(conf: dict[str, Any], topic: str) -> str | None:
    """The error of one record produced to `topic` (None: written)."""
    errors: list[KafkaError | None] = []
    producer = Producer({**conf, "message.timeout.ms": 5000, "retries": 0})
    producer.produce(topic, b"v", on_delivery=lambda error, _msg: errors.append(error))
    producer.flush(CLIENT_TIMEOUT_S)
    error = errors[0]
    return None if error is None else str(error.name())


def _consume(conf: dict[str, Any], topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(40):
            for message in consumer.consume(count, 0.5):
                if message.error() is not None:
                    raise KafkaException(message.error())
                values.append(message.value())
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


def test_default_deny_then_what_the_acls_allow(acl_broker: AclBroker) -> None:
    admin = AdminClient(acl_broker.conf("admin"))
    topic, secret = unique_topic("acl-orders"), unique_topic("acl-secret")
    for future in admin.create_topics([NewTopic(topic, 1, 1), NewTopic(secret, 1, 1)]).values():
        future.result(CLIENT_TIMEOUT_S)
    alice, bob = acl_broker.conf("alice"), acl_broker.conf("bob")
    assert _produce_error(alice, topic) == "TOPIC_AUTHORIZATION_FAILED"

    grants = [
        _binding(ResourceType.TOPIC, topic, "alice", AclOperation.WRITE),
        _binding(ResourceType.TOPIC, topic, "alice", AclOperation.READ),
        _binding(
            ResourceType.GROUP, "app-", "alice", AclOperation.READ, ResourcePatternType.PREFIXED
        ),
    ]
    for future in admin.create_acls(grants).values():
        future.result(CLIENT_TIMEOUT_S)
    listed = admin.describe_acls(ANY_FILTER).result(CLIENT_TIMEOUT_S)
    assert set(map(str, listed)) >= set(map(str, grants))

    assert _produce_error(alice, topic) is None
    assert _consume(alice, topic, "app-1", 1) == [b"v"]
    assert _produce_error(bob, topic) == "TOPIC_AUTHORIZATION_FAILED"
    with pytest.raises(KafkaException, match="AUTHORIZATION_FAILED"):
        _consume(bob, topic, "app-2", 1)

    # Names alice may not describe do not leak: the secret topic is left out of the list.
    visible = Consumer({**alice, "group.id": "app-list"})
    try:
        names = set(visible.list_topics(timeout=CLIENT_TIMEOUT_S).topics)
    finally:
        visible.close()
    assert topic in names and secret not in names

    # kafka-python sees the same: its producer is refused on the secret topic.
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"localhost:{acl_broker.port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="alice",
        sasl_plain_password=USERS["alice"],
        max_block_ms=5000,
    )
    try:
        with pytest.raises(kafka.errors.KafkaError):
            producer.send(secret, b"x").get(timeout=CLIENT_TIMEOUT_S)
        producer.send(topic, b"kp").get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close()

    # Deleted, the grant stops counting from the next request on.
    deleted = admin.delete_acls(
        [
            AclBindingFilter(
                ResourceType.TOPIC,
                topic,
                ResourcePatternType.LITERAL,
                "User:alice",
                None,
                AclOperation.WRITE,
                AclPermissionType.ANY,
            )
        ]
    )
    for future in deleted.values():
        assert len(future.result(CLIENT_TIMEOUT_S)) == 1
    wait_until(
        lambda: _produce_error(alice, topic) == "TOPIC_AUTHORIZATION_FAILED",
        CLIENT_TIMEOUT_S,
        "alice refused once her grant is gone",
    )


def test_only_a_principal_allowed_to_alter_the_cluster_makes_acls(acl_broker: AclBroker) -> None:
    alice = AdminClient(acl_broker.conf("alice"))
    grant = _binding(ResourceType.TOPIC, "anything", "alice", AclOperation.ALL)
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        alice.create_acls([grant])[grant].result(CLIENT_TIMEOUT_S)
    plaintext = AdminClient({"bootstrap.servers": acl_broker.process.bootstrap})
    with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
        plaintext.create_acls([grant])[grant].result(CLIENT_TIMEOUT_S)


def test_without_an_authorizer_the_acl_apis_say_so(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    grant = _binding(ResourceType.TOPIC, "t", "alice", AclOperation.READ)
    with pytest.raises(KafkaException, match="SECURITY_DISABLED"):
        admin.create_acls([grant])[grant].result(CLIENT_TIMEOUT_S)
