"""`strom config get|set|delete`: targets, arguments, tables and error lines."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from confluent_kafka import KafkaError
from kio.schema.errors import ErrorCode
from typer.testing import CliRunner

from strom.cli.common import CommandError, ConnectionSettings, ExitCode
from strom.cli.config_cmd import (
    DESCRIBE_CONFIGS,
    INCREMENTAL_ALTER_CONFIGS,
    AlterOp,
    ConfigRow,
    ConfigTarget,
    TargetKind,
    alter_via_wire,
    change_lines,
    choose_target,
    config_table,
    describe_via_wire,
    kafka_error,
    missing_keys,
    parse_changes,
    parse_keys,
    source_name,
)
from strom.cli.main import app
from strom.protocol.codec import build_response

runner = CliRunner()
TOPIC = ConfigTarget(TargetKind.TOPIC, "orders")
BROKER = ConfigTarget(TargetKind.BROKER, "2")
DEFAULT = ConfigTarget(TargetKind.BROKER_DEFAULT, "")


def test_exactly_one_target() -> None:
    assert choose_target("orders", None, False) == TOPIC
    assert choose_target(None, 2, False) == BROKER
    assert choose_target(None, None, True) == DEFAULT
    assert [t.resource_type for t in (TOPIC, BROKER, DEFAULT)] == [2, 4, 4]
    assert [t.label for t in (TOPIC, BROKER, DEFAULT)] == [
        "topic 'orders'",
        "broker 2",
        "the cluster-wide broker default",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ["config", "get"],
        ["config", "get", "--topic", "t", "--broker", "1"],
        ["config", "set", "--broker", "1", "--cluster-default", "a=1"],
        ["config", "delete", "--topic", "t", "--broker-default", "a"],
    ],
)
def test_commands_refuse_no_target_or_two(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == "strom: choose one of --topic NAME, --broker ID and --cluster-default\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["set", "--topic", "t", "retention.ms"],
            "config set expects key=value, got 'retention.ms'",
        ),
        (["set", "--topic", "t", "=5"], "config set expects key=value, got '=5'"),
        (["set", "--topic", "t", "a=1", "a=2"], "a is given twice"),
        (
            ["delete", "--topic", "t", "a=1"],
            "expected a config key, got 'a=1' (to change it: config set)",
        ),
        (["get", "--topic", " "], "--topic must not be empty"),
        (["get", "--topic", "t", " "], "a config key must not be empty"),
    ],
)
def test_argument_errors_exit_2_before_connecting(args: list[str], message: str) -> None:
    result = runner.invoke(app, ["config", *args])
    assert result.exit_code == 2
    assert result.stderr == f"strom: {message}\n"


def test_set_and_delete_need_arguments() -> None:
    assert runner.invoke(app, ["config", "set", "--topic", "t"]).exit_code == 2
    assert runner.invoke(app, ["config", "delete", "--topic", "t"]).exit_code == 2
    assert runner.invoke(app, ["config", "get", "--broker", "-1"]).exit_code == 2


def test_parsing_keeps_values_with_equals_signs_and_drops_repeated_keys() -> None:
    assert parse_changes(["a=b=c", "x="]) == [("a", "b=c"), ("x", "")]
    assert parse_keys(["b", "a", "b"]) == ["b", "a"]
    with pytest.raises(CommandError):
        parse_changes(["a=1", " a=2"])


def test_sources_have_kafkas_names() -> None:
    assert [source_name(i) for i in (1, 2, 3, 4, 5)] == [
        "DYNAMIC_TOPIC_CONFIG",
        "DYNAMIC_BROKER_CONFIG",
        "DYNAMIC_DEFAULT_BROKER_CONFIG",
        "STATIC_BROKER_CONFIG",
        "DEFAULT_CONFIG",
    ]
    assert (source_name(8), source_name(42)) == ("GROUP_CONFIG", "source 42")


def test_table_sorted_with_sensitive_and_missing_values() -> None:
    rows = [
        ConfigRow("segment.ms", "1000", 1),
        ConfigRow("password", "hunter2", 4, sensitive=True),
        ConfigRow("retention.bytes", None, 5),
    ]
    assert config_table(rows) == [
        ("password", "(sensitive)", "STATIC_BROKER_CONFIG"),
        ("retention.bytes", "(none)", "DEFAULT_CONFIG"),
        ("segment.ms", "1000", "DYNAMIC_TOPIC_CONFIG"),
    ]
    assert missing_keys(rows, ["segment.ms", "nope"]) == ["nope"]


def test_change_lines() -> None:
    assert change_lines(TOPIC, AlterOp.SET, [("retention.ms", "5")]) == [
        "set retention.ms=5 for topic 'orders'"
    ]
    assert change_lines(DEFAULT, AlterOp.DELETE, [("log.retention.ms", "")]) == [
        "deleted log.retention.ms for the cluster-wide broker default"
    ]


def test_broker_errors_read_as_one_line_naming_the_target() -> None:
    connection = ConnectionSettings.create("127.0.0.1:9092", 5)
    invalid = KafkaError(KafkaError.INVALID_CONFIG, "Invalid value soon for retention.ms")
    error = kafka_error(connection, invalid, TOPIC)
    assert error.message == "topic 'orders': INVALID_CONFIG: Invalid value soon for retention.ms"
    assert error.exit_code is ExitCode.KAFKA_ERROR
    missing = KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Broker: Unknown topic or partition")
    assert kafka_error(connection, missing, TOPIC).message == "topic 'orders' does not exist"
    assert kafka_error(connection, missing, BROKER).message.startswith("broker 2: ")


class FakeSession:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.asked: list[tuple[int, dict[str, Any]]] = []

    async def call(
        self, api_key: int, name: str, fields: Mapping[str, Any], **bounds: int | None
    ) -> tuple[int, Any]:
        self.asked.append((api_key, dict(fields)))
        return self.answer.__version__, self.answer


def describe_answer(error: ErrorCode = ErrorCode.none) -> Any:
    entry = {
        "name": "log.retention.ms",
        "value": "7200000",
        "read_only": False,
        "config_source": 3,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": 0,
        "documentation": None,
    }
    return build_response(
        DESCRIBE_CONFIGS,
        4,
        {
            "throttle_time": 0,
            "results": [
                {
                    "error_code": error,
                    "error_message": "not allowed" if error else None,
                    "resource_type": 4,
                    "resource_name": "",
                    "configs": [] if error else [entry],
                }
            ],
        },
    )


def alter_answer(error: ErrorCode, message: str | None) -> Any:
    return build_response(
        INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "throttle_time": 0,
            "responses": [
                {
                    "error_code": error,
                    "error_message": message,
                    "resource_type": 4,
                    "resource_name": "",
                }
            ],
        },
    )


def test_the_cluster_default_is_the_broker_resource_without_a_name() -> None:
    session = FakeSession(describe_answer())
    rows = asyncio.run(describe_via_wire(session, DEFAULT))  # type: ignore[arg-type]
    assert rows == [ConfigRow("log.retention.ms", "7200000", 3)]
    [resource] = session.asked[0][1]["resources"]
    assert (resource["resource_type"], resource["resource_name"]) == (4, "")


def test_cluster_default_changes_are_incremental() -> None:
    session = FakeSession(alter_answer(ErrorCode.none, None))
    changes = [("log.retention.ms", "1"), ("num.partitions", "3")]
    asyncio.run(alter_via_wire(session, DEFAULT, AlterOp.SET, changes))  # type: ignore[arg-type]
    asyncio.run(alter_via_wire(session, DEFAULT, AlterOp.DELETE, [("log.retention.ms", "")]))  # type: ignore[arg-type]
    [(api_key, set_request), (_, delete_request)] = session.asked
    assert api_key == INCREMENTAL_ALTER_CONFIGS
    assert set_request["resources"][0]["configs"] == [
        {"name": "log.retention.ms", "config_operation": 0, "value": "1"},
        {"name": "num.partitions", "config_operation": 0, "value": "3"},
    ]
    assert delete_request["resources"][0]["configs"] == [
        {"name": "log.retention.ms", "config_operation": 1, "value": None}
    ]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            alter_answer(ErrorCode.invalid_config, "log.dirs is read-only"),
            "the cluster-wide broker default: INVALID_CONFIG: log.dirs is read-only",
        ),
        (
            alter_answer(ErrorCode.policy_violation, None),
            "the cluster-wide broker default: POLICY_VIOLATION",
        ),
    ],
)
def test_cluster_default_errors_are_one_line(answer: Any, message: str) -> None:
    session = FakeSession(answer)
    with pytest.raises(CommandError) as caught:
        asyncio.run(alter_via_wire(session, DEFAULT, AlterOp.SET, [("log.dirs", "/x")]))  # type: ignore[arg-type]
    assert caught.value.message == message
    session = FakeSession(describe_answer(ErrorCode.cluster_authorization_failed))
    with pytest.raises(CommandError, match=r"CLUSTER_AUTHORIZATION_FAILED: not allowed$"):
        asyncio.run(describe_via_wire(session, DEFAULT))  # type: ignore[arg-type]
