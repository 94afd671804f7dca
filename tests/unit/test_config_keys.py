"""strom.config's key registry, arbitrary values loading or failing cleanly, and topic
configs: validation, effective values and their sources.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.config import (
    CONFIG_KEYS,
    CONFIG_KEYS_BY_NAME,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    config_key,
    effective_topic_config,
    load_config,
    validate_topic_configs,
)

STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG
DYNAMIC = ConfigSource.DYNAMIC_TOPIC_CONFIG

# ---------------------------------------------------------------- the registry


def test_registry_is_consistent() -> None:
    names = [key.name for key in CONFIG_KEYS]
    assert len(names) == len(set(names))
    for key in CONFIG_KEYS:
        key.default_value  # noqa: B018 - every default parses and passes its validator
        assert key.doc and "\n" not in key.doc and len(key.doc) < 100, key.name
    for topic_key in TOPIC_CONFIG_KEYS.values():
        assert topic_key.broker_key in CONFIG_KEYS_BY_NAME, topic_key.name
    assert list(TOPIC_CONFIG_KEYS) == sorted(TOPIC_CONFIG_KEYS)
    assert config_key("num.partitions").default == "1"
    with pytest.raises(ConfigError, match=r"did you mean 'num.partitions'"):
        config_key("num.partition")


def test_compatibility_keys_have_no_effect() -> None:
    for name in (
        "socket.send.buffer.bytes",
        "num.network.threads",
        "num.io.threads",
        "background.threads",
        "queued.max.requests",
        "num.recovery.threads.per.data.dir",
    ):
        assert not CONFIG_KEYS_BY_NAME[name].effect, name
    assert CONFIG_KEYS_BY_NAME["log.segment.bytes"].effect


_KEY_NAMES = sorted(CONFIG_KEYS_BY_NAME)
_PLAUSIBLE = st.text(alphabet=st.sampled_from("0123456789-,:/@[]. aAbPLAINTEXT"), max_size=30)


@given(st.dictionaries(st.sampled_from(_KEY_NAMES), st.one_of(st.text(), _PLAUSIBLE)))
def test_any_values_load_or_raise_config_error(settings: dict[str, str]) -> None:
    try:
        config = load_config(overrides=[f"{key}={value}" for key, value in settings.items()])
    except ConfigError as error:
        assert error.key is None or error.key in CONFIG_KEYS_BY_NAME
        return
    assert isinstance(config, BrokerConfig)
    effective_topic_config(config, {})


# ---------------------------------------------------------------- topic configs


def test_validate_topic_configs() -> None:
    assert validate_topic_configs(
        {
            "retention.ms": " 1000 ",
            "cleanup.policy": "compact, delete",
            "unclean.leader.election.enable": "TRUE",
            "segment.bytes": None,
            "min.cleanable.dirty.ratio": "0.25",
        }
    ) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
        "min.cleanable.dirty.ratio": "0.25",
    }


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "retension.ms",
            "1",
            "unknown topic config key 'retension.ms' (did you mean 'retention.ms'?)",
        ),
        ("retention.ms", "abc", "invalid value 'abc' for 'retention.ms': expected a long integer"),
        ("retention.ms", "-2", "invalid value '-2' for 'retention.ms': must be at least -1"),
        ("segment.bytes", "13", "invalid value '13' for 'segment.bytes': must be at least 14"),
        ("cleanup.policy", "delete,keep", "'keep' is not one of compact, delete"),
        ("compression.type", "brotli", "must be one of uncompressed, zstd"),
        ("message.timestamp.type", "Now", "must be one of CreateTime, LogAppendTime"),
        ("min.cleanable.dirty.ratio", "1.5", "must be between 0 and 1"),
        ("min.insync.replicas", "0", "must be at least 1"),
        ("flush.messages", "0", "must be at least 1"),
    ],
)
def test_invalid_topic_config(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({name: value})
    assert message in str(info.value)
    assert info.value.key == name


def test_effective_topic_config_sources() -> None:
    broker = load_config(
        file_text="log.retention.hours=1\nlog.segment.bytes=1000\n",
        overrides=["message.max.bytes=2000"],
    )
    effective = effective_topic_config(broker, {"cleanup.policy": "compact"})
    assert set(effective) == set(TOPIC_CONFIG_KEYS)
    assert effective["cleanup.policy"] == ("compact", DYNAMIC)
    assert effective["retention.ms"] == ("3600000", STATIC)
    assert effective["segment.bytes"] == ("1000", STATIC)
    assert effective["max.message.bytes"] == ("2000", STATIC)
    assert effective["segment.ms"] == ("604800000", DEFAULT)
    assert effective["flush.messages"] == ("1", DEFAULT)
    assert effective["flush.ms"] == (str(2**63 - 1), DEFAULT)
    assert effective["message.timestamp.type"] == ("CreateTime", DEFAULT)
    assert effective["min.insync.replicas"] == ("1", DEFAULT)
    assert effective["index.interval.bytes"] == ("4096", DEFAULT)
    assert effective["retention.bytes"] == ("-1", DEFAULT)
    assert all(isinstance(source, ConfigSource) for _, source in effective.values())


def test_effective_topic_config_resolves_broker_synonyms() -> None:
    broker = load_config(
        overrides=["log.roll.hours=2", "log.flush.scheduler.interval.ms=300", "log.retention.ms=-1"]
    )
    effective = effective_topic_config(broker, {})
    assert effective["segment.ms"] == ("7200000", STATIC)
    assert effective["flush.ms"] == ("300", STATIC)
    assert effective["retention.ms"] == ("-1", STATIC)


def test_effective_topic_config_rejects_bad_override() -> None:
    with pytest.raises(ConfigError, match=r"'segment.ms'"):
        effective_topic_config(load_config(), {"segment.ms": "0"})
