"""SCRAM-SHA-256 and SCRAM-SHA-512 with real clients: users made with confluent-kafka's
admin client (AlterUserScramCredentials), then confluent-kafka and kafka-python
authenticating with them over SASL_PLAINTEXT; wrong passwords and unknown users refused
alike; a deleted user refused from then on; users surviving a `kill -9`; and in a
three-node cluster, on Raft and on ZooKeeper, a user made at one broker accepted at
another, with Kafka's /config/users znodes both ways on ZooKeeper.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import BrokerProcess, free_port
from client_helpers import (
    CLIENT_TIMEOUT_S,
    add_scram_user,
    authentication_error,
    kafka_python_round_trip,
    round_trip,
    unique_topic,
    wait_until,
)
from cluster import free_ports, running_cluster
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramMechanism,
    UserScramCredentialDeletion,
)
from zookeeper import kazoo_client

from strom.security.scram import ScramMechanism as Mechanism
from strom.security.scram import credential_from_password, format_scram_config

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
MECHANISM_NAMES = {SHA256: "SCRAM-SHA-256", SHA512: "SCRAM-SHA-512"}
SCRAM_SETTINGS = ["sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512"]


def _admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def _upsert(bootstrap: str, user: str, password: str, mechanism: ScramMechanism = SHA256) -> None:
    add_scram_user(bootstrap, user, password, mechanism)


def _conf(port: int, user: str, password: str, mechanism: ScramMechanism) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM_NAMES[mechanism],
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.fixture(scope="module")
def scram_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    sasl_port = free_port()
    process = BrokerProcess(
        tmp_path_factory.mktemp("scram-broker") / "data",
        more_listeners=[f"SASL_PLAINTEXT://localhost:{sasl_port}"],
        extra=[
            part
            for setting in [
                *SCRAM_SETTINGS,
                "connection.failed.authentication.delay.ms=50",
                # Kafka's brokers log in to each other with this; strom accepts and ignores it.
                "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                'username="admin" password="admin-secret";',
            ]
            for part in ("--set", setting)
        ],
    )
    process.start()
    try:
        yield process, sasl_port
    finally:
        process.kill()


def test_users_made_by_an_admin_client_authenticate_with_either_mechanism(
    scram_broker: tuple[BrokerProcess, int],
) -> None:
    broker, port = scram_broker
    _upsert(broker.bootstrap, "alice", "alice-secret", SHA256)
    _upsert(broker.bootstrap, "bob", "bob-secret", SHA512)
    expected = [f"v{i}".encode() for i in range(20)]
    assert round_trip(_conf(port, "alice", "alice-secret", SHA256), 20, prefix="scram") == expected
    assert round_trip(_conf(port, "bob", "bob-secret", SHA512), 20, prefix="scram") == expected
    admin = _admin(broker.bootstrap)
    described = admin.describe_user_scram_credentials(["alice", "bob"])
    infos = {
        user: [
            (i.mechanism, i.iterations) for i in f.result(CLIENT_TIMEOUT_S).scram_credential_infos
        ]
        for user, f in described.items()
    }
    assert infos == {"alice": [(SHA256, 4096)], "bob": [(SHA512, 4096)]}


def test_a_wrong_password_and_an_unknown_user_are_refused_alike(
    scram_broker: tuple[BrokerProcess, int],
) -> None:
    broker, port = scram_broker
    _upsert(broker.bootstrap, "carol", "carol-secret", SHA512)
    wrong = authentication_error(_conf(port, "carol", "not-it", SHA512))
    unknown = authentication_error(_conf(port, "nobody", "not-it", SHA512))
    assert "invalid credentials" in wrong
    assert wrong == unknown
    # A user with SHA-512 credentials only is unknown to SHA-256.
    assert authentication_error(_conf(port, "carol", "carol-secret", SHA256)) == unknown.replace(
        "SCRAM-SHA-512", "SCRAM-SHA-256"
    )


def test_a_deleted_user_is_refused_from_its_next_connection_on(
    scram_broker: tuple[BrokerProcess, int],
) -> None:
    broker, port = scram_broker
    _upsert(broker.bootstrap, "dave", "dave-secret")
    assert len(round_trip(_conf(port, "dave", "dave-secret", SHA256), 3, prefix="scram")) == 3
    deletion = UserScramCredentialDeletion("dave", SHA256)
    admin = _admin(broker.bootstrap)
    admin.alter_user_scram_credentials([deletion])["dave"].result(timeout=CLIENT_TIMEOUT_S)
    assert "invalid credentials" in authentication_error(_conf(port, "dave", "dave-secret", SHA256))
    with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
        admin.describe_user_scram_credentials(["dave"])["dave"].result(CLIENT_TIMEOUT_S)


def test_a_new_password_replaces_the_old_one(scram_broker: tuple[BrokerProcess, int]) -> None:
    broker, port = scram_broker
    _upsert(broker.bootstrap, "erin", "first")
    _upsert(broker.bootstrap, "erin", "second")
    assert len(round_trip(_conf(port, "erin", "second", SHA256), 2, prefix="scram")) == 2
    assert "invalid credentials" in authentication_error(_conf(port, "erin", "first", SHA256))


def test_kafka_python_authenticates_with_scram(scram_broker: tuple[BrokerProcess, int]) -> None:
    broker, port = scram_broker
    _upsert(broker.bootstrap, "frank", "frank-secret", SHA512)
    settings: dict[str, Any] = {
        "bootstrap_servers": f"localhost:{port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "frank",
        "sasl_plain_password": "frank-secret",
    }
    values = kafka_python_round_trip(settings, 5, "scram-kp")
    assert values == [f"kp{i}".encode() for i in range(5)]


def test_kcat_on_an_older_librdkafka_authenticates(scram_broker: tuple[BrokerProcess, int]) -> None:
    """Debian's kcat links a librdkafka older than 2.6.1, whose SCRAM final message
    repeats the client's nonce; strom accepts that, as Kafka does since 3.8.1."""
    broker, port = scram_broker
    _upsert(broker.bootstrap, "ivan", "ivan-secret", SHA512)
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is installed by ./dev"
    topic = unique_topic("scram-kcat")
    sasl = [
        *("-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512"),
        *("-X", "sasl.username=ivan", "-X", "sasl.password=ivan-secret"),
    ]
    run = {"capture_output": True, "text": True, "timeout": 60, "check": True}
    subprocess.run(
        [kcat, "-b", f"localhost:{port}", *sasl, "-P", "-t", topic, "-p", "0"],
        input="one\ntwo\n",
        **run,
    )
    consumed = subprocess.run(
        [kcat, "-b", f"localhost:{port}", *sasl, "-C", "-t", topic, "-e"],
        **run,
    )
    assert consumed.stdout.split() == ["one", "two"]


def test_users_survive_a_kill_9(tmp_path: Path) -> None:
    sasl_port = free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        more_listeners=[f"SASL_PLAINTEXT://localhost:{sasl_port}"],
        extra=["--set", SCRAM_SETTINGS[0]],
    )
    broker.start()
    try:
        _upsert(broker.bootstrap, "gina", "gina-secret", SHA512)
        broker.kill()
        broker.start()
        conf = _conf(sasl_port, "gina", "gina-secret", SHA512)
        assert len(round_trip(conf, 3, prefix="scram")) == 3
    finally:
        broker.kill()


def test_a_user_made_at_one_broker_is_accepted_at_every_other(
    tmp_path: Path, store: str | None
) -> None:
    """The credential is a metadata record (on ZooKeeper, Kafka's /config/users znode),
    decided by the active controller wherever it was asked: every broker takes it. On
    ZooKeeper, a user an operator writes into /config/users with a change notification,
    as Kafka's old tools did, is taken too."""
    sasl_ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
    with running_cluster(
        tmp_path,
        3,
        zookeeper=store,
        settings=[*SCRAM_SETTINGS, "min.insync.replicas=2", "default.replication.factor=3"],
        more_listeners={n: f"SASL_PLAINTEXT://localhost:{p}" for n, p in sasl_ports.items()},
    ) as cluster:
        # Made at each node, so at least two are forwarded to the active controller.
        for node, user in ((1, "alice"), (2, "bob"), (3, "carol")):
            _upsert(cluster.address(node), user, f"{user}-secret")
        for node, user in ((3, "alice"), (1, "bob"), (2, "carol")):
            conf = _conf(sasl_ports[node], user, f"{user}-secret", SHA256)
            assert len(round_trip(conf, 20, prefix="scram")) == 20
        if store is None:
            return
        with kazoo_client(store) as zk:
            data, _stat = zk.get("/config/users/alice")
            body = json.loads(data)
            assert body["version"] == 1
            assert body["config"]["SCRAM-SHA-256"].startswith("salt=")
            assert body["config"]["SCRAM-SHA-256"].endswith(",iterations=4096")
            credential = credential_from_password(
                Mechanism.SCRAM_SHA_512, "hand-made", b"operator-salt", 4096
            )
            config = {"SCRAM-SHA-512": format_scram_config(credential)}
            zk.create("/config/users/hank", json.dumps({"version": 1, "config": config}).encode())
            notice = json.dumps({"version": 2, "entity_path": "users/hank"}).encode()
            zk.create("/config/changes/config_change_", notice, sequence=True)
        hank = _conf(sasl_ports[2], "hank", "hand-made", SHA512)
        wait_until(
            lambda: _describes(cluster.address(2), "hank"),
            CLIENT_TIMEOUT_S,
            "the hand-written user in the metadata",
        )
        assert len(round_trip(hank, 5, prefix="scram")) == 5


def _describes(bootstrap: str, user: str) -> bool:
    admin = _admin(bootstrap)
    try:
        admin.describe_user_scram_credentials([user])[user].result(CLIENT_TIMEOUT_S)
    except KafkaException:
        return False
    return True
