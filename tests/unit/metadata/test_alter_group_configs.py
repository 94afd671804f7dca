"""The controller's decisions on group configs (config resource type GROUP): a group
need not exist, values are checked against the deciding controller's broker keys on the
effective values, and each resource succeeds or fails as a whole."""

from __future__ import annotations

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

GROUP = ConfigResourceType.GROUP
SET, DELETE = AlterConfigOp.SET, AlterConfigOp.DELETE
APPEND, SUBTRACT = AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT
SESSION = "consumer.session.timeout.ms"


def alter(
    current: MetadataImage,
    name: str,
    *entries: tuple[str, str | None, AlterConfigOp],
    incremental: bool = True,
    validate_only: bool = False,
    broker: dict[str, str] | None = None,
) -> tuple[MetadataImage, list[ConfigRecord], ConfigResult]:
    change = ConfigResourceChange(GROUP, name, [ConfigEntryChange(*e) for e in entries])
    records, results = alter_configs(
        current,
        [change],
        incremental=incremental,
        validate_only=validate_only,
        broker_config=broker,
    )
    config_records = [r for r in records if isinstance(r, ConfigRecord)]
    assert len(config_records) == len(records)
    return current.replay(records), config_records, results[0]


def test_a_group_that_does_not_exist_gets_configs_set_and_deleted() -> None:
    current, records, result = alter(
        MetadataImage.empty(),
        "orders",
        (SESSION, " 50000", SET),
        ("share.auto.offset.reset", "Earliest", SET),
    )
    assert result == ConfigResult(GROUP, "orders")
    assert records == [
        ConfigRecord(GROUP, "orders", SESSION, "50000"),
        ConfigRecord(GROUP, "orders", "share.auto.offset.reset", "earliest"),
    ]
    assert current.group_configs("orders") == {
        SESSION: "50000",
        "share.auto.offset.reset": "earliest",
    }
    current, records, result = alter(current, "orders", (SESSION, None, DELETE))
    assert result.error_code == ErrorCode.none
    assert records == [ConfigRecord(GROUP, "orders", SESSION, None)]
    assert current.group_configs("orders") == {"share.auto.offset.reset": "earliest"}
    current, records, _ = alter(current, "orders", ("share.auto.offset.reset", None, DELETE))
    assert (GROUP, "orders") not in current.configs


def test_alter_configs_replaces_the_whole_set() -> None:
    current, _, _ = alter(MetadataImage.empty(), "g", (SESSION, "50000", SET))
    current, records, result = alter(
        current, "g", ("share.record.lock.duration.ms", "20000", SET), incremental=False
    )
    assert result.error_code == ErrorCode.none
    assert current.group_configs("g") == {"share.record.lock.duration.ms": "20000"}
    assert ConfigRecord(GROUP, "g", SESSION, None) in records


def test_bad_names_values_and_operations_are_refused_whole() -> None:
    empty = MetadataImage.empty()
    cases = [
        ((("session.timeout.ms", "1", SET),), "Unknown group config name: session.timeout.ms"),
        (((SESSION, "90000", SET),), "less than or equal to group.consumer.max.session"),
        (((SESSION, "50000", SET), ("consumer.heartbeat.interval.ms", "1", SET)), "greater than"),
        (((SESSION, "5", APPEND),), "only list configs"),
        ((("share.auto.offset.reset", "latest", SUBTRACT),), "only list configs"),
    ]
    for entries, message in cases:
        current, records, result = alter(empty, "g", *entries)
        assert result.error_code == ErrorCode.invalid_config, entries
        assert message in (result.error_message or ""), (entries, result.error_message)
        assert records == [] and current.configs == {}


def test_the_empty_name_and_repeated_keys_are_invalid_requests() -> None:
    _, _, result = alter(MetadataImage.empty(), "", (SESSION, "50000", SET))
    assert result == ConfigResult(
        GROUP, "", ErrorCode.invalid_request, "Default group resources are not allowed."
    )
    _, _, result = alter(
        MetadataImage.empty(), "g", (SESSION, "50000", SET), (SESSION, None, DELETE)
    )
    assert result.error_code == ErrorCode.invalid_request


def test_the_bounds_are_the_deciding_controllers_broker_keys() -> None:
    broker = {"group.consumer.max.session.timeout.ms": "120000"}
    current, _, result = alter(MetadataImage.empty(), "g", (SESSION, "90000", SET), broker=broker)
    assert result.error_code == ErrorCode.none
    assert current.group_configs("g") == {SESSION: "90000"}
    # Under tighter bounds the stored override refuses any change but its own.
    _, _, refused = alter(current, "g", ("share.session.timeout.ms", "50000", SET))
    assert refused.error_code == ErrorCode.invalid_config
    assert SESSION in (refused.error_message or "")
    _, _, fixed = alter(current, "g", (SESSION, None, DELETE))
    assert fixed.error_code == ErrorCode.none


def test_validate_only_checks_and_writes_nothing() -> None:
    current, records, result = alter(
        MetadataImage.empty(), "g", (SESSION, "50000", SET), validate_only=True
    )
    assert result.error_code == ErrorCode.none and records == [] and current.configs == {}
    _, _, refused = alter(MetadataImage.empty(), "g", (SESSION, "1", SET), validate_only=True)
    assert refused.error_code == ErrorCode.invalid_config


def test_group_configs_sit_beside_a_topic_of_the_same_name() -> None:
    current, _, _ = alter(MetadataImage.empty(), "t", (SESSION, "50000", SET))
    current = current.replay([ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", "1")])
    assert current.group_configs("t") == {SESSION: "50000"}
    assert current.topic_configs("t") == {"retention.ms": "1"}
