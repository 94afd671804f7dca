"""`strom group ...`: list, describe and delete groups, and reset their offsets.

Through confluent-kafka's admin client (ListGroups, DescribeGroups, OffsetFetch,
ListOffsets, OffsetCommit, DeleteGroups; group_admin.py), so it works against any
Kafka-compatible broker. What needs no broker (parsing, tables, the reset plan) is in
group_model.py. KIP-848 groups are described, and share groups (which the admin client
does not see) listed, described and reset, through strom's own client:
group_consumer.py, group_share.py, group_share_offsets.py. DeleteGroups deletes an empty
group of any type, share groups too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from strom.cli.common import (
    DEFAULT_BOOTSTRAP,
    DEFAULT_TIMEOUT_S,
    BootstrapOption,
    CommandConfigOption,
    CommandError,
    TimeoutOption,
    admin_outcome,
    echo_status,
    print_table,
    raise_failures,
    reporting_errors,
    usage_error,
)
from strom.cli.group_admin import (
    chosen_partitions,
    commit_plan,
    committed_offsets,
    connect,
    describe_groups,
    group_error,
    group_exists,
    list_offsets,
    offset_spec,
    partition_bounds,
)
from strom.cli.group_consumer import (
    CONSUMER_MEMBER_HEADERS,
    ConsumerGroupView,
    consumer_header,
    consumer_member_rows,
    describe_consumer_group,
)
from strom.cli.group_model import (
    ACTIVE_MEMBER_ERRORS,
    ResetMode,
    active_members_message,
    describe_header,
    group_missing_message,
    group_progress,
    group_type_name,
    list_rows,
    member_rows,
    parse_topic_selection,
    partition_owners,
    plan_reset,
    reset_target,
    total_lag,
)
from strom.cli.group_share import (
    SHARE_MEMBER_HEADERS,
    SHARE_PARTITION_HEADERS,
    ShareGroupView,
    describe_share_group,
    list_share_groups,
    share_header,
    share_member_rows,
    share_partition_rows,
    total_share_lag,
)
from strom.cli.group_share_offsets import (
    ShareResetRequest,
    busy_share_groups,
    check_share_target,
    not_share_message,
    reset_share_offsets,
)

if TYPE_CHECKING:
    from confluent_kafka.admin import ClusterMetadata  # type: ignore[attr-defined]

    from strom.cli.txn_model import BrokerAddress

group_app = typer.Typer(
    name="group",
    help="List, describe and delete groups (classic, consumer and share), and reset their offsets.",
    no_args_is_help=True,
)

GroupArgument = Annotated[str, typer.Argument(help="Group id.", show_default=False)]
GroupsArgument = Annotated[list[str], typer.Argument(help="Group ids.", show_default=False)]


def describe_consumer_groups(
    bootstrap: str,
    timeout_s: float,
    groups: Sequence[str],
    command_config: Path | None,
    *,
    quiet: bool = False,
) -> dict[str, tuple[ConsumerGroupView, BrokerAddress]]:
    """The KIP-848 groups' ConsumerGroupDescribe answers, from their coordinators.
    `quiet`: a group that cannot be described (gone since it was listed) is left out."""
    if not groups:
        return {}
    from strom.cli.txn import TxnCluster, run

    async def work(cluster: TxnCluster) -> dict[str, tuple[ConsumerGroupView, BrokerAddress]]:
        found = {}
        for group in groups:
            try:
                found[group] = await describe_consumer_group(cluster, group)
            except CommandError:
                if not quiet:
                    raise
        return found

    return run(bootstrap, timeout_s, work, command_config)


def describe_share_groups(
    bootstrap: str, timeout_s: float, groups: Sequence[str], command_config: Path | None
) -> dict[str, tuple[ShareGroupView, BrokerAddress]]:
    """The groups among `groups` that are share groups (which confluent-kafka's admin
    client does not see), described by their coordinators."""
    if not groups:
        return {}
    from strom.cli.txn import TxnCluster, run

    async def work(cluster: TxnCluster) -> dict[str, tuple[ShareGroupView, BrokerAddress]]:
        found = {}
        for group in groups:
            described = await describe_share_group(cluster, group)
            if described is not None:
                found[group] = described
        return found

    return run(bootstrap, timeout_s, work, command_config)


def share_groups(
    bootstrap: str, timeout_s: float, metadata: ClusterMetadata, command_config: Path | None
) -> list[tuple[str, str, str, str, str]]:
    """`strom group list` rows of the share groups, which confluent-kafka does not list."""
    from strom.cli.txn import TxnCluster, run
    from strom.cli.txn_model import BrokerAddress

    brokers = [BrokerAddress(b.id, str(b.host), b.port) for b in metadata.brokers.values()]

    async def work(cluster: TxnCluster) -> list[tuple[str, str, str, str, str]]:
        return await list_share_groups(cluster, brokers)

    return run(bootstrap, timeout_s, work, command_config)


def print_share_group(view: ShareGroupView, coordinator: BrokerAddress) -> None:
    print(share_header(view, coordinator) + "\n")
    if view.members:
        print_table(SHARE_MEMBER_HEADERS, share_member_rows(view.members))
    else:
        print("No active members.")
    print()
    if not view.partitions:
        print("No share-partition state.")
        return
    print_table(SHARE_PARTITION_HEADERS, share_partition_rows(view.partitions))
    lag = total_share_lag(view.partitions)
    if lag is not None:
        print(f"\nTotal lag: {lag}")


@group_app.command("list")
def list_groups(
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """List groups: type (classic, consumer or share), state, protocol type, members."""
    with reporting_errors():
        connection, admin, metadata = connect(bootstrap, timeout, command_config)
        future = admin.list_consumer_groups(request_timeout=timeout)
        listing, error = admin_outcome(future, connection, "listing groups")
        if error is not None:
            raise connection.kafka_error(error)
        for failure in listing.errors or []:
            echo_status(f"strom: warning: a broker did not list its groups: {failure}")
        groups = listing.valid or []
        counts: dict[str, int] = {}
        futures = (
            admin.describe_consumer_groups([g.group_id for g in groups], request_timeout=timeout)
            if groups
            else {}
        )
        for group_id, each in futures.items():
            description, error = admin_outcome(each, connection, f"group {group_id!r}")
            if error is None:  # a group gone since it was listed shows no count
                counts[group_id] = len(description.members)
        kip848 = [g.group_id for g in groups if group_type_name(g) == "CONSUMER"]
        views = describe_consumer_groups(bootstrap, timeout, kip848, command_config, quiet=True)
        states = {group_id: view.state for group_id, (view, _) in views.items()}
        rows = list_rows(groups, counts, states) + share_groups(
            bootstrap, timeout, metadata, command_config
        )
        if not rows:
            echo_status("no groups")
            return
        print_table(
            ("GROUP", "TYPE", "STATE", "PROTOCOL TYPE", "MEMBERS"), sorted(rows, key=lambda r: r[0])
        )


@group_app.command("describe")
def describe(
    groups: GroupsArgument,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show each group's members and, per partition, its committed offset, log end and lag.

    The partitions are those with a committed offset and those assigned to a member.
    """
    with reporting_errors():
        names = list(dict.fromkeys(groups))
        connection, admin, _ = connect(bootstrap, timeout, command_config)
        descriptions = describe_groups(admin, connection, names)
        missing = [n for n in names if not group_exists(descriptions[n])]
        share_views = describe_share_groups(bootstrap, timeout, missing, command_config)
        for name in missing:
            if name not in share_views:
                raise CommandError(group_missing_message(name))
        kip848 = [n for n in names if group_type_name(descriptions[n]) == "CONSUMER"]
        consumer_views = describe_consumer_groups(bootstrap, timeout, kip848, command_config)
        for index, name in enumerate(names):
            if index:
                print()
            if name in share_views:
                print_share_group(*share_views[name])
                continue
            description = descriptions[name]
            committed = committed_offsets(admin, connection, name)
            owners = partition_owners(description.members)
            partitions = set(committed) | set(owners)
            log_ends, _ = list_offsets(admin, connection, partitions, offset_spec("latest"))
            progress = group_progress(committed, log_ends, owners)
            if name in consumer_views:
                view, coordinator = consumer_views[name]
                print(consumer_header(view, coordinator) + "\n")
                if view.members:
                    print_table(CONSUMER_MEMBER_HEADERS, consumer_member_rows(view.members))
                else:
                    print("No active members.")
            else:
                print(describe_header(description) + "\n")
                if description.members:
                    print_table(
                        ("MEMBER", "CLIENT ID", "HOST", "INSTANCE ID", "PARTITIONS"),
                        member_rows(description.members),
                    )
                else:
                    print("No active members.")
            print()
            if not progress:
                print("No committed offsets.")
                continue
            print_table(
                ("TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG", "MEMBER"),
                (each.row() for each in progress),
            )
            lag = total_lag(progress)
            if lag is not None:
                print(f"\nTotal lag: {lag}")


@group_app.command("delete")
def delete(
    groups: GroupsArgument,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Delete groups that have no members, with their offsets (or start offsets)."""
    with reporting_errors():
        names = list(dict.fromkeys(groups))
        connection, admin, _ = connect(bootstrap, timeout, command_config)
        futures = admin.delete_consumer_groups(names, request_timeout=timeout)
        failures: dict[str, CommandError] = {}
        busy: list[str] = []
        for name in names:
            _, error = admin_outcome(futures[name], connection, f"group {name!r}")
            if error is None:
                print(f"deleted group {name}")
                continue
            failures[name] = group_error(connection, error, name)
            if error.name() in ACTIVE_MEMBER_ERRORS:
                busy.append(name)
        # A share group refused for its members is told how many it has.
        for name, message in busy_share_groups(bootstrap, timeout, busy, command_config).items():
            failures[name] = CommandError(message)
        raise_failures(list(failures.values()))


@group_app.command("reset-offsets")
def reset_offsets(
    group: GroupArgument,
    topics: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC[:P,...]",
            help="A topic, or some of its partitions (repeatable).",
        ),
    ] = None,
    all_topics: Annotated[
        bool,
        typer.Option("--all-topics", help="Every partition the group has an offset for."),
    ] = False,
    to_earliest: Annotated[
        bool, typer.Option("--to-earliest", help="To the oldest record.")
    ] = False,
    to_latest: Annotated[
        bool, typer.Option("--to-latest", help="To the log end (skip everything).")
    ] = False,
    to_datetime: Annotated[
        str | None,
        typer.Option(
            "--to-datetime",
            metavar="ISO8601",
            help="To the first record at or after this time (local time without a zone).",
        ),
    ] = None,
    to_offset: Annotated[
        int | None, typer.Option("--to-offset", min=0, metavar="N", help="To offset N.")
    ] = None,
    shift_by: Annotated[
        int | None,
        typer.Option("--shift-by", metavar="N", help="Move the committed offset by N (±)."),
    ] = None,
    execute: Annotated[
        bool, typer.Option("--execute", help="Commit the new offsets (otherwise only show them).")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show the new offsets (the default).")
    ] = False,
    share: Annotated[
        bool,
        typer.Option(
            "--share",
            help="A group that does not exist yet is made a share group (an existing share "
            "group is found without this).",
        ),
    ] = False,
    bootstrap: BootstrapOption = DEFAULT_BOOTSTRAP,
    timeout: TimeoutOption = DEFAULT_TIMEOUT_S,
    command_config: CommandConfigOption = None,
) -> None:
    """Show, and with --execute commit, new offsets for a group that has no members.

    Offsets outside a partition's log are moved to its start or end, as Kafka's tool does.

    A share group's start offsets are set the same way (any target but --shift-by).
    """
    with reporting_errors():
        target = reset_target(to_earliest, to_latest, to_datetime, to_offset, shift_by)
        if execute and dry_run:
            raise usage_error("choose one of --execute and --dry-run")
        if topics and all_topics:
            raise usage_error("choose one of --topic and --all-topics")
        if not topics and not all_topics:
            raise usage_error("choose the partitions to reset with --topic or --all-topics")
        for text in topics or []:
            parse_topic_selection(text)  # a typo is a usage error before connecting
        if share:
            check_share_target(target)
        connection, admin, metadata = connect(bootstrap, timeout, command_config)
        description = describe_groups(admin, connection, [group])[group]
        exists = group_exists(description)
        if share and exists:
            raise CommandError(not_share_message(group, group_type_name(description).lower()))
        found = {} if exists else describe_share_groups(bootstrap, timeout, [group], command_config)
        if share or group in found:
            view = found[group][0] if group in found else None
            request = ShareResetRequest(group, view, target, topics, all_topics, execute)
            reset_share_offsets(request, connection, admin, metadata)
            return
        if description.members:
            raise CommandError(active_members_message(group))
        committed = committed_offsets(admin, connection, group)
        partitions = chosen_partitions(
            connection,
            metadata,
            topics,
            all_topics,
            committed,
            f"group {group!r} has no committed offsets; name the topics with --topic",
        )
        at_ms = target.value if target.mode is ResetMode.DATETIME else None
        bounds = partition_bounds(admin, connection, partitions, at_ms)
        plan, warnings = plan_reset(target, partitions, committed, bounds)
        for warning in warnings:
            echo_status(f"strom: warning: {warning}")
        print_table(("TOPIC", "PARTITION", "CURRENT OFFSET", "NEW OFFSET"), (p.row() for p in plan))
        new_group = not group_exists(description)
        if not execute:
            if new_group:
                echo_status(
                    f"group {group!r} does not exist yet; --execute creates it "
                    "(add --share for a share group)"
                )
            echo_status("dry run: nothing changed; add --execute to commit these offsets")
            return
        commit_plan(admin, connection, group, plan)
        created = " (a new group)" if new_group else ""
        echo_status(f"committed new offsets for {len(plan)} partitions of group {group}{created}")
