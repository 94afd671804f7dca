"""The state of consumer groups (KIP-848), and how records change it.

A consumer group changes only by `replay` of its records (`records.py`), live and at
load alike. Its state is derived, as Kafka derives it:

    Empty        no members
    Assigning    the group epoch is ahead of the target assignment's epoch
    Reconciling  some member is not yet at the target assignment's epoch, or still
                 revoking or waiting for partitions
    Stable       every member is reconciled with the target assignment
    (a deleted group is gone: its epoch record's tombstone removes it)

A member's own reconciliation state (`MemberState`):

    STABLE --target moves on--> UNREVOKED_PARTITIONS   (it must give some up first)
                           \\-> UNRELEASED_PARTITIONS  (some of its new partitions are
                                                        still owned by others)
                           \\-> STABLE                  (at the new epoch)
    UNREVOKED_PARTITIONS --its heartbeat no longer owns them--> any of the three
    UNRELEASED_PARTITIONS --the owners released them--> STABLE

`partition_owners` holds, for every partition assigned to or being revoked by a member,
that member and its epoch: the invariant is that no partition is in two members'
`assigned | pending_revocation`; replay raises `OwnershipError` if a record would break
it (a bug, never a client's doing).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from enum import Enum, IntEnum

from strom.group.consumer.records import (
    Assignment,
    ClassicMetadata,
    ConsumerGroupEpochKey,
    ConsumerGroupEpochValue,
    ConsumerKey,
    ConsumerValue,
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    MemberSubscriptionKey,
    MemberSubscriptionValue,
    PartitionMetadataKey,
    PartitionMetadataValue,
    TargetAssignmentEpochKey,
    TargetAssignmentEpochValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
    TopicMetadata,
)

__all__ = [
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "MemberState",
    "OwnershipError",
    "replay_consumer",
]

EMPTY: Mapping[uuid.UUID, frozenset[int]] = {}
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class OwnershipError(AssertionError):
    """A record would give a partition to two members at once."""


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)
    classic: ClassicMetadata | None = None
    """Set while the member uses the classic protocol (JoinGroup, SyncGroup, Heartbeat)
    in this consumer group: what it joined with."""

    def subscription(self) -> MemberSubscriptionValue:
        return MemberSubscriptionValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
            classic=self.classic,
        )

    def current_assignment(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned=self.assigned,
            pending_revocation=self.pending_revocation,
        )

    def owned(self) -> set[tuple[uuid.UUID, int]]:
        """Partitions it holds: assigned or still being revoked."""
        return {
            (t, p)
            for side in (self.assigned, self.pending_revocation)
            for t in side
            for p in side[t]
        }


@dataclass(slots=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    """instance id -> member id."""
    target: dict[str, Assignment] = field(default_factory=dict)
    """member id -> its partitions in the target assignment."""
    partition_owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = field(default_factory=dict)
    """(topic id, partition) -> (member id, its epoch) of the member holding it."""
    subscribed_topics: dict[str, TopicMetadata] = field(default_factory=dict)
    """The subscribed topics as of the last assignment, by name."""

    def copy(self) -> ConsumerGroup:
        return ConsumerGroup(
            self.group_id,
            self.group_epoch,
            self.assignment_epoch,
            dict(self.members),
            dict(self.static_members),
            dict(self.target),
            dict(self.partition_owners),
            dict(self.subscribed_topics),
        )

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str | None) -> ConsumerMember | None:
        member_id = self.static_members.get(instance_id) if instance_id is not None else None
        return self.members.get(member_id) if member_id is not None else None

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding the partition, -1 when none holds it."""
        owner = self.partition_owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def classic_members(self) -> list[ConsumerMember]:
        """The members using the classic protocol."""
        return [m for m in self.members.values() if m.classic is not None]

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}

    # --- ownership ------------------------------------------------------------------

    def _release(self, member: ConsumerMember) -> None:
        for tp in member.owned():
            if self.partition_owners.get(tp, ("", 0))[0] == member.member_id:
                del self.partition_owners[tp]

    def _take(self, member: ConsumerMember) -> None:
        for tp in member.owned():
            holder = self.partition_owners.get(tp)
            if holder is not None and holder[0] != member.member_id:
                raise OwnershipError(
                    f"group {self.group_id}: partition {tp} given to {member.member_id} "
                    f"while {holder[0]} holds it"
                )
            self.partition_owners[tp] = (member.member_id, member.member_epoch)

    def put_member(self, member: ConsumerMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
            if old.instance_id is not None and old.instance_id != member.instance_id:
                self.static_members.pop(old.instance_id, None)
        self._take(member)
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._release(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]


def replay_consumer(
    groups: MutableMapping[str, ConsumerGroup], key: ConsumerKey, value: ConsumerValue | None
) -> None:
    """Apply one consumer group record to `groups`, as Kafka's GroupMetadataManager
    replays it: live after a write is durable, and at load."""
    group = groups.get(key.group_id)
    if isinstance(key, ConsumerGroupEpochKey):
        if value is None:
            groups.pop(key.group_id, None)
            return
        assert isinstance(value, ConsumerGroupEpochValue)
        if group is None:
            group = groups[key.group_id] = ConsumerGroup(key.group_id)
        group.group_epoch = value.epoch
        return
    if group is None:
        if value is None:
            return
        group = groups[key.group_id] = ConsumerGroup(key.group_id)
    if isinstance(key, PartitionMetadataKey):
        topics = value.topics if isinstance(value, PartitionMetadataValue) else ()
        group.subscribed_topics = {topic.name: topic for topic in topics}
    elif isinstance(key, TargetAssignmentEpochKey):
        epoch = value.assignment_epoch if isinstance(value, TargetAssignmentEpochValue) else -1
        group.assignment_epoch = epoch
    elif isinstance(key, TargetAssignmentKey):
        if isinstance(value, TargetAssignmentValue):
            group.target[key.member_id] = value.partitions
        else:
            group.target.pop(key.member_id, None)
    elif isinstance(key, MemberSubscriptionKey):
        if isinstance(value, MemberSubscriptionValue):
            old = group.members.get(key.member_id) or ConsumerMember(key.member_id)
            group.put_member(_with_subscription(old, value))
        else:
            group.remove_member(key.member_id)
    else:
        _replay_current(group, key, value)


def _with_subscription(member: ConsumerMember, value: MemberSubscriptionValue) -> ConsumerMember:
    return replace(
        member,
        instance_id=value.instance_id,
        rack_id=value.rack_id,
        client_id=value.client_id,
        client_host=value.client_host,
        subscribed_topic_names=value.subscribed_topic_names,
        subscribed_topic_regex=value.subscribed_topic_regex,
        rebalance_timeout_ms=value.rebalance_timeout_ms,
        server_assignor=value.server_assignor,
        classic=value.classic,
    )


def _replay_current(
    group: ConsumerGroup, key: CurrentAssignmentKey, value: ConsumerValue | None
) -> None:
    if value is None and key.member_id not in group.members:
        return
    old = group.members.get(key.member_id) or ConsumerMember(key.member_id)
    if isinstance(value, CurrentAssignmentValue):
        try:
            state = MemberState(value.state)
        except ValueError:
            state = MemberState.UNKNOWN
        member = replace(
            old,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=state,
            assigned=value.assigned,
            pending_revocation=value.pending_revocation,
        )
    else:  # the member is leaving: it holds nothing any more
        member = replace(
            old,
            member_epoch=LEAVE_EPOCH,
            previous_member_epoch=LEAVE_EPOCH,
            state=MemberState.STABLE,
            assigned=EMPTY,
            pending_revocation=EMPTY,
        )
    group.put_member(member)
