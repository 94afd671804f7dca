"""SASL/OAUTHBEARER with real clients against one broker with two SASL_PLAINTEXT listeners
and a SASL_SSL one: UNSECURED takes unsecured JWTs (KIP-255, librdkafka's
`enable.sasl.oauthbearer.unsecure.jwt`), OVERTLS the same over TLS, SIGNED checks RS256
tokens the test signs against a JWKS the test serves over https, its CA given in the
JAAS entry's `ssl.*` options as Kafka reads them (KIP-768). ACLs are on, with everything
allowed on what no ACL names, so one test can show that the token's principal is the one
ACLs see. Also: kafka-python's token provider, refused tokens (one broker log line
each), a rotated key fetched when a token names its kid, and a broker whose JWKS cannot
be read refusing to start.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from broker import free_port, serve_refused
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    authentication_error,
    kafka_python_round_trip,
    round_trip,
    unique_topic,
)
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from cryptography.hazmat.primitives.asymmetric import rsa
from oauth_helpers import (
    HANDLER,
    MODULE,
    KeyServer,
    OAuthBroker,
    signed_token,
)

from tls_material import TlsMaterial


def unsecured_conf(port: int, principal: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": f"principal={principal} scope=read,write",
        **more,
    }


def signed_conf(port: int, token: str) -> dict[str, Any]:
    def oauth_cb(_config: str) -> tuple[str, float]:
        return token, time.time() + 600

    return {
        "bootstrap.servers": f"localhost:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


def produce(conf: dict[str, Any], count: int) -> None:
    """`count` records written with acks=all through a client with `conf`."""
    producer = Producer({**conf, "acks": "all"})
    topic = unique_topic("oauth-produce")
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def test_confluent_kafka_with_unsecured_jwts(oauth_broker: OAuthBroker) -> None:
    conf = unsecured_conf(oauth_broker.unsecured_port, "alice")
    assert round_trip(conf, 10, prefix="oauth") == [f"v{i}".encode() for i in range(10)]


def test_oauthbearer_over_sasl_ssl(oauth_broker: OAuthBroker, tls: TlsMaterial) -> None:
    conf = unsecured_conf(
        oauth_broker.tls_port,
        "alice",
        **{"security.protocol": "SASL_SSL", "ssl.ca.location": str(tls.ca_cert_path)},
    )
    assert round_trip(conf, 10, prefix="oauth-tls") == [f"v{i}".encode() for i in range(10)]


def test_confluent_kafka_with_signed_jwts(oauth_broker: OAuthBroker, keys: KeyServer) -> None:
    token = signed_token(keys.keys["k1"], "k1", "svc-orders")
    produce(signed_conf(oauth_broker.signed_port, token), 10)


def test_a_short_lived_token_ends_the_session_and_is_renewed_on_the_connection(
    oauth_broker: OAuthBroker, keys: KeyServer
) -> None:
    """A token's expiry bounds the session (KIP-368) even without
    connections.max.reauth.ms: librdkafka fetches a fresh token and re-authenticates on the
    same connection, and the broker never has to close it."""
    lifetime_s = 4

    def oauth_cb(_config: str) -> tuple[str, float]:
        # librdkafka is told a shorter life than the token has, so it always holds a
        # fresh token when a session is due: re-authenticating with a token about to
        # expire gets a session too short to renew (at most once a second, as in Kafka).
        return signed_token(keys.keys["k1"], "k1", "svc-short", lifetime_s), time.time() + 1.5

    errors: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": f"localhost:{oauth_broker.signed_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "OAUTHBEARER",
            "oauth_cb": oauth_cb,
            "error_cb": errors.append,
            "linger.ms": 0,
        }
    )
    topic = unique_topic("oauth-short")
    started, sent = time.monotonic(), 0
    while time.monotonic() - started < 1.3 * lifetime_s:
        producer.produce(topic, str(sent).encode(), partition=0)
        sent += 1
        producer.poll(0.1)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and errors == []
    log = oauth_broker.process.read_log()
    assert "the session of User:svc-short has expired" not in log
    assert "re-authenticated with OAUTHBEARER on SIGNED as User:svc-short" in log


def test_kafka_python_with_a_token_provider(oauth_broker: OAuthBroker, keys: KeyServer) -> None:
    from kafka.net.sasl.oauth import AbstractTokenProvider

    token = signed_token(keys.keys["k1"], "k1", "svc-python")

    class Provider(AbstractTokenProvider):
        def token(self) -> str:
            return token

    settings: dict[str, Any] = {
        "bootstrap_servers": f"localhost:{oauth_broker.signed_port}",
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": Provider(),
    }
    values = kafka_python_round_trip(settings, 3, "oauth-kp")
    assert values == [f"kp{i}".encode() for i in range(3)]


def test_refused_tokens_fail_cleanly_and_are_logged(
    oauth_broker: OAuthBroker, keys: KeyServer
) -> None:
    expired = signed_token(keys.keys["k1"], "k1", "alice", lifetime_s=-120)
    error = authentication_error(signed_conf(oauth_broker.signed_port, expired))
    assert error == 'SASL authentication error: {"status":"invalid_token"}'
    stranger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = signed_token(stranger, "k1", "admin")
    assert "invalid_token" in authentication_error(signed_conf(oauth_broker.signed_port, forged))
    log = oauth_broker.process.read_log()
    assert re.search(
        r"INFO .*failed authentication with OAUTHBEARER on listener SIGNED from 127\.0\.0\.1:\d+ "
        r"\(token refused: expired",
        log,
    ), log[-3000:]
    assert "token refused: the signature does not verify" in log
    assert expired not in log and forged not in log


def test_a_new_key_is_fetched_when_a_token_names_its_kid(
    oauth_broker: OAuthBroker, keys: KeyServer
) -> None:
    fetches = keys.fetches
    token = signed_token(keys.add_key("k2"), "k2", "svc-rotated")
    conf = signed_conf(oauth_broker.signed_port, token)
    # The first attempt names a kid the broker lacks: refused, and the broker fetches
    # the key set again; librdkafka reconnects and is let in.
    produce(conf, 2)
    assert keys.fetches > fetches


def test_acls_see_the_tokens_principal(oauth_broker: OAuthBroker) -> None:
    topic = unique_topic("oauth-acl")
    admin = admin_client(oauth_broker.process.bootstrap)
    binding = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.ALL,
        AclPermissionType.ALLOW,
    )
    admin.create_acls([binding])[binding].result(timeout=CLIENT_TIMEOUT_S)
    alice = Producer(unsecured_conf(oauth_broker.unsecured_port, "alice", acks="all"))
    alice.produce(topic, b"from alice", partition=0)
    assert alice.flush(CLIENT_TIMEOUT_S) == 0
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(error)

    bob = Producer(unsecured_conf(oauth_broker.unsecured_port, "bob", acks="all"))
    bob.produce(topic, b"from bob", partition=0, on_delivery=delivered)
    bob.flush(CLIENT_TIMEOUT_S)
    assert [error.code() for error in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_a_broker_whose_jwks_cannot_be_read_does_not_start(tmp_path: Path) -> None:
    port = free_port()
    missing = tmp_path / "missing-jwks.json"
    result = serve_refused(
        tmp_path / "data",
        f"listeners=PLAINTEXT://127.0.0.1:{free_port()},SASL_PLAINTEXT://127.0.0.1:{port}",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        f"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={MODULE};",
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=" + HANDLER,
        f"sasl.oauthbearer.jwks.endpoint.url={missing.as_uri()}",
    )
    assert result.returncode == 1
    assert "listener SASL_PLAINTEXT cannot read its OAUTHBEARER key set from file://" in (
        result.stderr
    )
