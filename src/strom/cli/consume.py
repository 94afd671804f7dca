"""`strom consume TOPIC`: records to stdout, one per line.

The consumer is assigned the partitions directly (no group membership, no commits), so
it never disturbs a consumer group and starts exactly where it is told.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, BinaryIO

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
    reporting_errors,
    topic_missing_message,
    unescape_separator,
    usage_error,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition

# Upper bound on one poll, so Ctrl-C and --timeout-ms are noticed promptly.
POLL_INTERVAL_S = 0.5
BATCH_RECORDS = 500

HeaderValue = str | bytes | None
Headers = list[tuple[str, HeaderValue]] | dict[str, HeaderValue]


@dataclass(frozen=True, slots=True)
class RecordFormat:
    """How a record becomes one output line: [partition:offset SEP][headers SEP][key SEP]value."""

    print_key: bool = False
    print_headers: bool = False
    print_offset: bool = False
    separator: bytes = b"\t"
    raw: bool = False

    def render(
        self,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
    ) -> bytes:
        fields: list[bytes] = []
        if self.print_offset:
            fields.append(f"{partition}:{offset}".encode())
        if self.print_headers:
            pairs = headers.items() if isinstance(headers, dict) else headers or []
            fields.append(b",".join(name.encode() + b"=" + self._text(v) for name, v in pairs))
        if self.print_key:
            fields.append(self._text(key))
        fields.append(self._text(value))
        return self.separator.join(fields) + b"\n"

    def _text(self, data: HeaderValue) -> bytes:
        if data is None:
            return b"null"
        if isinstance(data, str):
            return data.encode()
        if self.raw:
            return data
        return data.decode("utf-8", errors="replace").encode()


@dataclass(frozen=True, slots=True)
class StartPosition:
    """Where reading starts in each assigned partition."""

    offset: int  # an offset, or librdkafka's OFFSET_BEGINNING / OFFSET_END
    reset: str  # auto.offset.reset: where to go when `offset` is out of range


def start_position(
    from_beginning: bool, from_end: bool, offset: int | None, timestamp: int | None = None
) -> StartPosition:
    """Where to start; with a timestamp, the offsets come later (offsets_for_times) and
    this is where partitions without a record that late start: their end."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    chosen = sum((from_beginning, from_end, offset is not None, timestamp is not None))
    if chosen > 1:
        raise usage_error(
            "choose one of --from-beginning, --from-end, --offset and --from-timestamp"
        )
    if from_beginning:
        return StartPosition(OFFSET_BEGINNING, "earliest")
    if offset is not None:
        return StartPosition(offset, "earliest")
    return StartPosition(OFFSET_END, "latest")


def parse_timestamp(text: str) -> int:
    """--from-timestamp: milliseconds since the epoch, or an ISO 8601 date and time
    (2026-11-28T09:30:00Z, or with a UTC offset; without one it is UTC)."""
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    try:
        moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    except ValueError:
        raise usage_error(
            f"--from-timestamp {text!r}: expected milliseconds since the epoch or an "
            "ISO 8601 time such as 2026-11-28T09:30:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """--grep: a record is printed if the pattern is found in its key or its value (read
    as UTF-8, undecodable bytes replaced); no pattern lets every record through."""

    pattern: re.Pattern[str] | None

    @staticmethod
    def create(text: str | None) -> RecordFilter:
        if text is None:
            return RecordFilter(None)
        try:
            return RecordFilter(re.compile(text))
        except re.error as exc:
            raise usage_error(f"--grep {text!r} is not a regular expression: {exc}") from None

    def matches(self, key: bytes | str | None, value: bytes | str | None) -> bool:
        if self.pattern is None:
            return True
        for field in (key, value):
            if field is None:
                continue
            text = field if isinstance(field, str) else field.decode("utf-8", errors="replace")
            if self.pattern.search(text):
                return True
        return False


class _Idle:
    """Tracks time since the last record against --timeout-ms (None: wait forever)."""

    def __init__(self, timeout_ms: int | None) -> None:
        self.timeout_s = None if timeout_ms is None else timeout_ms / 1000
        self.since = time.monotonic()

    def record_arrived(self) -> None:
        self.since = time.monotonic()

    def poll_s(self) -> float:
        """How long the next poll may block; 0 when the idle timeout has passed."""
        if self.timeout_s is None:
            return POLL_INTERVAL_S
        left = self.timeout_s - (time.monotonic() - self.since)
        return max(0.0, min(POLL_INTERVAL_S, left))


def _check(message: Message, topic: str, warned: set[str]) -> bool:
    """True if `message` is a record; warns about (or raises for) an error event."""
    error = message.error()
    if error is None:
        return True
    name = error.name()
    if name in ("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC"):
        raise CommandError(topic_missing_message(topic))
    if error.fatal():
        raise CommandError(kafka_error_message(name, error.str()))
    if name not in warned and name != "_PARTITION_EOF":
        warned.add(name)
        echo_status(f"strom: warning: {kafka_error_message(name, error.str())}")
    return False


@dataclass(slots=True)
class _Progress:
    written: int = 0


def _read(
    consumer: Consumer,
    topic: str,
    out: BinaryIO,
    fmt: RecordFormat,
    count: int | None,
    idle: _Idle,
    progress: _Progress,
    wanted_records: RecordFilter,
) -> None:
    """Write records (those `wanted_records` lets through) until --count is reached or
    the idle timeout passes; records filtered out count as arrivals for the timeout."""
    warned: set[str] = set()
    while count is None or progress.written < count:
        wait_s = idle.poll_s()
        if wait_s <= 0:
            return
        wanted = BATCH_RECORDS if count is None else min(BATCH_RECORDS, count - progress.written)
        before, arrived = progress.written, False
        for message in consumer.consume(wanted, wait_s):
            if not _check(message, topic, warned):
                continue
            arrived = True
            if not wanted_records.matches(message.key(), message.value()):
                continue
            out.write(
                fmt.render(
                    message.partition() or 0,
                    message.offset() or 0,
                    message.key(),
                    message.value(),
                    message.headers(),
                )
            )
            progress.written += 1
        if progress.written > before:
            out.flush()
        if arrived:
            idle.record_arrived()


def _at_time(
    consumer: Consumer, topic: str, partitions: list[int], timestamp: int, timeout_s: float
) -> list[TopicPartition]:
    """Each partition at its first record at or after `timestamp` (ListOffsets by time);
    a partition with none starts at its end, waiting for the next record."""
    from confluent_kafka import OFFSET_END, KafkaException
    from confluent_kafka import TopicPartition as Position

    asked = [Position(topic, p, timestamp) for p in partitions]
    try:
        found = consumer.offsets_for_times(asked, timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        raise CommandError(kafka_error_message(error.name(), error.str())) from None
    return [Position(topic, f.partition, f.offset if f.offset >= 0 else OFFSET_END) for f in found]


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so exiting does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def consume(
    topic: Annotated[str, typer.Argument(help="Topic to read.", show_default=False)],
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning", help="Start at the oldest record.")
    ] = False,
    from_end: Annotated[
        bool, typer.Option("--from-end", help="Start after the newest record (the default).")
    ] = False,
    offset: Annotated[
        int | None,
        typer.Option("--offset", min=0, help="Start at this offset (in every partition read)."),
    ] = None,
    from_timestamp: Annotated[
        str | None,
        typer.Option(
            "--from-timestamp",
            metavar="TIME",
            help="Start at the first record at or after TIME: ms since the epoch or ISO 8601.",
        ),
    ] = None,
    grep: Annotated[
        str | None,
        typer.Option(
            "--grep",
            "-g",
            metavar="REGEX",
            help="Print only records whose key or value matches (Python regex).",
        ),
    ] = None,
    partition: Annotated[
        int | None, typer.Option("--partition", "-p", min=0, help="Read only this partition.")
    ] = None,
    count: Annotated[
        int | None, typer.Option("--count", "-n", min=1, help="Exit after N records.")
    ] = None,
    timeout_ms: Annotated[
        int | None,
        typer.Option("--timeout-ms", min=1, help="Exit when no record arrived for T ms."),
    ] = None,
    print_key: Annotated[bool, typer.Option("--print-key", help="Print the key.")] = False,
    print_headers: Annotated[
        bool, typer.Option("--print-headers", help="Print headers as k=v,k2=v2.")
    ] = False,
    print_offset: Annotated[
        bool, typer.Option("--print-offset", help="Print PARTITION:OFFSET first.")
    ] = False,
    key_separator: Annotated[
        str,
        typer.Option(
            "--key-separator",
            "-k",
            metavar="SEP",
            help="Between printed fields (\\t, \\n, \\0 are understood).",
            show_default="\\t",
        ),
    ] = "\t",
    raw: Annotated[
        bool, typer.Option("--raw", help="Write bytes as they are, without UTF-8 decoding.")
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Print TOPIC's records to stdout, one per line, from the end (or where told)."""
    from confluent_kafka import Consumer, TopicPartition

    with reporting_errors():
        timestamp = None if from_timestamp is None else parse_timestamp(from_timestamp)
        start = start_position(from_beginning, from_end, offset, timestamp)
        wanted_records = RecordFilter.create(grep)
        fmt = RecordFormat(
            print_key=print_key,
            print_headers=print_headers,
            print_offset=print_offset,
            separator=unescape_separator(key_separator, "--key-separator").encode(),
            raw=raw,
        )
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        consumer = connection.create_client(
            Consumer,
            {
                "group.id": f"strom-cli-{secrets.token_hex(6)}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": start.reset,
            },
        )
        progress = _Progress()
        interrupted = False
        try:
            partitions = connection.topic(connection.metadata(consumer), topic).partitions
            if partition is not None and partition not in partitions:
                raise usage_error(
                    f"topic {topic!r} has no partition {partition} (it has {len(partitions)})"
                )
            chosen = sorted(partitions) if partition is None else [partition]
            assignment = [TopicPartition(topic, p, start.offset) for p in chosen]
            if timestamp is not None:
                assignment = _at_time(consumer, topic, chosen, timestamp, connection.timeout_s)
            consumer.assign(assignment)
            idle = _Idle(timeout_ms)
            _read(consumer, topic, sys.stdout.buffer, fmt, count, idle, progress, wanted_records)
        except BrokenPipeError:
            _silence_stdout()  # the reader went away, as `| head` does: not an error
        except KeyboardInterrupt:
            interrupted = True
        finally:
            consumer.close()
        echo_status(f"consumed {progress.written} records from {topic}")
        if interrupted:
            raise typer.Exit(int(ExitCode.INTERRUPTED))
