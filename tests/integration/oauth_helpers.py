"""An identity provider and an OAUTHBEARER broker for the integration tests, shared by
the listener tests (test_oauthbearer_listeners.py), strom's own client
(test_oauthbearer_client.py) and the Spark connector.

The module-scoped fixtures `tls`, `keys` (the key server, with the key `k1`) and
`oauth_broker` are imported by the test modules that use them.

`KeyServer` serves a JWKS over https; `TokenServer` is a client credentials token
endpoint over https that checks each client's id and secret and issues RS256 tokens
signed with the key server's `k1`; `running_oauth_broker` starts a broker with two
SASL_PLAINTEXT listeners, UNSECURED (unsecured JWTs) and SIGNED (tokens checked against
the key server), ACLs on with everything allowed on what no ACL names, logging at DEBUG
(each authentication is a DEBUG line).
"""

from __future__ import annotations

import base64
import json
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
import pytest
from broker import BrokerProcess, free_port
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tls_material import TlsMaterial, make_tls_material

HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
ISSUER = "https://idp.strom.test"
AUDIENCE = "strom"


def signed_token(key: rsa.RSAPrivateKey, kid: str, sub: str, lifetime_s: int = 600) -> str:
    now = int(time.time())
    claims = {"sub": sub, "iat": now, "exp": now + lifetime_s, "iss": ISSUER, "aud": AUDIENCE}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


class _HttpsServer:
    """A threading HTTP server on loopback behind the test CA's server certificate."""

    def __init__(self, tls: TlsMaterial, handler: type[BaseHTTPRequestHandler], path: str) -> None:
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.server.keystore_pem_path)
        self.http.socket = context.wrap_socket(self.http.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.http.server_address[1]}{path}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def _reply(handler: BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class KeyServer(_HttpsServer):
    """A JWKS endpoint over https: serves the public keys in `keys`, counting the
    fetches."""

    def __init__(self, tls: TlsMaterial) -> None:
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.fetches = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.fetches += 1
                _reply(self, 200, {"keys": server.public_keys()})

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(tls, Handler, "/jwks")

    def public_keys(self) -> list[dict[str, Any]]:
        return [
            {**RSAAlgorithm.to_jwk(key.public_key(), as_dict=True), "kid": kid, "use": "sig"}
            for kid, key in list(self.keys.items())
        ]

    def add_key(self, kid: str) -> rsa.RSAPrivateKey:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.keys[kid] = key
        return key


@dataclass(frozen=True, slots=True)
class TokenGrant:
    """One request the token endpoint answered: who asked, for what, and the answer."""

    client_id: str
    form: dict[str, list[str]]
    status: int


class TokenServer(_HttpsServer):
    """A client credentials token endpoint (RFC 6749, 4.4) over https. A client in
    `clients` (id -> secret) that asks with grant_type=client_credentials and HTTP Basic
    credentials gets an RS256 JWT for `sub` = its id, signed with the key server's `k1`;
    any other request gets RFC 6749's JSON error. Every request is in `grants`."""

    def __init__(self, tls: TlsMaterial, keys: KeyServer, clients: dict[str, str]) -> None:
        self.clients = clients
        self.grants: list[TokenGrant] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(size).decode())
                client_id, secret = _basic(self.headers.get("Authorization", ""))
                if server.clients.get(client_id) != secret or not secret:
                    status, body = (
                        401,
                        {
                            "error": "invalid_client",
                            "error_description": "unknown client or wrong secret",
                        },
                    )
                elif form.get("grant_type") != ["client_credentials"]:
                    status, body = 400, {"error": "unsupported_grant_type"}
                else:
                    token = signed_token(keys.keys["k1"], "k1", client_id)
                    status, body = (
                        200,
                        {
                            "access_token": token,
                            "token_type": "Bearer",
                            "expires_in": 600,
                        },
                    )
                server.grants.append(TokenGrant(client_id, form, status))
                _reply(self, status, body)

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(tls, Handler, "/realms/strom/token")


def _basic(header: str) -> tuple[str, str]:
    scheme, _, encoded = header.partition(" ")
    if scheme != "Basic":
        return "", ""
    user, _, password = base64.b64decode(encoded).decode().partition(":")
    return user, password


class OAuthBroker:
    def __init__(
        self, process: BrokerProcess, unsecured_port: int, signed_port: int, tls_port: int
    ) -> None:
        self.process = process
        self.unsecured_port = unsecured_port
        self.signed_port = signed_port
        self.tls_port = tls_port


@contextmanager
def running_oauth_broker(
    data_dir: Path, keys: KeyServer, tls: TlsMaterial
) -> Iterator[OAuthBroker]:
    """The OAUTHBEARER broker, killed on the way out."""
    unsecured_port, signed_port, tls_port = free_port(), free_port(), free_port()
    signed = "listener.name.signed."
    settings = [
        "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "UNSECURED:SASL_PLAINTEXT,SIGNED:SASL_PLAINTEXT,OVERTLS:SASL_SSL",
        "sasl.enabled.mechanisms=OAUTHBEARER",
        "connection.failed.authentication.delay.ms=20",
        f"listener.name.unsecured.oauthbearer.sasl.jaas.config={MODULE};",
        f"listener.name.overtls.oauthbearer.sasl.jaas.config={MODULE};",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={tls.server.keystore_pem_path}",
        f"{signed}oauthbearer.sasl.jaas.config={MODULE} ssl.truststore.type=PEM "
        f'ssl.truststore.location="{tls.ca_cert_path}";',
        f"{signed}oauthbearer.sasl.server.callback.handler.class={HANDLER}",
        f"{signed}oauthbearer.sasl.oauthbearer.jwks.endpoint.url={keys.url}",
        f"{signed}sasl.oauthbearer.expected.audience=kafka,{AUDIENCE}",
        f"sasl.oauthbearer.expected.issuer={ISSUER}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found=true",
    ]
    process = BrokerProcess(
        data_dir,
        more_listeners=[
            f"UNSECURED://localhost:{unsecured_port}",
            f"SIGNED://localhost:{signed_port}",
            f"OVERTLS://localhost:{tls_port}",
        ],
        extra=[
            "--log-level",
            "debug",  # authentications and re-authentications are logged at DEBUG
            *(part for setting in settings for part in ("--set", setting)),
        ],
    )
    process.start()
    try:
        yield OAuthBroker(process, unsecured_port, signed_port, tls_port)
    finally:
        process.kill()


@contextmanager
def running_token_server(
    tls: TlsMaterial, keys: KeyServer, clients: dict[str, str]
) -> Iterator[TokenServer]:
    """A token endpoint for `clients` (id: secret), closed on the way out."""
    server = TokenServer(tls, keys, clients)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    """A private CA and a certificate for localhost, for the https endpoints."""
    return make_tls_material(tmp_path_factory.mktemp("oauth-tls"))


@pytest.fixture(scope="module")
def keys(tls: TlsMaterial) -> Iterator[KeyServer]:
    """The JWKS endpoint, holding the key `k1`."""
    server = KeyServer(tls)
    server.add_key("k1")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def oauth_broker(
    tmp_path_factory: pytest.TempPathFactory, keys: KeyServer, tls: TlsMaterial
) -> Iterator[OAuthBroker]:
    """The OAUTHBEARER broker of a test module."""
    with running_oauth_broker(
        tmp_path_factory.mktemp("oauth-broker") / "data", keys, tls
    ) as broker:
        yield broker
