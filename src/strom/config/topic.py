"""Per-topic config keys (Kafka's names), their validation, and each topic's effective values.

A topic key without a topic override takes its value from a broker key: `retention.ms`
from `log.retention.ms` (itself resolved from minutes and hours), `segment.bytes` from
`log.segment.bytes`, and so on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from strom.config.broker import BrokerConfig
from strom.config.errors import ConfigSource
from strom.config.log_keys import CLEANUP_POLICIES, COMPRESSION_TYPES, TIMESTAMP_TYPES
from strom.config.schema import (
    AtLeast,
    Between,
    ConfigType,
    ConfigValue,
    OneOf,
    Validator,
    check_value,
    format_value,
    unknown_key,
)


@dataclass(frozen=True, slots=True)
class TopicConfigKey:
    """A per-topic key; `broker_key` is the broker key that supplies its default."""

    name: str
    type: ConfigType
    broker_key: str
    doc: str
    validator: Validator | None = None

    def parse(self, text: str) -> ConfigValue:
        """The typed, validated value of `text`; ConfigError naming this key otherwise."""
        return check_value(self.name, self.type, self.validator, text)


INT, LONG, BOOLEAN = ConfigType.INT, ConfigType.LONG, ConfigType.BOOLEAN
STRING, LIST, DOUBLE = ConfigType.STRING, ConfigType.LIST, ConfigType.DOUBLE

_KEYS = (
    TopicConfigKey(
        "cleanup.policy",
        LIST,
        "log.cleanup.policy",
        "delete old segments, compact by key, or both.",
        OneOf(CLEANUP_POLICIES),
    ),
    TopicConfigKey(
        "compression.type",
        STRING,
        "compression.type",
        "Compression of stored batches; producer = keep the producer's.",
        OneOf(COMPRESSION_TYPES),
    ),
    TopicConfigKey(
        "delete.retention.ms",
        LONG,
        "log.cleaner.delete.retention.ms",
        "Time tombstones and emptied transactions' markers are kept in a compacted topic.",
        AtLeast(0),
    ),
    TopicConfigKey(
        "file.delete.delay.ms",
        LONG,
        "log.segment.delete.delay.ms",
        "Time before a deleted segment's files are removed.",
        AtLeast(0),
    ),
    TopicConfigKey(
        "flush.messages",
        LONG,
        "log.flush.interval.messages",
        "Records between fsyncs; 1 = fsync before acknowledging.",
        AtLeast(1),
    ),
    TopicConfigKey(
        "flush.ms", LONG, "log.flush.interval.ms", "Most time records stay unsynced.", AtLeast(0)
    ),
    TopicConfigKey(
        "index.interval.bytes",
        INT,
        "log.index.interval.bytes",
        "Bytes between two entries of the offset index.",
        AtLeast(0),
    ),
    TopicConfigKey(
        "max.message.bytes", INT, "message.max.bytes", "Largest record batch accepted.", AtLeast(0)
    ),
    TopicConfigKey(
        "message.timestamp.type",
        STRING,
        "log.message.timestamp.type",
        "Record timestamps: CreateTime or LogAppendTime.",
        OneOf(TIMESTAMP_TYPES),
    ),
    TopicConfigKey(
        "message.timestamp.before.max.ms",
        LONG,
        "log.message.timestamp.before.max.ms",
        "Most a CreateTime timestamp may lie in the past.",
        AtLeast(0),
    ),
    TopicConfigKey(
        "message.timestamp.after.max.ms",
        LONG,
        "log.message.timestamp.after.max.ms",
        "Most a CreateTime timestamp may lie in the future.",
        AtLeast(0),
    ),
    TopicConfigKey(
        "min.cleanable.dirty.ratio",
        DOUBLE,
        "log.cleaner.min.cleanable.ratio",
        "Share of uncompacted log that triggers compaction.",
        Between(0, 1),
    ),
    TopicConfigKey(
        "min.compaction.lag.ms",
        LONG,
        "log.cleaner.min.compaction.lag.ms",
        "Least age of a record before it may be compacted.",
        AtLeast(0),
    ),
    TopicConfigKey(
        "max.compaction.lag.ms",
        LONG,
        "log.cleaner.max.compaction.lag.ms",
        "Most age of a record before it must be compacted.",
        AtLeast(1),
    ),
    TopicConfigKey(
        "min.insync.replicas",
        INT,
        "min.insync.replicas",
        "Replicas that must have a write for acks=all.",
        AtLeast(1),
    ),
    TopicConfigKey("preallocate", BOOLEAN, "log.preallocate", "Preallocate segment files.", None),
    TopicConfigKey(
        "retention.bytes",
        LONG,
        "log.retention.bytes",
        "Most bytes kept per partition; -1 = no limit.",
        None,
    ),
    TopicConfigKey(
        "retention.ms",
        LONG,
        "log.retention.ms",
        "Time a segment is kept; -1 = forever.",
        AtLeast(-1),
    ),
    TopicConfigKey(
        "segment.bytes", INT, "log.segment.bytes", "Size at which a segment is rolled.", AtLeast(14)
    ),
    TopicConfigKey(
        "segment.index.bytes",
        INT,
        "log.index.size.max.bytes",
        "Largest size of an offset index.",
        AtLeast(4),
    ),
    TopicConfigKey(
        "segment.ms", LONG, "log.roll.ms", "Age at which a segment is rolled.", AtLeast(1)
    ),
    TopicConfigKey(
        "strom.share.delivery.delay.ms",
        LONG,
        "strom.share.delivery.delay.ms",
        "Share groups get a record only from its timestamp + this (strom's).",
        AtLeast(0),
    ),
    TopicConfigKey(
        "strom.share.redelivery.backoff.ms",
        LONG,
        "strom.share.redelivery.backoff.ms",
        "A released share record waits this x 2^(deliveries-1) (strom's).",
        AtLeast(0),
    ),
    TopicConfigKey(
        "strom.share.redelivery.backoff.max.ms",
        LONG,
        "strom.share.redelivery.backoff.max.ms",
        "The longest redelivery backoff of a share record (strom's).",
        AtLeast(0),
    ),
    TopicConfigKey(
        "unclean.leader.election.enable",
        BOOLEAN,
        "unclean.leader.election.enable",
        "Allow a replica outside the ISR to become leader, losing data.",
        None,
    ),
)

TOPIC_CONFIG_KEYS: Mapping[str, TopicConfigKey] = MappingProxyType(
    {key.name: key for key in sorted(_KEYS, key=lambda key: key.name)}
)
"""Per-topic keys by name, in alphabetical order."""

# Broker keys whose effective value is resolved from other keys: (value, keys behind it).
_RESOLVED: Mapping[str, tuple[Callable[[BrokerConfig], int], tuple[str, ...]]] = {
    "log.retention.ms": (
        lambda broker: broker.log_retention_ms,
        ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ),
    "log.roll.ms": (lambda broker: broker.log_roll_ms, ("log.roll.ms", "log.roll.hours")),
    "log.flush.interval.ms": (
        lambda broker: broker.log_flush_interval_ms,
        ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ),
}


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str]:
    """Checked topic configs in canonical text (`TRUE` → `true`, ` 5 ` → `5`).

    A None value (Kafka's null: use the broker's value) is left out of the result. Raises
    ConfigError naming the key for an unknown key or a bad value.
    """
    result: dict[str, str] = {}
    for name, text in configs.items():
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            raise unknown_key(name, tuple(TOPIC_CONFIG_KEYS), "topic config key")
        if text is not None:
            result[name] = format_value(key.parse(text)) or ""
    return result


def effective_topic_config(
    broker: BrokerConfig, overrides: Mapping[str, str]
) -> dict[str, tuple[str, ConfigSource]]:
    """Every topic key's value and where it came from: the topic's override
    (DYNAMIC_TOPIC_CONFIG), else the broker key behind it: a dynamic config for this broker
    (DYNAMIC_BROKER_CONFIG) or for the cluster (DYNAMIC_DEFAULT_BROKER_CONFIG) when `broker`
    came from `BrokerConfig.with_dynamic`, the config file or --set (STATIC_BROKER_CONFIG),
    or the default (DEFAULT_CONFIG). Raises ConfigError if an override is invalid."""
    checked = validate_topic_configs(overrides)
    result: dict[str, tuple[str, ConfigSource]] = {}
    for name, key in TOPIC_CONFIG_KEYS.items():
        if name in checked:
            result[name] = (checked[name], ConfigSource.DYNAMIC_TOPIC_CONFIG)
        else:
            result[name] = broker_default(broker, key.broker_key)
    return result


def broker_default(broker: BrokerConfig, broker_key: str) -> tuple[str, ConfigSource]:
    """The effective text of a broker key and its source, resolving synonyms."""
    resolved = _RESOLVED.get(broker_key)
    if resolved is not None:
        # The value comes from the first of its keys that was set (ms before minutes
        # before hours), so the source is that key's.
        value, behind = resolved
        source = next(
            (
                broker.sources[name]
                for name in behind
                if broker.sources.get(name, ConfigSource.DEFAULT_CONFIG)
                is not ConfigSource.DEFAULT_CONFIG
            ),
            ConfigSource.DEFAULT_CONFIG,
        )
        return str(value(broker)), source
    return broker.raw[broker_key], broker.sources[broker_key]
