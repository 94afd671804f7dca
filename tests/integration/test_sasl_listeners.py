"""SASL/PLAIN listeners with real clients: confluent-kafka over SASL_PLAINTEXT and
SASL_SSL, kafka-python and kcat; wrong passwords and unknown users refused alike; nothing
but ApiVersions and the SASL requests served before authentication; the raw tokens of
SaslHandshake v0; and Hypothesis-made tokens that never get in or take the broker down.
"""

from __future__ import annotations

import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka
import kafka_wire as wire
import pytest
from broker import BrokerProcess, free_port, serve_refused
from client_helpers import CLIENT_TIMEOUT_S, round_trip, unique_topic
from confluent_kafka import Consumer, KafkaException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as SaslHandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tls_material import TlsMaterial, make_tls_material

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{name}="{password}"' for name, password in USERS.items()
)


class SaslBroker:
    def __init__(self, process: BrokerProcess, sasl_port: int, sasl_ssl_port: int) -> None:
        self.process = process
        self.sasl_port = sasl_port
        self.sasl_ssl_port = sasl_ssl_port


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("sasl-tls"))


@pytest.fixture(scope="module")
def sasl_broker(
    tmp_path_factory: pytest.TempPathFactory, material: TlsMaterial
) -> Iterator[SaslBroker]:
    sasl_port, sasl_ssl_port = free_port(), free_port()
    settings_ = [
        "sasl.enabled.mechanisms=PLAIN",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS};",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS};",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={material.server.keystore_pem_path}",
        "connection.failed.authentication.delay.ms=50",
    ]
    process = BrokerProcess(
        tmp_path_factory.mktemp("sasl-broker") / "data",
        more_listeners=[
            f"SASL_PLAINTEXT://localhost:{sasl_port}",
            f"SASL_SSL://localhost:{sasl_ssl_port}",
        ],
        extra=[part for setting in settings_ for part in ("--set", setting)],
    )
    process.start()
    try:
        yield SaslBroker(process, sasl_port, sasl_ssl_port)
    finally:
        process.kill()


def _conf(port: int, user: str, password: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
        **more,
    }


def _ports(conf: dict[str, Any]) -> set[int]:
    consumer = Consumer({**conf, "group.id": "metadata"})
    try:
        return {b.port for b in consumer.list_topics(timeout=CLIENT_TIMEOUT_S).brokers.values()}
    finally:
        consumer.close()


def test_confluent_kafka_round_trips_over_sasl_plaintext_and_sasl_ssl(
    sasl_broker: SaslBroker, material: TlsMaterial
) -> None:
    plain = _conf(sasl_broker.sasl_port, "alice", USERS["alice"])
    assert round_trip(plain, 500, prefix="sasl") == [f"v{i}".encode() for i in range(500)]
    assert _ports(plain) == {sasl_broker.sasl_port}
    tls = _conf(
        sasl_broker.sasl_ssl_port,
        "bob",
        USERS["bob"],
        **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(material.ca_cert_path)},
    )
    assert round_trip(tls, 500, prefix="sasl") == [f"v{i}".encode() for i in range(500)]
    assert _ports(tls) == {sasl_broker.sasl_ssl_port}


def test_a_wrong_password_and_an_unknown_user_are_refused_alike(sasl_broker: SaslBroker) -> None:
    errors = []
    for user, password in (("alice", "guess"), ("mallory", "alice-secret")):
        consumer = Consumer(_conf(sasl_broker.sasl_port, user, password, **{"group.id": "x"}))
        try:
            with pytest.raises(KafkaException) as info:
                consumer.list_topics(timeout=5)
            errors.append(str(info.value))
        finally:
            consumer.close()
    log = sasl_broker.process.read_log()
    assert "failed authentication with PLAIN on listener SASL_PLAINTEXT" in log
    assert "guess" not in log and "mallory" not in log  # no password, no user name hint
    with wire.connect(sasl_broker.sasl_port) as sock:
        assert wire.call(sock, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
        wrong = wire.call(sock, SaslAuthenticateRequest(auth_bytes=b"\0alice\0guess"))
        assert wrong.error_code == ErrorCode.sasl_authentication_failed
        assert wire.wait_closed(sock)
    with wire.connect(sasl_broker.sasl_port) as sock:
        wire.call(sock, SaslHandshakeRequest(mechanism="PLAIN"))
        unknown = wire.call(sock, SaslAuthenticateRequest(auth_bytes=b"\0mallory\0guess"))
        assert unknown.error_message == wrong.error_message  # no hint whether alice exists
        assert wire.wait_closed(sock)


def test_kafka_python_and_kcat_authenticate_with_plain(sasl_broker: SaslBroker) -> None:
    topic = unique_topic("sasl-kp")
    producer = kafka.KafkaProducer(
        bootstrap_servers=f"localhost:{sasl_broker.sasl_port}",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username="bob",
        sasl_plain_password=USERS["bob"],
        acks="all",
    )
    try:
        for i in range(5):
            producer.send(topic, f"kp{i}".encode(), partition=0).get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close()
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is installed by ./dev"
    consumed = subprocess.run(
        [
            kcat,
            "-b",
            f"localhost:{sasl_broker.sasl_port}",
            "-X",
            "security.protocol=SASL_PLAINTEXT",
            "-X",
            "sasl.mechanisms=PLAIN",
            "-X",
            "sasl.username=alice",
            "-X",
            f"sasl.password={USERS['alice']}",
            "-C",
            "-t",
            topic,
            "-e",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert consumed.stdout.split() == [f"kp{i}" for i in range(5)]


def test_nothing_but_api_versions_and_sasl_before_authentication(sasl_broker: SaslBroker) -> None:
    with wire.connect(sasl_broker.sasl_port) as sock:
        versions = wire.call(
            sock, wire.ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        assert {k.api_key for k in versions.api_keys} >= {17, 36}
        wire.send_body(
            sock,
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        assert wire.wait_closed(sock)
    with wire.connect(sasl_broker.sasl_port) as sock:
        refused = wire.call(sock, SaslHandshakeRequest(mechanism="GSSAPI"))
        assert refused.error_code == ErrorCode.unsupported_sasl_mechanism
        assert refused.mechanisms == ("PLAIN",)
        assert wire.wait_closed(sock)
    # On a listener without SASL the SASL requests are answered ILLEGAL_SASL_STATE.
    with wire.connect(sasl_broker.process.port) as sock:
        answer = wire.call(sock, SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer.error_code == ErrorCode.illegal_sasl_state


def _raw_token(sock: socket.socket, token: bytes) -> bytes:
    sock.sendall(struct.pack(">i", len(token)) + token)
    return wire.read_frame(sock)


def test_saslhandshake_v0_takes_raw_tokens(sasl_broker: SaslBroker) -> None:
    with wire.connect(sasl_broker.sasl_port) as sock:
        assert wire.call(sock, SaslHandshakeV0(mechanism="PLAIN")).error_code == 0
        assert _raw_token(sock, b"\0alice\0" + USERS["alice"].encode()) == b""
        answer = wire.call(
            sock,
            MetadataRequest(
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            ),
        )
        assert {b.port for b in answer.brokers} == {sasl_broker.sasl_port}
    with wire.connect(sasl_broker.sasl_port) as sock:
        wire.call(sock, SaslHandshakeV0(mechanism="PLAIN"))
        sock.sendall(struct.pack(">i", 11) + b"\0alice\0nope")
        assert wire.wait_closed(sock)  # v0 has no room for an error: the broker closes


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(token=st.binary(max_size=2048), v0=st.booleans())
def test_made_up_tokens_never_get_in(sasl_broker: SaslBroker, token: bytes, v0: bool) -> None:
    with wire.connect(sasl_broker.sasl_port) as sock:
        if v0:
            wire.call(sock, SaslHandshakeV0(mechanism="PLAIN"))
            sock.sendall(struct.pack(">i", len(token)) + token)
        else:
            wire.call(sock, SaslHandshakeRequest(mechanism="PLAIN"))
            answer = wire.call(sock, SaslAuthenticateRequest(auth_bytes=token))
            assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert wire.wait_closed(sock)
    assert _ports(_conf(sasl_broker.sasl_port, "alice", USERS["alice"])) == {sasl_broker.sasl_port}


def test_a_sasl_listener_without_users_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    process = serve_refused(
        tmp_path / "data",
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()},SASL_PLAINTEXT://127.0.0.1:{free_port()}",
        "sasl.enabled.mechanisms=PLAIN",
    )
    assert process.returncode == 2, process.stderr
    assert "listener.name.sasl_plaintext.plain.sasl.jaas.config" in process.stderr
