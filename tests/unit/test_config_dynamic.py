"""Dynamic broker configs: which keys may change live, precedence, sources, topic defaults."""

from __future__ import annotations

import pytest

from strom.config import (
    CONFIG_KEYS,
    CONFIG_KEYS_BY_NAME,
    ConfigError,
    ConfigSource,
    DynamicUpdateMode,
    effective_topic_config,
    load_config,
    validate_dynamic_broker_configs,
)
from strom.config.dynamic import shown
from strom.config.keys import CLUSTER_WIDE_KEYS

STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG
TOPIC = ConfigSource.DYNAMIC_TOPIC_CONFIG
BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG
CLUSTER = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG


def test_dynamic_update_modes_follow_kafka() -> None:
    assert set(CONFIG_KEYS_BY_NAME) >= CLUSTER_WIDE_KEYS
    for name in (
        "log.retention.ms",
        "log.retention.bytes",
        "log.segment.bytes",
        "log.roll.ms",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.cleanup.policy",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "compression.type",
        "message.max.bytes",
        "log.cleaner.threads",
        "log.cleaner.delete.retention.ms",
        "log.index.interval.bytes",
        "log.message.timestamp.type",
    ):
        assert CONFIG_KEYS_BY_NAME[name].dynamic is DynamicUpdateMode.CLUSTER_WIDE, name
    for name in (
        "log.dirs",
        "node.id",
        "listeners",
        "log.retention.hours",
        "log.retention.minutes",
        "log.roll.hours",
        "log.cleaner.enable",
        "num.partitions",
        "log.flush.scheduler.interval.ms",
    ):
        assert CONFIG_KEYS_BY_NAME[name].dynamic is DynamicUpdateMode.READ_ONLY, name


def test_every_key_that_backs_a_topic_config_is_dynamic() -> None:
    from strom.config import TOPIC_CONFIG_KEYS

    for topic_key in TOPIC_CONFIG_KEYS.values():
        mode = CONFIG_KEYS_BY_NAME[topic_key.broker_key].dynamic
        assert mode is DynamicUpdateMode.CLUSTER_WIDE, topic_key.broker_key


def test_validate_dynamic_broker_configs() -> None:
    validate_dynamic_broker_configs(
        {"log.retention.ms": "1000", "log.cleanup.policy": None}, per_broker=False
    )
    validate_dynamic_broker_configs({"message.max.bytes": "10"}, per_broker=True)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"log.dirs": "/x"},
            "log.dirs is a static broker setting: change it in the properties file and restart",
        ),
        (
            {"log.roll.hours": "1"},
            "log.roll.hours is a static broker setting: change it in the properties file and "
            "restart (log.roll.ms can be changed dynamically)",
        ),
        (
            {"log.retention.mss": "1"},
            "unknown broker config key 'log.retention.mss' (did you mean 'log.retention.ms'?)",
        ),
        (
            {"log.retention.ms": "soon"},
            "invalid value 'soon' for 'log.retention.ms': expected a long integer",
        ),
        ({"log.dirs": None}, "log.dirs is a static broker setting"),
    ],
)
def test_dynamic_refusals_name_the_key(changes: dict[str, str | None], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_dynamic_broker_configs(changes, per_broker=True)
    assert message in str(info.value)
    assert info.value.key == next(iter(changes))


def test_precedence_per_broker_then_cluster_default_then_static_then_default() -> None:
    static = load_config(overrides=["log.retention.ms=1000", "message.max.bytes=2000"])
    config = static.with_dynamic(
        {"log.retention.ms": "5000", "log.segment.bytes": "4096", "message.max.bytes": "3000"},
        {"message.max.bytes": "4000"},
    )
    assert config.log_retention_ms == 5000 and config.sources["log.retention.ms"] is CLUSTER
    assert config.log_segment_bytes == 4096 and config.sources["log.segment.bytes"] is CLUSTER
    assert config.message_max_bytes == 4000 and config.sources["message.max.bytes"] is BROKER
    assert config.raw["message.max.bytes"] == "4000"
    assert config.sources["log.cleanup.policy"] is DEFAULT
    assert config.dynamic_problems == ()
    # the static layer is kept: removing the dynamic values restores it
    again = config.with_dynamic({}, {})
    assert again == static
    assert again.log_retention_ms == 1000 and again.sources["log.retention.ms"] is STATIC
    assert static.with_dynamic({}, {}) is static


def test_invalid_or_static_stored_values_are_skipped_with_a_reason() -> None:
    config = load_config().with_dynamic(
        {"log.retention.ms": "abc", "log.dirs": "/elsewhere", "min.insync.replicas": "2"},
        {"no.such.key": "1"},
    )
    assert config.min_insync_replicas == 2
    assert config.log_retention_ms == 604_800_000 and str(config.log_dir) == "data"
    assert len(config.dynamic_problems) == 3
    assert any(
        "cluster-default dynamic config log.retention.ms='abc' ignored" in problem
        for problem in config.dynamic_problems
    )
    assert any("log.dirs is a static broker setting" in p for p in config.dynamic_problems)
    assert any("unknown broker config key 'no.such.key'" in p for p in config.dynamic_problems)


def test_dynamic_values_do_not_count_as_ignored_static_keys() -> None:
    static = load_config(overrides=["num.io.threads=4"])
    config = static.with_dynamic({"num.network.threads": "5"}, {})
    assert config.ignored == ("num.io.threads",)
    assert config.sources["num.network.threads"] is CLUSTER


def test_topics_follow_dynamic_broker_defaults_with_their_sources() -> None:
    broker = load_config(
        file_text="log.retention.hours=1\nlog.segment.bytes=1000\nlog.roll.hours=2\n"
    ).with_dynamic(
        {"log.retention.ms": "60000", "log.cleanup.policy": "compact", "min.insync.replicas": "2"},
        {"min.insync.replicas": "3", "log.roll.ms": "500"},
    )
    effective = effective_topic_config(broker, {"cleanup.policy": "delete"})
    assert effective["cleanup.policy"] == ("delete", TOPIC)  # topic override wins
    assert effective["retention.ms"] == ("60000", CLUSTER)  # ms beats the static hours
    assert effective["min.insync.replicas"] == ("3", BROKER)
    assert effective["segment.ms"] == ("500", BROKER)
    assert effective["segment.bytes"] == ("1000", STATIC)
    assert effective["max.message.bytes"] == ("1048588", DEFAULT)
    without_override = effective_topic_config(broker, {})
    assert without_override["cleanup.policy"] == ("compact", CLUSTER)


def test_auto_leader_rebalance_is_a_real_setting_now() -> None:
    assert load_config().auto_leader_rebalance_enable is True
    config = load_config(overrides=["auto.leader.rebalance.enable=false"])
    assert config.auto_leader_rebalance_enable is False and config.ignored == ()
    assert all(key.name != "auto.leader.rebalance.enable" or key.effect for key in CONFIG_KEYS)


# ---------------------------------------------------------------- TLS stores

_SSL = ["listeners=PLAINTEXT://:9092,SSL://:9093", "ssl.keystore.type=PEM"]


def test_tls_stores_change_per_broker_also_for_one_listener() -> None:
    for name in ("ssl.keystore.location", "listener.name.ssl.ssl.keystore.location"):
        validate_dynamic_broker_configs({name: "/etc/strom/new.pem"}, per_broker=True)
        with pytest.raises(ConfigError, match="only be set for one broker"):
            validate_dynamic_broker_configs({name: "/etc/strom/new.pem"}, per_broker=False)
    for name in ("ssl.client.auth", "listener.name.ssl.ssl.client.auth", "ssl.enabled.protocols"):
        with pytest.raises(ConfigError, match="static broker setting"):
            validate_dynamic_broker_configs({name: "required"}, per_broker=True)
    with pytest.raises(ConfigError, match="a listener may override the ssl"):
        validate_dynamic_broker_configs({"listener.name.ssl.num.partitions": "3"}, per_broker=True)


def test_a_dynamic_listener_store_overrides_the_static_one() -> None:
    static = load_config(overrides=[*_SSL, "ssl.keystore.location=/etc/strom/old.pem"])
    assert dict(static.listener_tls)["SSL"].keystore_location == "/etc/strom/old.pem"
    rotated = static.with_dynamic(
        {}, {"listener.name.ssl.ssl.keystore.location": "/etc/strom/new.pem"}
    )
    assert dict(rotated.listener_tls)["SSL"].keystore_location == "/etc/strom/new.pem"
    assert rotated.dynamic_problems == ()
    elsewhere = static.with_dynamic(
        {}, {"listener.name.other.ssl.keystore.location": "/etc/strom/new.pem"}
    )
    assert dict(elsewhere.listener_tls)["SSL"].keystore_location == "/etc/strom/old.pem"
    assert "not in 'listeners'" in elsewhere.dynamic_problems[0]


def test_log_lines_never_show_a_password() -> None:
    line = shown({"ssl.keystore.password": "hunter2", "listener.name.ssl.ssl.key.password": "x"})
    assert "hunter2" not in line and "'x'" not in line
    assert line.count("(sensitive)") == 2
    assert shown({"log.retention.ms": "1000"}) == "{'log.retention.ms': '1000'}"
    assert shown({}) == "{}"


def test_the_keys_kafka_types_as_passwords_are_sensitive() -> None:
    """Kafka's PASSWORD keys (SslConfigs, SaslConfigs): DescribeConfigs and log lines
    never show their values. A PEM chain or trust list is not secret in itself, but
    Kafka hides them, and a client relying on that must not see them from strom."""
    passwords = {
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.keystore.key",
        "ssl.keystore.certificate.chain",
        "ssl.truststore.password",
        "ssl.truststore.certificates",
    }
    assert {n for n in passwords if CONFIG_KEYS_BY_NAME[n].sensitive} == passwords
