"""OAuth 2 client credentials (RFC 6749, section 4.4) for strom's client, as librdkafka
asks with `sasl.oauthbearer.method=oidc`: the request to the token endpoint, and what its
answer means.

The request is a POST of `grant_type=client_credentials` (and `scope=` with
`sasl.oauthbearer.scope`), form-encoded, with the client id and secret in HTTP Basic
authorization as librdkafka sends them (joined by a colon, not form-encoded first), and
`Accept: application/json`. The answer is JSON with `access_token`; the token expires at
its own `exp` claim when it is a JWT (librdkafka's rule), else `expires_in` seconds after
the answer. The principal (for messages only) is the JWT's `sub`, else the client id.

Every refusal is `TokenEndpointError`, one sentence naming the endpoint (its URL without
a user, password or query) and, where it helps, the setting to check. No message ever
holds the client secret or the token: text the endpoint sends back is shortened to
printable characters and has the secret masked, should the endpoint echo it.

Pure: the HTTP exchange is the shell's (strom.client.oauth_login), the time comes in as
`now_ms`. Written by hand: a form POST and a JSON answer need no library.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from strom.client.oauth_tokens import BearerToken

__all__ = [
    "CLIENT_ID_KEY",
    "CLIENT_SECRET_KEY",
    "SCOPE_KEY",
    "TOKEN_ENDPOINT_KEY",
    "OidcLogin",
    "TokenEndpointError",
    "TokenRequest",
    "read_token_answer",
    "shown_url",
    "token_request",
]

TOKEN_ENDPOINT_KEY = "sasl.oauthbearer.token.endpoint.url"
CLIENT_ID_KEY = "sasl.oauthbearer.client.id"
CLIENT_SECRET_KEY = "sasl.oauthbearer.client.secret"
SCOPE_KEY = "sasl.oauthbearer.scope"
_B64TOKEN = re.compile(r"[-_~+/.a-zA-Z0-9]+=*", re.ASCII)
_SHOWN_CHARS = 200
_CREDENTIAL_ERRORS = frozenset({"invalid_client", "unauthorized_client", "access_denied"})


class TokenEndpointError(ValueError):
    """The token endpoint did not give a usable token; the message says why."""


@dataclass(frozen=True, slots=True)
class OidcLogin:
    """How to get tokens from a token endpoint with client credentials."""

    token_endpoint_url: str
    client_id: str
    client_secret: str = field(repr=False)
    scope: str = ""
    extensions: tuple[tuple[str, str], ...] = ()
    https_ca_location: str = ""
    """librdkafka's `https.ca.location`: a CA file or directory, or `probe` (the
    system's, as without it)."""
    https_ca_pem: str = ""
    """librdkafka's `https.ca.pem`: CA certificates as PEM text."""


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One POST to the token endpoint."""

    url: str
    headers: tuple[tuple[str, str], ...] = field(repr=False)
    body: bytes


def shown_url(url: str) -> str:
    """The URL as a message shows it: scheme, host, port and path only."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        return "the configured URL"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def token_request(login: OidcLogin) -> TokenRequest:
    """The client credentials request for `login`."""
    form = {"grant_type": "client_credentials"}
    if login.scope:
        form["scope"] = login.scope
    credentials = f"{login.client_id}:{login.client_secret}".encode()
    headers = (
        ("Accept", "application/json"),
        ("Authorization", "Basic " + base64.b64encode(credentials).decode("ascii")),
        ("Content-Type", "application/x-www-form-urlencoded"),
    )
    return TokenRequest(login.token_endpoint_url, headers, urllib.parse.urlencode(form).encode())


def read_token_answer(
    login: OidcLogin, status: int, content_type: str, body: bytes, now_ms: int
) -> BearerToken:
    """The token in the endpoint's answer (HTTP `status`, `body`), obtained at `now_ms`;
    TokenEndpointError saying what is wrong with the answer."""
    endpoint = f"the token endpoint {shown_url(login.token_endpoint_url)}"
    answer = _json_object(body)
    if not 200 <= status < 300:
        refusal = _refusal(login, status, answer)
        raise TokenEndpointError(f"{endpoint} refused the request: {refusal}")
    if answer is None:
        kind = _printable(content_type, login) or "no Content-Type"
        raise TokenEndpointError(
            f"{endpoint} answered HTTP {status} with something that is not a JSON object "
            f"({kind}); is {TOKEN_ENDPOINT_KEY} the token endpoint itself?"
        )
    value = answer.get("access_token")
    if not isinstance(value, str) or not value:
        raise TokenEndpointError(f"{endpoint} answered without an access_token")
    if not _B64TOKEN.fullmatch(value):
        raise TokenEndpointError(
            f"{endpoint} answered with an access_token that is not an OAuth bearer token "
            "(RFC 6750: letters, digits and -._~+/ only)"
        )
    claims = _jwt_claims(value)
    expires_at_ms = _expiry_ms(claims, answer, now_ms)
    if expires_at_ms is None:
        raise TokenEndpointError(
            f"{endpoint} answered with a token whose expiry is unknown: it is not a JWT "
            "with an exp claim, and the answer has no expires_in"
        )
    if expires_at_ms <= now_ms:
        raise TokenEndpointError(
            f"{endpoint} answered with a token that has already expired (at {expires_at_ms} "
            f"ms, now {now_ms} ms); is this machine's clock right?"
        )
    subject = claims.get("sub") if claims is not None else None
    principal = subject if isinstance(subject, str) and subject.strip() else login.client_id
    return BearerToken(
        value=value,
        principal=principal,
        expires_at_ms=expires_at_ms,
        obtained_at_ms=now_ms,
        extensions=MappingProxyType(dict(login.extensions)),
    )


def _json_object(body: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return parsed if isinstance(parsed, dict) else None


def _refusal(login: OidcLogin, status: int, answer: dict[str, Any] | None) -> str:
    """HTTP <status>, the RFC 6749 error and its description if the answer has them,
    and which setting to check."""
    text = f"HTTP {status}"
    error = answer.get("error") if answer is not None else None
    if isinstance(error, str) and error:
        text += f", {_printable(error, login)}"
        description = answer.get("error_description") if answer is not None else None
        if isinstance(description, str) and description.strip():
            text += f" ({_printable(description, login)})"
    if 300 <= status < 400:
        return (
            f"{text}, a redirect, which strom's client does not follow; set "
            f"{TOKEN_ENDPOINT_KEY} to where it points"
        )
    if error in _CREDENTIAL_ERRORS or status == 401:
        return f"{text}; check {CLIENT_ID_KEY} and {CLIENT_SECRET_KEY}"
    if error == "invalid_scope":
        return f"{text}; check {SCOPE_KEY}"
    return text


def _printable(text: str, login: OidcLogin) -> str:
    """Text from the endpoint, safe to show: the secret masked, printable, and short."""
    if login.client_secret:
        text = text.replace(login.client_secret, "***")
    shown = "".join(c if c.isprintable() else " " for c in text).strip()
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 3] + "..."


def _jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWT, read without checking it (the broker checks it); None when
    the token is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1]
    try:
        data = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    except (binascii.Error, ValueError):
        return None
    return _json_object(data)


def _expiry_ms(claims: dict[str, Any] | None, answer: dict[str, Any], now_ms: int) -> int | None:
    exp = _seconds(claims.get("exp") if claims is not None else None)
    if exp is not None:
        return int(exp * 1000)
    given = answer.get("expires_in")
    if isinstance(given, str) and given.strip().isdecimal() and len(given) < 16:
        given = int(given.strip())  # some endpoints send the number as text
    expires_in = _seconds(given)
    if expires_in is not None and expires_in > 0:
        return now_ms + int(expires_in * 1000)
    return None


def _seconds(value: object) -> float | None:
    """A finite JSON number of seconds that fits in milliseconds since the epoch."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return value if -(2**53) < value * 1000 < 2**53 else None
