"""SASL on a broker's listener: the server side of one connection's authentication.

Pure: no I/O. The shell reads a SaslHandshake request and calls `SaslServer.handshake`,
then hands each SaslAuthenticate request's `auth_bytes` (or, after a v0 handshake, each
raw size-prefixed SASL token) to `SaslServer.authenticate`, and sends back what they
return. As in Kafka (its `SaslServerAuthenticator`), a refused step answers with an error
code and closes the connection: the client must reconnect to try again.

A mechanism's server side is a `Mechanism`: one object per authentication, stepped with
the client's tokens until it completes or refuses. PLAIN (RFC 4616) is here; SCRAM
(strom.security.scram) and OAUTHBEARER (strom.security.oauthbearer) use the same
interface with several steps. Re-authentication (KIP-368) is not supported: once
authenticated, a connection stays authenticated, SaslHandshake and SaslAuthenticate are
refused, and the session lifetime strom reports is 0 (no expiry). A mechanism whose
credential expires (OAUTHBEARER's token) says when in its completed step, kept for
re-authentication.

Written by hand: Python's SASL libraries are clients, or bind to Cyrus SASL in C; a
broker needs Kafka's exact messages and rules, which are small.
"""

from __future__ import annotations

import hmac
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from kio.schema.errors import ErrorCode

from strom.security.principal import user_principal

__all__ = [
    "GSSAPI",
    "MAX_PLAIN_MESSAGE_BYTES",
    "MECHANISM_NAMES",
    "OAUTHBEARER",
    "PLAIN",
    "SCRAM_SHA_256",
    "SCRAM_SHA_512",
    "AuthenticateResult",
    "HandshakeResult",
    "Mechanism",
    "MechanismStep",
    "PlainServer",
    "SaslAuthenticationFailed",
    "SaslServer",
    "SaslState",
]

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
OAUTHBEARER = "OAUTHBEARER"
GSSAPI = "GSSAPI"
MECHANISM_NAMES = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512, OAUTHBEARER, GSSAPI)
"""Kafka's SASL mechanisms, spelled as clients send them in SaslHandshake."""

MAX_PLAIN_MESSAGE_BYTES = 64 * 1024
"""A longer PLAIN message is refused as malformed before it is decoded. RFC 4616 asks a
server to accept 255 bytes for each of its three parts."""

# The Kafka API keys (strom.protocol.apis.ApiKey) authentication is made of.
_SASL_HANDSHAKE = 17
_API_VERSIONS = 18
_SASL_AUTHENTICATE = 36
_DURING_AUTHENTICATION = frozenset({_SASL_HANDSHAKE, _API_VERSIONS, _SASL_AUTHENTICATE})
_SASL_REQUESTS = frozenset({_SASL_HANDSHAKE, _SASL_AUTHENTICATE})


class SaslAuthenticationFailed(ValueError):
    """A mechanism refused the client. The message is safe to send to the client: it
    never tells whether a user exists. `log_reason`, when given, says more for the
    broker's log (never a secret)."""

    def __init__(self, message: str, *, log_reason: str | None = None) -> None:
        super().__init__(message)
        self.log_reason = log_reason


@dataclass(frozen=True, slots=True)
class MechanismStep:
    """What a mechanism answers to one client token: the challenge to send back, and
    once `complete`, the authenticated name (`alice` for User:alice) and, for a credential
    that expires, when (ms since the epoch)."""

    challenge: bytes
    complete: bool
    principal_name: str | None = None
    expires_at_ms: int | None = None

    def __post_init__(self) -> None:
        if self.complete != (self.principal_name is not None):
            raise ValueError("a complete step names its principal, an incomplete one none")


class Mechanism(ABC):
    """The server side of one mechanism for ONE authentication: a fresh instance for
    each connection's handshake."""

    @abstractmethod
    def step(self, token: bytes) -> MechanismStep:
        """The answer to the client's next token; SaslAuthenticationFailed to refuse."""


# --- PLAIN ----------------------------------------------------------------------------

_INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"
_OTHER_AUTHZID = (
    "Authentication failed: Client requested an authorization id that is different from username"
)
_DUMMY_PASSWORD = bytes(32)
"""What a password for an unknown user is compared with, so the time taken does not
tell unknown users from wrong passwords."""


def _encoded(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


class PlainServer(Mechanism):
    """PLAIN (RFC 4616): one message `[authzid] NUL authcid NUL passwd`, checked against
    `users` (name -> password, as the JAAS config's `user_<name>` options give them).

    Kafka's rules: exactly three parts; the name and the password are not empty; an
    authorization id, when given, is the name. The principal is the name.
    """

    def __init__(self, users: Mapping[str, str]) -> None:
        self._passwords = {name: _encoded(password) for name, password in users.items()}
        self._used = False

    def step(self, token: bytes) -> MechanismStep:
        if self._used:
            raise SaslAuthenticationFailed(
                "Authentication failed: the SASL/PLAIN exchange takes one message"
            )
        self._used = True
        authzid, username, password = _plain_parts(token)
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._passwords.get(username)
        matches = hmac.compare_digest(
            _encoded(password), _DUMMY_PASSWORD if expected is None else expected
        )
        if expected is None or not matches:
            raise SaslAuthenticationFailed(_INVALID_CREDENTIALS)
        # As in Kafka, checked only once the password is right: it tells nothing otherwise.
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(_OTHER_AUTHZID)
        return MechanismStep(b"", complete=True, principal_name=username)


def _plain_parts(token: bytes) -> tuple[str, str, str]:
    """The authzid, name and password of a PLAIN message."""

    def malformed(problem: str) -> SaslAuthenticationFailed:
        return SaslAuthenticationFailed(
            f"Authentication failed: malformed SASL/PLAIN message: {problem}"
        )

    if len(token) > MAX_PLAIN_MESSAGE_BYTES:
        raise malformed(f"longer than {MAX_PLAIN_MESSAGE_BYTES} bytes")
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("not valid UTF-8") from None
    parts = text.split("\0", 3)
    if len(parts) != 3:
        got = "more than 3" if len(parts) > 3 else str(len(parts))
        raise malformed(f"expected 3 parts separated by NUL, got {got}")
    return parts[0], parts[1], parts[2]


# --- one connection -------------------------------------------------------------------


class SaslState(Enum):
    """Where a connection's authentication stands."""

    AWAITING_HANDSHAKE = "awaiting handshake"
    AWAITING_AUTHENTICATE = "awaiting authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class HandshakeResult:
    """The SaslHandshake response, and whether to close the connection once it is sent."""

    error_code: ErrorCode
    mechanisms: tuple[str, ...]
    close: bool


@dataclass(frozen=True, slots=True)
class AuthenticateResult:
    """The SaslAuthenticate response (after a v0 handshake: `auth_bytes` is the raw token
    to send, and a refusal just closes), and whether to close once it is sent."""

    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes
    complete: bool
    close: bool
    log_reason: str | None = None
    """Why the mechanism refused, for the broker's log only."""


class SaslServer:
    """One connection's SASL authentication.

    Legal transitions:
        AWAITING_HANDSHAKE    --handshake(an enabled mechanism)-->             AWAITING_AUTHENTICATE
        AWAITING_AUTHENTICATE --authenticate(token), mechanism continues-->   AWAITING_AUTHENTICATE
        AWAITING_AUTHENTICATE --authenticate(token), mechanism completes-->   COMPLETE
        any state             --any refusal (disabled mechanism, bad credentials,
                                  a call out of order)-->                     FAILED
    FAILED is terminal: every call is refused again. Every result that says `close`
    leaves the state FAILED, and only those do.
    """

    def __init__(self, mechanisms: Mapping[str, Callable[[], Mechanism]]) -> None:
        """`mechanisms`: the enabled ones, in the listener's order, name -> a factory of
        a fresh mechanism server."""
        self._factories = dict(mechanisms)
        self._enabled = tuple(self._factories)
        self._state = SaslState.AWAITING_HANDSHAKE
        self._mechanism: str | None = None
        self._server: Mechanism | None = None
        self._principal_name: str | None = None
        self._expires_at_ms: int | None = None

    @property
    def state(self) -> SaslState:
        return self._state

    @property
    def mechanisms(self) -> tuple[str, ...]:
        """The enabled mechanisms, in order."""
        return self._enabled

    @property
    def mechanism(self) -> str | None:
        """The mechanism the client chose, once its handshake was accepted."""
        return self._mechanism

    @property
    def principal(self) -> str | None:
        """`User:<name>` once COMPLETE; None before, and after a failure."""
        if self._state is not SaslState.COMPLETE or self._principal_name is None:
            return None
        return user_principal(self._principal_name)

    @property
    def credential_expires_at_ms(self) -> int | None:
        """When the credential the client authenticated with expires (ms since the
        epoch), for a mechanism that says so (OAUTHBEARER); None otherwise."""
        return self._expires_at_ms if self._state is SaslState.COMPLETE else None

    def allows(self, api_key: int) -> bool:
        """Whether a request of `api_key` may arrive now; the shell closes the connection
        on one that may not (as Kafka does). While authenticating: ApiVersions,
        SaslHandshake and SaslAuthenticate (out of order, those two are answered with
        ILLEGAL_SASL_STATE); once COMPLETE: all but those two; once FAILED: none."""
        if self._state is SaslState.COMPLETE:
            return api_key not in _SASL_REQUESTS
        if self._state is SaslState.FAILED:
            return False
        return api_key in _DURING_AUTHENTICATION

    def handshake(self, mechanism: str) -> HandshakeResult:
        """The answer to a SaslHandshake asking for `mechanism`."""
        if self._state is not SaslState.AWAITING_HANDSHAKE:
            return self._refuse_handshake(ErrorCode.illegal_sasl_state)
        factory = self._factories.get(mechanism)
        if factory is None:
            return self._refuse_handshake(ErrorCode.unsupported_sasl_mechanism)
        try:
            self._server = factory()
        except BaseException:
            self._fail()
            raise
        self._mechanism = mechanism
        self._state = SaslState.AWAITING_AUTHENTICATE
        return HandshakeResult(ErrorCode.none, self._enabled, close=False)

    def authenticate(self, token: bytes) -> AuthenticateResult:
        """The answer to a client token (a SaslAuthenticate request's `auth_bytes`)."""
        if self._state is not SaslState.AWAITING_AUTHENTICATE or self._server is None:
            return self._refuse(ErrorCode.illegal_sasl_state, self._out_of_order())
        try:
            step = self._server.step(token)
        except SaslAuthenticationFailed as exc:
            return self._refuse(ErrorCode.sasl_authentication_failed, str(exc), exc.log_reason)
        except BaseException:
            self._fail()  # a bug in the mechanism: the shell logs it and closes
            raise
        if step.complete:
            self._state = SaslState.COMPLETE
            self._principal_name = step.principal_name
            self._expires_at_ms = step.expires_at_ms
            self._server = None
        return AuthenticateResult(
            ErrorCode.none, None, step.challenge, complete=step.complete, close=False
        )

    def _out_of_order(self) -> str:
        if self._state is SaslState.AWAITING_HANDSHAKE:
            return "Unexpected SaslAuthenticate request before a SaslHandshake"
        if self._state is SaslState.COMPLETE:
            return "Already authenticated: re-authentication (KIP-368) is not supported"
        return "Authentication has already failed on this connection"

    def _refuse_handshake(self, error_code: ErrorCode) -> HandshakeResult:
        self._fail()
        return HandshakeResult(error_code, self._enabled, close=True)

    def _refuse(
        self, error_code: ErrorCode, message: str, log_reason: str | None = None
    ) -> AuthenticateResult:
        self._fail()
        return AuthenticateResult(
            error_code, message, b"", complete=False, close=True, log_reason=log_reason
        )

    def _fail(self) -> None:
        self._state = SaslState.FAILED
        self._server = None
        self._principal_name = None
        self._expires_at_ms = None
