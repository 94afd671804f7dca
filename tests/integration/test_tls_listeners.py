"""SSL listeners with real clients: confluent-kafka, kafka-python and kcat over TLS beside
a PLAINTEXT listener, each told the address of the listener it came in on; client
certificates when the listener requires them; hostile bytes on the TLS port; and a
broken key store that stops the start with the key named.

The certificates come from tests/tls_material.py (a private CA made per module).
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka
import pytest
from broker import BrokerProcess, free_port, serve_refused
from client_helpers import CLIENT_TIMEOUT_S, unique_topic, wait_until
from cluster import free_ports, running_cluster
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tls_material import TlsMaterial, make_tls_material

RECORDS = 2_000
SECRET = "not-for-your-eyes"


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(
        tmp_path_factory.mktemp("tls"),
        client_subjects=("CN=alice,OU=eng,O=strom,C=US", "CN=mallory,O=elsewhere"),
    )


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    """Certificates of another CA, which the broker does not trust."""
    return make_tls_material(tmp_path_factory.mktemp("other-ca"))


def _tls_broker(
    directory: Path, material: TlsMaterial, *settings_: str
) -> tuple[BrokerProcess, int]:
    ssl_port = free_port()
    broker = BrokerProcess(
        directory / "data",
        more_listeners=[f"SSL://localhost:{ssl_port}"],
        extra=[
            "--set",
            "ssl.keystore.type=PEM",
            "--set",
            f"ssl.keystore.location={material.server.keystore_pem_path}",
            "--set",
            "ssl.truststore.type=PEM",
            "--set",
            f"ssl.truststore.location={material.ca_cert_path}",
            *(part for setting in settings_ for part in ("--set", setting)),
        ],
    )
    broker.start()
    return broker, ssl_port


@pytest.fixture(scope="module")
def tls_broker(
    tmp_path_factory: pytest.TempPathFactory, material: TlsMaterial
) -> Iterator[tuple[BrokerProcess, int]]:
    """One broker for the module: PLAINTEXT and SSL; the SSL listener requests (but does
    not require) client certificates."""
    broker, ssl_port = _tls_broker(
        tmp_path_factory.mktemp("tls-broker"),
        material,
        "ssl.client.auth=requested",
        f"ssl.truststore.password={SECRET}",  # unused by a PEM trust store; never shown
    )
    try:
        yield broker, ssl_port
    finally:
        broker.kill()


def _tls_conf(material: TlsMaterial, port: int, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SSL",
        "ssl.ca.location": str(material.ca_cert_path),
        **more,
    }


def _produce(conf: dict[str, Any], topic: str, count: int) -> None:
    producer = Producer({**conf, "acks": "all", "linger.ms": 5})
    errors: list[Any] = []
    for i in range(count):
        producer.produce(
            topic,
            value=f"value-{i}".encode(),
            key=f"k{i}".encode(),
            partition=0,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        producer.poll(0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert errors == []


def _consume(conf: dict[str, Any], topic: str, count: int) -> list[bytes]:
    """`count` values of `topic` read from its start by a consumer of a new group."""
    group = f"g-{topic}-{time.monotonic_ns()}"
    consumer = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest"})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    return values


def _broker_ports(conf: dict[str, Any]) -> set[int]:
    consumer = Consumer({**conf, "group.id": "metadata"})
    try:
        brokers = consumer.list_topics(timeout=CLIENT_TIMEOUT_S).brokers
    finally:
        consumer.close()
    return {broker.port for broker in brokers.values()}


def test_clients_round_trip_over_tls_and_learn_the_tls_address(
    tls_broker: tuple[BrokerProcess, int], material: TlsMaterial
) -> None:
    broker, ssl_port = tls_broker
    conf = _tls_conf(material, ssl_port)
    topic = unique_topic("tls")
    _produce(conf, topic, RECORDS)
    expected = [f"value-{i}".encode() for i in range(RECORDS)]
    assert _consume(conf, topic, RECORDS) == expected

    # Each client is given the address of the listener it connected to.
    assert _broker_ports(conf) == {ssl_port}
    assert _broker_ports({"bootstrap.servers": broker.bootstrap}) == {broker.port}

    # A client with a certificate (requested, not required, here) is served the same way.
    alice = material.client("alice")
    with_cert = _tls_conf(
        material,
        ssl_port,
        **{
            "ssl.certificate.location": str(alice.cert_path),
            "ssl.key.location": str(alice.key_path),
        },
    )
    assert _consume(with_cert, topic, RECORDS) == expected

    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=f"localhost:{ssl_port}",
        security_protocol="SSL",
        ssl_cafile=str(material.ca_cert_path),
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
    )
    try:
        values = []
        for message in consumer:
            values.append(message.value)
            if len(values) == RECORDS:
                break
    finally:
        consumer.close()
    assert values == expected


def test_describe_configs_never_shows_a_password(
    tls_broker: tuple[BrokerProcess, int], material: TlsMaterial
) -> None:
    broker, ssl_port = tls_broker
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    for conf in ({"bootstrap.servers": broker.bootstrap}, _tls_conf(material, ssl_port)):
        admin = AdminClient(conf)
        described = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
        entry = described["ssl.truststore.password"]
        assert entry.is_sensitive and entry.value is None
        assert described["ssl.client.auth"].value == "requested"
        assert all(SECRET not in (e.value or "") for e in described.values())


def test_kcat_lists_and_consumes_over_tls(
    tls_broker: tuple[BrokerProcess, int], material: TlsMaterial
) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat is not None, "kcat is installed by ./dev"
    _broker, ssl_port = tls_broker
    topic = unique_topic("kcat-tls")
    _produce(_tls_conf(material, ssl_port), topic, 10)
    common = [
        kcat,
        "-b",
        f"localhost:{ssl_port}",
        "-X",
        "security.protocol=ssl",
        "-X",
        f"ssl.ca.location={material.ca_cert_path}",
    ]
    listing = subprocess.run(
        [*common, "-L", "-t", topic], capture_output=True, text=True, timeout=60, check=True
    )
    assert f"at localhost:{ssl_port}" in listing.stdout, listing.stdout
    consumed = subprocess.run(
        [*common, "-C", "-t", topic, "-e", "-f", "%s\\n"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert consumed.stdout.split() == [f"value-{i}" for i in range(10)]


def test_a_required_client_certificate_must_be_trusted_and_map_to_a_principal(
    tmp_path: Path, material: TlsMaterial, stranger: TlsMaterial
) -> None:
    # Only alice's certificate maps to a principal; Kafka refuses a client whose
    # certificate no rule maps, and so does strom.
    broker, ssl_port = _tls_broker(
        tmp_path,
        material,
        "listener.name.ssl.ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=(alice),OU=.*$/$1/",
    )
    try:
        topic = unique_topic("mtls")
        alice = material.client("alice")
        alice_conf = _tls_conf(
            material,
            ssl_port,
            **{
                "ssl.certificate.location": str(alice.cert_path),
                "ssl.key.location": str(alice.key_path),
            },
        )
        _produce(alice_conf, topic, 10)
        assert len(_consume(alice_conf, topic, 10)) == 10

        outsider = stranger.client("alice")
        mallory = material.client("mallory")
        for refused in (
            _tls_conf(material, ssl_port),  # no certificate
            _tls_conf(  # a trusted certificate whose name no rule maps
                material,
                ssl_port,
                **{
                    "ssl.certificate.location": str(mallory.cert_path),
                    "ssl.key.location": str(mallory.key_path),
                },
            ),
            _tls_conf(
                material,
                ssl_port,
                **{
                    "ssl.certificate.location": str(outsider.cert_path),
                    "ssl.key.location": str(outsider.key_path),
                },
            ),
        ):
            consumer = Consumer({**refused, "group.id": "refused"})
            try:
                with pytest.raises(KafkaException):
                    consumer.list_topics(timeout=2)  # it never succeeds: waits it out
            finally:
                consumer.close()
        # The PLAINTEXT listener is not affected.
        assert _broker_ports({"bootstrap.servers": broker.bootstrap}) == {broker.port}
    finally:
        broker.kill()


def _closed_by_broker(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the broker closes `sock` within `timeout_s` (whatever it sent first: a TLS
    alert, say)."""
    sock.settimeout(timeout_s)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(payload=st.binary(min_size=1, max_size=4096))
def test_garbage_on_the_tls_port_closes_only_that_connection(
    tls_broker: tuple[BrokerProcess, int], material: TlsMaterial, payload: bytes
) -> None:
    _broker, ssl_port = tls_broker
    with socket.create_connection(("127.0.0.1", ssl_port), timeout=5) as sock:
        sock.sendall(payload)
        sock.shutdown(socket.SHUT_WR)
        assert _closed_by_broker(sock, 15.0)
    context = ssl.create_default_context(cafile=str(material.ca_cert_path))
    with (
        socket.create_connection(("localhost", ssl_port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")


def test_a_kafka_request_in_plaintext_on_the_tls_port_is_refused(
    tls_broker: tuple[BrokerProcess, int], material: TlsMaterial
) -> None:
    _broker, ssl_port = tls_broker
    api_versions_v0 = b"\x00\x00\x00\x0e\x00\x12\x00\x00\x00\x00\x00\x07\x00\x04test"
    with socket.create_connection(("127.0.0.1", ssl_port), timeout=5) as sock:
        sock.sendall(api_versions_v0)
        assert _closed_by_broker(sock, 15.0)
    wait_until(
        lambda: _broker_ports(_tls_conf(material, ssl_port)) == {ssl_port},
        CLIENT_TIMEOUT_S,
        "a TLS client to be served after the plaintext request",
    )


def test_a_missing_key_store_stops_the_start_naming_the_key(tmp_path: Path) -> None:
    process = serve_refused(
        tmp_path / "data",
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()},SSL://127.0.0.1:{free_port()}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tmp_path / 'missing.pem'}",
    )
    assert process.returncode == 1, process.stderr
    assert "listener.name.ssl.ssl.keystore.location" in process.stderr, process.stderr
    assert "missing.pem" in process.stderr


def test_a_cluster_tells_each_client_the_brokers_on_its_own_listener(
    tmp_path: Path, material: TlsMaterial, store: str | None
) -> None:
    """Every broker registers both its listeners with the controller (over the network
    for the two that are not it, through ZooKeeper's /strom/brokers znodes on that
    store): a TLS client is told each broker's SSL port, a PLAINTEXT one its plaintext
    port, and acks=all writes replicated three ways go through TLS."""
    ssl_ports = dict(zip((1, 2, 3), free_ports(3), strict=True))
    with running_cluster(
        tmp_path,
        3,
        zookeeper=store,
        settings=[
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={material.server.keystore_pem_path}",
            "min.insync.replicas=2",
        ],
        more_listeners={node: f"SSL://localhost:{port}" for node, port in ssl_ports.items()},
    ) as cluster:
        conf = _tls_conf(material, ssl_ports[1])
        wait_until(
            lambda: _broker_ports(conf) == set(ssl_ports.values()),
            CLIENT_TIMEOUT_S,
            "every broker's SSL port in a TLS client's metadata",
        )
        plaintext = {int(address.rpartition(":")[2]) for address in cluster.bootstrap.split(",")}
        assert _broker_ports({"bootstrap.servers": cluster.bootstrap}) == plaintext
        topic = unique_topic("tls-rf3")
        _produce(conf, topic, 500)
        assert _consume(_tls_conf(material, ssl_ports[3]), topic, 500) == [
            f"value-{i}".encode() for i in range(500)
        ]


def _served_certificate(port: int) -> bytes:
    """The DER certificate the listener on `port` presents to a new handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        certificate = tls.getpeercert(binary_form=True)
    assert certificate is not None
    return certificate


def _set_broker_config(admin: AdminClient, name: str, value: str) -> None:
    resource = ConfigResource(
        ConfigResource.Type.BROKER,
        "1",
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)


def test_a_new_key_store_is_taken_without_a_restart(tmp_path: Path, material: TlsMaterial) -> None:
    """Kafka's dynamic listener reconfiguration: a new key store set for one broker is
    checked where its file is, then served to new handshakes; open connections go on."""
    broker, ssl_port = _tls_broker(tmp_path, material)
    rotated = make_tls_material(tmp_path / "rotated")
    old_der = ssl.PEM_cert_to_DER_cert(material.server.cert_pem)
    new_der = ssl.PEM_cert_to_DER_cert(rotated.server.cert_pem)
    key = "listener.name.ssl.ssl.keystore.location"
    try:
        assert _served_certificate(ssl_port) == old_der
        topic = unique_topic("rotate")
        producer = Producer({**_tls_conf(material, ssl_port), "acks": "all"})
        producer.produce(topic, b"before", partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        with pytest.raises(KafkaException, match=r"missing\.pem"):
            _set_broker_config(admin, key, str(tmp_path / "missing.pem"))
        assert _served_certificate(ssl_port) == old_der

        _set_broker_config(admin, key, str(rotated.server.keystore_pem_path))
        wait_until(
            lambda: _served_certificate(ssl_port) == new_der,
            CLIENT_TIMEOUT_S,
            "the listener to present the new certificate",
        )
        producer.produce(topic, b"after", partition=0)  # on its connection from before
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
        assert _consume(_tls_conf(rotated, ssl_port), topic, 2) == [b"before", b"after"]
        assert "reloaded its key and trust stores" in broker.read_log()
    finally:
        broker.kill()
