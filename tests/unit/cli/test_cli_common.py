"""Pure helpers shared by the client commands: parsing, error messages, exit codes."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
import typer

from strom.cli.common import (
    CommandError,
    ConnectionSettings,
    ErrorRecorder,
    ExitCode,
    parse_key_value,
    parse_key_values,
    reporting_errors,
    unescape_separator,
    unreachable_message,
    unreachable_reason,
)


@dataclass(frozen=True)
class FakeError:
    """Stands in for confluent_kafka.KafkaError: only what the helpers call."""

    error_name: str
    text: str = ""

    def name(self) -> str:
        return self.error_name

    def str(self) -> str:
        return self.text


REFUSED = (
    "127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused "
    "(after 0ms in state CONNECT)"
)
UNRESOLVED = (
    "nosuch.invalid:9092/bootstrap: Failed to resolve 'nosuch.invalid:9092': "
    "Name or service not known (after 2ms in state CONNECT)"
)


def test_key_value_splits_at_the_first_equals_sign() -> None:
    assert parse_key_value("retention.ms=1000", "--config") == ("retention.ms", "1000")
    assert parse_key_value("k=a=b", "--header") == ("k", "a=b")
    assert parse_key_value(" k =", "--header") == ("k", "")
    assert parse_key_values(None, "--config") == []
    assert parse_key_values(["a=1", "b=2"], "--config") == [("a", "1"), ("b", "2")]


@pytest.mark.parametrize("text", ["novalue", "=value", "", "  =x"])
def test_key_value_without_a_key_is_a_usage_error(text: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_key_value(text, "--config")
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == f"--config expects key=value, got {text!r}"


def test_separator_escapes() -> None:
    assert unescape_separator("\\t", "-k") == "\t"
    assert unescape_separator("\t", "-k") == "\t"
    assert unescape_separator("::", "-k") == "::"
    assert unescape_separator("a\\nb\\0\\\\", "-k") == "a\nb\0\\"
    with pytest.raises(CommandError) as caught:
        unescape_separator("", "--key-separator")
    assert caught.value.exit_code == ExitCode.USAGE


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (REFUSED, "connection refused"),
        (UNRESOLVED, "host name not found"),
        ("h:1/bootstrap: Connection setup timed out in state CONNECT", "connection timed out"),
        (None, "no answer within 2.5 s"),
        ("h:1/1: Something odd happened (after 12ms in state UP)", "Something odd happened"),
        ("[thrd:h:1/1]: h:1/1: Odd (after 1ms in state UP)", "Odd"),
        (
            "[thrd:h:1/1]: h:1/1: Disconnected: connection closed by peer: receive 0 after "
            "POLLIN (after 0ms in state UP)",
            "the broker closed the connection",
        ),
    ],
)
def test_unreachable_reason(text: str | None, reason: str) -> None:
    assert unreachable_reason(text, 2.5) == reason


def test_unreachable_message_names_the_bootstrap_server() -> None:
    assert (
        unreachable_message("127.0.0.1:9092", REFUSED, 5)
        == "cannot reach a broker at 127.0.0.1:9092 (connection refused)"
    )


def test_recorder_keeps_the_last_error_that_says_why() -> None:
    recorder = ErrorRecorder()
    recorder(FakeError("_TRANSPORT", REFUSED))  # type: ignore[arg-type]
    recorder(FakeError("_ALL_BROKERS_DOWN", "1/1 brokers are down"))  # type: ignore[arg-type]
    assert recorder.last_text == REFUSED


def test_recorder_takes_failure_lines_from_librdkafkas_log() -> None:
    recorder = ErrorRecorder()
    # confluent-kafka calls logger.log(level, "%s [%s] %s", facility, client, message)
    recorder.logger.log(logging.INFO, "%s [%s] %s", "FAIL", "strom-cli#producer-1", REFUSED)
    recorder.logger.log(logging.DEBUG, "%s [%s] %s", "CONNECT", "strom-cli#producer-1", "x")
    recorder(FakeError("_TRANSPORT", "older error"))  # type: ignore[arg-type]
    assert recorder.last_text == REFUSED


def connection() -> ConnectionSettings:
    return ConnectionSettings.create("127.0.0.1:9092", 5.0)


def test_transport_error_after_a_recorded_cause_means_unreachable() -> None:
    conn = connection()
    conn.errors(FakeError("_TRANSPORT", REFUSED))  # type: ignore[arg-type]
    error = conn.kafka_error(FakeError("_TRANSPORT", "Failed to get metadata"))  # type: ignore[arg-type]
    assert error.exit_code == ExitCode.UNREACHABLE
    assert error.message == "cannot reach a broker at 127.0.0.1:9092 (connection refused)"


def test_broker_errors_are_kafka_errors_with_name_and_message() -> None:
    conn = connection()
    error = conn.kafka_error(
        FakeError("POLICY_VIOLATION", "Broker: Policy violation"),  # type: ignore[arg-type]
        "orders",
    )
    assert error.exit_code == ExitCode.KAFKA_ERROR
    assert error.message == "orders: POLICY_VIOLATION: Broker: Policy violation"


def test_unknown_topic_error_names_the_topic() -> None:
    error = connection().kafka_error(
        FakeError("UNKNOWN_TOPIC_OR_PART", "Broker: Unknown topic"),  # type: ignore[arg-type]
        "orders",
    )
    assert (error.exit_code, error.message) == (
        ExitCode.KAFKA_ERROR,
        "topic 'orders' does not exist",
    )


def test_client_config_bounds_connection_setup_and_silences_librdkafka() -> None:
    conn = ConnectionSettings.create(" 10.0.0.1:9092 ", 2.5)
    config = conn.client_config()
    assert config["bootstrap.servers"] == "10.0.0.1:9092"
    assert config["socket.connection.setup.timeout.ms"] == 2500
    assert config["logger"] is conn.errors.logger
    assert config["error_cb"] is conn.errors


def test_empty_bootstrap_is_a_usage_error() -> None:
    with pytest.raises(CommandError) as caught:
        ConnectionSettings.create("  ", 5.0)
    assert caught.value.exit_code == ExitCode.USAGE


def test_reporting_errors_maps_to_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(typer.Exit) as caught, reporting_errors():
        raise CommandError("cannot reach a broker at x:1 (no answer)", ExitCode.UNREACHABLE)
    assert caught.value.exit_code == 3
    assert capsys.readouterr().err == "strom: cannot reach a broker at x:1 (no answer)\n"

    with pytest.raises(typer.Exit) as caught, reporting_errors():
        raise KeyboardInterrupt
    assert caught.value.exit_code == 130
