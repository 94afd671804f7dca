"""`strom produce TOPIC`: one record per line of stdin."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    ConnectionSettings,
    ExitCode,
    TimeoutOption,
    echo_status,
    kafka_error_message,
    parse_key_values,
    reporting_errors,
    unescape_separator,
    usage_error,
)

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

# How long librdkafka keeps retrying one record before it reports it as failed.
DELIVERY_TIMEOUT_S = 30.0


class CompressionType(StrEnum):
    """A value of the producer's `compression.type`, as `--compression` takes it."""

    NONE = "none"
    GZIP = "gzip"
    SNAPPY = "snappy"
    LZ4 = "lz4"
    ZSTD = "zstd"


class Acks(StrEnum):
    ALL = "all"
    ONE = "1"
    ZERO = "0"


def strip_line_end(line: bytes) -> bytes:
    """The line without its trailing "\\n" (or "\\r\\n")."""
    if line.endswith(b"\n"):
        line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
    return line


def split_key(line: bytes, separator: bytes | None) -> tuple[bytes | None, bytes, bool]:
    """(key, value, separator_found): the key is the text before the first separator."""
    if separator is None:
        return None, line, True
    key, found, value = line.partition(separator)
    if not found:
        return None, line, False
    return key, value, True


def encode_headers(pairs: Iterable[tuple[str, str]]) -> list[tuple[str, bytes]]:
    return [(key, value.encode()) for key, value in pairs]


@dataclass(slots=True)
class DeliveryTally:
    """The delivery callback: counts records delivered and failed, keeps the first error."""

    delivered: int = 0
    failed: int = 0
    first_error: str | None = None

    def fail(self, message: str) -> None:
        self.failed += 1
        if self.first_error is None:
            self.first_error = message

    def __call__(self, error: KafkaError | None, _message: Message | None) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.fail(kafka_error_message(error.name(), error.str()))


def _send(producer: Producer, topic: str, value: bytes, key: bytes | None, **extra: Any) -> None:
    """Queue one record, waiting for room while librdkafka's queue is full."""
    while True:
        try:
            producer.produce(topic, value=value, key=key, **extra)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
        return


def _produce_lines(
    producer: Producer,
    topic: str,
    lines: BinaryIO,
    separator: bytes | None,
    extra: dict[str, Any],
    tally: DeliveryTally,
) -> None:
    """Queue every line of `lines`; records librdkafka refuses at once count as failed."""
    from confluent_kafka import KafkaException

    warned = False
    for line_number, line in enumerate(lines, start=1):
        key, value, found = split_key(strip_line_end(line), separator)
        if not found and not warned:
            warned = True
            echo_status(
                f"strom: warning: line {line_number} has no key separator; such lines "
                "are sent with a null key (reported once)"
            )
        try:
            _send(producer, topic, value, key, **extra)
        except KafkaException as exc:
            error = exc.args[0]
            tally.fail(f"line {line_number}: {kafka_error_message(error.name(), error.str())}")


def _finish(producer: Producer, tally: DeliveryTally, flush_s: float) -> None:
    """Wait for outstanding deliveries; the ones still pending count as failed."""
    pending = producer.flush(flush_s)
    for _ in range(pending):
        tally.fail(f"no delivery report within {flush_s:g} s")


def produce(
    topic: Annotated[str, typer.Argument(help="Topic to write to.", show_default=False)],
    key_separator: Annotated[
        str | None,
        typer.Option(
            "--key-separator",
            "-k",
            help="Split each line at the first SEP into key and value (no key if not given).",
            metavar="SEP",
        ),
    ] = None,
    compression: Annotated[
        CompressionType, typer.Option("--compression", help="Batch compression codec.")
    ] = CompressionType.NONE,
    partition: Annotated[
        int | None,
        typer.Option("--partition", "-p", min=0, help="Write every record to this partition."),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            "-H",
            metavar="KEY=VALUE",
            help="Header key=value on every record (repeatable).",
        ),
    ] = None,
    acks: Annotated[
        Acks, typer.Option("--acks", help="Replicas that must have a record before it counts.")
    ] = Acks.ALL,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Write one record per line of stdin to TOPIC (the line's newline is not included).

    A topic that does not exist is created if the broker creates topics on first use
    (auto.create.topics.enable), as with Kafka's console producer.
    """
    from confluent_kafka import Producer

    with reporting_errors():
        headers = encode_headers(parse_key_values(header, "--header"))
        separator = (
            unescape_separator(key_separator, "--key-separator").encode()
            if key_separator is not None
            else None
        )
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        producer = connection.create_client(
            Producer,
            {
                "acks": acks.value,
                "compression.type": compression.value,
                "linger.ms": 5,
                "message.timeout.ms": round(max(DELIVERY_TIMEOUT_S, timeout) * 1000),
            },
        )
        partitions = connection.topic(connection.metadata(producer, topic), topic).partitions
        tally = DeliveryTally()
        extra: dict[str, Any] = {"on_delivery": tally}
        if headers:
            extra["headers"] = headers
        if partition is not None:
            if partition not in partitions:
                raise usage_error(
                    f"topic {topic!r} has no partition {partition} (it has {len(partitions)})"
                )
            extra["partition"] = partition
        interrupted = False
        try:
            _produce_lines(producer, topic, sys.stdin.buffer, separator, extra, tally)
        except KeyboardInterrupt:
            interrupted = True
        _finish(producer, tally, timeout if interrupted else max(DELIVERY_TIMEOUT_S, timeout) + 1)
        echo_status(f"produced {tally.delivered} records to {topic}")
        if interrupted:
            raise CommandError("interrupted", ExitCode.INTERRUPTED)
        if tally.failed:
            total = tally.delivered + tally.failed
            raise CommandError(
                f"{tally.failed} of {total} records were not delivered ({tally.first_error})"
            )
