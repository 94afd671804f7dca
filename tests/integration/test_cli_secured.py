"""The commands on strom's own client (cluster status, txn list, config --cluster-default)
against secured listeners, with librdkafka's keys in --command-config: SASL_SSL with
SCRAM-SHA-512 and PLAIN, SSL with the CA; a wrong password and an unknown CA refused
with the reason, exit code 3. The console's per-broker log sizes over SASL_SSL too."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess, free_port
from client_helpers import (
    add_scram_user,
    create_topic,
    make_records,
    produce_confluent,
    strom_with,
)

from strom.console.backend import ClusterBackend

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tls_material import TlsMaterial, make_tls_material

PLAIN_JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_ops="ops-secret";'
)


class Secured:
    def __init__(self, broker: BrokerProcess, ssl_port: int, sasl_ssl_port: int) -> None:
        self.broker = broker
        self.ssl_port = ssl_port
        self.sasl_ssl_port = sasl_ssl_port


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(tmp_path_factory.mktemp("cli-tls"))


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, material: TlsMaterial) -> Iterator[Secured]:
    ssl_port, sasl_ssl_port = free_port(), free_port()
    settings = [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={material.server.keystore_pem_path}",
        "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
        "connection.failed.authentication.delay.ms=20",
    ]
    broker = BrokerProcess(
        tmp_path_factory.mktemp("cli-secured") / "data",
        more_listeners=[
            f"SSL://localhost:{ssl_port}",
            f"SASL_SSL://localhost:{sasl_ssl_port}",
        ],
        extra=[part for setting in settings for part in ("--set", setting)],
    )
    broker.start()
    try:
        add_scram_user(broker.bootstrap, "admin", "admin-secret")
        yield Secured(broker, ssl_port, sasl_ssl_port)
    finally:
        broker.kill()


def _sasl_ssl(material: TlsMaterial, mechanism: str, user: str, password: str) -> str:
    return (
        "security.protocol=SASL_SSL\n"
        f"ssl.ca.location={material.ca_cert_path}\n"
        f"sasl.mechanism={mechanism}\nsasl.username={user}\nsasl.password={password}\n"
    )


@pytest.mark.parametrize(
    "args",
    [("cluster", "status"), ("txn", "list"), ("config", "get", "--cluster-default")],
    ids=lambda args: " ".join(args),
)
def test_own_client_commands_over_sasl_ssl_with_scram(
    secured: Secured, material: TlsMaterial, tmp_path: Path, args: tuple[str, ...]
) -> None:
    text = _sasl_ssl(material, "SCRAM-SHA-512", "admin", "admin-secret")
    done = strom_with(tmp_path / "scram.properties", text, secured.sasl_ssl_port, *args)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_plain_and_ssl_work_too(secured: Secured, material: TlsMaterial, tmp_path: Path) -> None:
    plain = _sasl_ssl(material, "PLAIN", "ops", "ops-secret")
    done = strom_with(tmp_path / "p.properties", plain, secured.sasl_ssl_port, "cluster", "status")
    assert done.returncode == 0, done.stderr
    tls = f"security.protocol=SSL\nssl.ca.location={material.ca_cert_path}\n"
    done = strom_with(tmp_path / "t.properties", tls, secured.ssl_port, "cluster", "status")
    assert done.returncode == 0, done.stderr
    assert f"localhost:{secured.ssl_port}" in done.stdout  # the SSL listener's addresses


def test_a_wrong_password_and_an_unknown_ca_are_refused_with_the_reason(
    secured: Secured, material: TlsMaterial, tmp_path: Path
) -> None:
    wrong = _sasl_ssl(material, "SCRAM-SHA-512", "admin", "not-it")
    done = strom_with(tmp_path / "w.properties", wrong, secured.sasl_ssl_port, "cluster", "status")
    assert done.returncode == 3, done.stderr
    assert "SASL login refused: Authentication failed" in done.stderr
    assert "invalid credentials" in done.stderr
    other_ca = make_tls_material(tmp_path / "other")
    untrusted = f"security.protocol=SSL\nssl.ca.location={other_ca.ca_cert_path}\n"
    done = strom_with(tmp_path / "u.properties", untrusted, secured.ssl_port, "cluster", "status")
    assert done.returncode == 3, done.stderr
    assert f"cannot connect to localhost:{secured.ssl_port}: TLS handshake failed" in done.stderr
    assert "certificate" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_consoles_log_sizes_are_asked_of_each_broker_with_its_security(
    secured: Secured, material: TlsMaterial, tmp_path: Path
) -> None:
    create_topic(secured.broker.bootstrap, "sized", 1)
    produce_confluent(secured.broker.bootstrap, "sized", make_records(20, seed=7))
    properties = tmp_path / "console.properties"
    properties.write_text(_sasl_ssl(material, "SCRAM-SHA-512", "admin", "admin-secret"))
    backend = ClusterBackend(f"localhost:{secured.sasl_ssl_port}", 10, properties)
    try:
        sizes = backend.log_sizes()
    finally:
        backend.close()
    assert sizes.get(("sized", 0), {}).get(1, 0) > 0, sizes
