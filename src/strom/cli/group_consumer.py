"""`strom group describe` of a KIP-848 consumer group: ConsumerGroupDescribe.

confluent-kafka's admin client describes a consumer group with ConsumerGroupDescribe
too, but keeps neither the group epoch, the assignment epoch nor the members' epochs.
So for a group of type CONSUMER the command asks the group's coordinator itself, through
strom's own client (wire.py): FindCoordinator for the group, then ConsumerGroupDescribe
there, looked up again while the coordinator moves or loads. What it makes of the
answer (values and table rows) needs no broker and is tested without sockets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.cli.common import CommandError
from strom.cli.group_model import NONE, Partition, format_assignment, group_missing_message
from strom.cli.txn import at_coordinator
from strom.cli.txn_model import COORDINATOR_RETRIABLE, BrokerAddress, CoordinatorMoved
from strom.cli.wire import error_name, is_error

if TYPE_CHECKING:
    from strom.cli.txn import TxnCluster
    from strom.cli.wire import WireSession

CONSUMER_GROUP_DESCRIBE = 69
GROUP_KEY = 0
CLASSIC_MEMBER_TYPE = 0


@dataclass(frozen=True, slots=True)
class ConsumerMemberView:
    member_id: str
    member_epoch: int
    instance_id: str | None
    client_id: str
    client_host: str
    assigned: tuple[Partition, ...]
    target: tuple[Partition, ...]
    protocol: str = "consumer"
    """The group protocol it speaks: "classic" while a group moves between the protocols
    (ConsumerGroupDescribe v1's member_type 0), else "consumer"."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ConsumerMemberView, ...]


def _partitions(assignment: Any) -> tuple[Partition, ...]:
    if assignment is None:
        return ()
    return tuple(
        sorted(
            (str(tp.topic_name), int(p))
            for tp in assignment.topic_partitions
            for p in tp.partitions
        )
    )


def _failure(group: str, name: str, message: str | None) -> CommandError:
    why = f" ({message})" if message else ""
    text = f"cannot describe group {group!r}: {name}{why}"
    if name in COORDINATOR_RETRIABLE:
        return CoordinatorMoved(text)
    if name == "GROUP_ID_NOT_FOUND":
        return CommandError(group_missing_message(group))
    return CommandError(text)


def coordinator_of(response: Any, group: str) -> BrokerAddress:
    """The coordinator a FindCoordinator answer names (v0-v3 at the top, v4+ per key)."""
    answer = next((c for c in getattr(response, "coordinators", ())), response)
    if is_error(answer.error_code):
        raise _failure(group, error_name(answer.error_code), getattr(answer, "error_message", None))
    return BrokerAddress(int(answer.node_id), str(answer.host), int(answer.port))


def view_from(response: Any, group: str) -> ConsumerGroupView:
    """The group's entry of a ConsumerGroupDescribe answer; CommandError on its error."""
    found = next((g for g in response.groups if str(g.group_id) == group), None)
    if found is None:
        raise CommandError(f"ConsumerGroupDescribe: no answer for {group!r}")
    if is_error(found.error_code):
        raise _failure(group, error_name(found.error_code), found.error_message)
    members = tuple(
        ConsumerMemberView(
            member_id=str(m.member_id),
            member_epoch=int(m.member_epoch),
            instance_id=None if m.instance_id is None else str(m.instance_id),
            client_id=str(m.client_id),
            client_host=str(m.client_host),
            assigned=_partitions(m.assignment),
            target=_partitions(m.target_assignment),
            protocol="classic"
            if getattr(m, "member_type", 1) == CLASSIC_MEMBER_TYPE
            else "consumer",
        )
        for m in found.members
    )
    return ConsumerGroupView(
        group_id=group,
        state=str(found.group_state),
        group_epoch=int(found.group_epoch),
        assignment_epoch=int(found.assignment_epoch),
        assignor=str(found.assignor_name),
        members=tuple(sorted(members, key=lambda m: m.member_id)),
    )


def consumer_header(view: ConsumerGroupView, coordinator: BrokerAddress | None) -> str:
    where = f"{coordinator.node_id} ({coordinator.address})" if coordinator else NONE
    return (
        f"Group: {view.group_id}   Type: consumer   State: {view.state}   "
        f"Group epoch: {view.group_epoch}   Assignment epoch: {view.assignment_epoch}   "
        f"Assignor: {view.assignor or NONE}   Coordinator: {where}"
    )


CONSUMER_MEMBER_HEADERS = (
    "MEMBER",
    "EPOCH",
    "PROTOCOL",
    "CLIENT ID",
    "HOST",
    "INSTANCE ID",
    "ASSIGNED",
    "TARGET",
)


def consumer_member_rows(
    members: Sequence[ConsumerMemberView],
) -> list[tuple[str, str, str, str, str, str, str, str]]:
    """One row per member, by member id; partitions in the --topic syntax."""
    return [
        (
            m.member_id,
            str(m.member_epoch),
            m.protocol,
            m.client_id or NONE,
            m.client_host or NONE,
            m.instance_id or NONE,
            format_assignment(m.assigned),
            format_assignment(m.target),
        )
        for m in members
    ]


async def describe_consumer_group(
    cluster: TxnCluster, group: str
) -> tuple[ConsumerGroupView, BrokerAddress]:
    """FindCoordinator, then ConsumerGroupDescribe there (`strom.cli.txn.at_coordinator`)."""

    async def ask(
        session: WireSession, coordinator: BrokerAddress
    ) -> tuple[ConsumerGroupView, BrokerAddress]:
        _, response = await session.call(
            CONSUMER_GROUP_DESCRIBE,
            "ConsumerGroupDescribe",
            {"group_ids": [group], "include_authorized_operations": False},
            max_version=1,
        )
        return view_from(response, group), coordinator

    return await at_coordinator(cluster, group, GROUP_KEY, lambda r: coordinator_of(r, group), ask)
