"""AlterConfigs and IncrementalAlterConfigs for topics, brokers and the cluster default."""

from __future__ import annotations

from cluster_harness import cluster, commit, create_topic
from kio.schema.errors import ErrorCode

from strom.metadata.configs import (
    AlterConfigOp,
    ConfigEntryChange,
    ConfigResourceChange,
    ConfigResult,
    alter_configs,
)
from strom.metadata.image import MetadataImage
from strom.metadata.records import ConfigRecord, ConfigResourceType

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER
SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE
APPEND, SUBTRACT = AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT


def image() -> MetadataImage:
    return create_topic(cluster(1, 2), "t", {0: (1, 2)})


def incremental(
    current: MetadataImage,
    kind: int,
    name: str,
    *entries: tuple[str, str | None, AlterConfigOp],
    validate_only: bool = False,
) -> tuple[MetadataImage, ConfigResult]:
    change = ConfigResourceChange(kind, name, [ConfigEntryChange(*e) for e in entries])
    records, results = alter_configs(
        current, [change], incremental=True, validate_only=validate_only
    )
    return commit(current, records), results[0]


def test_incremental_set_delete_append_subtract_on_a_topic() -> None:
    current, result = incremental(
        image(), TOPIC, "t", ("retention.ms", " 1000 ", SET), ("cleanup.policy", "compact", APPEND)
    )
    assert result == ConfigResult(TOPIC, "t")
    # APPEND starts from the default (delete) when there is no override, as Kafka does
    assert current.topic_configs("t") == {
        "retention.ms": "1000",
        "cleanup.policy": "delete,compact",
    }
    current, _ = incremental(current, TOPIC, "t", ("cleanup.policy", "compact", APPEND))
    assert current.topic_configs("t")["cleanup.policy"] == "delete,compact"  # no duplicates
    current, _ = incremental(
        current, TOPIC, "t", ("cleanup.policy", "delete", SUBTRACT), ("retention.ms", None, DELETE)
    )
    assert current.topic_configs("t") == {"cleanup.policy": "compact"}


def test_incremental_changes_write_only_what_changed() -> None:
    current, _ = incremental(image(), TOPIC, "t", ("retention.ms", "1000", SET))
    records, _ = alter_configs(
        current,
        [ConfigResourceChange(TOPIC, "t", [ConfigEntryChange("retention.ms", "1000")])],
        incremental=True,
    )
    assert records == []


def test_legacy_alter_configs_replaces_the_whole_set() -> None:
    current, _ = incremental(
        image(), TOPIC, "t", ("retention.ms", "1000", SET), ("segment.ms", "5000", SET)
    )
    records, results = alter_configs(
        current,
        [ConfigResourceChange(TOPIC, "t", [ConfigEntryChange("max.message.bytes", "2000")])],
        incremental=False,
    )
    assert results[0].error_code == ErrorCode.none
    assert records == [
        ConfigRecord(TOPIC, "t", "retention.ms", None),
        ConfigRecord(TOPIC, "t", "segment.ms", None),
        ConfigRecord(TOPIC, "t", "max.message.bytes", "2000"),
    ]
    assert commit(current, records).topic_configs("t") == {"max.message.bytes": "2000"}


def test_topic_refusals() -> None:
    current = image()
    cases = [
        (("retention.ms", "abc", SET), ErrorCode.invalid_config, "expected a long integer"),
        (("retension.ms", "1", SET), ErrorCode.invalid_config, "did you mean 'retention.ms'"),
        (("retention.ms", "1", APPEND), ErrorCode.invalid_config, "only list configs"),
        (("cleanup.policy", "keep", APPEND), ErrorCode.invalid_config, "'keep' is not one of"),
        (("retention.ms", None, SET), ErrorCode.invalid_request, "SET of 'retention.ms' needs"),
    ]
    for entry, code, fragment in cases:
        after, result = incremental(current, TOPIC, "t", entry)
        assert result.error_code == code, entry
        assert fragment in (result.error_message or ""), (entry, result.error_message)
        assert after.configs == current.configs
    _, result = incremental(current, TOPIC, "nope", ("retention.ms", "1", SET))
    assert result.error_code == ErrorCode.unknown_topic_or_partition


def test_a_resource_succeeds_or_fails_as_a_whole() -> None:
    current, result = incremental(
        image(), TOPIC, "t", ("retention.ms", "1", SET), ("segment.bytes", "1", SET)
    )
    assert result.error_code == ErrorCode.invalid_config
    assert current.topic_configs("t") == {}


def test_cluster_default_and_per_broker_configs() -> None:
    current, result = incremental(image(), BROKER, "", ("log.retention.ms", "60000", SET))
    assert result.error_code == ErrorCode.none
    current, result = incremental(current, BROKER, "2", ("log.cleanup.policy", "compact", APPEND))
    assert result.error_code == ErrorCode.none
    assert current.cluster_default_configs() == {"log.retention.ms": "60000"}
    assert current.broker_configs(2) == {"log.cleanup.policy": "delete,compact"}


def test_static_unknown_and_unregistered_broker_configs_are_refused() -> None:
    current = image()
    _, result = incremental(current, BROKER, "", ("log.dirs", "/x", SET))
    assert result.error_code == ErrorCode.invalid_config
    assert result.error_message == (
        "log.dirs is a static broker setting: change it in the properties file and restart"
    )
    _, result = incremental(current, BROKER, "1", ("log.retention.hours", "1", SET))
    assert result.error_message == (
        "log.retention.hours is a static broker setting: change it in the properties file and "
        "restart (log.retention.ms can be changed dynamically)"
    )
    _, result = incremental(current, BROKER, "1", ("log.retention.hourz", "1", SET))
    assert result.error_code == ErrorCode.invalid_config
    assert "unknown broker config key 'log.retention.hourz'" in (result.error_message or "")
    _, result = incremental(current, BROKER, "1", ("log.cleaner.threads", "-1", SET))
    assert result.error_code == ErrorCode.invalid_config
    _, result = incremental(current, BROKER, "9", ("log.retention.ms", "1", SET))
    assert result.error_code == ErrorCode.broker_id_not_registered
    _, result = incremental(current, BROKER, "x", ("log.retention.ms", "1", SET))
    assert result.error_code == ErrorCode.invalid_request


def test_requests_with_repeats_or_unknown_resource_types_are_refused() -> None:
    current = image()
    entry = ConfigEntryChange("retention.ms", "1")
    records, results = alter_configs(
        current,
        [
            ConfigResourceChange(TOPIC, "t", [entry]),
            ConfigResourceChange(TOPIC, "t", [entry]),
            ConfigResourceChange(8, "x", [entry]),
            ConfigResourceChange(BROKER, "", [entry, entry]),
        ],
        incremental=True,
    )
    assert records == []
    assert [r.error_code for r in results] == [ErrorCode.invalid_request] * 4
    assert "not supported" in (results[2].error_message or "")


def test_validate_only_writes_nothing() -> None:
    current, result = incremental(
        image(), TOPIC, "t", ("retention.ms", "1", SET), validate_only=True
    )
    assert result.error_code == ErrorCode.none and current.topic_configs("t") == {}
