"""Re-authentication (KIP-368) on a SASL listener whose sessions last 1.5 s: the lifetime a
client is told, SaslHandshake and SaslAuthenticate again on one connection (over raw
sockets, with Kafka's refusals), a connection past its lifetime closed at its next
request, confluent-kafka and strom's own client re-authenticating while they work, and a
removed SCRAM user shut out of the connection it had already opened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import kafka_wire as wire
import pytest
from broker import BrokerProcess, free_port
from client_helpers import CLIENT_TIMEOUT_S, add_scram_user, unique_topic, wait_until
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ScramMechanism, UserScramCredentialDeletion
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from strom.client import KafkaConnection
from strom.client.security import ClientSecurity, SaslLogin

LIFETIME_MS = 1500
LIFETIME = timedelta(milliseconds=LIFETIME_MS)
USERS = {"alice": "alice-secret", "bob": "bob-secret", "dora": "dora-secret"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{name}="{password}"' for name, password in USERS.items())
    + ";"
)
METADATA = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


@pytest.fixture(scope="module")
def reauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    settings = [
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"connections.max.reauth.ms={LIFETIME_MS}",
        "connection.failed.authentication.delay.ms=50",
    ]
    process = BrokerProcess(
        tmp_path_factory.mktemp("reauth") / "data",
        more_listeners=[f"SASL_PLAINTEXT://localhost:{port}"],
        extra=["--log-level", "debug", *(p for s in settings for p in ("--set", s))],
    )
    process.start()
    try:
        yield process, port
    finally:
        process.kill()


def _plain(user: str) -> bytes:
    return f"\0{user}\0{USERS[user]}".encode()


def _log_in(sock: Any, user: str) -> Any:
    assert wire.call(sock, SaslHandshakeRequest(mechanism="PLAIN")).error_code == 0
    return wire.call(sock, SaslAuthenticateRequest(auth_bytes=_plain(user)))


def test_a_session_is_renewed_on_its_connection_and_closed_once_it_has_expired(
    reauth_broker: tuple[BrokerProcess, int],
) -> None:
    _broker, port = reauth_broker
    with wire.connect(port) as sock:
        answer = _log_in(sock, "alice")
        assert (answer.error_code, answer.session_lifetime) == (0, LIFETIME)
        assert wire.call(sock, METADATA).brokers

        renewed = _log_in(sock, "alice")  # the same connection, the same principal
        renewed_at = time.monotonic()
        assert (renewed.error_code, renewed.session_lifetime) == (0, LIFETIME)
        assert wire.call(sock, METADATA).brokers
        # Again within a second: answered as on any authenticated connection.
        too_soon = wire.call(sock, SaslHandshakeRequest(mechanism="PLAIN"))
        assert too_soon.error_code == ErrorCode.illegal_sasl_state
        assert wire.call(sock, METADATA).brokers

        # Past the lifetime, the next request closes the connection.
        def closed() -> bool:
            try:
                wire.call(sock, METADATA)
            except (wire.Closed, OSError):
                return True
            return False

        wait_until(closed, 10.0, "the expired session's connection to close")
        assert time.monotonic() - renewed_at >= LIFETIME_MS / 1000


def test_re_authenticating_as_someone_else_is_refused_and_closes(
    reauth_broker: tuple[BrokerProcess, int],
) -> None:
    broker, port = reauth_broker
    with wire.connect(port) as sock:
        assert _log_in(sock, "alice").error_code == 0
        refused = _log_in(sock, "bob")
        assert refused.error_code == ErrorCode.sasl_authentication_failed
        assert refused.error_message == (
            "Cannot change principals during re-authentication from User.alice: User.bob"
        )
        assert wire.wait_closed(sock)
    assert "failed re-authentication with PLAIN on listener SASL_PLAINTEXT" in broker.read_log()


def _conf(port: int, mechanism: str, user: str, password: str, errors: list[KafkaError]) -> dict:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
        "error_cb": errors.append,
        "linger.ms": 0,
    }


def test_confluent_kafka_re_authenticates_while_it_produces(
    reauth_broker: tuple[BrokerProcess, int],
) -> None:
    broker, port = reauth_broker
    errors: list[KafkaError] = []
    producer = Producer(_conf(port, "PLAIN", "dora", USERS["dora"], errors))
    topic = unique_topic("reauth")
    delivered: list[int] = []

    def on_delivery(error: KafkaError | None, message: Any) -> None:
        assert error is None, error
        delivered.append(int(message.value()))

    started = time.monotonic()
    sent = 0
    while time.monotonic() - started < 3.5 * LIFETIME_MS / 1000:  # three renewals at least
        producer.produce(topic, str(sent).encode(), partition=0, on_delivery=on_delivery)
        sent += 1
        producer.poll(0.1)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert delivered == list(range(sent)) and errors == []
    log = broker.read_log()
    assert log.count("re-authenticated with PLAIN on SASL_PLAINTEXT as User:dora") >= 2
    assert "the session of User:dora has expired" not in log


def test_a_removed_user_is_shut_out_of_its_open_connection(
    reauth_broker: tuple[BrokerProcess, int],
) -> None:
    broker, port = reauth_broker
    add_scram_user(broker.bootstrap, "carol", "carol-secret", ScramMechanism.SCRAM_SHA_256)
    errors: list[KafkaError] = []
    producer = Producer(_conf(port, "SCRAM-SHA-256", "carol", "carol-secret", errors))
    topic = unique_topic("reauth-removed")
    producer.produce(topic, b"before", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and errors == []

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deletion = UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)
    admin.alter_user_scram_credentials([deletion])["carol"].result(timeout=CLIENT_TIMEOUT_S)
    # Without re-authentication the open connection would serve carol for ever.
    wait_until(
        lambda: (
            producer.poll(0.2) is not None
            and any(e.code() == KafkaError._AUTHENTICATION for e in errors)
        ),
        CLIENT_TIMEOUT_S,
        "the removed user's client to be refused",
    )
    assert "failed re-authentication with SCRAM-SHA-256" in broker.read_log()


def test_strom_client_renews_its_session_on_a_connection_it_keeps(
    reauth_broker: tuple[BrokerProcess, int],
) -> None:
    """What a node's links to other nodes need: one connection used for longer than a
    session lasts, its requests pipelined, without being closed for an expired session."""
    broker, port = reauth_broker
    security = ClientSecurity(sasl=SaslLogin("PLAIN", "bob", USERS["bob"]))

    async def work() -> int:
        connection = await KafkaConnection.connect("localhost", port, security=security)
        answered = 0
        try:
            started = time.monotonic()
            while time.monotonic() - started < 3.5 * LIFETIME_MS / 1000:
                answers = await asyncio.gather(
                    *(connection.request(3, 12, METADATA, timeout_s=10) for _ in range(3))
                )
                answered += sum(1 for answer in answers if answer.brokers)
                await asyncio.sleep(0.05)
            assert not connection.is_closed, connection.close_reason
        finally:
            connection.close()
            await connection.wait_closed()
        return answered

    answered = asyncio.run(work())
    assert answered >= 30
    log = broker.read_log()
    assert log.count("re-authenticated with PLAIN on SASL_PLAINTEXT as User:bob") >= 2
    assert "the session of User:bob has expired" not in log
