"""SASL/OAUTHBEARER (RFC 7628) as a Kafka broker speaks it: the client's initial response,
and the broker's side of one authentication (`OAuthBearerServer`, a sasl.Mechanism).

The client sends one message, `n,[a=<authzid>],^Aauth=Bearer <token>^A[<key>=<value>^A]*^A`
(^A is the byte 0x01), with Kafka's rules: the GS2 flag is `n` (no channel binding), the
authzid is ASCII without `=` or `,` except as `=3D` and `=2C`, the scheme is `Bearer` in
any case, the token is RFC 6750's b64token, an extension key is letters and its value
printable ASCII, space, tab, CR or LF. strom answers as Kafka's OAuthBearerSaslServer:

- **Malformed message:** refused at once with Kafka's words for a refusal whose reason
  it keeps to itself ("Authentication failed during authentication due to invalid
  credentials with SASL mechanism OAUTHBEARER").
- **Token refused:** not yet a failure. The challenge is RFC 7628's JSON error, exactly
  as Kafka writes it: `{"status":"invalid_token"}`, or with a required scope missing
  `{"status":"insufficient_scope", "scope":"[a, b]"}`. The client answers with the single
  byte 0x01, and the authentication fails with that JSON as its error message: nothing
  more (no reason, no claim) reaches the client. A client that instead sends another
  initial response is checked again from the start, as Kafka does.
- **Token accepted:** an authzid other than the token's principal is refused with
  Kafka's message (which names both: the client sent them). Extensions are accepted and
  ignored, as both of Kafka's validators accept them all; strom has no use for them.
  The step completes with an empty challenge, the principal, and the token's expiry
  (`MechanismStep.expires_at_ms`, which bounds the session: sasl.py).

Different from Kafka: the authzid is compared once `=2C` and `=3D` are decoded (RFC 5801);
Kafka compares the text as sent.

Pure: the token's checks are the `validator` passed in (strom.security.jwt_validation,
with the clock and the key set bound by the shell). Written by hand: the framing is a few
rules, and no Python library speaks the server side.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from strom.security.jwt_validation import TokenRefused, ValidToken
from strom.security.sasl import OAUTHBEARER, Mechanism, MechanismStep, SaslAuthenticationFailed

__all__ = [
    "GENERIC_FAILURE",
    "MAX_OAUTHBEARER_MESSAGE_BYTES",
    "ClientInitialResponse",
    "OAuthBearerServer",
    "TokenValidator",
    "client_initial_response",
    "error_challenge",
    "parse_client_initial_response",
]

MAX_OAUTHBEARER_MESSAGE_BYTES = 64 * 1024
"""A longer client message is refused as malformed before it is read (strom's bound;
Kafka's is the 512 KiB of any SASL request)."""

GENERIC_FAILURE = (
    f"Authentication failed during authentication due to invalid credentials with SASL "
    f"mechanism {OAUTHBEARER}"
)
_SEPARATOR = "\x01"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7e \t\r\n]+"
_MESSAGE = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:{_KEY}={_VALUE}\x01)*)\x01"
)
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)
_EXTENSION_KEY = re.compile(_KEY)
_EXTENSION_VALUE = re.compile(_VALUE)

TokenValidator = Callable[[str], ValidToken]
"""Checks a token now, against the listener's settings; TokenRefused if it fails."""


@dataclass(frozen=True, slots=True)
class ClientInitialResponse:
    """What the client's message says: the bearer token, the authzid ("" when none) and
    the extensions."""

    token: str = field(repr=False)
    authorization_id: str = ""
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


def parse_client_initial_response(message: bytes) -> ClientInitialResponse:
    """The client's initial response; SaslAuthenticationFailed(GENERIC_FAILURE) if it is
    not one (the reason stays in `log_reason`)."""

    def malformed(problem: str) -> SaslAuthenticationFailed:
        return SaslAuthenticationFailed(
            GENERIC_FAILURE, log_reason=f"malformed OAUTHBEARER message: {problem}"
        )

    if len(message) > MAX_OAUTHBEARER_MESSAGE_BYTES:
        raise malformed(f"longer than {MAX_OAUTHBEARER_MESSAGE_BYTES} bytes")
    try:
        text = message.decode("utf-8")
    except UnicodeDecodeError:
        raise malformed("not valid UTF-8") from None
    match = _MESSAGE.fullmatch(text)
    if match is None:
        raise malformed("not n,[a=<authzid>],^A<key>=<value>^A...^A")
    pairs: dict[str, str] = {}
    for pair in match["pairs"].split(_SEPARATOR)[:-1]:
        key, _, value = pair.partition("=")
        pairs[key] = value  # a repeated key: the last one counts, as in Kafka
    auth = pairs.pop("auth", None)
    if auth is None:
        raise malformed("no auth=")
    auth_match = _AUTH.fullmatch(auth)
    if auth_match is None:
        raise malformed("auth= is not <scheme> <b64token>")
    if auth_match["scheme"].lower() != "bearer":
        raise malformed("the auth scheme is not Bearer")
    authzid = (match["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return ClientInitialResponse(auth_match["token"], authzid, MappingProxyType(pairs))


def client_initial_response(
    token: str, authorization_id: str = "", extensions: Mapping[str, str] | None = None
) -> bytes:
    """The message a client sends (for strom's tests and benchmarks); ValueError for an
    extension Kafka's rules refuse."""
    items = dict(extensions or {})
    for key, value in items.items():
        if key == "auth" or not _EXTENSION_KEY.fullmatch(key):
            raise ValueError(f"invalid extension name {key!r}")
        if not _EXTENSION_VALUE.fullmatch(value):
            raise ValueError(f"invalid value for extension {key!r}")
    authzid = authorization_id.replace("=", "=3D").replace(",", "=2C")
    pairs = "".join(f"{_SEPARATOR}{key}={value}" for key, value in items.items())
    authz = f"a={authzid}" if authzid else ""
    return f"n,{authz},{_SEPARATOR}auth=Bearer {token}{pairs}{_SEPARATOR}{_SEPARATOR}".encode()


def error_challenge(refused: TokenRefused) -> bytes:
    """RFC 7628's error, written as Kafka writes it."""
    text = f'{{"status":"{refused.status.value}"'
    if refused.scope is not None:
        text += f', "scope":"{refused.scope}"'
    return (text + "}").encode()


class _State(Enum):
    AWAITING_TOKEN = "awaiting token"
    AWAITING_ERROR_ACK = "awaiting the client's 0x01 after an error"
    COMPLETE = "complete"
    FAILED = "failed"


class OAuthBearerServer(Mechanism):
    """The broker's side of one OAUTHBEARER authentication.

    Legal transitions:
        AWAITING_TOKEN     --step(message), token accepted, authzid fits-->   COMPLETE
        AWAITING_TOKEN     --step(message), token refused: JSON error-->      AWAITING_ERROR_ACK
        AWAITING_ERROR_ACK --step(0x01)-->                                    FAILED (the JSON)
        AWAITING_ERROR_ACK --step(another message)-->                         as from AWAITING_TOKEN
        any state          --malformed message, other authzid, a step once
                             COMPLETE-->                                      FAILED (terminal)
    """

    def __init__(self, validator: TokenValidator) -> None:
        self._validator = validator
        self._state = _State.AWAITING_TOKEN
        self._error: bytes | None = None
        self._error_reason = ""

    def step(self, token: bytes) -> MechanismStep:
        if self._state in (_State.COMPLETE, _State.FAILED):
            self._state = _State.FAILED
            raise SaslAuthenticationFailed(
                GENERIC_FAILURE, log_reason="a message after the exchange ended"
            )
        if self._state is _State.AWAITING_ERROR_ACK and token == b"\x01":
            self._state = _State.FAILED
            assert self._error is not None
            raise SaslAuthenticationFailed(
                self._error.decode(), log_reason=f"token refused: {self._error_reason}"
            )
        try:
            return self._initial_response(token)
        except SaslAuthenticationFailed:
            self._state = _State.FAILED
            raise

    def _initial_response(self, message: bytes) -> MechanismStep:
        response = parse_client_initial_response(message)
        try:
            token = self._validator(response.token)
        except TokenRefused as refused:
            self._error, self._error_reason = error_challenge(refused), refused.reason
            self._state = _State.AWAITING_ERROR_ACK
            return MechanismStep(self._error, complete=False)
        authzid = response.authorization_id
        if authzid and authzid != token.principal_name:
            raise SaslAuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) "
                f"that is different from the token's principal name ({token.principal_name})",
                log_reason="the authorization id is not the token's principal",
            )
        self._state, self._error = _State.COMPLETE, None
        return MechanismStep(
            b"",
            complete=True,
            principal_name=token.principal_name,
            expires_at_ms=token.expires_at_ms,
        )
