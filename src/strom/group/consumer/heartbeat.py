"""The decision of one ConsumerGroupHeartbeat (KIP-848), made on a copy of its group.

A heartbeat joins (member epoch 0), reports (the member's epoch), leaves (-1) or leaves
for a while as a static member (-2). Every change it makes is a record, replayed into
the copy as it is written (`Work.emit`), so the copy is exactly what replaying the
records does to the group: the state the records leave is the only state there is.
The steps, as Kafka's GroupMetadataManager takes them:

1. The member: found, created, or (static member back after a -2 leave) replacing its
   former self, which hands over its assignment; epochs checked (FENCED_MEMBER_EPOCH
   for an epoch the coordinator did not give, UNKNOWN_MEMBER_ID for an unknown member).
2. Its subscription: a member metadata record when anything of it changed. A changed
   subscription, or a change in the subscribed topics (created, grown, deleted), bumps
   the group epoch.
3. The target assignment: recomputed by the server assignor when the group epoch is
   ahead of the assignment epoch; the members whose target changed get a record.
4. Reconciliation (`reconcile.py`): the member's current assignment moves toward its
   target; a current assignment record when it changed.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum

from kio.schema.errors import ErrorCode

from strom.group.consumer.assignors import ASSIGNORS, AssignmentSpec
from strom.group.consumer.reconcile import FencedByState, reconcile
from strom.group.consumer.records import (
    Assignment,
    ConsumerGroupEpochKey,
    ConsumerGroupEpochValue,
    ConsumerKey,
    ConsumerValue,
    CurrentAssignmentKey,
    MemberSubscriptionKey,
    PartitionMetadataKey,
    PartitionMetadataValue,
    TargetAssignmentEpochKey,
    TargetAssignmentEpochValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
    TopicMetadata,
)
from strom.group.consumer.state import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    replay_consumer,
)
from strom.group.consumer.topic_regex import topic_regex

__all__ = [
    "ConsumerGroupConfig",
    "ConsumerHeartbeatRequest",
    "ConsumerHeartbeatResult",
    "HeartbeatRefused",
    "MigrationPolicy",
    "TopicInfo",
    "Work",
    "assignor_of",
    "blank",
    "fence_member",
    "remove_member_records",
    "replace_static",
    "run_heartbeat",
]

ConsumerRecord = tuple[ConsumerKey, ConsumerValue | None]


class MigrationPolicy(Enum):
    """`group.consumer.migration.policy`: which way a group may move between the classic
    and the consumer protocol while its members roll over (`migration.py`)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    assignors: tuple[str, ...] = ("uniform", "range")
    """`group.consumer.assignors`; the first is the default."""
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 2**31 - 1
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL
    classic_max_size: int = 2**31 - 1
    """`group.max.size`: a group turning back into a classic group must fit it."""


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic of the metadata image, as a consumer group sees it."""

    topic_id: uuid.UUID
    partitions: int
    internal: bool = False


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[uuid.UUID, frozenset[int]] | None = None
    """The partitions the member says it owns; None when unchanged since its last one."""
    client_id: str = ""
    client_host: str = ""
    api_version: int = 0
    """The request's ConsumerGroupHeartbeat version: from v1 the member id is required."""


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Assignment | None = None


class HeartbeatRefused(Exception):
    """The heartbeat is answered with an error and writes nothing."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class Work:
    """A decision's copy of one group and the records it has written to it."""

    group: ConsumerGroup
    records: list[ConsumerRecord] = field(default_factory=list)
    deleted: bool = False
    """The group's epoch record was deleted: the group is gone."""

    def emit(self, key: ConsumerKey, value: ConsumerValue | None) -> None:
        self.records.append((key, value))
        groups = {self.group.group_id: self.group}
        replay_consumer(groups, key, value)
        self.deleted = self.group.group_id not in groups


MEMBER_ID_REQUIRED_VERSION = 1
"""From ConsumerGroupHeartbeat v1 the consumer makes its own member id (KIP-1082)."""


def blank(value: str | None) -> bool:
    """A value given but empty, or only spaces and control characters (what Java's
    String.trim() removes), as Kafka's throwIfEmptyString refuses it."""
    return value is not None and not value.strip("".join(map(chr, range(33))))


def validate(req: ConsumerHeartbeatRequest, config: ConsumerGroupConfig) -> None:
    """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid, its checks in its order."""

    def invalid(message: str) -> HeartbeatRefused:
        return HeartbeatRefused(ErrorCode.invalid_request, message)

    epoch = req.member_epoch
    if (
        req.api_version >= MEMBER_ID_REQUIRED_VERSION or epoch > 0 or epoch == LEAVE_EPOCH
    ) and blank(req.member_id):
        raise invalid("MemberId can't be empty.")
    if blank(req.group_id):
        raise invalid("GroupId can't be empty.")
    if blank(req.instance_id):
        raise invalid("InstanceId can't be empty.")
    if blank(req.rack_id):
        raise invalid("RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        # An empty list of names or an empty regex is a member subscribed to nothing.
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            raise invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < STATIC_LEAVE_EPOCH:
        raise invalid("MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in config.assignors:
        raise HeartbeatRefused(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {req.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(config.assignors)}.",
        )
    if req.subscribed_topic_regex is not None:
        try:
            topic_regex(req.subscribed_topic_regex)
        except ValueError as exc:
            raise HeartbeatRefused(
                ErrorCode.invalid_regular_expression,
                f"SubscribedTopicRegex {req.subscribed_topic_regex!r} is invalid: {exc}",
            ) from None


def _fenced(message: str) -> HeartbeatRefused:
    return HeartbeatRefused(
        ErrorCode.fenced_member_epoch,
        f"{message} The member must abandon all its partitions and rejoin.",
    )


def check_epoch(
    member: ConsumerMember, epoch: int, owned: Mapping[uuid.UUID, frozenset[int]] | None
) -> None:
    if epoch > member.member_epoch:
        raise _fenced(f"The member epoch {epoch} is greater than {member.member_epoch}.")
    if epoch < member.member_epoch:
        # The answer with the new epoch may have been lost: the previous epoch is fine
        # while the member owns no more than its current assignment.
        subset = owned is not None and all(
            ps <= member.assigned.get(t, frozenset()) for t, ps in owned.items()
        )
        if epoch != member.previous_member_epoch or not subset:
            raise _fenced(f"The member epoch {epoch} is smaller than {member.member_epoch}.")


def _member(work: Work, req: ConsumerHeartbeatRequest, member_id: str) -> ConsumerMember:
    group = work.group
    if req.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            if req.member_epoch != 0:
                raise HeartbeatRefused(
                    ErrorCode.unknown_member_id, f"Member {member_id} is not a member of the group."
                )
            return ConsumerMember(member_id)
        check_epoch(member, req.member_epoch, req.owned)
        return member
    existing = group.static_member(req.instance_id)
    if req.member_epoch == 0:
        if existing is None:
            return group.members.get(member_id) or ConsumerMember(member_id)
        # Kafka waits for the instance id to be released only by a member of the
        # consumer protocol: one using the classic protocol is replaced at once.
        if existing.member_epoch == STATIC_LEAVE_EPOCH or existing.classic is not None:
            return replace_static(work, existing, member_id)
        if existing.member_id == member_id:
            check_epoch(existing, 0, req.owned)
            return existing
        raise HeartbeatRefused(
            ErrorCode.unreleased_instance_id,
            f"Static member {member_id} with instance id {req.instance_id} cannot join the "
            f"group because the instance id is owned by member {existing.member_id}.",
        )
    if existing is None:
        raise HeartbeatRefused(
            ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."
        )
    if existing.member_id != member_id:
        raise HeartbeatRefused(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {req.instance_id} was fenced by "
            f"member {existing.member_id}.",
        )
    check_epoch(existing, req.member_epoch, req.owned)
    return existing


def replace_static(work: Work, old: ConsumerMember, member_id: str) -> ConsumerMember:
    """A static member back (with a new member id): it takes its former self's place,
    subscription, target and assignment, at epoch 0."""
    group_id = work.group.group_id
    target = work.group.target.get(old.member_id, {})
    remove_member_records(work, old.member_id)
    new = replace(old, member_id=member_id, member_epoch=0, previous_member_epoch=0)
    work.emit(MemberSubscriptionKey(group_id, member_id), new.subscription())
    work.emit(TargetAssignmentKey(group_id, member_id), TargetAssignmentValue(target))
    work.emit(CurrentAssignmentKey(group_id, member_id), new.current_assignment())
    return work.group.members[member_id]


def remove_member_records(work: Work, member_id: str) -> None:
    group_id = work.group.group_id
    work.emit(CurrentAssignmentKey(group_id, member_id), None)
    work.emit(TargetAssignmentKey(group_id, member_id), None)
    work.emit(MemberSubscriptionKey(group_id, member_id), None)


def subscribed_topics(
    members: Mapping[str, ConsumerMember], topics: Mapping[str, TopicInfo]
) -> dict[str, TopicMetadata]:
    """The existing topics some member subscribes to, by name or by its regex (a full
    match, internal topics excluded)."""
    names: set[str] = set()
    patterns: set[str] = set()
    for member in members.values():
        names.update(member.subscribed_topic_names)
        if member.subscribed_topic_regex is not None:
            patterns.add(member.subscribed_topic_regex)
    for pattern in patterns:
        compiled = topic_regex(pattern)
        names.update(n for n, t in topics.items() if not t.internal and compiled.matches(n))
    return {
        name: TopicMetadata(topics[name].topic_id, name, topics[name].partitions)
        for name in sorted(names)
        if name in topics
    }


def member_topic_ids(
    member: ConsumerMember, subscribed: Mapping[str, TopicMetadata]
) -> frozenset[uuid.UUID]:
    regex = member.subscribed_topic_regex
    pattern = topic_regex(regex) if regex else None
    return frozenset(
        meta.topic_id
        for name, meta in subscribed.items()
        if name in member.subscribed_topic_names or (pattern is not None and pattern.matches(name))
    )


def bump_epoch_if_needed(work: Work, topics: Mapping[str, TopicInfo], bump: bool) -> None:
    """Record the subscribed topics if they changed; bump the group epoch if they did or
    if `bump` (a member joined, left or changed its subscription)."""
    group = work.group
    subscribed = subscribed_topics(group.members, topics)
    if subscribed != group.subscribed_topics:
        work.emit(
            PartitionMetadataKey(group.group_id), PartitionMetadataValue(tuple(subscribed.values()))
        )
        bump = True
    if bump:
        work.emit(
            ConsumerGroupEpochKey(group.group_id), ConsumerGroupEpochValue(group.group_epoch + 1)
        )


def assignor_of(group: ConsumerGroup, config: ConsumerGroupConfig) -> str:
    """The server assignor most members ask for, else the default (the first)."""
    wanted = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
    return wanted.most_common(1)[0][0] if wanted else config.assignors[0]


def update_target(work: Work, config: ConsumerGroupConfig) -> None:
    """A new target assignment at the group epoch, when the group epoch is ahead."""
    group = work.group
    if group.group_epoch <= group.assignment_epoch:
        return
    name = assignor_of(group, config)
    specs = {
        member_id: AssignmentSpec(
            member_topic_ids(member, group.subscribed_topics), group.target.get(member_id, {})
        )
        for member_id, member in group.members.items()
    }
    partitions = {meta.topic_id: meta.partitions for meta in group.subscribed_topics.values()}
    result = ASSIGNORS[name](specs, partitions)
    for member_id in sorted(group.members):
        new = result.get(member_id, {})
        if dict(new) != dict(group.target.get(member_id, {})):
            work.emit(TargetAssignmentKey(group.group_id, member_id), TargetAssignmentValue(new))
    work.emit(
        TargetAssignmentEpochKey(group.group_id), TargetAssignmentEpochValue(group.group_epoch)
    )


def fence_member(work: Work, member_id: str, topics: Mapping[str, TopicInfo]) -> None:
    """Remove a member (left, expired, fenced) and bump the group epoch, so the others
    get its partitions at their next heartbeat."""
    remove_member_records(work, member_id)
    bump_epoch_if_needed(work, topics, bump=True)


def run_heartbeat(
    work: Work,
    req: ConsumerHeartbeatRequest,
    member_id: str,
    topics: Mapping[str, TopicInfo],
    config: ConsumerGroupConfig,
    fence: Callable[[Work, str], None] | None = None,
) -> tuple[ConsumerHeartbeatResult, ConsumerMember | None]:
    """Steps 1-4 for a join or a heartbeat (epoch >= 0), or a leave (-1, -2). Returns the
    answer and the member as it is now (None once it left). Raises HeartbeatRefused.
    `fence(work, member_id)` removes a member leaving (default: `fence_member`)."""
    group = work.group
    if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        remove = fence or (lambda w, member_id: fence_member(w, member_id, topics))
        return _leave(work, req, remove), None
    if (
        req.member_epoch == 0
        and member_id not in group.members
        and group.static_member(req.instance_id) is None
        and len(group.members) >= config.max_size
    ):
        raise HeartbeatRefused(
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of {config.max_size} members.",
        )
    member = _member(work, req, member_id)
    known = member.member_id in group.members
    updated = replace(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=req.server_assignor
        if req.server_assignor is not None
        else member.server_assignor,
        subscribed_topic_names=(
            req.subscribed_topic_names
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            req.subscribed_topic_regex
            if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=req.client_id,
        client_host=req.client_host,
        classic=None,  # it speaks the consumer protocol now, as Kafka's heartbeat sets
    )
    if not known or updated.subscription() != member.subscription():
        work.emit(MemberSubscriptionKey(group.group_id, member.member_id), updated.subscription())
    bump = not known or (
        updated.subscribed_topic_names != member.subscribed_topic_names
        or updated.subscribed_topic_regex != member.subscribed_topic_regex
        or updated.server_assignor != member.server_assignor
    )
    bump_epoch_if_needed(work, topics, bump)
    update_target(work, config)
    before = group.members[member.member_id]
    try:
        after = reconcile(
            before,
            group.assignment_epoch,
            group.target.get(member.member_id, {}),
            group.partition_epoch,
            req.owned,
        )
    except FencedByState:
        raise _fenced("The member is in an unknown state.") from None
    if after != before:
        work.emit(
            CurrentAssignmentKey(group.group_id, member.member_id), after.current_assignment()
        )
    full = req.member_epoch == 0 or (
        req.rebalance_timeout_ms != -1
        and req.subscribed_topic_names is not None
        and req.owned is not None
    )
    changed = dict(after.assigned) != dict(before.assigned) or not known
    return (
        ConsumerHeartbeatResult(
            member_id=member.member_id,
            member_epoch=after.member_epoch,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            assignment=after.assigned if full or changed else None,
        ),
        after,
    )


def _leave(
    work: Work, req: ConsumerHeartbeatRequest, fence: Callable[[Work, str], None]
) -> ConsumerHeartbeatResult:
    group = work.group
    if req.instance_id is None:
        member = group.members.get(req.member_id)
        if member is None:
            raise HeartbeatRefused(
                ErrorCode.unknown_member_id, f"Member {req.member_id} is not a member of the group."
            )
    else:
        found = group.static_member(req.instance_id)
        if found is None:
            raise HeartbeatRefused(
                ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown."
            )
        if found.member_id != req.member_id:
            raise HeartbeatRefused(
                ErrorCode.fenced_instance_id,
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced by "
                f"member {found.member_id}.",
            )
        member = found
    if req.member_epoch == STATIC_LEAVE_EPOCH:
        # It keeps its assignment for a while: back within its session timeout, it takes
        # it again; otherwise the timeout removes it.
        away = replace(
            member,
            member_epoch=STATIC_LEAVE_EPOCH,
            previous_member_epoch=member.member_epoch,
            pending_revocation={},
            state=MemberState.STABLE,
        )
        work.emit(CurrentAssignmentKey(group.group_id, member.member_id), away.current_assignment())
    else:
        fence(work, member.member_id)
    return ConsumerHeartbeatResult(member_id=member.member_id, member_epoch=req.member_epoch)
