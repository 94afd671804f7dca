"""A group moving between the classic protocol and the consumer protocol while its
members roll over (KIP-848's online migration), as Kafka's GroupMetadataManager moves
it; `group.consumer.migration.policy` says which ways are allowed.

Upgrade: a ConsumerGroupHeartbeat joining a live classic group of protocol type
"consumer" turns it into a consumer group (`upgrade`). Each classic member becomes a
member using the classic protocol, at the classic generation as its epoch, Stable,
owning what its last SyncGroup gave it, which is also its target; the group epoch and
the assignment epoch are the generation. The new member then joins as any member does
(a new group epoch, a new target assignment). The classic members go on with JoinGroup,
SyncGroup and Heartbeat (`strom.group.consumer.classic_members`) until they restart on
the consumer protocol.

Downgrade: when the members leaving (a leave, a fence, a LeaveGroup) leave only members
using the classic protocol, the consumer group becomes a classic group again
(`fence_members`): its records are deleted, and the classic group, Stable at the group
epoch with each member's target as its assignment, goes to the classic coordinator,
which starts a rebalance so they all rejoin.

The classic coordinator's side (the classic group's record, its waiting requests, the
offsets it holds) is `strom.group.handover`; the shell writes both sides' records in one
batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping

from kio.schema.errors import ErrorCode

from strom.group.consumer.heartbeat import (
    HeartbeatRefused,
    MigrationPolicy,
    TopicInfo,
    Work,
    bump_epoch_if_needed,
    remove_member_records,
    subscribed_topics,
)
from strom.group.consumer.records import (
    ClassicMetadata,
    ConsumerGroupEpochKey,
    ConsumerGroupEpochValue,
    CurrentAssignmentKey,
    MemberSubscriptionKey,
    PartitionMetadataKey,
    PartitionMetadataValue,
    TargetAssignmentEpochKey,
    TargetAssignmentEpochValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
)
from strom.group.consumer.state import ConsumerGroup, ConsumerMember, MemberState
from strom.group.consumer_protocol import (
    EmbeddedProtocolError,
    decode_assignment,
    decode_subscription,
    embedded_version,
    encode_assignment,
)
from strom.group.state import CONSUMER_PROTOCOL_TYPE, Group, GroupState, Member

__all__ = [
    "MigrationPolicy",
    "assignment_bytes",
    "check_upgrade",
    "fence_members",
    "partitions_by_name",
    "upgrade",
]


BUILT_IN_ASSIGNORS = frozenset({"range", "roundrobin", "sticky", "cooperative-sticky"})
"""The clients' own assignors. Their user data is stickiness only (a member's previous
partitions and generation), which the broker's assignors do without: librdkafka copies
it from each member's subscription into the assignment it sends, so Kafka refuses to
upgrade a librdkafka group on `sticky` or `cooperative-sticky` once it has been assigned
twice; strom upgrades it."""


def _not_upgraded(group_id: str, why: str) -> HeartbeatRefused:
    return HeartbeatRefused(
        ErrorCode.group_id_not_found,
        f"Cannot upgrade classic group {group_id} to consumer group because {why}.",
    )


def check_upgrade(classic: Group, policy: MigrationPolicy, max_size: int) -> None:
    """Kafka's validateOnlineUpgrade. Raises HeartbeatRefused (GROUP_ID_NOT_FOUND)."""
    if not policy.upgrades:
        raise _not_upgraded(classic.group_id, "online upgrade is disabled")
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise _not_upgraded(
            classic.group_id, "the group does not use the consumer embedded protocol"
        )
    if len(classic.members) > max_size:
        raise _not_upgraded(
            classic.group_id, "the group size exceeds the consumer group maximum size"
        )


def partitions_by_id(
    by_name: Mapping[str, tuple[int, ...]], topics: Mapping[str, TopicInfo]
) -> dict[uuid.UUID, frozenset[int]]:
    """Partitions named by topic name, by topic id; topics and partitions that do not
    exist are left out."""
    result: dict[uuid.UUID, frozenset[int]] = {}
    for name, partitions in by_name.items():
        info = topics.get(name)
        if info is None:
            continue
        valid = frozenset(p for p in partitions if 0 <= p < info.partitions)
        if valid:
            result[info.topic_id] = result.get(info.topic_id, frozenset()) | valid
    return result


def partitions_by_name(
    assignment: Mapping[uuid.UUID, frozenset[int]], topics: Mapping[str, TopicInfo]
) -> dict[str, tuple[int, ...]]:
    names = {info.topic_id: name for name, info in topics.items()}
    return {
        names[topic_id]: tuple(sorted(partitions))
        for topic_id, partitions in assignment.items()
        if topic_id in names and partitions
    }


def assignment_bytes(
    member: ConsumerMember,
    assignment: Mapping[uuid.UUID, frozenset[int]],
    topics: Mapping[str, TopicInfo],
) -> bytes:
    """An assignment for a member using the classic protocol, in the version of the
    subscription it joined with."""
    assert member.classic is not None
    protocols = member.classic.protocols
    version = embedded_version(protocols[0][1]) if protocols else 0
    return encode_assignment(partitions_by_name(assignment, topics), version)


def upgrade(work: Work, classic: Group, topics: Mapping[str, TopicInfo]) -> None:
    """Write, into `work` (a new consumer group), the records of the consumer group the
    classic group becomes (Kafka's fromClassicGroup and createConsumerGroupRecords).
    Raises HeartbeatRefused when a member's embedded protocol does not parse, or carries
    user data a client-side assignor would lose."""
    group_id = classic.group_id
    generation = classic.generation_id
    members: list[ConsumerMember] = []
    taken: set[tuple[uuid.UUID, int]] = set()
    for old in classic.members.values():
        metadata = old.metadata_for(classic.protocol_name) or (
            old.protocols[0][1] if old.protocols else b""
        )
        try:
            subscription = decode_subscription(metadata)
            by_name, user_data = decode_assignment(old.assignment) if old.assignment else ({}, None)
        except EmbeddedProtocolError:
            raise _not_upgraded(group_id, "the embedded consumer protocol is malformed") from None
        if user_data and classic.protocol_name not in BUILT_IN_ASSIGNORS:
            raise _not_upgraded(
                group_id,
                "an unsupported custom assignor is in use (its user data would be lost); "
                "switch to a default assignor before upgrading",
            )
        owned = {
            topic_id: frozenset(p for p in parts if (topic_id, p) not in taken)
            for topic_id, parts in partitions_by_id(by_name, topics).items()
        }
        taken.update((t, p) for t, parts in owned.items() for p in parts)
        member = ConsumerMember(
            old.member_id,
            instance_id=old.group_instance_id,
            rack_id=subscription.rack_id,
            client_id=old.client_id,
            client_host=old.client_host,
            subscribed_topic_names=subscription.topics,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            member_epoch=generation,
            previous_member_epoch=generation,
            state=MemberState.STABLE,
            assigned={t: ps for t, ps in owned.items() if ps},
            classic=ClassicMetadata(old.session_timeout_ms, old.protocols),
        )
        members.append(member)
    for member in members:
        work.emit(MemberSubscriptionKey(group_id, member.member_id), member.subscription())
    work.emit(ConsumerGroupEpochKey(group_id), ConsumerGroupEpochValue(generation))
    subscribed = subscribed_topics(work.group.members, topics)
    work.emit(PartitionMetadataKey(group_id), PartitionMetadataValue(tuple(subscribed.values())))
    for member in members:
        target = TargetAssignmentValue(member.assigned)
        work.emit(TargetAssignmentKey(group_id, member.member_id), target)
    work.emit(TargetAssignmentEpochKey(group_id), TargetAssignmentEpochValue(generation))
    for member in members:
        work.emit(CurrentAssignmentKey(group_id, member.member_id), member.current_assignment())


def downgrades(
    group: ConsumerGroup, leaving: Collection[str], policy: MigrationPolicy, classic_max_size: int
) -> bool:
    """Kafka's validateOnlineDowngradeWithFencedMembers: the members left all use the
    classic protocol, there are some, the policy allows it and they fit a classic group."""
    remaining = [m for member_id, m in group.members.items() if member_id not in leaving]
    return (
        bool(remaining)
        and all(m.classic is not None for m in remaining)
        and policy.downgrades
        and len(remaining) <= classic_max_size
    )


def fence_members(
    work: Work,
    leaving: Collection[str],
    topics: Mapping[str, TopicInfo],
    policy: MigrationPolicy,
    classic_max_size: int,
    now_ms: int,
) -> Group | None:
    """Remove members (left, expired, fenced) with one new group epoch; or, when only
    members using the classic protocol stay, delete the consumer group and return the
    classic group it becomes (for the classic coordinator to adopt)."""
    group = work.group
    if not leaving:
        return None
    if downgrades(group, leaving, policy, classic_max_size):
        return _downgrade(work, leaving, topics, now_ms)
    for member_id in leaving:
        remove_member_records(work, member_id)
    bump_epoch_if_needed(work, topics, bump=True)
    return None


def _downgrade(
    work: Work, leaving: Collection[str], topics: Mapping[str, TopicInfo], now_ms: int
) -> Group:
    before = work.group.copy()
    group_id = before.group_id
    classic = Group(
        group_id,
        GroupState.STABLE,
        now_ms,
        generation_id=before.group_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
    )
    staying = [m for member_id, m in before.members.items() if member_id not in leaving]
    for member in staying:
        assert member.classic is not None
        session_ms = member.classic.session_timeout_ms
        classic.members[member.member_id] = Member(
            member_id=member.member_id,
            group_instance_id=member.instance_id,
            client_id=member.client_id,
            client_host=member.client_host,
            rebalance_timeout_ms=member.rebalance_timeout_ms,
            session_timeout_ms=session_ms,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocols=member.classic.protocols,
            heartbeat_deadline_ms=now_ms + session_ms,
        )
        if member.instance_id is not None:
            classic.static_members[member.instance_id] = member.member_id
    classic.leader_id = staying[0].member_id
    classic.protocol_name = classic.select_protocol()
    for member in staying:
        target = before.target.get(member.member_id, {})
        chosen = classic.members[member.member_id].metadata_for(classic.protocol_name)
        version = embedded_version(chosen)
        classic.members[member.member_id].assignment = encode_assignment(
            partitions_by_name(target, topics), version
        )
    for member_id in list(before.members):
        remove_member_records(work, member_id)
    work.emit(TargetAssignmentEpochKey(group_id), None)
    work.emit(PartitionMetadataKey(group_id), None)
    work.emit(ConsumerGroupEpochKey(group_id), None)
    return classic
