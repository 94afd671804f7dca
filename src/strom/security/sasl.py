"""SASL on a broker's listener: the server side of one connection's authentication.

Pure: no I/O. The shell reads a SaslHandshake request and calls `SaslServer.handshake`,
then hands each SaslAuthenticate request's `auth_bytes` (or, after a v0 handshake, each
raw size-prefixed SASL token) to `SaslServer.authenticate`, and sends back what they
return. As in Kafka (its `SaslServerAuthenticator`), a refused step answers with an error
code and closes the connection: the client must reconnect to try again.

A mechanism's server side is a `Mechanism`: one object per authentication, stepped with
the client's tokens until it completes or refuses. PLAIN (RFC 4616) is here; SCRAM
(strom.security.scram) and OAUTHBEARER (strom.security.oauthbearer) use the same
interface with several steps.

Re-authentication (KIP-368), as Kafka's SaslServerAuthenticator does it: a session
expires `connections.max.reauth.ms` after it was authenticated (per mechanism), or when
its credential does (a token's expiry), whichever comes first; with neither it never
expires. The lifetime goes to the client in SaslAuthenticate v1, and a client that
supports KIP-368 sends SaslHandshake and SaslAuthenticate again on the same connection,
with the same mechanism, before then; the new authentication must name the same
principal. Once the session has expired, every other request closes the connection (the
shell asks `expired`). A session that never expires cannot re-authenticate, nor can one
that began to less than a second ago: that SaslHandshake is not the gate's, and is
answered as Kafka answers it on an authenticated connection (ILLEGAL_SASL_STATE).

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
    "REAUTH_MIN_INTERVAL_MS",
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
    "session_lifetime_ms",
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
    """When a complete step's credential stops being valid (a token's expiry, wall-clock
    ms); None: it does not expire."""

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
    session_lifetime_ms: int = 0
    """Once complete: how long the session lasts (SaslAuthenticate v1); 0: for ever."""
    log_reason: str | None = None
    """Why the mechanism refused, for the broker's log only."""


REAUTH_MIN_INTERVAL_MS = 1000
"""A session re-authenticates at most once a second, as in Kafka."""


def session_lifetime_ms(
    max_reauth_ms: int, credential_expires_ms: int | None, now_ms: int
) -> int | None:
    """How long a session authenticated at `now_ms` lasts, by Kafka's rule: the shorter of
    `max_reauth_ms` (when above 0) and the credential's remaining life (when it has an
    expiry), never below 0; None when neither applies (it never expires)."""
    limits = [] if max_reauth_ms <= 0 else [max_reauth_ms]
    if credential_expires_ms is not None:
        limits.append(credential_expires_ms - now_ms)
    return max(0, min(limits)) if limits else None


class SaslServer:
    """One connection's SASL authentication.

    Legal transitions:
        AWAITING_HANDSHAKE    --handshake(an enabled mechanism)-->             AWAITING_AUTHENTICATE
        AWAITING_AUTHENTICATE --authenticate(token), mechanism continues-->   AWAITING_AUTHENTICATE
        AWAITING_AUTHENTICATE --authenticate(token), mechanism completes-->   COMPLETE
        COMPLETE              --reauthenticate(an enabled mechanism) of a
                                  session that expires, a second after the last
                                  one began-->                               AWAITING_AUTHENTICATE
        any state             --any refusal (disabled mechanism, bad credentials,
                                  a call out of order, another mechanism or
                                  principal when re-authenticating)-->      FAILED
    FAILED is terminal: every call is refused again. Every result that says `close`
    leaves the state FAILED, and only those do. While re-authenticating the principal is
    None, as before the first authentication: the connection serves nothing else.
    """

    def __init__(
        self,
        mechanisms: Mapping[str, Callable[[], Mechanism]],
        max_reauth_ms: Mapping[str, int] | None = None,
    ) -> None:
        """`mechanisms`: the enabled ones, in the listener's order, name -> a factory of
        a fresh mechanism server; `max_reauth_ms`: `connections.max.reauth.ms` of each
        (absent or 0: no limit)."""
        self._factories = dict(mechanisms)
        self._enabled = tuple(self._factories)
        self._max_reauth_ms = dict(max_reauth_ms or {})
        self._state = SaslState.AWAITING_HANDSHAKE
        self._mechanism: str | None = None
        self._server: Mechanism | None = None
        self._principal_name: str | None = None
        self._expires_ms: int | None = None
        """When the authenticated session expires (wall-clock ms); None: never."""
        self._began_ms: int | None = None
        """When the current re-authentication began; None before the first."""
        self._previous: tuple[str, str] | None = None
        """While re-authenticating: the session's mechanism and principal name."""
        self._bad_mechanism: str | None = None
        """While re-authenticating with another mechanism: the refusal to answer."""
        self._credential_expires_ms: int | None = None
        """When the authenticated credential expires (wall-clock ms); None: never."""

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
        return self._credential_expires_ms if self._state is SaslState.COMPLETE else None

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

    @property
    def reauthenticating(self) -> bool:
        return self._previous is not None

    def expired(self, now_ms: int) -> bool:
        """Whether the authenticated session has expired by `now_ms`: the shell then
        closes the connection at its next request (all but a SaslHandshake that
        re-authenticates)."""
        return (
            self._state is SaslState.COMPLETE
            and self._expires_ms is not None
            and now_ms > self._expires_ms
        )

    def handshake(self, mechanism: str) -> HandshakeResult:
        """The answer to a SaslHandshake asking for `mechanism`."""
        if self._state is not SaslState.AWAITING_HANDSHAKE:
            return self._refuse_handshake(ErrorCode.illegal_sasl_state)
        factory = self._factories.get(mechanism)
        if factory is None:
            return self._refuse_handshake(ErrorCode.unsupported_sasl_mechanism)
        if self._previous is not None and mechanism != self._previous[0]:
            # Kafka accepts the handshake and refuses the authentication that follows.
            self._bad_mechanism = (
                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._previous[0]}'"
            )
        else:
            try:
                self._server = factory()
            except BaseException:
                self._fail()
                raise
        self._mechanism = mechanism
        self._state = SaslState.AWAITING_AUTHENTICATE
        return HandshakeResult(ErrorCode.none, self._enabled, close=False)

    def reauthenticate(self, mechanism: str, now_ms: int) -> HandshakeResult | None:
        """A SaslHandshake on an authenticated connection: it begins re-authentication
        when the session expires and did not begin one in the last second (the answer to
        the handshake); None otherwise, for the shell to answer as any request."""
        if self._state is not SaslState.COMPLETE or self._expires_ms is None:
            return None
        if self._began_ms is not None and now_ms - self._began_ms < REAUTH_MIN_INTERVAL_MS:
            return None
        assert self._mechanism is not None and self._principal_name is not None
        self._previous = (self._mechanism, self._principal_name)
        self._began_ms = now_ms
        self._state = SaslState.AWAITING_HANDSHAKE
        self._principal_name = None
        self._expires_ms = None
        return self.handshake(mechanism)

    def authenticate(self, token: bytes, now_ms: int) -> AuthenticateResult:
        """The answer to a client token (a SaslAuthenticate request's `auth_bytes`) at
        `now_ms` (wall-clock ms, which a credential's expiry is compared with)."""
        if self._bad_mechanism is not None:
            return self._refuse(ErrorCode.sasl_authentication_failed, self._bad_mechanism)
        if self._state is not SaslState.AWAITING_AUTHENTICATE or self._server is None:
            return self._refuse(ErrorCode.illegal_sasl_state, self._out_of_order())
        try:
            step = self._server.step(token)
        except SaslAuthenticationFailed as exc:
            return self._refuse(ErrorCode.sasl_authentication_failed, str(exc), exc.log_reason)
        except BaseException:
            self._fail()  # a bug in the mechanism: the shell logs it and closes
            raise
        if not step.complete:
            return AuthenticateResult(ErrorCode.none, None, step.challenge, False, close=False)
        if self._previous is not None and step.principal_name != self._previous[1]:
            return self._refuse(
                ErrorCode.sasl_authentication_failed,
                "Cannot change principals during re-authentication from "
                f"User.{self._previous[1]}: User.{step.principal_name}",
            )
        assert self._mechanism is not None
        lifetime = session_lifetime_ms(
            self._max_reauth_ms.get(self._mechanism, 0), step.expires_at_ms, now_ms
        )
        self._state = SaslState.COMPLETE
        self._principal_name = step.principal_name
        self._server = None
        self._previous = None
        self._expires_ms = None if lifetime is None else now_ms + lifetime
        self._credential_expires_ms = step.expires_at_ms
        return AuthenticateResult(
            ErrorCode.none,
            None,
            step.challenge,
            True,
            close=False,
            session_lifetime_ms=lifetime or 0,
        )

    def _out_of_order(self) -> str:
        if self._state is SaslState.AWAITING_HANDSHAKE:
            return "Unexpected SaslAuthenticate request before a SaslHandshake"
        if self._state is SaslState.COMPLETE:
            return "SaslAuthenticate request received after successful authentication"
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
        self._previous = None
        self._bad_mechanism = None
        self._expires_ms = None
        self._credential_expires_ms = None
