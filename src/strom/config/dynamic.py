"""Dynamic broker configs: which keys may change at run time, and applying them.

Kafka stores dynamic broker configs in the metadata log, as the cluster-wide default
(`kafka-configs --entity-type brokers --entity-default`) or for one broker
(`--entity-name 1`). A value resolves per-broker dynamic > cluster-default dynamic >
static (properties file, --set) > built-in default; keys with synonyms
(log.retention.ms / .minutes / .hours) are resolved from the merged set, ms first, as
Kafka's KafkaConfig does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from strom.config.broker import DYNAMIC_LAYER, BrokerConfig, build_config
from strom.config.errors import ConfigError, ConfigSource
from strom.config.keys import CONFIG_KEYS_BY_NAME
from strom.config.listener_settings import LISTENER_PREFIX, override_key, split_listener_keys
from strom.config.schema import ConfigKey, DynamicUpdateMode, format_value, unknown_key

# A read-only key whose dynamic form is another key: named in the refusal.
_DYNAMIC_FORM = {
    "log.retention.hours": "log.retention.ms",
    "log.retention.minutes": "log.retention.ms",
    "log.roll.hours": "log.roll.ms",
    "log.flush.scheduler.interval.ms": "log.flush.interval.ms",
}


def dynamic_config_key(name: str, *, per_broker: bool) -> ConfigKey:
    """The broker key `name` if it may be set dynamically for one broker (`per_broker`) or
    as the cluster-wide default; ConfigError saying why not otherwise. A
    `listener.name.<listener>.<key>` name stands for its key."""
    if name.startswith(LISTENER_PREFIX):
        _listener, _dot, base = name[len(LISTENER_PREFIX) :].partition(".")
        split_listener_keys({name: ""})  # ConfigError if it names no key a listener has
        return replace(dynamic_config_key(base, per_broker=per_broker), name=name)
    key = CONFIG_KEYS_BY_NAME.get(name)
    if key is None:
        raise unknown_key(name, tuple(CONFIG_KEYS_BY_NAME), "broker config key")
    if key.dynamic is DynamicUpdateMode.READ_ONLY:
        hint = _DYNAMIC_FORM.get(name)
        also = f" ({hint} can be changed dynamically)" if hint else ""
        raise ConfigError(
            f"{name} is a static broker setting: change it in the properties file and "
            f"restart{also}",
            key=name,
        )
    if key.dynamic is DynamicUpdateMode.PER_BROKER and not per_broker:
        raise ConfigError(
            f"{name} can only be set for one broker, not as the cluster-wide default",
            key=name,
        )
    return key


def validate_dynamic_broker_configs(changes: Mapping[str, str | None], *, per_broker: bool) -> None:
    """Raises ConfigError naming the key if a change is not allowed: an unknown key, a
    read-only (static) key, a per-broker key set cluster-wide, or an invalid value. A None
    value (deleting the override) needs only an allowed key."""
    for name, text in changes.items():
        key = dynamic_config_key(name, per_broker=per_broker)
        if text is not None:
            key.parse(text)


def canonical_dynamic_broker_configs(
    changes: Mapping[str, str | None], *, per_broker: bool
) -> dict[str, str]:
    """Checked as `validate_dynamic_broker_configs` does, in canonical text (None left out)."""
    validate_dynamic_broker_configs(changes, per_broker=per_broker)
    return {
        name: format_value(dynamic_config_key(name, per_broker=per_broker).parse(text)) or ""
        for name, text in changes.items()
        if text is not None
    }


def apply_dynamic(
    config: BrokerConfig, cluster_default: Mapping[str, str], per_broker: Mapping[str, str]
) -> BrokerConfig:
    """See BrokerConfig.with_dynamic."""
    given = dict(config.given)
    layers = dict(config.given_layers)
    sources: dict[str, ConfigSource] = {}
    problems: list[str] = []
    for is_per_broker, source, settings in (
        (False, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, cluster_default),
        (True, ConfigSource.DYNAMIC_BROKER_CONFIG, per_broker),
    ):
        scope = "broker" if is_per_broker else "cluster-default"
        for name, text in sorted(settings.items()):
            try:
                dynamic_config_key(name, per_broker=is_per_broker).parse(text)
            except ConfigError as exc:
                problems.append(
                    f"{scope} dynamic config {name}={_shown(name, text)} ignored: {exc}"
                )
                continue
            given.pop(name, None)
            given[name] = text
            layers[name] = DYNAMIC_LAYER
            sources[name] = source
    if not sources and not problems and not _is_dynamic(config):
        return config
    try:
        built = build_config(given, layers, sources)
    except ConfigError as exc:  # a combination the static checks refuse: keep the static
        problems.append(f"dynamic broker configs ignored: {exc}")
        built = build_config(config.given, config.given_layers)
    return replace(
        built,
        given=config.given,
        given_layers=config.given_layers,
        ignored=config.ignored,
        dynamic_problems=tuple(problems),
    )


def _is_dynamic(config: BrokerConfig) -> bool:
    return bool(config.dynamic_problems) or any(
        source in (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        for source in config.sources.values()
    )


def shown(configs: Mapping[str, str]) -> str:
    """Dynamic configs as a log line may show them: sensitive values (passwords, private
    keys) replaced by "(sensitive)"."""
    if not configs:
        return "{}"

    return (
        "{" + ", ".join(f"{name!r}: {_shown(name, text)}" for name, text in configs.items()) + "}"
    )


def _shown(name: str, text: str) -> str:
    key = override_key(name) or CONFIG_KEYS_BY_NAME.get(name)
    return "(sensitive)" if key is not None and key.sensitive else repr(text)
