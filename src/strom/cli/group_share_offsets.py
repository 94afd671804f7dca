"""`strom group reset-offsets` and `strom group delete` of a KIP-932 share group.

A share group commits no offsets: each of its share-partitions has a start offset, below
which every record is done with. Kafka's `kafka-share-groups.sh --reset-offsets` moves
them with AlterShareGroupOffsets (91, v0), which the group's coordinator refuses while
the group has members (NON_EMPTY_GROUP) and which creates a group that does not exist;
its `--delete` sends DeleteGroups, which `strom group delete` already sends for every
type of group. confluent-kafka 2.16's admin client knows no share groups, so the reset
asks the group's coordinator itself through strom's own client (FindCoordinator, then
AlterShareGroupOffsets there, again while the coordinator moves or loads), as
group_share.py does to describe one.

The reset is planned as a consumer group's is (`group_model.plan_reset`), with the start
offsets as the current offsets: `--to-earliest`, `--to-latest`, `--to-datetime` and
`--to-offset`, an offset outside a partition's log moved to its nearer end, as Kafka's
tool does. Kafka's share-group tool has no `--shift-by`, nor does this. What the
command makes of the answers (requests, messages, start offsets) needs no broker and is
tested without sockets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.cli.common import CommandError, echo_status, print_table, raise_failures, usage_error
from strom.cli.group_admin import chosen_partitions, partition_bounds
from strom.cli.group_consumer import GROUP_KEY, coordinator_of
from strom.cli.group_model import Partition, PlannedOffset, ResetMode, ResetTarget, plan_reset
from strom.cli.group_share import ShareGroupView, describe_share_group
from strom.cli.txn import at_coordinator
from strom.cli.txn_model import COORDINATOR_RETRIABLE, CoordinatorMoved
from strom.cli.wire import error_name, is_error

if TYPE_CHECKING:
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        ClusterMetadata,
    )

    from strom.cli.common import ConnectionSettings
    from strom.cli.txn import TxnCluster
    from strom.cli.txn_model import BrokerAddress
    from strom.cli.wire import WireSession

ALTER_SHARE_GROUP_OFFSETS = 91
SHARE_PLAN_HEADERS = ("TOPIC", "PARTITION", "START OFFSET", "NEW START OFFSET")
SHARE_TARGETS = "--to-earliest, --to-latest, --to-datetime or --to-offset"


def share_members_message(group: str, members: int | None) -> str:
    """What a share group with members is told; `members` None or 0: not known."""
    if not members:
        return f"share group {group!r} has active members; stop them first"
    if members == 1:
        return f"share group {group!r} has 1 active member; stop it first"
    return f"share group {group!r} has {members} active members; stop them first"


def not_share_message(group: str, kind: str) -> str:
    """`kind`: the group's type as `strom group list` names it, or "" when not known."""
    if kind in ("", "unknown"):
        return f"group {group!r} is not a share group"
    return f"group {group!r} is a {kind} group, not a share group"


def shift_refused_message() -> str:
    return (
        "--shift-by is not supported for share groups (they have start offsets, not "
        f"committed offsets); choose {SHARE_TARGETS}"
    )


def check_share_target(target: ResetTarget) -> None:
    """A usage error for a reset target share groups do not have."""
    if target.mode is ResetMode.SHIFT:
        raise usage_error(shift_refused_message())


def start_offsets(view: ShareGroupView | None) -> dict[Partition, int]:
    """The start offset of each share-partition that has one (its state was initialized)."""
    if view is None:
        return {}
    return {
        (s.topic, s.partition): s.start_offset
        for s in view.partitions
        if s.start_offset is not None
    }


def alter_request(group: str, plan: Sequence[PlannedOffset]) -> dict[str, Any]:
    """AlterShareGroupOffsets v0's fields: the plan's new start offsets, topic by topic."""
    topics: dict[str, list[dict[str, int]]] = {}
    for p in plan:
        topics.setdefault(p.topic, []).append(
            {"partition_index": p.partition, "start_offset": p.new}
        )
    return {
        "group_id": group,
        "topics": [{"topic_name": t, "partitions": ps} for t, ps in topics.items()],
    }


class ShareGroupBusy(CommandError):
    """AlterShareGroupOffsets answered NON_EMPTY_GROUP: the group has members."""


def _why(message: Any) -> str:
    return f" ({message})" if message else ""


def alter_failures(response: Any, group: str) -> list[CommandError]:
    """Each partition an AlterShareGroupOffsets answer refused, in the answer's order.
    Its top-level error is raised: CoordinatorMoved for the coordinator's (ask again),
    ShareGroupBusy for NON_EMPTY_GROUP, a plain message for a group of another type."""
    if is_error(response.error_code):
        name = error_name(response.error_code)
        text = f"cannot reset the start offsets of share group {group!r}: {name}"
        text += _why(response.error_message)
        if name in COORDINATOR_RETRIABLE:
            raise CoordinatorMoved(text)
        if name == "NON_EMPTY_GROUP":
            raise ShareGroupBusy(share_members_message(group, None))
        if name == "GROUP_ID_NOT_FOUND":
            raise CommandError(not_share_message(group, ""))
        raise CommandError(text)
    return [
        CommandError(
            f"{topic.topic_name}:{p.partition_index}: "
            f"{error_name(p.error_code)}{_why(p.error_message)}"
        )
        for topic in response.responses
        for p in topic.partitions
        if is_error(p.error_code)
    ]


async def alter_share_group_offsets(
    cluster: TxnCluster, group: str, plan: Sequence[PlannedOffset]
) -> list[CommandError]:
    """AlterShareGroupOffsets at the group's coordinator: the partitions it refused.
    While the group has members, a CommandError that counts them."""

    async def ask(session: WireSession, coordinator: BrokerAddress) -> list[CommandError]:
        _, response = await session.call(
            ALTER_SHARE_GROUP_OFFSETS,
            "AlterShareGroupOffsets",
            alter_request(group, plan),
            max_version=0,
        )
        return alter_failures(response, group)

    try:
        return await at_coordinator(
            cluster, group, GROUP_KEY, lambda r: coordinator_of(r, group), ask
        )
    except ShareGroupBusy:
        members = await share_member_count(cluster, group)
        raise CommandError(share_members_message(group, members)) from None


async def share_member_count(cluster: TxnCluster, group: str) -> int | None:
    """How many members the share group has; None when it is no share group or cannot
    be described (then the message says only that it has members)."""
    try:
        described = await describe_share_group(cluster, group)
    except CommandError:
        return None
    return None if described is None else len(described[0].members)


def busy_share_groups(
    bootstrap: str, timeout_s: float, groups: Sequence[str], command_config: Path | None
) -> dict[str, str]:
    """What `strom group delete` says of each of `groups` (refused: they have members)
    that is a share group: its member count."""
    if not groups:
        return {}
    from strom.cli.txn import run

    async def work(cluster: TxnCluster) -> dict[str, str]:
        said = {}
        for group in groups:
            members = await share_member_count(cluster, group)
            if members is not None:
                said[group] = share_members_message(group, members)
        return said

    return run(bootstrap, timeout_s, work, command_config)


@dataclass(frozen=True, slots=True)
class ShareResetRequest:
    """What `strom group reset-offsets` was asked to do to a share group."""

    group: str
    view: ShareGroupView | None
    """The group as ShareGroupDescribe answered; None: it does not exist yet."""
    target: ResetTarget
    topics: list[str] | None
    all_topics: bool
    execute: bool


def reset_share_offsets(
    request: ShareResetRequest,
    connection: ConnectionSettings,
    admin: AdminClient,
    metadata: ClusterMetadata,
) -> None:
    """Print the new start offsets and, with --execute, set them."""
    from strom.cli.txn import run

    group, view = request.group, request.view
    check_share_target(request.target)
    if view is not None and view.members:
        raise CommandError(share_members_message(group, len(view.members)))
    current = start_offsets(view)
    partitions = chosen_partitions(
        connection,
        metadata,
        request.topics,
        request.all_topics,
        current,
        f"share group {group!r} has no start offsets; name the topics with --topic",
    )
    target = request.target
    at_ms = target.value if target.mode is ResetMode.DATETIME else None
    bounds = partition_bounds(admin, connection, partitions, at_ms)
    plan, warnings = plan_reset(target, partitions, current, bounds)
    for warning in warnings:
        echo_status(f"strom: warning: {warning}")
    print_table(SHARE_PLAN_HEADERS, (p.row() for p in plan))
    if not request.execute:
        if view is None:
            echo_status(f"share group {group!r} does not exist yet; --execute creates it")
        echo_status("dry run: nothing changed; add --execute to set these start offsets")
        return

    async def work(cluster: TxnCluster) -> list[CommandError]:
        return await alter_share_group_offsets(cluster, group, plan)

    settings = connection.command_config_file
    raise_failures(run(connection.bootstrap, connection.timeout_s, work, settings))
    count = f"{len(plan)} partition" + ("" if len(plan) == 1 else "s")
    created = " (a new share group)" if view is None else ""
    echo_status(f"set the start offsets of {count} of share group {group}{created}")
