"""What the client commands share: connection options, librdkafka settings, error reporting.

The client commands talk to any Kafka-compatible broker through confluent-kafka. It is
imported inside the functions that need it, so `strom serve` never loads librdkafka.
`--command-config FILE` adds client settings (TLS, SASL, client.id) from a properties file,
as Kafka's tools do. Its small syntax is parsed here by hand (`parse_command_config`):
javaproperties implements all of Java's (escapes, continuation lines, trailing blanks kept
in values) and takes any line as a key, where this wants values trimmed and a line
without a key reported with its number.

Exit codes: 0 success, 1 a Kafka error, 2 a usage error, 3 no broker reachable,
130 interrupted by Ctrl-C.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Protocol, TypeVar

import typer

if TYPE_CHECKING:
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient, ClusterMetadata, TopicMetadata  # type: ignore[attr-defined]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 5.0
ClientT = TypeVar("ClientT")


class ExitCode(IntEnum):
    OK = 0
    KAFKA_ERROR = 1
    USAGE = 2
    UNREACHABLE = 3
    INTERRUPTED = 130


class CommandError(Exception):
    """A failure to report as `strom: <message>` with a given exit code."""

    def __init__(self, message: str, exit_code: ExitCode = ExitCode.KAFKA_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def usage_error(message: str) -> CommandError:
    return CommandError(message, ExitCode.USAGE)


BootstrapOption = Annotated[
    str,
    typer.Option(
        "--bootstrap-server",
        "-b",
        envvar="STROM_BOOTSTRAP",
        help="Broker to connect to first, HOST:PORT (a comma-separated list is fine).",
    ),
]
TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=0.1,
        help="Seconds to wait for the broker to answer before giving up.",
    ),
]
CommandConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--command-config",
        metavar="FILE",
        envvar="STROM_COMMAND_CONFIG",
        help="Client settings for librdkafka as key=value lines (a client.properties file), "
        "such as security.protocol, ssl.ca.location, sasl.mechanism, sasl.username, "
        "sasl.oauthbearer.method or client.id.",
        show_default=False,
    ),
]


def echo_error(message: str) -> None:
    print(f"strom: {message}", file=sys.stderr, flush=True)


def raise_failures(failures: list[CommandError]) -> None:
    """Print every failure but the last, then raise the last (its exit code counts)."""
    for failure in failures[:-1]:
        echo_error(failure.message)
    if failures:
        raise failures[-1]


def echo_status(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def reporting_errors() -> Iterator[None]:
    """Turn CommandError and Ctrl-C into a message on stderr and an exit code."""
    try:
        yield
    except CommandError as error:
        echo_error(error.message)
        raise typer.Exit(int(error.exit_code)) from None
    except KeyboardInterrupt:
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    """Split `key=value` at the first `=`; the key must not be empty."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise usage_error(f"{option} expects key=value, got {text!r}")
    return key, value


def parse_key_values(texts: list[str] | None, option: str) -> list[tuple[str, str]]:
    return [parse_key_value(text, option) for text in texts or []]


_ESCAPES = {"\\t": "\t", "\\n": "\n", "\\r": "\r", "\\0": "\0", "\\\\": "\\"}


def unescape_separator(text: str, option: str) -> str:
    """A separator as typed: `\\t`, `\\n`, `\\r`, `\\0` and `\\\\` stand for the character."""
    result = re.sub(r"\\[tnr0\\]", lambda m: _ESCAPES[m.group(0)], text)
    if not result:
        raise usage_error(f"{option} must not be empty")
    return result


_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_SEPARATOR = re.compile(r"[=:]")


def parse_command_config(text: str) -> dict[str, str]:
    """The settings of a properties file: `key=value` or `key: value` lines, split at the
    first `=` or `:`, key and value trimmed; blank lines and lines starting with `#` or `!`
    are skipped; a later line wins. Backslash escapes and continuation lines are not
    interpreted: librdkafka's values need neither."""
    settings: dict[str, str] = {}
    for number, line in enumerate(_LINE_BREAK.split(text), start=1):
        stripped = line.strip()
        if not stripped or stripped[0] in "#!":
            continue
        separator = _SEPARATOR.search(stripped)
        if separator is None:
            raise usage_error(f"line {number}: expected key=value, got {stripped!r}")
        key = stripped[: separator.start()].strip()
        if not key:
            raise usage_error(f"line {number}: no key before {separator.group()!r}")
        settings[key] = stripped[separator.end() :].strip()
    return settings


def read_command_config(path: Path | None) -> dict[str, str]:
    """The settings of a --command-config file (none without one); a file that cannot be
    read or parsed is a usage error naming it."""
    if path is None:
        return {}
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise usage_error(f"cannot read --command-config file {str(path)!r}: {reason}") from None
    try:
        return parse_command_config(text)
    except CommandError as exc:
        raise usage_error(f"--command-config {path}: {exc.message}") from None


# confluent-kafka's settings that take a Python object: a properties file cannot give one.
PYTHON_OBJECT_KEYS = frozenset(
    {
        "error_cb",
        "logger",
        "stats_cb",
        "throttle_cb",
        "oauth_cb",
        "on_delivery",
        "on_commit",
        "default.topic.config",
    }
)
_CREATE_PREFIX = re.compile(r"^Failed to create [\w ]+?: ")
_UNKNOWN_KEY = re.compile(r'^No such configuration property: "([^"]+)"$')


def refused_settings_reason(text: str) -> str:
    """Why librdkafka (or confluent-kafka) refused to create a client, in a few words."""
    text = _CREATE_PREFIX.sub("", text.strip())
    unknown = _UNKNOWN_KEY.match(text)
    if unknown:
        return f"unknown key {unknown.group(1)!r} (librdkafka has no such configuration property)"
    return text


# librdkafka's local errors that mean "no broker answered".
UNREACHABLE_ERRORS = frozenset({"_TRANSPORT", "_RESOLVE", "_ALL_BROKERS_DOWN", "_TIMED_OUT"})

_REASONS = (
    ("connection refused", "connection refused"),
    ("failed to resolve", "host name not found"),
    ("name or service not known", "host name not found"),
    ("timed out", "connection timed out"),
    ("invalid response size", "the peer does not speak the Kafka protocol"),
    ("connection closed by peer", "the broker closed the connection"),
    ("disconnected", "disconnected by the broker"),
    ("connection reset", "connection reset by the peer"),
    ("ssl handshake", "TLS handshake failed"),
    ("sasl", "authentication failed"),
)


def unreachable_reason(error_text: str | None, timeout_s: float) -> str:
    """A short reason from librdkafka's last error text, such as "connection refused"."""
    if not error_text:
        return f"no answer within {timeout_s:g} s"
    lowered = error_text.lower()
    for needle, reason in _REASONS:
        if needle in lowered:
            return reason
    # "host:9092/bootstrap: Something failed (after 3ms in state CONNECT)" -> the middle.
    text = re.sub(r"^(\[thrd:[^\]]*\]: )?\S+/\S+: ", "", error_text)
    return re.sub(r" \(after \d+ms in state \w+\)$", "", text)


def unreachable_message(bootstrap: str, error_text: str | None, timeout_s: float) -> str:
    reason = unreachable_reason(error_text, timeout_s)
    return f"cannot reach a broker at {bootstrap} ({reason})"


def kafka_error_message(name: str, text: str, context: str | None = None) -> str:
    prefix = f"{context}: " if context else ""
    return f"{prefix}{name}: {text}"


def topic_missing_message(topic: str) -> str:
    return f"topic {topic!r} does not exist"


class ErrorRecorder:
    """Takes librdkafka's errors (its error_cb) and its log (through `logger`) off the
    terminal, keeping the last text that says why a broker could not be reached."""

    def __init__(self) -> None:
        self.last_failure_log: str | None = None
        self.last_error: str | None = None
        # A logger outside the logging tree: nothing reaches the root logger's handlers.
        self.logger = logging.Logger("strom.cli.librdkafka")
        self.logger.addHandler(_FailureLogHandler(self))

    @property
    def last_text(self) -> str | None:
        """The log's FAIL lines are in order and cover more cases (a broker closing the
        connection is only logged); error_cb's text is the fallback."""
        return self.last_failure_log or self.last_error

    def __call__(self, error: KafkaError) -> None:
        if error.name() != "_ALL_BROKERS_DOWN":  # says nothing about why
            self.last_error = error.str()


class _FailureLogHandler(logging.Handler):
    """Keeps librdkafka's FAIL log lines (connect failed, disconnected) in the recorder."""

    def __init__(self, recorder: ErrorRecorder) -> None:
        super().__init__()
        self.recorder = recorder

    def emit(self, record: logging.LogRecord) -> None:
        # confluent-kafka logs ("%s [%s] %s", facility, client name, message)
        args = record.args
        if isinstance(args, tuple) and len(args) == 3 and args[0] == "FAIL":
            self.recorder.last_failure_log = str(args[2])


class _Polling(Protocol):
    def poll(self, timeout: float = -1) -> Any: ...


class _MetadataClient(_Polling, Protocol):
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any: ...


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """Where and how patiently to connect, shared by every client command, and the client
    settings of its --command-config file."""

    bootstrap: str
    timeout_s: float
    errors: ErrorRecorder
    command_config: Mapping[str, str] = field(default_factory=dict)
    command_config_file: Path | None = None

    @classmethod
    def create(
        cls, bootstrap: str, timeout_s: float, command_config: Path | None = None
    ) -> ConnectionSettings:
        bootstrap = bootstrap.strip()
        if not bootstrap:
            raise usage_error("--bootstrap-server must not be empty")
        settings = read_command_config(command_config)
        refused = sorted(PYTHON_OBJECT_KEYS & settings.keys())
        if refused:
            raise usage_error(
                f"--command-config {command_config}: {refused[0]} takes a Python object, "
                "which a properties file cannot give"
            )
        return cls(bootstrap, timeout_s, ErrorRecorder(), settings, command_config)

    @property
    def timeout_ms(self) -> int:
        return max(1, round(self.timeout_s * 1000))

    def client_config(self) -> dict[str, Any]:
        """librdkafka settings: fail within the timeout and keep its log off the terminal.
        The --command-config settings win over these defaults, but not over
        --bootstrap-server (the address every message names) nor the error and log
        callbacks."""
        config: dict[str, Any] = {
            "client.id": "strom-cli",
            "socket.connection.setup.timeout.ms": max(1000, self.timeout_ms),
            "log_level": 6,
        }
        config |= self.command_config
        config |= {"bootstrap.servers": self.bootstrap, "error_cb": self.errors}
        debug = os.environ.get("STROM_LIBRDKAFKA_DEBUG")  # e.g. "broker,protocol"
        if debug:
            config |= {"debug": debug, "log_level": 7}  # librdkafka logs to stderr
        else:
            config["logger"] = self.errors.logger
        return config

    def create_client(
        self,
        factory: Callable[[dict[str, Any]], ClientT],
        extra: Mapping[str, Any] | None = None,
    ) -> ClientT:
        """A confluent-kafka client made with client_config() and the command's own
        settings (`extra`, which win). Settings from --command-config that librdkafka
        refuses are a usage error naming the file."""
        from confluent_kafka import KafkaException

        try:
            return factory(self.client_config() | dict(extra or {}))
        except (KafkaException, ValueError, TypeError) as exc:
            if self.command_config_file is None:
                raise
            error = future_error(exc)
            reason = refused_settings_reason(str(exc) if error is None else error.str())
            raise usage_error(f"--command-config {self.command_config_file}: {reason}") from None

    def unreachable(self) -> CommandError:
        return CommandError(
            unreachable_message(self.bootstrap, self.errors.last_text, self.timeout_s),
            ExitCode.UNREACHABLE,
        )

    def kafka_error(self, error: KafkaError, context: str | None = None) -> CommandError:
        """The CommandError for a KafkaError: unreachable (3) or a Kafka error (1)."""
        if error.name() in UNREACHABLE_ERRORS and self.errors.last_text is not None:
            return self.unreachable()
        if error.name() == "UNKNOWN_TOPIC_OR_PART" and context:
            return CommandError(topic_missing_message(context))
        return CommandError(kafka_error_message(error.name(), error.str(), context))

    def metadata(self, client: _MetadataClient, topic: str | None = None) -> ClusterMetadata:
        """All topics' metadata, or one topic's: asking for one topic lets a broker with
        auto.create.topics.enable create it, as Kafka's console producer does; only
        `strom produce` asks that way."""
        from confluent_kafka import KafkaException

        try:
            metadata: ClusterMetadata = (
                client.list_topics(timeout=self.timeout_s)
                if topic is None
                else client.list_topics(topic, timeout=self.timeout_s)
            )
        except KafkaException as exc:
            client.poll(0)  # serve error_cb so the reason is known
            error = exc.args[0]
            if error.name() in UNREACHABLE_ERRORS:
                raise self.unreachable() from None
            raise self.kafka_error(error) from None
        return metadata

    def topic(self, metadata: ClusterMetadata, name: str) -> TopicMetadata:
        """One topic from the metadata, or the error a user should see."""
        topic = metadata.topics.get(name)
        if topic is None:
            raise CommandError(topic_missing_message(name))
        if topic.error is not None:
            raise self.kafka_error(topic.error, name)
        return topic


def future_error(exc: BaseException) -> KafkaError | None:
    """The KafkaError inside an exception an admin future raised, if there is one."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def has_name(error: KafkaError | None, name: str) -> bool:
    return error is not None and error.name() == name


def print_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """Columns aligned, no borders, no trailing spaces; bold headers on a terminal. Cells
    are shown as they are: `[b]` or `:smile:` in a name stays that text."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console()
    if not console.is_terminal:
        console = Console(width=1000)  # no wrapping inside cells when piped
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 3, 0, 0))
    for header in headers:
        table.add_column(header, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # cells are data, never rich markup
    with console.capture() as captured:
        console.print(table)
    lines = captured.get().splitlines()
    print("\n".join(line.rstrip() for line in lines), flush=True)


def admin_client(connection: ConnectionSettings) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return connection.create_client(AdminClient)


def admin_outcome(
    future: concurrent.futures.Future[Any], connection: ConnectionSettings, what: str
) -> tuple[Any, KafkaError | None]:
    """An admin future's (result, None), or (None, the KafkaError it failed with)."""
    try:
        return future.result(timeout=connection.timeout_s + 1), None
    except concurrent.futures.TimeoutError:
        raise CommandError(
            f"{what}: no answer from the broker within {connection.timeout_s:g} s"
        ) from None
    except Exception as exc:
        error = future_error(exc)
        if error is None:
            raise
        return None, error
