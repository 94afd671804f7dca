"""TLS and SASL for strom's own client: what a connection does after the TCP connect and
before its first request.

TLS wraps the dialed stream (`StreamWriter.start_tls`, so a test dialer still decides
where the connection goes). SASL is Kafka's: SaslHandshake v1 naming the mechanism, then
SaslAuthenticate v2 carrying the mechanism's tokens, PLAIN (RFC 4616) in one message,
SCRAM-SHA-256/512 (RFC 5802, strom.security.scram's client) in two, the server's final
signature checked, OAUTHBEARER (RFC 7628) in one: the initial response with a token from
the login's `BearerTokenSource` (strom.client.oauth_login) and its SASL extensions. A
broker that refuses the token answers with RFC 7628's JSON error; the client
acknowledges it with the byte 0x01, as the RFC says, and reports the JSON. A refusal
closes the connection and raises ClientAuthenticationError with the broker's message
(the caller names the peer).
"""

from __future__ import annotations

import contextlib
import secrets
import ssl
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from strom.client.errors import ClientConnectionError
from strom.security.sasl import OAUTHBEARER, SaslAuthenticationFailed
from strom.security.scram import ScramClient, ScramMechanism

if TYPE_CHECKING:
    from strom.client.connection import KafkaConnection
    from strom.client.oauth_tokens import BearerToken

__all__ = [
    "CLIENT_SASL_MECHANISMS",
    "BearerTokenSource",
    "ClientAuthenticationError",
    "ClientSecurity",
    "SaslLogin",
    "authenticate",
]

CLIENT_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)
"""The mechanisms strom's client can log in with."""

_SASL_HANDSHAKE = 17
_SASL_AUTHENTICATE = 36


class ClientAuthenticationError(ClientConnectionError):
    """The broker refused the TLS handshake or the SASL login; the connection is closed."""


class BearerTokenSource(Protocol):
    """Where an OAUTHBEARER login gets its token."""

    async def token(self, timeout_s: float) -> BearerToken:
        """A token to log in with now; ClientAuthenticationError if none can be had."""
        ...


@dataclass(frozen=True, slots=True)
class SaslLogin:
    mechanism: str
    """One of CLIENT_SASL_MECHANISMS."""
    username: str = ""
    password: str = field(default="", repr=False)
    tokens: BearerTokenSource | None = field(default=None, repr=False)
    """OAUTHBEARER's tokens (and only OAUTHBEARER's)."""

    def __post_init__(self) -> None:
        if self.mechanism not in CLIENT_SASL_MECHANISMS:
            raise ValueError(
                f"SASL mechanism {self.mechanism!r}: strom's client logs in with "
                f"{', '.join(CLIENT_SASL_MECHANISMS)}"
            )
        if (self.mechanism == OAUTHBEARER) != (self.tokens is not None):
            raise ValueError("a token source goes with SASL mechanism OAUTHBEARER, and only it")


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to secure a connection: TLS with `tls` (None: plaintext), then a SASL login
    (None: none). Kafka's security.protocol is which of the two are set."""

    tls: ssl.SSLContext | None = None
    sasl: SaslLogin | None = None

    @property
    def protocol(self) -> str:
        if self.sasl is None:
            return "SSL" if self.tls is not None else "PLAINTEXT"
        return "SASL_SSL" if self.tls is not None else "SASL_PLAINTEXT"


async def authenticate(connection: KafkaConnection, login: SaslLogin, timeout_s: float) -> None:
    """Log in on a new connection, or again on one whose session is due for renewal;
    ClientAuthenticationError (the connection closed) if the broker refuses. The
    connection learns the session's lifetime (`KafkaConnection.logged_in`)."""
    try:
        lifetime_ms = await _exchange(connection, login, timeout_s)
    except ClientAuthenticationError:
        connection.close()
        raise
    except SaslAuthenticationFailed as exc:
        connection.close()
        raise ClientAuthenticationError(f"SASL login failed: {exc}") from None
    connection.logged_in(login, lifetime_ms)


async def _exchange(connection: KafkaConnection, login: SaslLogin, timeout_s: float) -> int:
    """The login's messages; the session lifetime the broker gave, in ms (0: none)."""
    handshake = await connection.login_request(
        _SASL_HANDSHAKE, 1, {"mechanism": login.mechanism}, timeout_s=timeout_s
    )
    if handshake.error_code != ErrorCode.none:
        offered = ", ".join(handshake.mechanisms) or "none"
        raise ClientAuthenticationError(
            f"the broker refused SASL mechanism {login.mechanism} "
            f"({handshake.error_code.name.upper()}; it offers {offered})"
        )
    if login.tokens is not None:
        return await _bearer(connection, login.tokens, timeout_s)
    scram = ScramMechanism.from_name(login.mechanism)
    if scram is None:  # PLAIN
        token = f"\0{login.username}\0{login.password}".encode()
        return (await _step(connection, token, timeout_s)).lifetime_ms
    client = ScramClient(scram, login.username, login.password, secrets.token_urlsafe(24))
    server_first = await _step(connection, client.first_message(), timeout_s)
    server_final = await _step(connection, client.final_message(server_first.data), timeout_s)
    client.verify_server_final(server_final.data)
    return server_final.lifetime_ms


async def _bearer(connection: KafkaConnection, tokens: BearerTokenSource, timeout_s: float) -> int:
    # Imported here: it loads the broker's token checks (PyJWT, cryptography).
    from strom.security.oauthbearer import client_initial_response

    token = await tokens.token(timeout_s)
    try:
        message = client_initial_response(token.value, extensions=token.extensions)
    except ValueError as exc:  # the source checks extensions; this is a last guard
        raise ClientAuthenticationError(f"cannot send the OAUTHBEARER token: {exc}") from None
    challenge = await _step(connection, message, timeout_s)
    if not challenge.data:
        return challenge.lifetime_ms
    # RFC 7628's error: acknowledged with 0x01, after which the broker fails the exchange.
    error = challenge.data.decode("utf-8", "replace")
    with contextlib.suppress(ClientConnectionError):
        await _step(connection, b"\x01", timeout_s)
    raise ClientAuthenticationError(
        f"the broker refused the OAUTHBEARER token of {token.principal}: {error} (its log says why)"
    )


@dataclass(frozen=True, slots=True)
class _SaslAnswer:
    data: bytes
    lifetime_ms: int
    """The session lifetime the broker gives (KIP-368); 0: none, or not the last step."""


async def _step(connection: KafkaConnection, token: bytes, timeout_s: float) -> _SaslAnswer:
    answer = await connection.login_request(
        _SASL_AUTHENTICATE, 2, {"auth_bytes": token}, timeout_s=timeout_s
    )
    if answer.error_code != ErrorCode.none:
        message = answer.error_message or answer.error_code.name.upper()
        raise ClientAuthenticationError(f"SASL login refused: {message}")
    lifetime = answer.session_lifetime // timedelta(milliseconds=1)
    return _SaslAnswer(bytes(answer.auth_bytes), max(0, int(lifetime)))
