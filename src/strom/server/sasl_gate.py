"""SASL on a connection: the listener's mechanisms, and one connection's way through
SaslHandshake and SaslAuthenticate (or, after a v0 handshake, raw SASL tokens) before
any other request is served.

The decisions are strom.security.sasl's `SaslServer`; this module turns requests into
its calls and its results into response bodies, and says when the connection must
close: after a refused handshake, and after a failed authentication, whose answer goes
out only after `connection.failed.authentication.delay.ms` (Kafka's delay, which slows
down password guessing without holding a thread). Until the client has authenticated,
any other request than ApiVersions, SaslHandshake and SaslAuthenticate closes the
connection, as Kafka does. Once authenticated, a SaslHandshake may begin a
re-authentication (KIP-368), and a session past its lifetime closes the connection at
its next request (strom.security.sasl says when); both are judged by the wall clock,
which a token's expiry is written in.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from strom.config.errors import ConfigError
from strom.config.listener_settings import listener_prefix
from strom.config.security_keys import OAuthBearerSettings, SaslSettings
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.sasl import SaslAuthenticateResponse, SaslHandshakeResponse
from strom.security.jaas import JaasEntry, parse_jaas_config, plain_users
from strom.security.jwt_validation import (
    SignedJwtSettings,
    TokenRefused,
    UnsecuredJwtSettings,
    ValidToken,
    validate_signed,
    validate_unsecured,
)
from strom.security.oauthbearer import OAuthBearerServer, TokenValidator
from strom.security.sasl import (
    OAUTHBEARER,
    PLAIN,
    HandshakeResult,
    Mechanism,
    PlainServer,
    SaslServer,
)
from strom.security.scram import ScramCredential, ScramMechanism, ScramServer
from strom.server.clock import now_ms
from strom.server.jwks_source import JwksSource, jwks_tls_context

__all__ = ["ListenerSasl", "SaslGate", "SaslStep"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SaslStep:
    """What the connection sends for one SASL request and what it does next."""

    body: Any | None
    """The response body; None after a v0 raw token, whose answer is `raw`."""
    raw: bytes | None = None
    close: bool = False
    delay_s: float = 0.0
    """Wait this long before sending the answer (a failed authentication)."""


ScramCredentials = Callable[[str, ScramMechanism], ScramCredential | None]
"""A SCRAM user's credential for a mechanism, from the current metadata image."""


class ListenerSasl:
    """The SASL mechanisms of one listener, built from its settings at start: a JAAS
    config that does not parse is a ConfigError naming its key. SCRAM users are looked
    up in `scram_credentials` at each authentication, so a user added or removed with
    AlterUserScramCredentials counts from the next one on. OAUTHBEARER tokens are checked
    at `clock_ms()`; with Kafka's JWKS validator, against `jwks` (None otherwise), whose
    keys the broker reads before it serves (JwksSource.load) and keeps fresh."""

    def __init__(
        self,
        listener: str,
        settings: SaslSettings,
        scram_credentials: ScramCredentials,
        *,
        node_id: int = 0,
        clock_ms: Callable[[], int] = now_ms,
    ) -> None:
        self.listener = listener
        self.jwks: JwksSource | None = None
        self.delay_s = settings.failed_authentication_delay_ms / 1000
        self._max_reauth_ms = dict(settings.max_reauth_ms)
        prefix = listener_prefix(listener)
        jaas = dict(settings.jaas_configs)
        self._factories: dict[str, Callable[[], Mechanism]] = {}
        for mechanism in settings.mechanisms:
            key = f"{prefix}{mechanism.lower()}.sasl.jaas.config"
            entries = parse_jaas_config(jaas[mechanism], key=key) if mechanism in jaas else ()
            if len(entries) > 1 or (mechanism in (PLAIN, OAUTHBEARER) and not entries):
                raise ConfigError(
                    f"'{key}' must hold exactly one login module, as in Kafka; it holds "
                    f"{len(entries)}",
                    key=key,
                )
            scram = ScramMechanism.from_name(mechanism)
            if mechanism == PLAIN:
                users = dict(plain_users(entries, key=key))
                self._factories[mechanism] = lambda users=users: PlainServer(users)  # type: ignore[misc]
            elif scram is not None:
                self._factories[mechanism] = partial(_scram_server, scram, scram_credentials)
            elif mechanism == OAUTHBEARER and settings.oauthbearer is not None:
                validator = self._token_validator(
                    node_id, settings.oauthbearer, entries, key, clock_ms
                )
                self._factories[mechanism] = partial(OAuthBearerServer, validator)
            else:
                raise ConfigError(f"{mechanism} is not served yet", key=key)

    def _token_validator(
        self,
        node_id: int,
        settings: OAuthBearerSettings,
        entries: tuple[JaasEntry, ...],
        key: str,
        clock_ms: Callable[[], int],
    ) -> TokenValidator:
        if settings.jwks_endpoint_url is None:
            try:
                unsecured = UnsecuredJwtSettings.from_options(entries[0].options)
            except ValueError as exc:
                raise ConfigError(f"'{key}': {exc}", key=key) from None
            return lambda token: validate_unsecured(token, unsecured, clock_ms())
        url = settings.jwks_endpoint_url
        https = url.lower().startswith("https:")
        jwks = self.jwks = JwksSource(
            node_id,
            self.listener,
            url,
            refresh_ms=settings.jwks_refresh_ms,
            retry_backoff_ms=settings.jwks_retry_backoff_ms,
            retry_backoff_max_ms=settings.jwks_retry_backoff_max_ms,
            tls=jwks_tls_context(entries[0].options, key) if https else None,
        )
        signed = SignedJwtSettings(
            frozenset(settings.expected_audiences),
            settings.expected_issuer,
            settings.clock_skew_s,
            settings.sub_claim_name,
            settings.scope_claim_name,
        )

        def validate(token: str) -> ValidToken:
            try:
                return validate_signed(token, jwks.keys, signed, clock_ms())
            except TokenRefused as refused:
                if refused.unknown_kid is not None:
                    jwks.missing_kid(refused.unknown_kid)
                raise

        return validate

    def gate(self, node_id: int, peer: str) -> SaslGate:
        server = SaslServer(self._factories, self._max_reauth_ms)
        return SaslGate(server, self.delay_s, node_id, peer, self.listener)


_FAKE_SALT_KEY = secrets.token_bytes(32)
"""What an unknown SCRAM user's salt is derived from, so that asking twice for one shows
the same salt. It is this process's: two brokers (or one after a restart) show an unknown
user different salts, where a real user's is the same everywhere."""


def _scram_server(mechanism: ScramMechanism, credentials: ScramCredentials) -> ScramServer:
    return ScramServer(
        mechanism,
        lambda name: credentials(name, mechanism),
        secrets.token_urlsafe(_SERVER_NONCE_BYTES),
        _FAKE_SALT_KEY,
    )


_SERVER_NONCE_BYTES = 24


class SaslGate:
    """One connection's SASL authentication (see the module docstring)."""

    def __init__(
        self, server: SaslServer, delay_s: float, node_id: int, peer: str, listener: str
    ) -> None:
        self._server = server
        self._delay_s = delay_s
        self._node_id = node_id
        self._peer = peer
        self._listener = listener
        self._mechanism = ""
        self.raw_tokens = False
        """After a v0 SaslHandshake: the next frame is a raw SASL token, not a request."""

    @property
    def principal(self) -> str | None:
        """`User:<name>` once authenticated."""
        return self._server.principal

    def refuses(self, api_key: int) -> bool:
        return not self._server.allows(api_key)

    def expired(self) -> bool:
        """Whether the authenticated session is past its lifetime (KIP-368): the
        connection closes instead of answering (logged at INFO)."""
        if not self._server.expired(now_ms()):
            return False
        log.info(
            "[node %d] closing connection from %s on %s: the session of %s has expired",
            self._node_id,
            self._peer,
            self._listener,
            self.principal,
        )
        return True

    def reauthenticate(self, request: Request) -> SaslStep | None:
        """A SaslHandshake once authenticated: the start of a re-authentication, or None
        when this session cannot re-authenticate now (the handshake is then answered as
        any request is)."""
        principal = self.principal
        result = self._server.reauthenticate(str(request.body.mechanism), now_ms())
        if result is None:
            return None
        log.debug("[node %d] %s re-authenticating on %s", self._node_id, principal, self._listener)
        return self._handshake_step(request, result)

    def handshake(self, request: Request) -> SaslStep:
        return self._handshake_step(request, self._server.handshake(str(request.body.mechanism)))

    def _handshake_step(self, request: Request, result: HandshakeResult) -> SaslStep:
        mechanism = str(request.body.mechanism)
        if result.error_code == ErrorCode.none:
            self._mechanism = mechanism
            self.raw_tokens = request.api_version == 0
        else:
            log.info(
                "[node %d] SASL handshake from %s on %s refused: %s for mechanism %r",
                self._node_id,
                self._peer,
                self._listener,
                result.error_code.name,
                mechanism[:64],
            )
        body: SaslHandshakeResponse = {
            "error_code": result.error_code,
            "mechanisms": list(result.mechanisms),
        }
        return SaslStep(
            build_response(ApiKey.SASL_HANDSHAKE, request.api_version, body), close=result.close
        )

    def authenticate(self, request: Request) -> SaslStep:
        again = self._server.reauthenticating
        result = self._server.authenticate(bytes(request.body.auth_bytes), now_ms())
        self._note(result.error_code, result.complete, again, result.log_reason)
        body: SaslAuthenticateResponse = {
            "error_code": result.error_code,
            "error_message": result.error_message,
            "auth_bytes": result.auth_bytes,
            "session_lifetime": result.session_lifetime_ms,
        }
        failed = result.error_code == ErrorCode.sasl_authentication_failed
        return SaslStep(
            build_response(ApiKey.SASL_AUTHENTICATE, request.api_version, body),
            close=result.close,
            delay_s=self._delay_s if failed else 0.0,
        )

    def raw_token(self, token: bytes) -> SaslStep:
        """A v0 client's token: answered with a raw token; a failure closes the
        connection without an answer (the v0 framing has no room for an error)."""
        again = self._server.reauthenticating
        result = self._server.authenticate(token, now_ms())
        self._note(result.error_code, result.complete, again, result.log_reason)
        if result.complete:
            self.raw_tokens = False
        if result.error_code != ErrorCode.none:
            return SaslStep(None, close=True, delay_s=self._delay_s)
        return SaslStep(None, raw=result.auth_bytes)

    def _note(
        self, error: ErrorCode, complete: bool, again: bool, reason: str | None = None
    ) -> None:
        """Log an authentication's end; `again`: it was a re-authentication."""
        if complete:
            log.debug(
                "[node %d] %s %sauthenticated with %s on %s as %s",
                self._node_id,
                self._peer,
                "re-" if again else "",
                self._mechanism,
                self._listener,
                self.principal,
            )
        elif error != ErrorCode.none:
            log.info(
                "[node %d] failed %s with %s on listener %s from %s%s",
                self._node_id,
                "re-authentication" if again else "authentication",
                self._mechanism or "no mechanism",
                self._listener,
                self._peer,
                f" ({reason})" if reason else "",
            )
