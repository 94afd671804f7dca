"""The state of share groups (KIP-932), and how records change it.

A share group changes only by `replay_share` of its records (`records.py`), live and at
load alike. Its state is derived, as Kafka's ShareGroup derives it:

    Empty   --a member joins-->          Stable
    Stable  --the last member leaves-->  Empty
    (a deleted group is gone: its group metadata record's tombstone removes it)

Share groups have no revocation phase: a share-partition may be read by several members
at once, so a member's assignment goes straight to its target at the target's epoch;
every member is always in Kafka's member state STABLE.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from enum import Enum

from strom.group.share.records import (
    ShareAssignment,
    ShareCurrentAssignmentKey,
    ShareCurrentAssignmentValue,
    ShareGroupEpochKey,
    ShareGroupEpochValue,
    ShareKey,
    ShareMemberKey,
    ShareMemberValue,
    ShareStatePartitionsKey,
    ShareStatePartitionsValue,
    ShareTargetEpochKey,
    ShareTargetEpochValue,
    ShareTargetKey,
    ShareTargetValue,
    ShareValue,
)

__all__ = [
    "SHARE_MEMBER_STABLE",
    "ShareGroup",
    "ShareGroupState",
    "ShareMember",
    "replay_share",
]

SHARE_MEMBER_STABLE = 0
"""Kafka's MemberState.STABLE, the only state a share member has."""
NO_PARTITIONS: Mapping[uuid.UUID, frozenset[int]] = {}


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"


@dataclass(frozen=True, slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: ShareAssignment = field(default_factory=dict)

    def subscription(self) -> ShareMemberValue:
        return ShareMemberValue(
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
        )

    def current_assignment(self) -> ShareCurrentAssignmentValue:
        return ShareCurrentAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=SHARE_MEMBER_STABLE,
            assigned=self.assigned,
        )


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    assignment_timestamp_ms: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, ShareAssignment] = field(default_factory=dict)
    """member id -> its partitions in the target assignment."""
    state_partitions: ShareStatePartitionsValue = field(default_factory=ShareStatePartitionsValue)
    """Which topics' share-partition state is initializing, initialized or deleting."""

    def copy(self) -> ShareGroup:
        return ShareGroup(
            self.group_id,
            self.group_epoch,
            self.metadata_hash,
            self.assignment_epoch,
            self.assignment_timestamp_ms,
            dict(self.members),
            dict(self.target),
            self.state_partitions,
        )

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topic_names(self) -> set[str]:
        return {name for m in self.members.values() for name in m.subscribed_topic_names}


def replay_share(
    groups: MutableMapping[str, ShareGroup], key: ShareKey, value: ShareValue | None
) -> None:
    """Apply one share group record to `groups`, as Kafka's GroupMetadataManager replays
    it: live once a write is durable, and at load."""
    group = groups.get(key.group_id)
    if isinstance(key, ShareGroupEpochKey):
        if value is None:
            groups.pop(key.group_id, None)
            return
        assert isinstance(value, ShareGroupEpochValue)
        if group is None:
            group = groups[key.group_id] = ShareGroup(key.group_id)
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
        return
    if group is None:
        if value is None:
            return
        group = groups[key.group_id] = ShareGroup(key.group_id)
    if isinstance(key, ShareTargetEpochKey):
        if isinstance(value, ShareTargetEpochValue):
            group.assignment_epoch = value.assignment_epoch
            group.assignment_timestamp_ms = value.assignment_timestamp_ms
        else:
            group.assignment_epoch = -1
            group.assignment_timestamp_ms = 0
    elif isinstance(key, ShareTargetKey):
        if isinstance(value, ShareTargetValue):
            group.target[key.member_id] = value.partitions
        else:
            group.target.pop(key.member_id, None)
    elif isinstance(key, ShareMemberKey):
        if isinstance(value, ShareMemberValue):
            old = group.members.get(key.member_id) or ShareMember(key.member_id)
            group.members[key.member_id] = replace(
                old,
                rack_id=value.rack_id,
                client_id=value.client_id,
                client_host=value.client_host,
                subscribed_topic_names=value.subscribed_topic_names,
            )
        else:
            group.members.pop(key.member_id, None)
    elif isinstance(key, ShareStatePartitionsKey):
        if isinstance(value, ShareStatePartitionsValue):
            group.state_partitions = value
        else:
            group.state_partitions = ShareStatePartitionsValue()
    else:
        _replay_current(group, key, value)


def _replay_current(
    group: ShareGroup, key: ShareCurrentAssignmentKey, value: ShareValue | None
) -> None:
    if value is None:
        # The member is leaving (its subscription's tombstone follows): it holds nothing.
        old = group.members.get(key.member_id)
        if old is not None:
            group.members[key.member_id] = replace(
                old, member_epoch=-1, previous_member_epoch=-1, assigned=NO_PARTITIONS
            )
        return
    assert isinstance(value, ShareCurrentAssignmentValue)
    old = group.members.get(key.member_id) or ShareMember(key.member_id)
    group.members[key.member_id] = replace(
        old,
        member_epoch=value.member_epoch,
        previous_member_epoch=value.previous_member_epoch,
        assigned=value.assigned,
    )
