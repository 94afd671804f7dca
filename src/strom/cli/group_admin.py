"""The admin-client requests `strom group` makes of consumer groups and partitions:
DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, through confluent-kafka's admin
client, so they work against any Kafka-compatible broker. group.py's commands, the
share-group resets (group_share_offsets.py) and the console use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from strom.cli.common import (
    CommandError,
    ConnectionSettings,
    admin_client,
    admin_outcome,
    topic_missing_message,
)
from strom.cli.group_model import (
    Partition,
    PartitionBounds,
    PlannedOffset,
    group_error_message,
    merge_selections,
    parse_topic_selection,
    selected_partitions,
)

if TYPE_CHECKING:
    from pathlib import Path

    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ClusterMetadata,
        ConsumerGroupDescription,
        OffsetSpec,
    )


def connect(
    bootstrap: str, timeout: float, command_config: Path | None
) -> tuple[ConnectionSettings, AdminClient, ClusterMetadata]:
    """A connection and admin client, and the cluster's metadata: asking for it first
    reports an unreachable broker the same way every client command does."""
    connection = ConnectionSettings.create(bootstrap, timeout, command_config)
    admin = admin_client(connection)
    return connection, admin, connection.metadata(admin)


def group_error(connection: ConnectionSettings, error: KafkaError, group: str) -> CommandError:
    message = group_error_message(group, error.name())
    if message is not None:
        return CommandError(message)
    return connection.kafka_error(error, f"group {group!r}")


def describe_groups(
    admin: AdminClient, connection: ConnectionSettings, groups: Sequence[str]
) -> dict[str, ConsumerGroupDescription]:
    futures = admin.describe_consumer_groups(list(groups), request_timeout=connection.timeout_s)
    descriptions = {}
    for group in groups:
        description, error = admin_outcome(futures[group], connection, f"group {group!r}")
        if error is not None:
            raise group_error(connection, error, group)
        descriptions[group] = description
    return descriptions


def group_exists(description: ConsumerGroupDescription) -> bool:
    """DescribeGroups answers an unknown group with state Dead (GROUP_ID_NOT_FOUND from v6)."""
    return bool(description.members) or getattr(description.state, "name", "") != "DEAD"


def committed_offsets(
    admin: AdminClient, connection: ConnectionSettings, group: str
) -> dict[Partition, int]:
    """Every committed offset of the group (OffsetFetch for all partitions)."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=connection.timeout_s
    )
    result, error = admin_outcome(futures[group], connection, f"group {group!r}")
    if error is not None:
        raise group_error(connection, error, group)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in result.topic_partitions or []
        if tp.error is None and tp.offset >= 0
    }


def offset_spec(kind: str, timestamp_ms: int = 0) -> OffsetSpec:
    """OffsetSpec.earliest(), .latest() or .for_timestamp(ms), which are untyped."""
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    if kind == "timestamp":
        return OffsetSpec.for_timestamp(timestamp_ms)  # type: ignore[no-any-return]
    return getattr(OffsetSpec, kind)()  # type: ignore[no-any-return]


def list_offsets(
    admin: AdminClient,
    connection: ConnectionSettings,
    partitions: Iterable[Partition],
    spec: OffsetSpec,
) -> tuple[dict[Partition, int], dict[Partition, KafkaError]]:
    """ListOffsets: (offset per partition, error per partition that has none)."""
    from confluent_kafka import TopicPartition

    wanted = {TopicPartition(t, p): spec for t, p in partitions}
    if not wanted:
        return {}, {}
    futures = admin.list_offsets(wanted, request_timeout=connection.timeout_s)
    offsets: dict[Partition, int] = {}
    errors: dict[Partition, KafkaError] = {}
    for tp, future in futures.items():
        info, error = admin_outcome(future, connection, f"{tp.topic}:{tp.partition}")
        if error is not None:
            errors[(tp.topic, tp.partition)] = error
        else:
            offsets[(tp.topic, tp.partition)] = info.offset
    return offsets, errors


def chosen_partitions(
    connection: ConnectionSettings,
    metadata: ClusterMetadata,
    topics: list[str] | None,
    all_topics: bool,
    known: Iterable[Partition],
    nothing_known: str,
) -> list[Partition]:
    """The partitions --topic names, checked against the metadata; with --all-topics,
    the `known` ones (those the group has an offset for), or the error `nothing_known`
    when there are none."""
    if all_topics:
        every = sorted(known)
        if not every:
            raise CommandError(nothing_known)
        return every
    chosen: list[Partition] = []
    for selection in merge_selections(parse_topic_selection(t) for t in topics or []):
        topic = connection.topic(metadata, selection.topic)
        chosen += selected_partitions(selection, len(topic.partitions))
    return chosen


def partition_bounds(
    admin: AdminClient,
    connection: ConnectionSettings,
    partitions: list[Partition],
    at_ms: int | None,
) -> dict[Partition, PartitionBounds]:
    """Each partition's log start and end (ListOffsets) and, with `at_ms`, its first
    offset at or after that time."""
    queries = [offset_spec("earliest"), offset_spec("latest")]
    if at_ms is not None:
        queries.append(offset_spec("timestamp", at_ms))
    found: list[dict[Partition, int]] = []
    for spec in queries:
        offsets, errors = list_offsets(admin, connection, partitions, spec)
        if errors:
            (topic, _), error = min(errors.items())
            raise connection.kafka_error(error, topic)
        found.append(offsets)
    return {
        p: PartitionBounds(
            found[0][p],
            found[1][p],
            found[2][p] if at_ms is not None and found[2][p] >= 0 else None,
        )
        for p in partitions
    }


def commit_plan(
    admin: AdminClient, connection: ConnectionSettings, group: str, plan: Sequence[PlannedOffset]
) -> None:
    """Commit a reset plan's new offsets for `group` (OffsetCommit through the admin client);
    a failure for the group or one of its partitions is a CommandError."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(p.topic, p.partition, p.new) for p in plan]
    )
    futures = admin.alter_consumer_group_offsets([request], request_timeout=connection.timeout_s)
    result, error = admin_outcome(futures[group], connection, f"group {group!r}")
    if error is not None:
        raise group_error(connection, error, group)
    for tp in result.topic_partitions or []:
        if tp.error is None:
            continue
        if tp.error.name() == "UNKNOWN_TOPIC_OR_PART":
            raise CommandError(topic_missing_message(tp.topic))
        raise group_error(connection, tp.error, group)
