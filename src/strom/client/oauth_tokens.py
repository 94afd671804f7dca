"""OAUTHBEARER tokens for strom's client, and the unsecured ones it makes itself.

A `BearerToken` is what a login sends (RFC 7628's initial response, built by
strom.security.oauthbearer): the token, the SASL extensions, and for the client's own
use the principal it names and when it expires. It is used until 80% of its life has
passed, then replaced, as librdkafka does.

**Unsecured tokens** (librdkafka's `enable.sasl.oauthbearer.unsecure.jwt=true`, for
development) are made from `sasl.oauthbearer.config` with librdkafka's rules: names and
values separated by single spaces (so neither holds a space), `principal=` required,
`principalClaimName=` (`sub`), `scopeClaimName=` (`scope`), `scope=` (comma-separated;
empty items and repeats dropped), `lifeSeconds=` (3600, a positive 32-bit whole number),
`extension_<NAME>=<value>` for each SASL extension; a name given twice, an empty value,
an unknown name or a `"` in the principal, a claim name or the scope is refused. The
token is a JWT with the header `{"alg":"none"}`, the claims `{<principalClaimName>:
<principal>, "iat": <now>, "exp": <now + lifeSeconds>, <scopeClaimName>: [<scope>...]}`
(times in seconds with milliseconds, the scope only when there is one) and an empty
signature. Different from librdkafka: an extension with an empty value is refused (Kafka's
rule, which strom's broker keeps), a later `extension_<NAME>` replaces an earlier one, and
`iat` or `exp` as a claim name, or the same name for both claims, is refused.

Extensions, here and for `sasl.oauthbearer.extensions` (`parse_extensions`), follow RFC
7628 as Kafka reads it: a name is letters and not `auth`, a value is printable ASCII,
space, tab, CR or LF, and not empty.

Pure: the time comes in as `now_ms`. Written by hand: the rules are librdkafka's.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "DEFAULT_LIFE_SECONDS",
    "UNSECURED_CONFIG_KEY",
    "BearerToken",
    "UnsecuredLogin",
    "check_extension",
    "parse_extensions",
    "parse_unsecured_config",
    "unsecured_token",
]

UNSECURED_CONFIG_KEY = "sasl.oauthbearer.config"
DEFAULT_LIFE_SECONDS = 3600
_MAX_LIFE_SECONDS = 2**31 - 1
_REFRESH_AT = 0.8
"""The part of a token's life after which it is replaced (librdkafka's)."""
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7e \t\r\n]+")
_NONE_HEADER = b'{"alg":"none"}'
_NAMED = ("principalClaimName", "principal", "scopeClaimName", "scope", "lifeSeconds")
"""Longest first where one name begins another, as they are matched in this order."""
_EXTENSION_PREFIX = "extension_"


@dataclass(frozen=True, slots=True)
class BearerToken:
    """A token a login sends, with the extensions that go with it."""

    value: str = field(repr=False)
    principal: str
    """Whom the token names (its `sub`, or the unsecured token's principal): for messages."""
    expires_at_ms: int
    obtained_at_ms: int
    extensions: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def refresh_due(self, now_ms: int) -> bool:
        """Whether 80% of the token's life has passed: time to get a new one."""
        life_ms = self.expires_at_ms - self.obtained_at_ms
        return now_ms >= self.obtained_at_ms + int(life_ms * _REFRESH_AT)


@dataclass(frozen=True, slots=True)
class UnsecuredLogin:
    """What `sasl.oauthbearer.config` says an unsecured token holds."""

    principal: str
    principal_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    scope: tuple[str, ...] = ()
    life_seconds: int = DEFAULT_LIFE_SECONDS
    extensions: tuple[tuple[str, str], ...] = ()


def check_extension(name: str, value: str, where: str) -> None:
    """ValueError naming `where` (the setting) for an extension RFC 7628 does not allow."""
    if name == "auth":
        raise ValueError(f"{where}: the extension name auth is reserved for the token itself")
    if not _EXTENSION_NAME.fullmatch(name):
        raise ValueError(f"{where}: the extension name {name!r} is not letters A-Z and a-z only")
    if not _EXTENSION_VALUE.fullmatch(value):
        raise ValueError(
            f"{where}: the value of extension {name} must be printable ASCII (space, tab, "
            "CR and LF allowed) and not empty"
        )


def parse_extensions(text: str, where: str) -> tuple[tuple[str, str], ...]:
    """`name=value,name=value` (librdkafka's `sasl.oauthbearer.extensions`); blanks around
    the items and names are dropped, a later name replaces an earlier one."""
    found: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = item.strip().partition("=")
        if not equals:
            raise ValueError(f"{where}: {item.strip()!r} is not name=value")
        check_extension(name.strip(), value, where)
        found[name.strip()] = value
    return tuple(found.items())


def parse_unsecured_config(text: str) -> UnsecuredLogin:
    """librdkafka's `sasl.oauthbearer.config` for an unsecured token; ValueError saying
    what is wrong with it."""
    where = UNSECURED_CONFIG_KEY
    named: dict[str, str] = {}
    extensions: dict[str, str] = {}
    for item in text.split(" "):
        if not item:
            continue
        if item.startswith(_EXTENSION_PREFIX):
            name, equals, value = item.removeprefix(_EXTENSION_PREFIX).partition("=")
            if not equals:
                raise ValueError(f"{where}: {item!r} is not {_EXTENSION_PREFIX}<NAME>=<value>")
            check_extension(name, value, where)
            extensions[name] = value
            continue
        known = next((n for n in _NAMED if item.startswith(f"{n}=")), None)
        if known is None:
            raise ValueError(
                f"{where}: unknown entry {item!r}; it takes principal=, principalClaimName=, "
                f"scope=, scopeClaimName=, lifeSeconds= and {_EXTENSION_PREFIX}<NAME>="
            )
        if known in named:
            raise ValueError(f"{where}: {known}= is given more than once")
        value = item.removeprefix(f"{known}=")
        if not value:
            raise ValueError(f"{where}: {known}= is empty")
        if '"' in value:
            raise ValueError(f'{where}: {known}= must not hold a double quote (")')
        named[known] = value
    if "principal" not in named:
        raise ValueError(
            f"{where} has no principal=<name>: an unsecured token needs one "
            f"(for example {where}=principal=alice)"
        )
    login = UnsecuredLogin(
        principal=named["principal"],
        principal_claim_name=named.get("principalClaimName", "sub"),
        scope_claim_name=named.get("scopeClaimName", "scope"),
        scope=_scope(named.get("scope", "")),
        life_seconds=_life_seconds(named.get("lifeSeconds")),
        extensions=tuple(extensions.items()),
    )
    claim_names = (login.principal_claim_name, login.scope_claim_name)
    if {"iat", "exp"} & set(claim_names):
        raise ValueError(f"{where}: iat and exp are set by the token itself, not claim names")
    if login.principal_claim_name == login.scope_claim_name:
        raise ValueError(f"{where}: principalClaimName and scopeClaimName must differ")
    return login


def _scope(text: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(item for item in text.split(",") if item))


def _life_seconds(text: str | None) -> int:
    if text is None:
        return DEFAULT_LIFE_SECONDS
    if not (text.isascii() and text.isdigit()) or len(text) > 10:
        raise ValueError(f"{UNSECURED_CONFIG_KEY}: lifeSeconds={text} is not a whole number")
    seconds = int(text)
    if not 0 < seconds <= _MAX_LIFE_SECONDS:
        raise ValueError(
            f"{UNSECURED_CONFIG_KEY}: lifeSeconds={text} is not between 1 and {_MAX_LIFE_SECONDS}"
        )
    return seconds


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unsecured_token(login: UnsecuredLogin, now_ms: int) -> BearerToken:
    """The unsecured JWT `login` describes, issued at `now_ms`."""
    now_s = round(now_ms / 1000, 3)
    claims: dict[str, object] = {
        login.principal_claim_name: login.principal,
        "iat": now_s,
        "exp": round(now_s + login.life_seconds, 3),
    }
    if login.scope:
        claims[login.scope_claim_name] = list(login.scope)
    payload = json.dumps(claims, separators=(",", ":")).encode("ascii")
    return BearerToken(
        value=f"{_b64url(_NONE_HEADER)}.{_b64url(payload)}.",
        principal=login.principal,
        expires_at_ms=now_ms + login.life_seconds * 1000,
        obtained_at_ms=now_ms,
        extensions=MappingProxyType(dict(login.extensions)),
    )
