"""A listener's JWKS read from a `file:` URL at start, wired into its OAUTHBEARER
mechanism: a signed token passes, one with an unknown kid is refused without asking the
file again (Kafka reads a JWKS file once), and a key set that cannot be read is a
JwksLoadError naming the listener and the URL."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from strom.config.errors import ConfigError
from strom.config.security_keys import OAuthBearerSettings, SaslSettings
from strom.security.oauthbearer import client_initial_response
from strom.security.sasl import OAUTHBEARER
from strom.server.jwks_source import JwksLoadError, jwks_tls_context
from strom.server.sasl_gate import ListenerSasl

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def listener(url: str) -> ListenerSasl:
    settings = SaslSettings(
        (OAUTHBEARER,),
        ((OAUTHBEARER, MODULE),),
        0,
        OAuthBearerSettings(jwks_endpoint_url=url),
    )
    return ListenerSasl("SIGNED", settings, lambda name, mechanism: None)


def token(kid: str) -> str:
    now = int(time.time())
    return jwt.encode(
        {"sub": "svc", "iat": now, "exp": now + 60}, KEY, algorithm="RS256", headers={"kid": kid}
    )


def test_a_jwks_file_is_read_at_start_and_checks_tokens(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    jwk = {**RSAAlgorithm.to_jwk(KEY.public_key(), as_dict=True), "kid": "k1"}
    path.write_text(json.dumps({"keys": [jwk]}))
    sasl = listener(path.as_uri())
    assert sasl.jwks is not None and not sasl.jwks.refreshing
    asyncio.run(sasl.jwks.load())
    assert sasl.jwks.keys.kids == {"k1"}

    gate = sasl.gate(1, "127.0.0.1:1")._server
    gate.handshake(OAUTHBEARER)
    assert gate.authenticate(
        client_initial_response(token("k1")), now_ms=int(time.time() * 1000)
    ).complete
    assert gate.principal == "User:svc"

    gate = sasl.gate(1, "127.0.0.1:2")._server
    gate.handshake(OAUTHBEARER)
    refused = gate.authenticate(
        client_initial_response(token("k2")), now_ms=int(time.time() * 1000)
    )
    assert refused.auth_bytes == b'{"status":"invalid_token"}'
    sasl.jwks.missing_kid("k2")  # a file is not read again


@pytest.mark.parametrize("content", [None, "not json", '{"keys": 1}'])
def test_a_key_set_that_cannot_be_used_stops_the_start(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "jwks.json"
    if content is not None:
        path.write_text(content)
    sasl = listener(path.as_uri() + "?secret=1")
    assert sasl.jwks is not None
    with pytest.raises(JwksLoadError) as info:
        asyncio.run(sasl.jwks.load())
    assert str(info.value).startswith(
        f"listener SIGNED cannot read its OAUTHBEARER key set from {path.as_uri()}: "
    )
    assert "secret" not in str(info.value)


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"ssl.truststore.location": "/nonexistent/ca.pem"}, "JKS"),
        (
            {"ssl.truststore.type": "PEM", "ssl.truststore.location": "/nonexistent/ca.pem"},
            "option ssl.truststore.location",
        ),
        ({"ssl.endpoint.identification.algorithm": "dns"}, "must be https or empty"),
    ],
)
def test_an_https_jwks_tls_option_that_cannot_be_used_names_the_jaas_key(
    options: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError) as info:
        jwks_tls_context(options, "listener.name.signed.oauthbearer.sasl.jaas.config")
    assert "listener.name.signed.oauthbearer.sasl.jaas.config" in str(info.value)
    assert fragment in str(info.value)


def test_an_https_jwks_without_tls_options_trusts_the_systems_cas() -> None:
    context = jwks_tls_context({}, "k")
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    assert not jwks_tls_context({"ssl.endpoint.identification.algorithm": ""}, "k").check_hostname
