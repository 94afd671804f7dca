"""`strom group describe` of a KIP-932 share group: ShareGroupDescribe and
DescribeShareGroupOffsets.

confluent-kafka 2.16's admin client knows no share groups (it neither lists nor
describes them), so the command asks the group's coordinator itself through strom's own
client (wire.py), as group_consumer.py does for KIP-848 groups: FindCoordinator for the
group, then ShareGroupDescribe (v1) for its members and DescribeShareGroupOffsets (v1)
for each share-partition's start offset and lag, looked up again while the coordinator
moves or loads. A group of another type answers GROUP_ID_NOT_FOUND ("not a share
group"), which `describe_share_group` reports as None. What the command makes of the
answers (values and table rows) needs no broker and is tested without sockets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from strom.cli.common import CommandError
from strom.cli.group_consumer import GROUP_KEY, coordinator_of
from strom.cli.group_model import NONE, Partition, format_assignment
from strom.cli.txn import at_coordinator
from strom.cli.txn_model import COORDINATOR_RETRIABLE, BrokerAddress, CoordinatorMoved
from strom.cli.wire import ApiNotSupported, error_name, is_error

if TYPE_CHECKING:
    from strom.cli.txn import TxnCluster
    from strom.cli.wire import WireSession

SHARE_GROUP_DESCRIBE = 77
DESCRIBE_SHARE_GROUP_OFFSETS = 90
NOT_SHARE = frozenset({"GROUP_ID_NOT_FOUND", "UNSUPPORTED_VERSION"})
"""What ShareGroupDescribe answers for an unknown group or one of another type, and
where share groups are off."""


@dataclass(frozen=True, slots=True)
class ShareMemberView:
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    assigned: tuple[Partition, ...]


@dataclass(frozen=True, slots=True)
class SharePartitionView:
    topic: str
    partition: int
    start_offset: int | None
    """None: the share-partition has no state yet (no member has fetched from it)."""
    lag: int | None
    """None: not known (the broker said -1, or answered v0)."""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ShareGroupView:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberView, ...]
    partitions: tuple[SharePartitionView, ...] = ()


class NotAShareGroup(CommandError):
    """ShareGroupDescribe answered that there is no share group by that id."""


def _failure(group: str, name: str, message: str | None) -> CommandError:
    why = f" ({message})" if message else ""
    text = f"cannot describe share group {group!r}: {name}{why}"
    if name in COORDINATOR_RETRIABLE:
        return CoordinatorMoved(text)
    if name in NOT_SHARE:
        return NotAShareGroup(text)
    return CommandError(text)


def _assigned(assignment: Any) -> tuple[Partition, ...]:
    if assignment is None:
        return ()
    return tuple(
        sorted(
            (str(tp.topic_name), int(p))
            for tp in assignment.topic_partitions
            for p in tp.partitions
        )
    )


def share_view_from(response: Any, group: str) -> ShareGroupView:
    """The group's entry of a ShareGroupDescribe answer; NotAShareGroup when there is
    no share group by that id, CommandError on another error."""
    found = next((g for g in response.groups if str(g.group_id) == group), None)
    if found is None:
        raise CommandError(f"ShareGroupDescribe: no answer for {group!r}")
    if is_error(found.error_code):
        raise _failure(group, error_name(found.error_code), found.error_message)
    members = tuple(
        ShareMemberView(
            member_id=str(m.member_id),
            member_epoch=int(m.member_epoch),
            client_id=str(m.client_id),
            client_host=str(m.client_host),
            assigned=_assigned(m.assignment),
        )
        for m in found.members
    )
    return ShareGroupView(
        group_id=group,
        state=str(found.group_state),
        group_epoch=int(found.group_epoch),
        assignment_epoch=int(found.assignment_epoch),
        assignor=str(found.assignor_name),
        members=tuple(sorted(members, key=lambda m: m.member_id)),
    )


def share_partitions_from(response: Any, group: str) -> tuple[SharePartitionView, ...]:
    """Each share-partition of a DescribeShareGroupOffsets answer, by topic and partition."""
    found = next((g for g in response.groups if str(g.group_id) == group), None)
    if found is None:
        raise CommandError(f"DescribeShareGroupOffsets: no answer for {group!r}")
    if is_error(found.error_code):
        raise _failure(group, error_name(found.error_code), found.error_message)
    partitions = []
    for topic in found.topics:
        for p in topic.partitions:
            failed = is_error(p.error_code)
            start = int(p.start_offset)
            lag = int(getattr(p, "lag", -1))
            partitions.append(
                SharePartitionView(
                    topic=str(topic.topic_name),
                    partition=int(p.partition_index),
                    start_offset=None if failed or start < 0 else start,
                    lag=None if failed or lag < 0 else lag,
                    error=error_name(p.error_code) if failed else None,
                )
            )
    return tuple(sorted(partitions, key=lambda s: (s.topic, s.partition)))


def share_header(view: ShareGroupView, coordinator: BrokerAddress | None) -> str:
    where = f"{coordinator.node_id} ({coordinator.address})" if coordinator else NONE
    return (
        f"Group: {view.group_id}   Type: share   State: {view.state}   "
        f"Group epoch: {view.group_epoch}   Assignment epoch: {view.assignment_epoch}   "
        f"Assignor: {view.assignor or NONE}   Coordinator: {where}"
    )


SHARE_MEMBER_HEADERS = ("MEMBER", "EPOCH", "CLIENT ID", "HOST", "ASSIGNED")
SHARE_PARTITION_HEADERS = ("TOPIC", "PARTITION", "START OFFSET", "LAG")


def share_member_rows(
    members: Sequence[ShareMemberView],
) -> list[tuple[str, str, str, str, str]]:
    """One row per member, by member id; partitions in the --topic syntax."""
    return [
        (
            m.member_id,
            str(m.member_epoch),
            m.client_id or NONE,
            m.client_host or NONE,
            format_assignment(m.assigned),
        )
        for m in members
    ]


def share_partition_rows(
    partitions: Sequence[SharePartitionView],
) -> list[tuple[str, str, str, str]]:
    """One row per share-partition; an error in place of its start offset."""
    return [
        (
            s.topic,
            str(s.partition),
            s.error or (NONE if s.start_offset is None else str(s.start_offset)),
            NONE if s.lag is None else str(s.lag),
        )
        for s in partitions
    ]


def total_share_lag(partitions: Sequence[SharePartitionView]) -> int | None:
    lags = [s.lag for s in partitions if s.lag is not None]
    return sum(lags) if lags else None


async def describe_share_group(
    cluster: TxnCluster, group: str
) -> tuple[ShareGroupView, BrokerAddress] | None:
    """FindCoordinator, then ShareGroupDescribe and DescribeShareGroupOffsets there;
    None when there is no share group `group` (or the cluster serves none: off, or a
    broker that speaks no ShareGroupDescribe v1)."""

    async def ask(
        session: WireSession, coordinator: BrokerAddress
    ) -> tuple[ShareGroupView, BrokerAddress]:
        _, described = await session.call(
            SHARE_GROUP_DESCRIBE,
            "ShareGroupDescribe",
            {"group_ids": [group], "include_authorized_operations": False},
            min_version=1,
            max_version=1,
        )
        view = share_view_from(described, group)
        _, offsets = await session.call(
            DESCRIBE_SHARE_GROUP_OFFSETS,
            "DescribeShareGroupOffsets",
            {"groups": [{"group_id": group, "topics": None}]},
            max_version=1,
        )
        partitions = share_partitions_from(offsets, group)
        return replace(view, partitions=partitions), coordinator

    try:
        return await at_coordinator(
            cluster, group, GROUP_KEY, lambda r: coordinator_of(r, group), ask
        )
    except (NotAShareGroup, ApiNotSupported):
        return None


LIST_GROUPS = 16


def share_list_row(group: str, state: str, members: int | None) -> tuple[str, str, str, str, str]:
    """A share group's `strom group list` row: its protocol type is "share" too."""
    return (group, "share", state, "share", NONE if members is None else str(members))


async def list_share_groups(
    cluster: TxnCluster, brokers: Sequence[BrokerAddress]
) -> list[tuple[str, str, str, str, str]]:
    """Every broker's share groups (ListGroups v5, types filter "share"), with their
    member counts; a broker that cannot filter by type (before v5) lists none."""
    states: dict[str, str] = {}
    for broker in brokers:
        try:
            _, response = await cluster.session(broker).call(
                LIST_GROUPS,
                "ListGroups",
                {"states_filter": [], "types_filter": ["share"]},
                min_version=5,
            )
        except CommandError:
            continue
        if is_error(response.error_code):
            continue
        for g in response.groups:
            states[str(g.group_id)] = str(g.group_state)
    rows = []
    for group, state in sorted(states.items()):
        try:
            described = await describe_share_group(cluster, group)
        except CommandError:
            described = None  # gone since it was listed: no count
        members = None if described is None else len(described[0].members)
        rows.append(share_list_row(group, state, members))
    return rows
