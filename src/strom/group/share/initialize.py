"""Which share-partitions may be assigned: those whose state is initialized (Kafka 4.1+).

A share-partition is assigned to members only once the share coordinator holds its
state. The group's state partition metadata record (key 15) tracks it per topic:

    (not known) --a heartbeat sees it subscribed--> initializing   (the decision returns
                                                                    a `ShareInitialize`
                                                                    for the shell)
    initializing --the shell wrote the state: `mark_initialized`--> initialized
    initializing --the shell failed: `mark_uninitialized`--> (not known)
    initializing --older than group.share.initialize.retry.interval.ms--> asked again

A topic the group never knew starts at start offset -1 (the group's
`share.auto.offset.reset` decides); new partitions of a known topic start at 0, as in
Kafka. As in Kafka, all initializing topics of a group count as asked at the time the
group's record 15 was last written or loaded (the coordinator keeps that time); it is
not in the record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from strom.group.share.records import ShareStatePartitionsValue, ShareStateTopic
from strom.group.share.state import ShareGroup

__all__ = [
    "ShareInitialize",
    "ShareInitializeTopic",
    "assignable_partitions",
    "initialized_assignment_pending",
    "mark_initialized",
    "mark_uninitialized",
    "to_initialize",
    "with_initializing",
]

UNINITIALIZED_START_OFFSET = -1

TopicPartitions = Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class ShareInitializeTopic:
    topic_id: uuid.UUID
    name: str
    partitions: frozenset[int]
    start_offset: int
    """-1: where `share.auto.offset.reset` says; 0: the log start (a new partition)."""


@dataclass(frozen=True, slots=True)
class ShareInitialize:
    """An InitializeShareGroupState the shell sends (or does itself) for the group; it
    reports back with the coordinator's `state_initialized` or `state_not_initialized`."""

    group_id: str
    group_epoch: int
    topics: tuple[ShareInitializeTopic, ...]


def _by_id(topics: tuple[ShareStateTopic, ...]) -> dict[uuid.UUID, ShareStateTopic]:
    return {t.topic_id: t for t in topics}


def _parts(topic: ShareStateTopic | None) -> frozenset[int]:
    return frozenset() if topic is None or topic.partitions is None else topic.partitions


def assignable_partitions(group: ShareGroup) -> dict[uuid.UUID, frozenset[int]]:
    """The initialized partitions, by topic id."""
    return {t.topic_id: _parts(t) for t in group.state_partitions.initialized}


def initialized_assignment_pending(group: ShareGroup, subscribed_ids: set[uuid.UUID]) -> bool:
    """Some subscribed topic has initialized partitions that are not exactly the ones in
    the target assignment: a new assignment is due."""
    if not group.members or not subscribed_ids:
        return False
    assigned: dict[uuid.UUID, frozenset[int]] = {}
    for target in group.target.values():
        for topic_id, partitions in target.items():
            assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    for topic in group.state_partitions.initialized:
        if topic.topic_id in subscribed_ids and assigned.get(topic.topic_id) != _parts(topic):
            return True
    return False


def to_initialize(
    group: ShareGroup,
    subscribed: Mapping[uuid.UUID, tuple[str, int]],
    initializing_fresh: bool,
) -> dict[uuid.UUID, tuple[str, frozenset[int]]]:
    """The subscribed partitions neither initialized nor being initialized (the ones being
    initialized count only while `initializing_fresh`). `subscribed`: topic id -> (name,
    partition count) of the subscribed topics that exist."""
    state = group.state_partitions
    known = {t.topic_id: set(_parts(t)) for t in state.initialized}
    if initializing_fresh:
        for t in state.initializing:
            known.setdefault(t.topic_id, set()).update(_parts(t))
    changes: dict[uuid.UUID, tuple[str, frozenset[int]]] = {}
    for topic_id, (name, count) in sorted(subscribed.items()):
        have = known.get(topic_id, set())
        if not have or len(have) < count:
            changes[topic_id] = (name, frozenset(range(count)) - have)
    return changes


def with_initializing(
    state: ShareStatePartitionsValue, changes: Mapping[uuid.UUID, tuple[str, frozenset[int]]]
) -> ShareStatePartitionsValue:
    """Record 15 once `changes` are being initialized; they leave the deleting list."""
    initializing = _by_id(state.initializing)
    for topic_id, (name, partitions) in changes.items():
        merged = _parts(initializing.get(topic_id)) | partitions
        initializing[topic_id] = ShareStateTopic(topic_id, name, merged)
    deleting = tuple(t for t in state.deleting if t.topic_id not in changes)
    return ShareStatePartitionsValue(_sorted(initializing), state.initialized, deleting)


def mark_initialized(
    state: ShareStatePartitionsValue, done: TopicPartitions, names: Mapping[uuid.UUID, str]
) -> ShareStatePartitionsValue:
    """Record 15 once the state of `done` is written: initialized, no longer initializing."""
    initialized = _by_id(state.initialized)
    initializing = _by_id(state.initializing)
    for topic_id, partitions in done.items():
        old = initialized.get(topic_id)
        name = old.name if old else names.get(topic_id, "<UNKNOWN>")
        initialized[topic_id] = ShareStateTopic(topic_id, name, _parts(old) | partitions)
        _drop(initializing, topic_id, partitions)
    return ShareStatePartitionsValue(_sorted(initializing), _sorted(initialized), state.deleting)


def mark_uninitialized(
    state: ShareStatePartitionsValue, failed: TopicPartitions
) -> ShareStatePartitionsValue:
    """Record 15 once initializing `failed` did not work: no longer initializing."""
    initializing = _by_id(state.initializing)
    for topic_id, partitions in failed.items():
        _drop(initializing, topic_id, partitions)
    return ShareStatePartitionsValue(_sorted(initializing), state.initialized, state.deleting)


def _drop(
    topics: dict[uuid.UUID, ShareStateTopic], topic_id: uuid.UUID, partitions: frozenset[int]
) -> None:
    old = topics.get(topic_id)
    if old is None:
        return
    left = _parts(old) - partitions
    if left:
        topics[topic_id] = ShareStateTopic(topic_id, old.name, left)
    else:
        del topics[topic_id]


def _sorted(topics: dict[uuid.UUID, ShareStateTopic]) -> tuple[ShareStateTopic, ...]:
    return tuple(topics[t] for t in sorted(topics))
