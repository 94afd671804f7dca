"""`strom topic ...`: create, list, describe, delete and grow topics, and delete their
oldest records, through the admin API."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    ConnectionSettings,
    TimeoutOption,
    admin_client,
    admin_outcome,
    echo_status,
    has_name,
    parse_key_values,
    print_table,
    raise_failures,
    reporting_errors,
    topic_missing_message,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata, ConfigEntry, TopicMetadata  # type: ignore[attr-defined]

topic_app = typer.Typer(
    name="topic",
    help="Create, list, describe, grow and delete topics; delete their oldest records.",
    no_args_is_help=True,
)

TopicRow = tuple[str, int, int]


def topic_rows(metadata: ClusterMetadata, include_internal: bool) -> list[TopicRow]:
    """(name, partitions, replication factor) per topic, sorted by name."""
    rows = []
    for name, topic in metadata.topics.items():
        if name.startswith("__") and not include_internal:
            continue
        factors = [len(p.replicas) for p in topic.partitions.values()]
        rows.append((name, len(topic.partitions), min(factors, default=0)))
    return sorted(rows)


def format_ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids) or "-"


def partition_rows(topic: TopicMetadata) -> list[tuple[str, ...]]:
    """(partition, leader, replicas, isr, error) per partition, in partition order."""
    rows: list[tuple[str, ...]] = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        leader = str(p.leader) if p.leader >= 0 else "none"
        error = p.error.name() if p.error is not None else ""
        rows.append((str(index), leader, format_ids(p.replicas), format_ids(p.isrs), error))
    return rows


def describe_source(source: Any) -> str:
    """ConfigSource.DYNAMIC_TOPIC_CONFIG (or its number, 1) -> "dynamic topic config"."""
    from confluent_kafka.admin import ConfigSource  # type: ignore[attr-defined]

    if isinstance(source, int):
        try:
            source = ConfigSource(source)
        except ValueError:
            return str(source)
    name = getattr(source, "name", str(source))
    return str(name).lower().replace("_", " ")


def config_rows(entries: dict[str, ConfigEntry]) -> list[tuple[str, str, str]]:
    """(name, value, source) for every config that is not at its default, sorted by name."""
    rows = []
    for name in sorted(entries):
        entry = entries[name]
        if entry.is_default:
            continue
        value = "(sensitive)" if entry.is_sensitive else (entry.value or "")
        rows.append((name, value, describe_source(entry.source)))
    return rows


TopicArgument = Annotated[str, typer.Argument(help="Topic name.", show_default=False)]
TopicsArgument = Annotated[list[str], typer.Argument(help="Topic names.", show_default=False)]


@topic_app.command("create")
def create(
    name: TopicArgument,
    partitions: Annotated[
        int | None,
        typer.Option("--partitions", "-p", min=1, help="Partitions [default: the broker's]."),
    ] = None,
    replication_factor: Annotated[
        int | None,
        typer.Option(
            "--replication-factor",
            "-r",
            min=1,
            help="Replicas per partition [default: the broker's].",
        ),
    ] = None,
    config: Annotated[
        list[str] | None,
        typer.Option("--config", "-c", metavar="KEY=VALUE", help="Topic config (repeatable)."),
    ] = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed if the topic already exists.")
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Create a topic."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    with reporting_errors():
        configs = dict(parse_key_values(config, "--config"))
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        admin = admin_client(connection)
        if name in connection.metadata(admin).topics and if_not_exists:
            echo_status(f"topic {name!r} already exists")
            return
        new_topic = NewTopic(
            name,
            num_partitions=partitions or -1,
            replication_factor=replication_factor or -1,
            config=configs,
        )
        futures = admin.create_topics(
            [new_topic], operation_timeout=timeout, request_timeout=timeout
        )
        _, error = admin_outcome(futures[name], connection, name)
        if error is not None:
            if has_name(error, "TOPIC_ALREADY_EXISTS") and if_not_exists:
                echo_status(f"topic {name!r} already exists")
                return
            raise connection.kafka_error(error, name)
        print(f"created topic {name}")


@topic_app.command("list")
def list_topics(
    internal: Annotated[
        bool, typer.Option("--internal", help="Include internal topics (names starting __).")
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """List topics with their partition count and replication factor."""
    with reporting_errors():
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        rows = topic_rows(connection.metadata(admin_client(connection)), internal)
        if not rows:
            echo_status("no topics")
            return
        print_table(
            ("TOPIC", "PARTITIONS", "REPLICATION FACTOR"),
            ((name, str(count), str(factor)) for name, count, factor in rows),
        )


@topic_app.command("describe")
def describe(
    names: TopicsArgument,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show each topic's partitions (leader, replicas, ISR) and its non-default configs."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    with reporting_errors():
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        admin = admin_client(connection)
        metadata = connection.metadata(admin)
        topics = [connection.topic(metadata, name) for name in names]
        resources = [ConfigResource(ResourceType.TOPIC, name) for name in names]
        futures = admin.describe_configs(resources, request_timeout=timeout)
        for index, (name, topic, resource) in enumerate(zip(names, topics, resources, strict=True)):
            rows = partition_rows(topic)
            headers = ["PARTITION", "LEADER", "REPLICAS", "ISR", "ERROR"]
            if not any(row[-1] for row in rows):
                headers.pop()
                rows = [row[:-1] for row in rows]
            if index:
                print()
            print(f"Topic: {name}   Partitions: {len(rows)}\n")
            print_table(headers, rows)
            entries, error = admin_outcome(futures[resource], connection, name)
            if error is not None:
                raise connection.kafka_error(error, name)
            configs = config_rows(entries)
            if configs:
                print()
                print_table(("CONFIG", "VALUE", "SOURCE"), configs)
            else:
                print("\nAll configs at their defaults.")


@topic_app.command("delete")
def delete(
    names: TopicsArgument,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed for topics that do not exist.")
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Delete topics and their data."""
    with reporting_errors():
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        admin = admin_client(connection)
        existing = connection.metadata(admin).topics
        to_delete = []
        for name in names:
            if name in existing:
                to_delete.append(name)
            elif if_exists:
                echo_status(f"topic {name!r} does not exist")
            else:
                raise CommandError(topic_missing_message(name))
        if not to_delete:
            return
        futures = admin.delete_topics(to_delete, operation_timeout=timeout, request_timeout=timeout)
        failures: list[CommandError] = []
        for name in to_delete:
            _, error = admin_outcome(futures[name], connection, name)
            if error is None:
                print(f"deleted topic {name}")
            elif has_name(error, "UNKNOWN_TOPIC_OR_PART") and if_exists:
                echo_status(f"topic {name!r} does not exist")
            else:
                failures.append(connection.kafka_error(error, name))
        raise_failures(failures)


@topic_app.command("add-partitions")
def add_partitions(
    name: TopicArgument,
    total: Annotated[
        int,
        typer.Option(
            "--total", min=1, help="Partition count after the change.", show_default=False
        ),
    ],
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Grow a topic to --total partitions (existing records stay where they are)."""
    from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

    with reporting_errors():
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        admin = admin_client(connection)
        topic = connection.topic(connection.metadata(admin), name)
        current = len(topic.partitions)
        if total == current:
            echo_status(f"topic {name!r} already has {total} partitions")
            return
        if total < current:
            raise CommandError(
                f"topic {name!r} has {current} partitions; partitions can only be added"
            )
        futures = admin.create_partitions(
            [NewPartitions(name, total)], operation_timeout=timeout, request_timeout=timeout
        )
        _, error = admin_outcome(futures[name], connection, name)
        if error is not None:
            raise connection.kafka_error(error, name)
        print(f"topic {name} now has {total} partitions (was {current})")


def parse_before(text: str) -> int:
    """--before: an offset (0 or more), or "end" for each partition's high watermark."""
    if text == "end":
        return -1
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise CommandError(f"--before must be an offset (0 or more) or 'end', not {text!r}")
    return offset


@topic_app.command("delete-records")
def delete_records(
    name: TopicArgument,
    before: Annotated[
        str,
        typer.Option(
            "--before",
            metavar="OFFSET|end",
            help="Delete every record below this offset; 'end': all committed records.",
            show_default=False,
        ),
    ],
    partitions: Annotated[
        list[int] | None,
        typer.Option("--partition", "-p", metavar="N", help="Only this partition (repeatable)."),
    ] = None,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Delete a topic's oldest records: each partition then starts at --before (DeleteRecords,
    as kafka-delete-records.sh). Consumers below it move on to the new start."""
    from confluent_kafka import TopicPartition

    with reporting_errors():
        offset = parse_before(before)
        connection = ConnectionSettings.create(bootstrap, timeout, command_config)
        admin = admin_client(connection)
        topic = connection.topic(connection.metadata(admin), name)
        chosen = sorted(topic.partitions) if not partitions else sorted(set(partitions))
        unknown = [p for p in chosen if p not in topic.partitions]
        if unknown:
            raise CommandError(
                f"topic {name!r} has no partition {', '.join(map(str, unknown))} "
                f"(it has {len(topic.partitions)})"
            )
        futures = admin.delete_records(
            [TopicPartition(name, p, offset) for p in chosen],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        rows: list[tuple[str, ...]] = []
        failures: list[CommandError] = []
        for wanted, future in sorted(futures.items(), key=lambda item: item[0].partition):
            deleted, error = admin_outcome(future, connection, f"{name}-{wanted.partition}")
            if error is None:
                rows.append((str(wanted.partition), str(deleted.low_watermark)))
            else:
                failures.append(connection.kafka_error(error, f"{name}-{wanted.partition}"))
        if rows:
            print_table(("PARTITION", "STARTS AT"), rows)
        raise_failures(failures)
