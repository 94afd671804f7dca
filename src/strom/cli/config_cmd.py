"""`strom config get|set|delete`: the configs of a topic, of one broker, or the cluster-wide
broker default, with where each value comes from.

Topics and single brokers go through confluent-kafka's admin client (DescribeConfigs,
IncrementalAlterConfigs). librdkafka refuses a BROKER resource without a broker id, which
is how Kafka names the cluster-wide default, so that one goes through strom's own client
(wire.py) with the same two requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

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
    admin_client,
    admin_outcome,
    echo_error,
    kafka_error_message,
    parse_key_value,
    print_table,
    reporting_errors,
    topic_missing_message,
    usage_error,
)
from strom.cli.wire import WireSession, error_name, is_error, run_session

if TYPE_CHECKING:
    from confluent_kafka import KafkaError

config_app = typer.Typer(
    name="config",
    help="Show and change the configs of a topic, a broker or the cluster-wide default.",
    no_args_is_help=True,
)

DESCRIBE_CONFIGS = 32
INCREMENTAL_ALTER_CONFIGS = 44
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


class TargetKind(Enum):
    TOPIC = TOPIC_RESOURCE
    BROKER = BROKER_RESOURCE
    BROKER_DEFAULT = 0


class AlterOp(Enum):
    """IncrementalAlterConfigs' operations (APPEND and SUBTRACT are not offered)."""

    SET = 0
    DELETE = 1


@dataclass(frozen=True, slots=True)
class ConfigTarget:
    kind: TargetKind
    name: str
    """The topic's name, the broker's id, or "" for the cluster-wide broker default."""

    @property
    def resource_type(self) -> int:
        return BROKER_RESOURCE if self.kind is TargetKind.BROKER_DEFAULT else self.kind.value

    @property
    def label(self) -> str:
        if self.kind is TargetKind.TOPIC:
            return f"topic {self.name!r}"
        if self.kind is TargetKind.BROKER:
            return f"broker {self.name}"
        return "the cluster-wide broker default"


@dataclass(frozen=True, slots=True)
class ConfigRow:
    name: str
    value: str | None
    source: int
    """Kafka's ConfigSource number (strom.config.ConfigSource)."""
    sensitive: bool = False


def choose_target(topic: str | None, broker: int | None, cluster_default: bool) -> ConfigTarget:
    """Exactly one of --topic, --broker and --cluster-default; a usage error otherwise."""
    chosen = [topic is not None, broker is not None, cluster_default]
    if sum(chosen) != 1:
        raise usage_error("choose one of --topic NAME, --broker ID and --cluster-default")
    if topic is not None:
        if not topic.strip():
            raise usage_error("--topic must not be empty")
        return ConfigTarget(TargetKind.TOPIC, topic)
    if broker is not None:
        return ConfigTarget(TargetKind.BROKER, str(broker))
    return ConfigTarget(TargetKind.BROKER_DEFAULT, "")


def parse_changes(texts: Sequence[str]) -> list[tuple[str, str]]:
    """`KEY=VALUE` arguments as (key, value); a key given twice is a usage error."""
    changes = [parse_key_value(text, "config set") for text in texts]
    _check_unique([key for key, _ in changes])
    return changes


def parse_keys(keys: Sequence[str]) -> list[str]:
    cleaned = [key.strip() for key in keys]
    for key in cleaned:
        if not key:
            raise usage_error("a config key must not be empty")
        if "=" in key:
            raise usage_error(f"expected a config key, got {key!r} (to change it: config set)")
    return list(dict.fromkeys(cleaned))


def _check_unique(keys: Sequence[str]) -> None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            raise usage_error(f"{key} is given twice")
        seen.add(key)


def source_name(source: int) -> str:
    """4 -> "STATIC_BROKER_CONFIG": Kafka's names, as kafka-configs.sh prints them."""
    from strom.config import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return f"source {source}"


def config_table(rows: Sequence[ConfigRow]) -> list[tuple[str, str, str]]:
    """(key, value, source) per config, sorted by key."""
    shown = []
    for row in sorted(rows, key=lambda r: r.name):
        value = "(sensitive)" if row.sensitive else ("(none)" if row.value is None else row.value)
        shown.append((row.name, value, source_name(row.source)))
    return shown


def missing_keys(rows: Sequence[ConfigRow], keys: Sequence[str]) -> list[str]:
    names = {row.name for row in rows}
    return [key for key in keys if key not in names]


def change_lines(
    target: ConfigTarget, op: AlterOp, changes: Sequence[tuple[str, str]]
) -> list[str]:
    if op is AlterOp.SET:
        return [f"set {key}={value} for {target.label}" for key, value in changes]
    return [f"deleted {key} for {target.label}" for key, _ in changes]


# --- through confluent-kafka: a topic or one broker -------------------------------------


def _resource(target: ConfigTarget, entries: Sequence[Any] | None = None) -> Any:
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    kind = ResourceType.TOPIC if target.kind is TargetKind.TOPIC else ResourceType.BROKER
    if entries is None:
        return ConfigResource(kind, target.name)
    return ConfigResource(kind, target.name, incremental_configs=list(entries))


def kafka_error(
    connection: ConnectionSettings, error: KafkaError, target: ConfigTarget
) -> CommandError:
    if error.name() == "UNKNOWN_TOPIC_OR_PART" and target.kind is TargetKind.TOPIC:
        return CommandError(topic_missing_message(target.name))
    command_error = connection.kafka_error(error)
    if command_error.exit_code is ExitCode.KAFKA_ERROR:
        return CommandError(kafka_error_message(error.name(), error.str(), target.label))
    return command_error


def _checked_admin(connection: ConnectionSettings, target: ConfigTarget) -> Any:
    """An admin client, after the metadata says the broker is there (librdkafka would wait
    for an unknown broker id until the timeout)."""
    admin = admin_client(connection)
    metadata = connection.metadata(admin)
    if target.kind is TargetKind.BROKER and int(target.name) not in metadata.brokers:
        known = ", ".join(str(i) for i in sorted(metadata.brokers)) or "none"
        raise CommandError(f"no broker {target.name} in the cluster (brokers: {known})")
    return admin


def describe_via_admin(connection: ConnectionSettings, target: ConfigTarget) -> list[ConfigRow]:
    admin = _checked_admin(connection, target)
    resource = _resource(target)
    futures = admin.describe_configs([resource], request_timeout=connection.timeout_s)
    entries, error = admin_outcome(futures[resource], connection, target.label)
    if error is not None:
        raise kafka_error(connection, error, target)
    return [
        ConfigRow(e.name, e.value, int(getattr(e.source, "value", e.source)), e.is_sensitive)
        for e in entries.values()
    ]


def alter_via_admin(
    connection: ConnectionSettings,
    target: ConfigTarget,
    op: AlterOp,
    changes: Sequence[tuple[str, str]],
) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry  # type: ignore[attr-defined]

    admin = _checked_admin(connection, target)
    kafka_op = AlterConfigOpType.SET if op is AlterOp.SET else AlterConfigOpType.DELETE
    entries = [
        ConfigEntry(key, value if op is AlterOp.SET else None, incremental_operation=kafka_op)
        for key, value in changes
    ]
    resource = _resource(target, entries)
    futures = admin.incremental_alter_configs([resource], request_timeout=connection.timeout_s)
    _, error = admin_outcome(futures[resource], connection, target.label)
    if error is not None:
        raise kafka_error(connection, error, target)


# --- through strom's client: the cluster-wide broker default ----------------------------


def wire_failure(target: ConfigTarget, code: Any, message: str | None) -> CommandError:
    """The error as one line: the target, the error name and the broker's message."""
    if not message:
        return CommandError(f"{target.label}: {error_name(code)}")
    return CommandError(kafka_error_message(error_name(code), message, target.label))


async def describe_via_wire(session: WireSession, target: ConfigTarget) -> list[ConfigRow]:
    _, answer = await session.call(
        DESCRIBE_CONFIGS,
        "DescribeConfigs",
        {
            "resources": [
                {
                    "resource_type": target.resource_type,
                    "resource_name": target.name,
                    "configuration_keys": None,
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
        min_version=1,
        max_version=4,
    )
    rows = []
    for result in answer.results:
        if is_error(result.error_code):
            raise wire_failure(target, result.error_code, result.error_message)
        rows += [
            ConfigRow(e.name, e.value, int(e.config_source), bool(e.is_sensitive))
            for e in result.configs
        ]
    return rows


async def alter_via_wire(
    session: WireSession, target: ConfigTarget, op: AlterOp, changes: Sequence[tuple[str, str]]
) -> None:
    configs = [
        {
            "name": key,
            "config_operation": op.value,
            "value": value if op is AlterOp.SET else None,
        }
        for key, value in changes
    ]
    _, answer = await session.call(
        INCREMENTAL_ALTER_CONFIGS,
        "IncrementalAlterConfigs",
        {
            "resources": [
                {
                    "resource_type": target.resource_type,
                    "resource_name": target.name,
                    "configs": configs,
                }
            ],
            "validate_only": False,
        },
        max_version=1,
    )
    for result in answer.responses:
        if is_error(result.error_code):
            raise wire_failure(target, result.error_code, result.error_message)


# --- the commands -----------------------------------------------------------------------


def _describe(
    bootstrap: str, timeout: float, command_config: Path | None, target: ConfigTarget
) -> list[ConfigRow]:
    if target.kind is TargetKind.BROKER_DEFAULT:
        return run_session(
            bootstrap, timeout, lambda s: describe_via_wire(s, target), command_config
        )
    connection = ConnectionSettings.create(bootstrap, timeout, command_config)
    return describe_via_admin(connection, target)


def _alter(
    bootstrap: str,
    timeout: float,
    command_config: Path | None,
    target: ConfigTarget,
    op: AlterOp,
    changes: Sequence[tuple[str, str]],
) -> None:
    if target.kind is TargetKind.BROKER_DEFAULT:
        run_session(
            bootstrap, timeout, lambda s: alter_via_wire(s, target, op, changes), command_config
        )
    else:
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        alter_via_admin(connection, target, op, changes)
    for line in change_lines(target, op, changes):
        print(line)


TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", metavar="NAME", help="A topic's configs.")
]
BrokerOption = Annotated[
    int | None,
    typer.Option("--broker", min=0, metavar="ID", help="One broker's configs."),
]
DefaultOption = Annotated[
    bool,
    typer.Option(
        "--cluster-default",
        "--broker-default",
        help="The cluster-wide default of every broker's configs.",
    ),
]


@config_app.command("get")
def get(
    keys: Annotated[
        list[str] | None,
        typer.Argument(metavar="KEY", help="Only these keys.", show_default=False),
    ] = None,
    topic: TopicOption = None,
    broker: BrokerOption = None,
    cluster_default: DefaultOption = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show the effective configs and where each comes from (DYNAMIC_TOPIC_CONFIG,
    DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG or
    DEFAULT_CONFIG)."""
    with reporting_errors():
        target = choose_target(topic, broker, cluster_default)
        wanted = parse_keys(keys or [])
        rows = _describe(bootstrap, timeout, command_config, target)
        if wanted:
            rows = [row for row in rows if row.name in set(wanted)]
        if rows:
            print_table(("KEY", "VALUE", "SOURCE"), config_table(rows))
        elif not wanted:
            print(f"{target.label} has no configs to show")
        missing = missing_keys(rows, wanted)
        for key in missing:
            echo_error(f"{target.label} has no config {key!r}")
        if missing:
            raise typer.Exit(1)


@config_app.command("set")
def set_configs(
    changes: Annotated[
        list[str],
        typer.Argument(metavar="KEY=VALUE", help="Configs to set.", show_default=False),
    ],
    topic: TopicOption = None,
    broker: BrokerOption = None,
    cluster_default: DefaultOption = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Set configs (IncrementalAlterConfigs SET); the others keep their values."""
    with reporting_errors():
        target = choose_target(topic, broker, cluster_default)
        _alter(bootstrap, timeout, command_config, target, AlterOp.SET, parse_changes(changes))


@config_app.command("delete")
def delete_configs(
    keys: Annotated[
        list[str], typer.Argument(metavar="KEY", help="Configs to remove.", show_default=False)
    ],
    topic: TopicOption = None,
    broker: BrokerOption = None,
    cluster_default: DefaultOption = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Remove configs set on the target, so they fall back to the next source (the broker
    default, the static config, or the built-in default)."""
    with reporting_errors():
        target = choose_target(topic, broker, cluster_default)
        wanted = parse_keys(keys)
        _alter(
            bootstrap,
            timeout,
            command_config,
            target,
            AlterOp.DELETE,
            [(key, "") for key in wanted],
        )
