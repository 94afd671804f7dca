"""Per-listener settings: Kafka's `listener.name.<listener>.<key>` overrides, and the TLS
settings of every SSL listener.

A key such as `listener.name.external.ssl.keystore.location` sets `ssl.keystore.location`
for the listener named EXTERNAL only (listener names are matched without regard to case,
as Kafka writes them in lower case); the plain `ssl.*` keys apply to every SSL listener
that does not override them.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches

from strom.config.errors import ConfigError
from strom.config.listener_setup import ListenerSetup
from strom.config.schema import ConfigValue, check_value, invalid_value
from strom.config.security_keys import SSL_KEYS, TlsSettings, tls_settings
from strom.config.typed_values import TypedValues

__all__ = ["LISTENER_PREFIX", "ListenerOverrides", "listener_tls", "split_listener_keys"]

LISTENER_PREFIX = "listener.name."
_OVERRIDABLE = {key.name: key for key in SSL_KEYS}

ListenerOverrides = Mapping[str, Mapping[str, str]]
"""Listener name (upper case) -> key -> text."""


def split_listener_keys(given: Mapping[str, str]) -> tuple[dict[str, str], ListenerOverrides]:
    """(the plain keys, the per-listener overrides) of a config's key texts; ConfigError
    for a `listener.name.` key that names no key a listener may override."""
    plain: dict[str, str] = {}
    overrides: dict[str, dict[str, str]] = {}
    for name, text in given.items():
        if not name.startswith(LISTENER_PREFIX):
            plain[name] = text
            continue
        listener, dot, key = name[len(LISTENER_PREFIX) :].partition(".")
        if not dot or not listener or not key:
            raise invalid_value(
                name,
                text,
                "expected listener.name.<listener>.<key>, e.g. "
                "listener.name.ssl.ssl.keystore.location",
            )
        if key not in _OVERRIDABLE:
            close = get_close_matches(key, tuple(_OVERRIDABLE), n=1, cutoff=0.75)
            hint = f" (did you mean {LISTENER_PREFIX}{listener}.{close[0]}?)" if close else ""
            raise ConfigError(
                f"unknown config key {name!r}: a listener may override the ssl.* keys, "
                f"not {key!r}{hint}",
                key=name,
            )
        overrides.setdefault(listener.upper(), {})[key] = text
    return plain, overrides


def listener_tls(
    listeners: ListenerSetup, v: TypedValues, overrides: ListenerOverrides
) -> tuple[tuple[str, TlsSettings], ...]:
    """The TLS settings of each SSL listener: the `ssl.*` keys with its overrides."""
    names = {listener.name for listener in listeners.listeners}
    for listener_name, keys in overrides.items():
        if listener_name not in names:
            first = next(iter(keys))
            raise ConfigError(
                f"'{LISTENER_PREFIX}{listener_name.lower()}.{first}' names listener "
                f"{listener_name!r}, which is not in 'listeners'",
                key=f"{LISTENER_PREFIX}{listener_name.lower()}.{first}",
            )
    result = []
    for listener in listeners.listeners:
        if listeners.protocol(listener.name) != "SSL":
            continue
        values: dict[str, ConfigValue] = {key.name: v.all[key.name] for key in SSL_KEYS}
        for name, text in overrides.get(listener.name, {}).items():
            key = _OVERRIDABLE[name]
            full_name = f"{LISTENER_PREFIX}{listener.name.lower()}.{name}"
            values[name] = (
                check_value(full_name, key.type, key.validator, text) if text.strip() else None
            )
        result.append((listener.name, tls_settings(values)))
    return tuple(result)
