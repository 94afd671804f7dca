"""Per-listener settings: Kafka's `listener.name.<listener>.<key>` overrides, the TLS
settings of every SSL and SASL_SSL listener, and the SASL settings of every SASL one.

A key such as `listener.name.external.ssl.keystore.location` sets `ssl.keystore.location`
for the listener named EXTERNAL only (listener names are matched without regard to case,
as Kafka writes them in lower case); the plain `ssl.*` keys and `sasl.enabled.mechanisms`
apply to every listener that does not override them. A SASL listener's JAAS config
exists only in the prefixed form `listener.name.<listener>.<mechanism>.sasl.jaas.config`,
as in Kafka; its text is parsed when the listener starts (strom.security.jaas). An
OAUTHBEARER listener's validator is `listener.name.<l>.oauthbearer.sasl.server.callback.
handler.class`, and each `sasl.oauthbearer.*` key is read as Kafka reads it:
`listener.name.<l>.oauthbearer.<key>`, then `listener.name.<l>.<key>`, then `<key>`.
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from types import MappingProxyType

from strom.config.errors import ConfigError
from strom.config.listener_setup import ListenerSetup
from strom.config.node_keys import (
    CONNECTION_KEYS,
    SASL_PROTOCOLS,
    TLS_PROTOCOLS,
    parse_ip_overrides,
)
from strom.config.schema import ConfigKey, ConfigType, ConfigValue, check_value, invalid_value
from strom.config.security_keys import (
    JWKS_VALIDATOR_CLASSES,
    LOGIN_COMPAT_KEYS,
    OAUTHBEARER_KEYS,
    SASL_KEYS,
    SASL_MECHANISMS,
    SERVED_SASL_MECHANISMS,
    SERVER_CALLBACK_HANDLER_KEY,
    SSL_KEYS,
    UNSECURED_VALIDATOR_CLASS,
    OAuthBearerSettings,
    SaslSettings,
    TlsSettings,
    tls_settings,
)
from strom.config.typed_values import TypedValues
from strom.security.connection_quotas import ConnectionLimits

__all__ = [
    "LISTENER_PREFIX",
    "ListenerOverrides",
    "connection_limits",
    "ignored_overrides",
    "listener_prefix",
    "listener_sasl",
    "listener_tls",
    "override_key",
    "split_listener_keys",
]

LISTENER_PREFIX = "listener.name."
_JAAS_KEYS = tuple(
    ConfigKey(
        f"{mechanism.lower()}.sasl.jaas.config",
        ConfigType.STRING,
        None,
        f"The JAAS config of {mechanism} on one listener.",
        sensitive=True,
    )
    for mechanism in SASL_MECHANISMS
)
_MECHANISMS_KEY = next(key for key in SASL_KEYS if key.name == "sasl.enabled.mechanisms")
_REAUTH_KEY = next(key for key in SASL_KEYS if key.name == "connections.max.reauth.ms")
_REAUTH_KEYS = tuple(
    ConfigKey(
        f"{mechanism.lower()}.{_REAUTH_KEY.name}",
        _REAUTH_KEY.type,
        None,
        f"connections.max.reauth.ms of {mechanism} on one listener.",
        _REAUTH_KEY.validator,
    )
    for mechanism in SASL_MECHANISMS
)
_LIMIT_KEYS = tuple(
    key
    for key in CONNECTION_KEYS
    if key.name in ("max.connections", "max.connection.creation.rate")
)
_LIMITS = tuple((key.name, key) for key in _LIMIT_KEYS)
_HANDLER_KEY = ConfigKey(
    SERVER_CALLBACK_HANDLER_KEY,
    ConfigType.STRING,
    None,
    "OAUTHBEARER's token validator on one listener: Kafka's JWKS validator class, or none.",
)
_OAUTHBEARER_OVERRIDES = tuple(
    ConfigKey(
        f"oauthbearer.{key.name}", key.type, key.default, key.doc, key.validator, effect=key.effect
    )
    for key in (*OAUTHBEARER_KEYS, *LOGIN_COMPAT_KEYS)
    if key.name != "sasl.server.callback.handler.class"
)
_OVERRIDABLE = {
    key.name: key
    for key in (
        *SSL_KEYS,
        _MECHANISMS_KEY,
        *_JAAS_KEYS,
        *_REAUTH_KEYS,
        *_LIMIT_KEYS,
        *OAUTHBEARER_KEYS,
        *LOGIN_COMPAT_KEYS,
        *_OAUTHBEARER_OVERRIDES,
        _HANDLER_KEY,
    )
}


def listener_prefix(listener: str) -> str:
    """`listener.name.<listener>.`, the listener in lower case as Kafka writes it."""
    return f"{LISTENER_PREFIX}{listener.lower()}."


def override_key(name: str) -> ConfigKey | None:
    """The key a `listener.name.<listener>.<key>` name sets, if a listener may set it."""
    _listener, _dot, key = name[len(LISTENER_PREFIX) :].partition(".")
    return _OVERRIDABLE.get(key) if name.startswith(LISTENER_PREFIX) else None


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
                "sasl.enabled.mechanisms, <mechanism>.sasl.jaas.config, "
                "<mechanism>.connections.max.reauth.ms, the sasl.oauthbearer.* keys (also "
                "with oauthbearer. in front), oauthbearer.sasl.server.callback.handler.class, "
                f"max.connections and max.connection.creation.rate, not {key!r}{hint}",
                key=name,
            )
        overrides.setdefault(listener.upper(), {})[key] = text
    return plain, overrides


def ignored_overrides(overrides: ListenerOverrides) -> tuple[str, ...]:
    """The `listener.name.<l>.<key>` keys strom accepts without acting on them (Kafka's
    login keys), for the broker to name at start."""
    return tuple(
        listener_prefix(listener) + key
        for listener, keys in overrides.items()
        for key in keys
        if not _OVERRIDABLE[key].effect
    )


def listener_tls(
    listeners: ListenerSetup, v: TypedValues, overrides: ListenerOverrides
) -> tuple[tuple[str, TlsSettings], ...]:
    """The TLS settings of each SSL listener, and of a controller listener a
    broker-only node reaches over SSL: the `ssl.*` keys with its overrides."""
    names = {listener.name for listener in listeners.listeners} | set(listeners.controller_names)
    for listener_name, keys in overrides.items():
        if listener_name not in names:
            first = next(iter(keys))
            raise ConfigError(
                f"'{listener_prefix(listener_name)}{first}' names listener "
                f"{listener_name!r}, which is not in 'listeners' or 'controller.listener.names'",
                key=f"{listener_prefix(listener_name)}{first}",
            )
    result = []
    for name, protocol in listeners.protocols:
        if protocol not in TLS_PROTOCOLS:
            continue
        values: dict[str, ConfigValue] = {key.name: v.all[key.name] for key in SSL_KEYS}
        for key_name, text in overrides.get(name, {}).items():
            if not key_name.startswith("ssl."):
                continue
            key = _OVERRIDABLE[key_name]
            full_name = f"{listener_prefix(name)}{key_name}"
            values[key_name] = (
                check_value(full_name, key.type, key.validator, text) if text.strip() else None
            )
        result.append((name, tls_settings(values)))
    return tuple(result)


def listener_sasl(
    listeners: ListenerSetup, v: TypedValues, overrides: ListenerOverrides
) -> tuple[tuple[str, SaslSettings], ...]:
    """The SASL settings of each SASL_PLAINTEXT and SASL_SSL listener; ConfigError for a
    mechanism strom does not serve or PLAIN without its JAAS config (SCRAM needs none:
    its users are in the metadata)."""
    result = []
    for listener in listeners.listeners:
        if listeners.protocol(listener.name) not in SASL_PROTOCOLS:
            continue
        own = overrides.get(listener.name, {})
        prefix = listener_prefix(listener.name)
        mechanisms_key = "sasl.enabled.mechanisms"
        if mechanisms_key in own:
            mechanisms = _MECHANISMS_KEY.parse(own[mechanisms_key])
            mechanisms_key = prefix + mechanisms_key
        else:
            mechanisms = v.all[mechanisms_key]
        assert isinstance(mechanisms, tuple)
        names = tuple(dict.fromkeys(name.upper() for name in mechanisms))
        for name in names or ("",):
            if name not in SERVED_SASL_MECHANISMS:
                raise invalid_value(
                    mechanisms_key,
                    ",".join(names),
                    f"SASL listener {listener.name!r} needs mechanisms strom serves "
                    f"({', '.join(SERVED_SASL_MECHANISMS)} so far)",
                )
        jaas = []
        for name in names:
            key = f"{name.lower()}.sasl.jaas.config"
            if name.startswith("SCRAM-") and not own.get(key, "").strip():
                continue
            if not own.get(key, "").strip():
                example = _OAUTHBEARER_EXAMPLE if name == "OAUTHBEARER" else _PLAIN_EXAMPLE
                what = "its login module" if name == "OAUTHBEARER" else "its users"
                raise ConfigError(
                    f"SASL listener {listener.name!r} offers {name}: set '{prefix}{key}' "
                    f"({what}, e.g. {example})",
                    key=prefix + key,
                )
            jaas.append((name, own[key]))
        delay_ms = v.integer("connection.failed.authentication.delay.ms")
        reauth = []
        for name in names:  # Kafka's order: the mechanism's own key, else the broker's
            key = f"{name.lower()}.{_REAUTH_KEY.name}"
            text = own.get(key, "").strip()
            ms = (
                check_value(prefix + key, _REAUTH_KEY.type, _REAUTH_KEY.validator, text)
                if text
                else v.integer(_REAUTH_KEY.name)
            )
            assert isinstance(ms, int)
            reauth.append((name, ms))
        oauthbearer = _oauthbearer(listener.name, v, own) if "OAUTHBEARER" in names else None
        settings = SaslSettings(names, tuple(jaas), delay_ms, oauthbearer, tuple(reauth))
        result.append((listener.name, settings))
    return tuple(result)


_OAUTHBEARER_EXAMPLE = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
)


def _oauthbearer(listener: str, v: TypedValues, own: Mapping[str, str]) -> OAuthBearerSettings:
    """OAUTHBEARER's settings on `listener`: unsecured JWTs unless its server callback
    handler is Kafka's JWKS validator. Each `sasl.oauthbearer.*` key is read as Kafka
    reads it: `listener.name.<l>.oauthbearer.<key>`, then `listener.name.<l>.<key>`, then
    `<key>`."""
    prefix = listener_prefix(listener)
    handler = own.get(SERVER_CALLBACK_HANDLER_KEY, "").strip()
    if not handler or handler == UNSECURED_VALIDATOR_CLASS:
        return OAuthBearerSettings()
    if handler not in JWKS_VALIDATOR_CLASSES:
        raise invalid_value(
            prefix + SERVER_CALLBACK_HANDLER_KEY,
            handler,
            "strom runs no Java classes: set Kafka's JWKS validator "
            f"{JWKS_VALIDATOR_CLASSES[0]} (or leave it unset for unsecured JWTs)",
        )

    def value(name: str) -> tuple[str, ConfigValue]:
        key = _OVERRIDABLE[name]
        for full_name, own_name in (
            (prefix + "oauthbearer." + name, "oauthbearer." + name),
            (prefix + name, name),
        ):
            if own_name in own:
                text = own[own_name]
                parsed = (
                    check_value(full_name, key.type, key.validator, text) if text.strip() else None
                )
                return full_name, parsed
        return name, v.all[name]

    url_key, url = value("sasl.oauthbearer.jwks.endpoint.url")
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(
            f"listener {listener!r} validates OAUTHBEARER tokens against a JWKS: set "
            f"sasl.oauthbearer.jwks.endpoint.url (or {prefix}oauthbearer.sasl.oauthbearer."
            "jwks.endpoint.url) to its https:, http: or file: URL",
            key=url_key,
        )
    scheme = url.strip().partition(":")[0].lower()
    if scheme not in ("https", "http", "file"):
        raise invalid_value(url_key, url, "expected an https:, http: or file: URL")
    numbers = {}
    for name in (
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.clock.skew.seconds",
    ):
        full_name, number = value(name)
        if not isinstance(number, int):
            number = _OVERRIDABLE[name].default_value
        assert isinstance(number, int)
        numbers[name] = number
    backoff = numbers["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"]
    backoff_max = numbers["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"]
    if backoff_max < backoff:
        raise invalid_value(
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            str(backoff_max),
            f"must be at least sasl.oauthbearer.jwks.endpoint.retry.backoff.ms ({backoff})",
        )
    audiences = value("sasl.oauthbearer.expected.audience")[1]
    issuer = value("sasl.oauthbearer.expected.issuer")[1]
    names = {}
    for name in ("sasl.oauthbearer.sub.claim.name", "sasl.oauthbearer.scope.claim.name"):
        full_name, text = value(name)
        if not isinstance(text, str) or not text.strip():
            raise invalid_value(full_name, str(text or ""), "must name a claim")
        names[name] = text.strip()
    return OAuthBearerSettings(
        jwks_endpoint_url=url.strip(),
        jwks_refresh_ms=numbers["sasl.oauthbearer.jwks.endpoint.refresh.ms"],
        jwks_retry_backoff_ms=backoff,
        jwks_retry_backoff_max_ms=backoff_max,
        expected_audiences=tuple(audiences) if isinstance(audiences, tuple) else (),
        expected_issuer=issuer.strip() if isinstance(issuer, str) and issuer.strip() else None,
        clock_skew_s=numbers["sasl.oauthbearer.clock.skew.seconds"],
        sub_claim_name=names["sasl.oauthbearer.sub.claim.name"],
        scope_claim_name=names["sasl.oauthbearer.scope.claim.name"],
    )


_PLAIN_EXAMPLE = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";'
)


def connection_limits(
    listeners: ListenerSetup, v: TypedValues, overrides: ListenerOverrides
) -> ConnectionLimits:
    """The connection limits of the client listeners (Kafka's socket server keys, with
    each listener's max.connections and max.connection.creation.rate overrides)."""
    per_ip = v.integer("max.connections.per.ip")
    ip_text = v.string("max.connections.per.ip.overrides")
    if per_ip == 0 and not ip_text.strip():
        raise invalid_value(
            "max.connections.per.ip",
            "0",
            "max.connections.per.ip.overrides must be set when max.connections.per.ip is 0",
        )
    limits: dict[str, dict[str, int]] = {name: {} for name, _key in _LIMITS}
    for listener in listeners.client:
        own = overrides.get(listener.name, {})
        for name, key in _LIMITS:
            if name in own:
                full_name = listener_prefix(listener.name) + name
                value = check_value(full_name, key.type, key.validator, own[name])
                assert isinstance(value, int)
                limits[name][listener.name] = value
    several = len(listeners.client) > 1
    return ConnectionLimits(
        max_connections=v.integer("max.connections"),
        max_connections_per_ip=per_ip,
        per_ip_overrides=MappingProxyType(dict(parse_ip_overrides(ip_text))),
        max_creation_rate=v.integer("max.connection.creation.rate"),
        listener_max_connections=MappingProxyType(limits["max.connections"]),
        listener_max_creation_rate=MappingProxyType(limits["max.connection.creation.rate"]),
        protected_listener=listeners.inter_broker_name if several else None,
    )
