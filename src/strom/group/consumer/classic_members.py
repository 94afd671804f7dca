"""Members using the classic protocol inside a consumer group (KIP-848's migration):
their JoinGroup, SyncGroup, Heartbeat and LeaveGroup, decided as Kafka's
GroupMetadataManager decides them (classicGroupJoinToConsumerGroup and its siblings).

A classic member is a consumer group member like any other (the server assignor gives
its partitions, reconciliation keeps a partition from two members at once), whose
subscription, owned partitions, session timeout and protocols come from its JoinGroup:

- JoinGroup updates the member (a new one gets an id first: MEMBER_ID_REQUIRED), bumps
  the group epoch when its subscription changed, computes the target assignment and
  reconciles the member with the partitions its subscription says it owns. The answer's
  generation is the member's epoch; it names no leader (the broker assigns), so every
  classic member is a follower.
- SyncGroup answers the member's assigned partitions in its subscription's version;
  REBALANCE_IN_PROGRESS when a newer assignment waits for it (unless it is still
  revoking: then it gets what it keeps, and revokes the rest).
- Heartbeat answers REBALANCE_IN_PROGRESS when the member must rejoin: its epoch is
  behind the target's, it has partitions to revoke, or partitions it waited for are free.
- LeaveGroup fences the members named, possibly turning the group back into a classic
  group (`migration.fence_members`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from strom.group.consumer.heartbeat import (
    ConsumerGroupConfig,
    HeartbeatRefused,
    TopicInfo,
    Work,
    bump_epoch_if_needed,
    replace_static,
    update_target,
)
from strom.group.consumer.migration import (
    MigrationPolicy,
    assignment_bytes,
    fence_members,
    partitions_by_id,
)
from strom.group.consumer.reconcile import FencedByState, reconcile
from strom.group.consumer.records import (
    ClassicMetadata,
    CurrentAssignmentKey,
    MemberSubscriptionKey,
)
from strom.group.consumer.state import ConsumerGroup, ConsumerMember, MemberState
from strom.group.consumer_protocol import EmbeddedProtocolError, decode_subscription
from strom.group.requests import JoinRequest, LeavingMember, SyncRequest
from strom.group.state import CONSUMER_PROTOCOL_TYPE, Group, JoinResult, SyncResult

__all__ = ["ClassicJoin", "classic_heartbeat", "classic_join", "classic_leave", "classic_sync"]


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    """A JoinGroup's answer and the member as it is now (None: nothing was decided)."""

    result: JoinResult
    member: ConsumerMember | None = None


def _refused(error: ErrorCode, member_id: str = "") -> ClassicJoin:
    return ClassicJoin(JoinResult(error, member_id=member_id))


def supports(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """Kafka's supportsClassicProtocols: type "consumer", and (in a group with members)
    a protocol every member using the classic protocol offers."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return False
    if not group.members:
        return bool(names)
    classic = group.classic_members()
    return any(
        all(name in {p for p, _ in m.classic.protocols} for m in classic if m.classic)
        for name in names
    )


def classic_join(
    work: Work,
    req: JoinRequest,
    member_id: str,
    topics: Mapping[str, TopicInfo],
    config: ConsumerGroupConfig,
    policy: MigrationPolicy,
) -> ClassicJoin:
    """`member_id`: the request's, or a new one when it has none."""
    group = work.group
    if policy is MigrationPolicy.DISABLED:
        return _refused(ErrorCode.inconsistent_group_protocol, req.member_id)
    static = group.static_member(req.group_instance_id)
    if member_id not in group.members and static is None and len(group.members) >= config.max_size:
        return _refused(ErrorCode.group_max_size_reached, req.member_id)
    if not supports(group, req.protocol_type, {name for name, _ in req.protocols}):
        return _refused(ErrorCode.inconsistent_group_protocol, req.member_id)
    if req.require_known_member_id and not req.member_id and req.group_instance_id is None:
        return _refused(ErrorCode.member_id_required, member_id)
    if req.group_instance_id is not None and req.member_id:  # a static member rejoining
        if static is None:
            return _refused(ErrorCode.unknown_member_id, req.member_id)
        if static.member_id != req.member_id:
            return _refused(ErrorCode.fenced_instance_id, req.member_id)
    try:
        subscription = decode_subscription(req.protocols[0][1])
    except EmbeddedProtocolError:
        return _refused(ErrorCode.inconsistent_group_protocol, req.member_id)
    if static is not None and static.member_id != member_id:
        member = replace_static(work, static, member_id)  # a static member restarted
    else:
        member = group.members.get(member_id) or ConsumerMember(member_id)
    known = member.member_id in group.members
    updated = replace(
        member,
        instance_id=req.group_instance_id,
        rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        server_assignor=None,
        subscribed_topic_names=subscription.topics,
        subscribed_topic_regex=None,
        client_id=req.client_id,
        client_host=req.client_host,
        classic=ClassicMetadata(req.session_timeout_ms, req.protocols),
    )
    if not known or updated.subscription() != member.subscription():
        work.emit(MemberSubscriptionKey(group.group_id, member_id), updated.subscription())
    bump = not known or (
        updated.subscribed_topic_names != member.subscribed_topic_names
        or member.subscribed_topic_regex is not None
        or member.server_assignor is not None
    )
    bump_epoch_if_needed(work, topics, bump)
    update_target(work, config)
    before = group.members[member_id]
    if before.state == MemberState.UNKNOWN:  # it starts again from nothing
        before = replace(before, state=MemberState.STABLE, assigned={}, pending_revocation={})
    try:
        after = reconcile(
            before,
            group.assignment_epoch,
            group.target.get(member_id, {}),
            group.partition_epoch,
            partitions_by_id(subscription.owned, topics),
        )
    except FencedByState:  # pragma: no cover - UNKNOWN was reset above
        return _refused(ErrorCode.unknown_member_id, member_id)
    if after != group.members[member_id]:
        work.emit(CurrentAssignmentKey(group.group_id, member_id), after.current_assignment())
    result = JoinResult(
        ErrorCode.none,
        member_id=member_id,
        generation_id=after.member_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=req.protocols[0][0],
        leader_id="",
    )
    return ClassicJoin(result, after)


def classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
    """Kafka's validateConsumerGroupMember plus the check that it uses the classic
    protocol. Raises HeartbeatRefused (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID)."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = group.static_member(instance_id)
        if member is not None and member.member_id != member_id:
            raise HeartbeatRefused(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by "
                f"member {member.member_id}.",
            )
    if member is None:
        raise HeartbeatRefused(ErrorCode.unknown_member_id, f"Member {member_id} is unknown.")
    if member.classic is None:
        raise HeartbeatRefused(
            ErrorCode.unknown_member_id, f"Member {member_id} does not use the classic protocol."
        )
    return member


def classic_sync(
    group: ConsumerGroup, req: SyncRequest, topics: Mapping[str, TopicInfo]
) -> SyncResult:
    try:
        member = classic_member(group, req.member_id, req.group_instance_id)
    except HeartbeatRefused as refused:
        return SyncResult(refused.error)
    assert member.classic is not None
    if req.generation_id != member.member_epoch:
        return SyncResult(ErrorCode.illegal_generation)
    if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
        req.protocol_name is not None and req.protocol_name != member.classic.protocol_name
    ):
        return SyncResult(ErrorCode.inconsistent_group_protocol)
    if (
        group.assignment_epoch > member.member_epoch
        and member.state != MemberState.UNREVOKED_PARTITIONS
    ):
        return SyncResult(ErrorCode.rebalance_in_progress)
    return SyncResult(
        ErrorCode.none,
        req.protocol_type,
        req.protocol_name,
        assignment_bytes(member, member.assigned, topics),
    )


def waiting_on_unreleased(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """Some partition of its target it does not have yet is still held by another."""
    if member.state != MemberState.UNRELEASED_PARTITIONS:
        return False
    for topic_id, partitions in group.target.get(member.member_id, {}).items():
        mine = member.assigned.get(topic_id, frozenset())
        if any(p not in mine and group.partition_epoch(topic_id, p) != -1 for p in partitions):
            return True
    return False


def classic_heartbeat(
    group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
) -> ErrorCode:
    try:
        member = classic_member(group, member_id, instance_id)
    except HeartbeatRefused as refused:
        return refused.error
    if generation_id != member.member_epoch:
        return ErrorCode.illegal_generation
    if (
        member.member_epoch < group.assignment_epoch
        or member.state == MemberState.UNREVOKED_PARTITIONS
        or (
            member.state == MemberState.UNRELEASED_PARTITIONS
            and not waiting_on_unreleased(group, member)
        )
    ):
        return ErrorCode.rebalance_in_progress
    return ErrorCode.none


def classic_leave(
    work: Work,
    leaving: Sequence[LeavingMember],
    topics: Mapping[str, TopicInfo],
    policy: MigrationPolicy,
    classic_max_size: int,
    now_ms: int,
) -> tuple[list[ErrorCode], list[str], Group | None]:
    """LeaveGroup of a consumer group: one error per member named, the members removed,
    and the classic group the consumer group became, if it did."""
    group = work.group
    errors: list[ErrorCode] = []
    gone: list[str] = []
    for each in leaving:
        if each.group_instance_id is None:
            member = group.members.get(each.member_id)
            error = ErrorCode.none if member is not None else ErrorCode.unknown_member_id
        else:
            member = group.static_member(each.group_instance_id)
            if member is None:
                error = ErrorCode.unknown_member_id
            elif each.member_id and member.member_id != each.member_id:
                error = ErrorCode.fenced_instance_id
            else:
                error = ErrorCode.none
        errors.append(error)
        if error is ErrorCode.none and member is not None and member.member_id not in gone:
            gone.append(member.member_id)
    classic = fence_members(work, gone, topics, policy, classic_max_size, now_ms)
    return errors, gone, classic
