"""Group configs' keys, defaults and checks (strom.config.group_configs), as Kafka 4.0's
GroupConfig makes them, with Kafka 4.1's by_duration offset reset."""

from __future__ import annotations

import pytest

from strom.config import CONFIG_KEYS_BY_NAME, ConfigError, load_config
from strom.config.group_configs import (
    GROUP_CONFIG_KEYS,
    check_group_broker_keys,
    group_config_defaults,
    validate_group_configs,
)

DEFAULTS = {
    "consumer.heartbeat.interval.ms": "5000",
    "consumer.session.timeout.ms": "45000",
    "errors.deadletterqueue.copy.record.enable": "false",
    "errors.deadletterqueue.topic.name": "",
    "share.auto.offset.reset": "latest",
    "share.delivery.count.limit": "5",
    "share.partition.max.record.locks": "2000",
    "share.renew.acknowledge.enable": "true",
    "share.heartbeat.interval.ms": "5000",
    "share.record.lock.duration.ms": "30000",
    "share.session.timeout.ms": "45000",
}


def test_the_keys_are_kafkas_and_their_defaults_the_broker_keys() -> None:
    assert sorted(GROUP_CONFIG_KEYS) == sorted(DEFAULTS)
    assert group_config_defaults({}) == DEFAULTS
    broker = {"group.consumer.session.timeout.ms": "50000", "group.share.session.timeout.ms": "1"}
    defaults = group_config_defaults(broker)
    assert defaults["consumer.session.timeout.ms"] == "50000"
    assert defaults["share.session.timeout.ms"] == "1"


def test_every_bound_is_a_broker_key_with_kafkas_default() -> None:
    expected = {
        "group.consumer.session.timeout.ms": "45000",
        "group.consumer.min.session.timeout.ms": "45000",
        "group.consumer.max.session.timeout.ms": "60000",
        "group.consumer.heartbeat.interval.ms": "5000",
        "group.consumer.min.heartbeat.interval.ms": "5000",
        "group.consumer.max.heartbeat.interval.ms": "15000",
        "group.share.session.timeout.ms": "45000",
        "group.share.min.session.timeout.ms": "45000",
        "group.share.max.session.timeout.ms": "60000",
        "group.share.heartbeat.interval.ms": "5000",
        "group.share.min.heartbeat.interval.ms": "5000",
        "group.share.max.heartbeat.interval.ms": "15000",
        "group.share.record.lock.duration.ms": "30000",
        "group.share.min.record.lock.duration.ms": "15000",
        "group.share.max.record.lock.duration.ms": "60000",
        "group.share.delivery.count.limit": "5",
        "group.share.min.delivery.count.limit": "2",
        "group.share.max.delivery.count.limit": "10",
        "group.share.partition.max.record.locks": "2000",
        "group.share.min.partition.max.record.locks": "100",
        "group.share.max.partition.max.record.locks": "4000",
    }
    assert {name: CONFIG_KEYS_BY_NAME[name].default for name in expected} == expected
    for key in GROUP_CONFIG_KEYS.values():
        for name in (key.broker_key, key.min_key, key.max_key):
            assert name is None or name in expected


def test_share_keys_of_kafka_4_2() -> None:
    overrides = {
        "share.renew.acknowledge.enable": "FALSE",
        "errors.deadletterqueue.topic.name": " dlq ",
        "share.delivery.count.limit": "3",
    }
    assert validate_group_configs(overrides, {}) == {
        "errors.deadletterqueue.topic.name": "dlq",
        "share.delivery.count.limit": "3",
        "share.renew.acknowledge.enable": "false",
    }
    with pytest.raises(ConfigError, match="must not start with '__'"):
        validate_group_configs({"errors.deadletterqueue.topic.name": "__dlq"}, {})
    with pytest.raises(ConfigError, match="less than or equal to"):
        validate_group_configs({"share.delivery.count.limit": "11"}, {})


def test_values_come_back_canonical() -> None:
    overrides = {
        "consumer.session.timeout.ms": " 50000 ",
        "share.auto.offset.reset": "EARLIEST",
        "share.record.lock.duration.ms": "+20000",
    }
    assert validate_group_configs(overrides, {}) == {
        "consumer.session.timeout.ms": "50000",
        "share.auto.offset.reset": "earliest",
        "share.record.lock.duration.ms": "20000",
    }


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"session.timeout.ms": "1"}, "Unknown group config name: session.timeout.ms"),
        ({"consumer.session.timeout.ms": "soon"}, "expected an integer"),
        ({"consumer.session.timeout.ms": "0"}, "must be at least 1"),
        ({"share.record.lock.duration.ms": "999"}, "must be at least 1000"),
        (
            {"consumer.session.timeout.ms": "44999"},
            "consumer.session.timeout.ms must be greater than or equal to "
            "group.consumer.min.session.timeout.ms (45000); it would be 44999",
        ),
        (
            {"consumer.session.timeout.ms": "60001"},
            "must be less than or equal to group.consumer.max.session.timeout.ms (60000)",
        ),
        (
            {"consumer.heartbeat.interval.ms": "4999"},
            "greater than or equal to group.consumer.min.heartbeat.interval.ms (5000)",
        ),
        (
            {"consumer.heartbeat.interval.ms": "15001"},
            "less than or equal to group.consumer.max.heartbeat.interval.ms (15000)",
        ),
        (
            {"share.session.timeout.ms": "60001"},
            "less than or equal to group.share.max.session.timeout.ms (60000)",
        ),
        (
            {"share.heartbeat.interval.ms": "4000"},
            "greater than or equal to group.share.min.heartbeat.interval.ms (5000)",
        ),
        (
            {"share.record.lock.duration.ms": "14999"},
            "greater than or equal to group.share.min.record.lock.duration.ms (15000)",
        ),
        (
            {"share.record.lock.duration.ms": "60001"},
            "less than or equal to group.share.max.record.lock.duration.ms (60000)",
        ),
        ({"share.auto.offset.reset": "none"}, "must be latest, earliest or by_duration:"),
        ({"share.auto.offset.reset": "by_duration:1h"}, "is not an ISO-8601 duration"),
        ({"share.auto.offset.reset": "by_duration:PT"}, "is not an ISO-8601 duration"),
        ({"share.auto.offset.reset": "by_duration:-PT1S"}, "must not be negative"),
    ],
)
def test_bad_overrides_are_refused_by_name(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate_group_configs(overrides, {})
    assert message in str(caught.value)


def test_bounds_are_the_brokers_and_apply_to_the_effective_values() -> None:
    wide = {
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.min.heartbeat.interval.ms": "1000",
    }
    assert validate_group_configs({"consumer.session.timeout.ms": "6000"}, wide) == {
        "consumer.session.timeout.ms": "6000"
    }
    # The session timeout must exceed the heartbeat interval, the default one included.
    with pytest.raises(ConfigError) as caught:
        validate_group_configs({"consumer.session.timeout.ms": "5000"}, wide)
    assert str(caught.value) == (
        "consumer.session.timeout.ms must be greater than consumer.heartbeat.interval.ms "
        "(5000); it would be 5000"
    )
    # A broker default outside its bounds refuses any change, as in Kafka.
    with pytest.raises(ConfigError, match=r"share\.session\.timeout\.ms must be greater"):
        validate_group_configs({}, {"group.share.session.timeout.ms": "1"})


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("by_duration:PT1H", "by_duration:PT1H"),
        ("by_duration:p1dt30m", "by_duration:P1DT30M"),
        ("BY_DURATION:PT0.5S", "by_duration:PT0.5S"),
        ("by_duration:PT0S", "by_duration:PT0S"),
        ("by_duration:PT-1H61M", "by_duration:PT-1H61M"),
        ("latest", "latest"),
    ],
)
def test_offset_reset_takes_latest_earliest_or_a_duration(text: str, canonical: str) -> None:
    assert validate_group_configs({"share.auto.offset.reset": text}, {}) == {
        "share.auto.offset.reset": canonical
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["group.consumer.session.timeout.ms=70000"],
            "'group.consumer.session.timeout.ms': must lie between "
            "group.consumer.min.session.timeout.ms (45000) and "
            "group.consumer.max.session.timeout.ms (60000)",
        ),
        (
            ["group.consumer.min.session.timeout.ms=70000"],
            "'group.consumer.max.session.timeout.ms': must be at least "
            "group.consumer.min.session.timeout.ms (70000)",
        ),
        (
            ["group.share.record.lock.duration.ms=10000"],
            "must lie between group.share.min.record.lock.duration.ms (15000)",
        ),
        (
            [
                "group.share.heartbeat.interval.ms=45000",
                "group.share.max.heartbeat.interval.ms=5e4",
            ],
            "expected an integer",
        ),
        (
            [
                "group.share.heartbeat.interval.ms=45000",
                "group.share.max.heartbeat.interval.ms=50000",
            ],
            "'group.share.heartbeat.interval.ms': must be less than "
            "group.share.session.timeout.ms (45000)",
        ),
    ],
)
def test_a_broker_starts_only_with_group_defaults_within_their_bounds(
    settings: list[str], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=settings)
    assert message in str(caught.value)


def test_the_default_broker_config_holds_every_group_key() -> None:
    raw = load_config().raw
    assert group_config_defaults(raw) == DEFAULTS
    check_group_broker_keys(raw)
