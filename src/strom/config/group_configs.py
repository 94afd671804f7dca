"""Group configs: the overrides one group may have (config resource type GROUP, 32), with
Kafka 4.0's names, their defaults taken from the broker keys and their checks.

    GROUP_CONFIG_KEYS                                 the keys, in name order
    group_config_defaults(broker) -> {name: text}     what a group without overrides has
    validate_group_configs(overrides, broker) -> {name: canonical text}, else ConfigError
    check_group_broker_keys(broker)                   ConfigError if the broker keys disagree

`broker` is the broker's keys as text (BrokerConfig.raw); a key it lacks takes its
built-in default. The checks are Kafka's: every name must be a group key, every value
must parse, and the effective values (the broker's defaults behind the overrides) must
lie within the broker's min/max keys, each session timeout above its heartbeat interval.
`share.auto.offset.reset` also takes `by_duration:<ISO-8601 duration>`, as Kafka 4.1
does. The ISO-8601 durations are read by hand (Java's Duration.parse syntax): the
standard library has no parser for them. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from strom.config.errors import ConfigError
from strom.config.keys import CONFIG_KEYS_BY_NAME
from strom.config.schema import ConfigType, invalid_value, parse_value

__all__ = [
    "GROUP_CONFIG_KEYS",
    "SHARE_AUTO_OFFSET_RESET",
    "GroupConfigKey",
    "check_group_broker_keys",
    "duration_ms",
    "group_config_defaults",
    "validate_group_configs",
]

SHARE_AUTO_OFFSET_RESET = "share.auto.offset.reset"
_RESETS = ("latest", "earliest")
_BY_DURATION = "by_duration:"
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?[0-9]+)D)?"
    r"(T(?:([-+]?[0-9]+)H)?(?:([-+]?[0-9]+)M)?(?:([-+]?[0-9]+)(?:[.,]([0-9]{0,9}))?S)?)?",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class GroupConfigKey:
    """A group key: an INT whose default is `broker_key` and whose bounds are the broker's
    `min_key` and `max_key`, or (with no broker keys) share.auto.offset.reset."""

    name: str
    broker_key: str | None
    min_key: str | None
    max_key: str | None
    least: int = 1
    """What the value may be at the least whatever the broker's bounds (Kafka's atLeast)."""
    default: str | None = None
    """The default of a key with no broker key."""
    kind: str = "int"
    """"int" (bounded by the broker keys), "reset" (share.auto.offset.reset), "bool", or
    "dlq" (a dead-letter topic name: empty for none, never one of "__")."""


def _int_key(name: str, broker_key: str, least: int = 1) -> GroupConfigKey:
    group, _, rest = broker_key.partition(".")
    kind, _, tail = rest.partition(".")
    return GroupConfigKey(
        name, broker_key, f"{group}.{kind}.min.{tail}", f"{group}.{kind}.max.{tail}", least
    )


GROUP_CONFIG_KEYS: Mapping[str, GroupConfigKey] = {
    key.name: key
    for key in sorted(
        (
            _int_key("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms"),
            _int_key("consumer.session.timeout.ms", "group.consumer.session.timeout.ms"),
            GroupConfigKey(
                SHARE_AUTO_OFFSET_RESET, None, None, None, default="latest", kind="reset"
            ),
            _int_key("share.delivery.count.limit", "group.share.delivery.count.limit", least=2),
            _int_key(
                "share.partition.max.record.locks",
                "group.share.partition.max.record.locks",
                least=100,
            ),
            GroupConfigKey(
                "share.renew.acknowledge.enable", None, None, None, default="true", kind="bool"
            ),
            GroupConfigKey(
                "errors.deadletterqueue.topic.name", None, None, None, default="", kind="dlq"
            ),
            GroupConfigKey(
                "errors.deadletterqueue.copy.record.enable",
                None,
                None,
                None,
                default="false",
                kind="bool",
            ),
            _int_key("share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms"),
            _int_key(
                "share.record.lock.duration.ms", "group.share.record.lock.duration.ms", least=1000
            ),
            _int_key("share.session.timeout.ms", "group.share.session.timeout.ms"),
        ),
        key=lambda key: key.name,
    )
}

# Each session timeout must be above its heartbeat interval.
_SESSION_ABOVE_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
)


def _broker_value(broker: Mapping[str, str], name: str) -> str:
    text = broker.get(name)
    if text is None:
        default = CONFIG_KEYS_BY_NAME[name].default
        assert default is not None, f"{name} has a default"
        return default
    return text


def _broker_int(broker: Mapping[str, str], name: str) -> int:
    value = parse_value(name, ConfigType.INT, _broker_value(broker, name))
    assert isinstance(value, int)
    return value


def group_config_defaults(broker: Mapping[str, str]) -> dict[str, str]:
    """Every group key's value for a group without overrides, by name."""
    return {name: _default(key, broker) for name, key in GROUP_CONFIG_KEYS.items()}


def _default(key: GroupConfigKey, broker: Mapping[str, str]) -> str:
    if key.broker_key is not None:
        return str(_broker_int(broker, key.broker_key))
    assert key.default is not None, f"{key.name} has a default"
    return key.default


def validate_group_configs(
    overrides: Mapping[str, str], broker: Mapping[str, str]
) -> dict[str, str]:
    """`overrides` in canonical text; ConfigError naming the first problem otherwise."""
    for name in overrides:
        if name not in GROUP_CONFIG_KEYS:
            raise ConfigError(f"Unknown group config name: {name}", key=name)
    canonical = {name: _canonical(name, text) for name, text in sorted(overrides.items())}
    effective = group_config_defaults(broker) | canonical
    for name, key in GROUP_CONFIG_KEYS.items():
        if key.min_key is None or key.max_key is None:
            continue
        value = int(effective[name])
        low, high = _broker_int(broker, key.min_key), _broker_int(broker, key.max_key)
        if value < low:
            raise _out_of_bounds(name, value, f"greater than or equal to {key.min_key} ({low})")
        if value > high:
            raise _out_of_bounds(name, value, f"less than or equal to {key.max_key} ({high})")
    for session, heartbeat in _SESSION_ABOVE_HEARTBEAT:
        if int(effective[session]) <= int(effective[heartbeat]):
            raise _out_of_bounds(
                session,
                int(effective[session]),
                f"greater than {heartbeat} ({effective[heartbeat]})",
            )
    return canonical


def check_group_broker_keys(broker: Mapping[str, str]) -> None:
    """ConfigError unless each broker default lies within its min and max keys and each
    default heartbeat interval is below its session timeout, as Kafka requires at start."""
    for key in GROUP_CONFIG_KEYS.values():
        if key.broker_key is None or key.min_key is None or key.max_key is None:
            continue
        value = _broker_int(broker, key.broker_key)
        low, high = _broker_int(broker, key.min_key), _broker_int(broker, key.max_key)
        if high < low:
            raise invalid_value(key.max_key, str(high), f"must be at least {key.min_key} ({low})")
        if not low <= value <= high:
            raise invalid_value(
                key.broker_key,
                str(value),
                f"must lie between {key.min_key} ({low}) and {key.max_key} ({high})",
            )
    for session, heartbeat in _SESSION_ABOVE_HEARTBEAT:
        session_key = GROUP_CONFIG_KEYS[session].broker_key
        heartbeat_key = GROUP_CONFIG_KEYS[heartbeat].broker_key
        assert session_key is not None and heartbeat_key is not None
        interval_ms = _broker_int(broker, heartbeat_key)
        timeout_ms = _broker_int(broker, session_key)
        if interval_ms >= timeout_ms:
            raise invalid_value(
                heartbeat_key, str(interval_ms), f"must be less than {session_key} ({timeout_ms})"
            )


def _out_of_bounds(name: str, value: int, bound: str) -> ConfigError:
    return ConfigError(f"{name} must be {bound}; it would be {value}", key=name)


def _canonical(name: str, text: str) -> str:
    key = GROUP_CONFIG_KEYS[name]
    if key.kind == "reset":
        return _offset_reset(name, text)
    if key.kind == "bool":
        flag = parse_value(name, ConfigType.BOOLEAN, text)
        return "true" if flag else "false"
    if key.kind == "dlq":
        return _dead_letter_topic(name, text)
    value = parse_value(name, ConfigType.INT, text)
    assert isinstance(value, int)
    if value < key.least:
        raise invalid_value(name, text, f"must be at least {key.least}")
    return str(value)


def _offset_reset(name: str, text: str) -> str:
    stripped = text.strip()
    lowered = stripped.lower()
    if lowered in _RESETS:
        return lowered
    if lowered.startswith(_BY_DURATION):
        duration = stripped[len(_BY_DURATION) :]
        problem = _duration_problem(duration)
        if problem is None:
            return f"{_BY_DURATION}{duration.upper()}"
        raise invalid_value(name, text, problem)
    raise invalid_value(
        name, text, "must be latest, earliest or by_duration:<ISO-8601 duration, e.g. PT1H>"
    )


def _dead_letter_topic(name: str, text: str) -> str:
    """KIP-1191: a dead-letter topic name must not start with "__" (internal topics)."""
    topic = text.strip()
    if topic.startswith("__"):
        raise invalid_value(name, text, "DLQ topic name must not start with '__'")
    return topic


def duration_ms(text: str) -> int:
    """A checked ISO-8601 duration (by_duration's) in milliseconds."""
    match = _DURATION.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not an ISO-8601 duration")
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    total_ms = sum(
        int(part or 0) * unit_ms
        for part, unit_ms in ((days, 86_400_000), (hours, 3_600_000), (minutes, 60_000))
    )
    total_ms += int(seconds or 0) * 1000 + int((fraction or "").ljust(3, "0")[:3])
    return -total_ms if sign == "-" else total_ms


def _duration_problem(text: str) -> str | None:
    """What keeps `text` from being a non-negative ISO-8601 duration (PnDTnHnMn.nS)."""
    match = _DURATION.fullmatch(text)
    if match is None or match[3] == "T" or not any(match[i] for i in (2, 4, 5, 6)):
        return f"{text!r} is not an ISO-8601 duration such as PT1H or P1DT30M"
    sign, days, _, hours, minutes, seconds, fraction = match.groups()
    total_ns = sum(
        int(part or 0) * unit_s * 10**9
        for part, unit_s in ((days, 86400), (hours, 3600), (minutes, 60), (seconds, 1))
    )
    nanos = int((fraction or "").ljust(9, "0"))
    total_ns += -nanos if (seconds or "").startswith("-") else nanos
    if sign == "-":
        total_ns = -total_ns
    if total_ns < 0:
        return "the duration must not be negative"
    return None
