"""The decision of one ShareGroupHeartbeat (KIP-932, v1), made on a copy of its group.

A heartbeat joins (member epoch 0, with the member id the client made up), reports (the
member's epoch) or leaves (-1). Every change is a record, replayed into the copy as it
is written (`ShareWork.emit`), so the copy is exactly what replaying the records does.
The steps, as Kafka's GroupMetadataManager takes them:

1. The group and the member: found or (epoch 0) created; GROUP_ID_NOT_FOUND for an
   unknown group or a group of another type, GROUP_MAX_SIZE_REACHED past
   `group.share.max.size`, UNKNOWN_MEMBER_ID for an unknown member, FENCED_MEMBER_EPOCH
   for an epoch that is neither the member's nor its previous one.
2. Its subscription: a member metadata record when any of it changed. A changed topic
   list, or a change in the subscribed topics (created, grown, deleted: a different
   metadata hash), bumps the group epoch; so does a share-partition whose state became
   initialized since the last assignment.
3. The target assignment: recomputed by the `simple` assignor when the group epoch is
   ahead of the assignment epoch, over the initialized share-partitions only; the
   members whose target changed get a record.
4. The member's assignment: set to its target (filtered to its subscription) at the
   target's epoch; no revocation phase, since share-partitions are not exclusive.
5. Subscribed share-partitions not initialized yet: recorded as initializing, and
   returned for the shell to initialize (`initialize.py`).

`describe` is ShareGroupDescribe's view of a group.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from strom.group.share.assignor import SIMPLE_ASSIGNOR, ShareMemberSpec, assign_simple
from strom.group.share.initialize import (
    UNINITIALIZED_START_OFFSET,
    ShareInitialize,
    ShareInitializeTopic,
    assignable_partitions,
    initialized_assignment_pending,
    to_initialize,
    with_initializing,
)
from strom.group.share.records import (
    ShareAssignment,
    ShareCurrentAssignmentKey,
    ShareGroupEpochKey,
    ShareGroupEpochValue,
    ShareKey,
    ShareMemberKey,
    ShareStatePartitionsKey,
    ShareTargetEpochKey,
    ShareTargetEpochValue,
    ShareTargetKey,
    ShareTargetValue,
    ShareValue,
)
from strom.group.share.state import ShareGroup, ShareMember, replay_share

__all__ = [
    "ShareDescribedGroup",
    "ShareDescribedMember",
    "ShareGroupConfig",
    "ShareHeartbeatRefused",
    "ShareHeartbeatRequest",
    "ShareHeartbeatResult",
    "ShareTopic",
    "ShareWork",
    "describe",
    "fence_share_member",
    "metadata_hash",
    "run_share_heartbeat",
    "validate_share_heartbeat",
]

ShareRecord = tuple[ShareKey, ShareValue | None]
LEAVE_GROUP_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """The coordinator's `group.share.*` settings; a group's own `share.session.timeout.ms`
    and `share.heartbeat.interval.ms` replace the broker defaults for that group."""

    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_size: int = 200
    assignor: str = SIMPLE_ASSIGNOR
    initialize_retry_interval_ms: int = 30_000
    """`group.share.initialize.retry.interval.ms`."""


@dataclass(frozen=True, slots=True)
class ShareTopic:
    """A topic of the metadata image, as a share group sees it."""

    topic_id: uuid.UUID
    partitions: int


@dataclass(frozen=True, slots=True)
class ShareHeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None
    """None when unchanged since the member's last heartbeat."""
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResult:
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: ShareAssignment | None = None
    """None: the member keeps the assignment it has."""


class ShareHeartbeatRefused(Exception):
    """The heartbeat is answered with an error and writes nothing."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


@dataclass(slots=True)
class ShareWork:
    """A decision's copy of one group and the records it has written to it."""

    group: ShareGroup
    records: list[ShareRecord] = field(default_factory=list)
    deleted: bool = False
    initialize: ShareInitialize | None = None
    """Share-partitions whose state the shell must initialize."""

    def emit(self, key: ShareKey, value: ShareValue | None) -> None:
        self.records.append((key, value))
        groups = {self.group.group_id: self.group}
        replay_share(groups, key, value)
        self.deleted = self.group.group_id not in groups


def validate_share_heartbeat(req: ShareHeartbeatRequest) -> None:
    """Kafka's GroupCoordinatorService checks, before the group is looked at."""

    def invalid(message: str) -> ShareHeartbeatRefused:
        return ShareHeartbeatRefused(ErrorCode.invalid_request, message)

    if not req.member_id:
        raise invalid("MemberId can't be empty.")
    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    if req.member_epoch == 0:
        if not req.subscribed_topic_names:
            raise invalid("SubscribedTopicNames must be set in first request.")
    elif req.member_epoch < LEAVE_GROUP_EPOCH:
        raise invalid("MemberEpoch is invalid.")


def metadata_hash(names: set[str], topics: Mapping[str, ShareTopic]) -> int:
    """A signed 64-bit hash of the subscribed topics that exist: names, ids, partition
    counts; 0 for none. strom's own (Kafka hashes with Murmur3 and racks); it only
    tells whether the subscribed topics changed, so a group loaded from Kafka's records
    bumps its epoch once."""
    existing = sorted(n for n in names if n in topics)
    if not existing:
        return 0
    h = hashlib.blake2b(digest_size=8)
    for name in existing:
        topic = topics[name]
        h.update(name.encode() + b"\0" + topic.topic_id.bytes)
        h.update(topic.partitions.to_bytes(4, "big"))
    return int.from_bytes(h.digest(), "big", signed=True)


def _member(group: ShareGroup, req: ShareHeartbeatRequest) -> ShareMember:
    member = group.members.get(req.member_id)
    if member is None:
        if req.member_epoch != 0:
            raise ShareHeartbeatRefused(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} is not a member of group {group.group_id}.",
            )
        return ShareMember(req.member_id)
    epoch = req.member_epoch
    if epoch == 0 or epoch == member.member_epoch:
        return member
    if epoch > member.member_epoch:
        raise ShareHeartbeatRefused(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a greater member epoch ({epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must "
            "abandon all its partitions and rejoin.",
        )
    if epoch != member.previous_member_epoch:
        raise ShareHeartbeatRefused(
            ErrorCode.fenced_member_epoch,
            f"The share group member has a smaller member epoch ({epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}), and it does not "
            f"match the previous member epoch ({member.previous_member_epoch}). The "
            "member must abandon all its partitions and rejoin.",
        )
    return member


def _bump(work: ShareWork, new_hash: int) -> None:
    group = work.group
    work.emit(
        ShareGroupEpochKey(group.group_id), ShareGroupEpochValue(group.group_epoch + 1, new_hash)
    )


def _update_target(work: ShareWork, topics: Mapping[str, ShareTopic]) -> None:
    group = work.group
    if group.group_epoch <= group.assignment_epoch:
        return
    specs = {
        member_id: ShareMemberSpec(
            frozenset(topics[n].topic_id for n in member.subscribed_topic_names if n in topics),
            group.target.get(member_id, {}),
        )
        for member_id, member in group.members.items()
    }
    partitions = {
        topics[n].topic_id: topics[n].partitions
        for n in group.subscribed_topic_names()
        if n in topics
    }
    result = assign_simple(specs, partitions, assignable_partitions(group))
    for member_id in sorted(group.members):
        new = result.get(member_id, {})
        if dict(new) != dict(group.target.get(member_id, {})):
            work.emit(ShareTargetKey(group.group_id, member_id), ShareTargetValue(new))
    work.emit(ShareTargetEpochKey(group.group_id), ShareTargetEpochValue(group.group_epoch))


def _filtered(
    target: ShareAssignment, names: tuple[str, ...], topics: Mapping[str, ShareTopic]
) -> dict[uuid.UUID, frozenset[int]]:
    """The target's partitions of the topics the member subscribes to."""
    ids = {topics[n].topic_id for n in names if n in topics}
    return {t: ps for t, ps in target.items() if t in ids and ps}


def run_share_heartbeat(
    work: ShareWork,
    req: ShareHeartbeatRequest,
    topics: Mapping[str, ShareTopic],
    config: ShareGroupConfig,
    initializing_fresh: bool = False,
) -> ShareHeartbeatResult:
    """Steps 1-5 for a join or a heartbeat, or a leave (-1), on `work`, a copy of the
    group (a new, empty one when none exists yet). `initializing_fresh`: the group's
    initializing share-partitions were asked for less than the retry interval ago.
    Raises ShareHeartbeatRefused."""
    group = work.group
    known = req.member_id in group.members
    if req.member_epoch == LEAVE_GROUP_EPOCH:
        if not known:
            raise ShareHeartbeatRefused(
                ErrorCode.unknown_member_id,
                f"Member {req.member_id} is not a member of group {group.group_id}.",
            )
        fence_share_member(work, req.member_id, topics)
        return ShareHeartbeatResult(member_id=req.member_id, member_epoch=LEAVE_GROUP_EPOCH)
    if len(group.members) >= config.max_size and not known:
        raise ShareHeartbeatRefused(
            ErrorCode.group_max_size_reached,
            f"The share group has reached its maximum capacity of {config.max_size} members.",
        )
    member = _member(group, req)
    updated = replace(
        member,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        subscribed_topic_names=(
            req.subscribed_topic_names
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        client_id=req.client_id,
        client_host=req.client_host,
    )
    subscription_changed = False
    if not known or updated.subscription() != member.subscription():
        work.emit(ShareMemberKey(group.group_id, req.member_id), updated.subscription())
        subscription_changed = updated.subscribed_topic_names != member.subscribed_topic_names
    subscribed = {topics[n].topic_id for n in group.subscribed_topic_names() if n in topics}
    new_hash = metadata_hash(group.subscribed_topic_names(), topics)
    pending = group.assignment_epoch >= group.group_epoch and initialized_assignment_pending(
        group, subscribed
    )
    if subscription_changed or new_hash != group.metadata_hash or pending:
        _bump(work, new_hash)
    _update_target(work, topics)
    before = group.members[req.member_id]
    after = before
    target = group.target.get(req.member_id, {})
    if before.member_epoch != group.assignment_epoch:
        after = replace(
            before,
            previous_member_epoch=before.member_epoch,
            member_epoch=group.assignment_epoch,
            assigned=_filtered(target, before.subscribed_topic_names, topics),
        )
    elif subscription_changed:
        after = replace(before, assigned=_filtered(target, before.subscribed_topic_names, topics))
    if after != before or not known:
        work.emit(
            ShareCurrentAssignmentKey(group.group_id, req.member_id), after.current_assignment()
        )
    _initialize(work, topics, initializing_fresh)
    changed = dict(after.assigned) != dict(member.assigned) or not known
    full = req.member_epoch == 0 or req.subscribed_topic_names is not None
    return ShareHeartbeatResult(
        member_id=req.member_id,
        member_epoch=after.member_epoch,
        heartbeat_interval_ms=config.heartbeat_interval_ms,
        assignment=after.assigned if full or changed else None,
    )


def _initialize(work: ShareWork, topics: Mapping[str, ShareTopic], fresh: bool) -> None:
    group = work.group
    subscribed = {
        topics[n].topic_id: (n, topics[n].partitions)
        for n in group.subscribed_topic_names()
        if n in topics
    }
    changes = to_initialize(group, subscribed, fresh)
    if not changes:
        return
    state = group.state_partitions
    known = {t.topic_id for t in state.initialized + state.initializing}
    work.initialize = ShareInitialize(
        group.group_id,
        group.group_epoch,
        tuple(
            ShareInitializeTopic(
                topic_id, name, partitions, 0 if topic_id in known else UNINITIALIZED_START_OFFSET
            )
            for topic_id, (name, partitions) in sorted(changes.items())
        ),
    )
    work.emit(ShareStatePartitionsKey(group.group_id), with_initializing(state, changes))


def fence_share_member(work: ShareWork, member_id: str, topics: Mapping[str, ShareTopic]) -> None:
    """Remove a member (it left, or its session expired) and bump the group epoch; the
    last one out also moves the assignment epoch up, as an empty group needs no
    assignment."""
    group = work.group
    work.emit(ShareCurrentAssignmentKey(group.group_id, member_id), None)
    work.emit(ShareTargetKey(group.group_id, member_id), None)
    work.emit(ShareMemberKey(group.group_id, member_id), None)
    _bump(work, metadata_hash(group.subscribed_topic_names(), topics))
    if not group.members:
        work.emit(ShareTargetEpochKey(group.group_id), ShareTargetEpochValue(group.group_epoch))


# --------------------------------------------------------------------------- describe


@dataclass(frozen=True, slots=True)
class ShareDescribedMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]
    """(topic id, topic name, partitions), topics that no longer exist left out."""


@dataclass(frozen=True, slots=True)
class ShareDescribedGroup:
    group_id: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ShareDescribedMember, ...]


def describe(
    group: ShareGroup, topics: Mapping[str, ShareTopic], config: ShareGroupConfig
) -> ShareDescribedGroup:
    """ShareGroupDescribe's DescribedGroup, as plain values (the handler builds kio's)."""
    names = {t.topic_id: name for name, t in topics.items()}
    members = tuple(
        ShareDescribedMember(
            member_id=m.member_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=m.subscribed_topic_names,
            assignment=tuple(
                (t, names[t], tuple(sorted(m.assigned[t])))
                for t in sorted(m.assigned, key=lambda t: names.get(t, ""))
                if t in names
            ),
        )
        for m in sorted(group.members.values(), key=lambda m: m.member_id)
    )
    return ShareDescribedGroup(
        group_id=group.group_id,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=config.assignor,
        members=members,
    )
