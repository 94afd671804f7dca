"""One member's way from its current assignment to the group's target assignment.

The rule that keeps a partition from being consumed twice (Kafka's
CurrentAssignmentBuilder): a member gives up the partitions the target takes from it
before any other member gets them. So a member whose target drops partitions it owns
stays at its epoch, keeps only what it may keep, and is asked to revoke the rest
(UNREVOKED_PARTITIONS); only when its heartbeat no longer lists them does it move to
the target epoch. Partitions of its target still held by another member are not given
yet (UNRELEASED_PARTITIONS); they are given by a later heartbeat once released.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace

from strom.group.consumer.records import Assignment
from strom.group.consumer.state import ConsumerMember, MemberState

__all__ = ["FencedByState", "reconcile"]

OwnedPartitions = Mapping[uuid.UUID, frozenset[int]] | None
"""What the member's heartbeat says it owns; None when the heartbeat did not say."""


class FencedByState(Exception):
    """A member in a state this coordinator does not know: it must rejoin."""


def _owns_any(owned: OwnedPartitions, partitions: Assignment) -> bool:
    if owned is None:
        return True  # it did not say: assume it still owns them
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: OwnedPartitions,
) -> ConsumerMember:
    """The member after this heartbeat (the same value when nothing changes)."""
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned)
    if member.state == MemberState.UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if owned is None or any(owned.values()):
        raise FencedByState(member.member_id)
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _epoch(member: ConsumerMember, epoch: int) -> ConsumerMember:
    """At `epoch`, with the epoch it had as its previous one (a member whose answer with
    the new epoch was lost may still heartbeat with the previous)."""
    return replace(member, member_epoch=epoch, previous_member_epoch=member.member_epoch)


def _next(
    member: ConsumerMember,
    member_epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epoch: Callable[[uuid.UUID, int], int],
    owned: OwnedPartitions,
) -> ConsumerMember:
    keep: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    give: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        new = frozenset(p for p in wanted - kept if partition_epoch(topic_id, p) == -1)
        unreleased = unreleased or len(new) < len(wanted - kept)
        if kept:
            keep[topic_id] = kept
        if current - wanted:
            revoke[topic_id] = current - wanted
        if new:
            give[topic_id] = new
    if revoke and _owns_any(owned, revoke):
        return replace(
            _epoch(member, member_epoch),
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=keep,
            pending_revocation=revoke,
        )
    for topic_id, partitions in give.items():
        keep[topic_id] = keep.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return replace(_epoch(member, target_epoch), state=state, assigned=keep, pending_revocation={})
