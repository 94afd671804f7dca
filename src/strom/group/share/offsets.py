"""What AlterShareGroupOffsets and DeleteShareGroupOffsets decide about a share group
(KIP-932), as Kafka's GroupMetadataManager decides it. Pure: topics come in as
`ShareTopic`s of the metadata image, the group as it is now.

Alter (only an empty group; a group that does not exist is created):

    the group epoch goes up by one (the state epoch of the new states, which fences the
    share-partitions' leaders)
    each named partition of an existing topic is recorded *initializing* (record 15) and
    its state is started again at the given start offset (`ShareInitialize`); the shell
    then reports it initialized (`mark_initialized`) or not (`mark_uninitialized`)
    a topic the image lacks, or a partition past its count: UNKNOWN_TOPIC_OR_PARTITION

Delete (only an empty share group):

    initialized topic --delete_offsets--> deleting (its initialized partitions' states
                                          are deleted by the shell)
    deleting topic    --delete_offsets--> deleting (every partition's state deleted again)
    deleting topic    --deleted--> (not known)
    any other topic: UNKNOWN_TOPIC_OR_PARTITION
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.group.share.heartbeat import ShareTopic
from strom.group.share.initialize import ShareInitialize, ShareInitializeTopic
from strom.group.share.records import ShareStatePartitionsValue, ShareStateTopic

__all__ = [
    "NO_OFFSET_INFORMATION",
    "UNKNOWN_TOPIC_MESSAGE",
    "AlterPlan",
    "DeletePlan",
    "OffsetResult",
    "plan_alter",
    "plan_delete",
    "without_deleting",
]

UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
NO_OFFSET_INFORMATION = "There is no offset information to delete."


@dataclass(frozen=True, slots=True)
class OffsetResult:
    """One topic's (or, with `partition`, one partition's) answer."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int | None = None
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AlterPlan:
    state: ShareStatePartitionsValue
    """Record 15 with the altered partitions initializing."""
    results: tuple[OffsetResult, ...]
    """Per partition: NONE (to be initialized) or UNKNOWN_TOPIC_OR_PARTITION."""
    initialize: ShareInitialize | None
    """The states to start again, at the new group epoch (None: nothing valid named)."""


@dataclass(frozen=True, slots=True)
class DeletePlan:
    state: ShareStatePartitionsValue
    """Record 15 with the named topics moved to deleting."""
    deletes: tuple[tuple[str, uuid.UUID, frozenset[int]], ...]
    """(topic name, id, partitions) whose share-partition states the shell deletes."""
    errors: tuple[OffsetResult, ...]


def plan_alter(
    group_id: str,
    state: ShareStatePartitionsValue,
    group_epoch: int,
    asked: Sequence[tuple[str, Sequence[tuple[int, int]]]],
    topics: Mapping[str, ShareTopic],
) -> AlterPlan:
    """`asked`: (topic name, [(partition, start offset)]); `group_epoch`: the new one."""
    results: list[OffsetResult] = []
    starts: dict[tuple[uuid.UUID, str, int], set[int]] = {}
    initializing = {t.topic_id: t for t in state.initializing}
    for name, partitions in asked:
        topic = topics.get(name)
        for partition, start_offset in partitions:
            if topic is None or not 0 <= partition < topic.partitions:
                results.append(
                    OffsetResult(
                        name,
                        None if topic is None else topic.topic_id,
                        partition,
                        ErrorCode.unknown_topic_or_partition,
                        UNKNOWN_TOPIC_MESSAGE,
                    )
                )
                continue
            results.append(OffsetResult(name, topic.topic_id, partition))
            starts.setdefault((topic.topic_id, name, start_offset), set()).add(partition)
            old = initializing.get(topic.topic_id)
            have = frozenset() if old is None or old.partitions is None else old.partitions
            initializing[topic.topic_id] = ShareStateTopic(topic.topic_id, name, have | {partition})
    if not starts:
        return AlterPlan(state, tuple(results), None)
    changed = set(initializing) - {t.topic_id for t in state.initializing}
    changed |= {topic_id for topic_id, _, _ in starts}
    new_state = ShareStatePartitionsValue(
        tuple(initializing[t] for t in sorted(initializing)),
        state.initialized,
        tuple(t for t in state.deleting if t.topic_id not in changed),
    )
    initialize = ShareInitialize(
        group_id,
        group_epoch,
        tuple(
            ShareInitializeTopic(topic_id, name, frozenset(parts), start_offset)
            for (topic_id, name, start_offset), parts in sorted(
                starts.items(), key=lambda item: (item[0][0], item[0][2])
            )
        ),
    )
    return AlterPlan(new_state, tuple(results), initialize)


def plan_delete(
    state: ShareStatePartitionsValue, asked: Sequence[str], topics: Mapping[str, ShareTopic]
) -> DeletePlan:
    """`asked`: the topic names of the request."""
    initialized = {t.topic_id: t for t in state.initialized}
    deleting = {t.topic_id: t for t in state.deleting}
    deletes: list[tuple[str, uuid.UUID, frozenset[int]]] = []
    errors: list[OffsetResult] = []
    for name in asked:
        topic = topics.get(name)
        if topic is None:
            errors.append(
                OffsetResult(
                    name,
                    None,
                    error=ErrorCode.unknown_topic_or_partition,
                    message=UNKNOWN_TOPIC_MESSAGE,
                )
            )
            continue
        done = initialized.pop(topic.topic_id, None)
        if done is not None:
            deletes.append((name, topic.topic_id, done.partitions or frozenset()))
            deleting[topic.topic_id] = ShareStateTopic(topic.topic_id, name, None)
        elif topic.topic_id in deleting:
            deletes.append((name, topic.topic_id, frozenset(range(topic.partitions))))
        else:
            errors.append(
                OffsetResult(
                    name,
                    None,
                    error=ErrorCode.unknown_topic_or_partition,
                    message=NO_OFFSET_INFORMATION,
                )
            )
    new_state = ShareStatePartitionsValue(
        state.initializing,
        tuple(initialized[t] for t in sorted(initialized)),
        tuple(deleting[t] for t in sorted(deleting)),
    )
    return DeletePlan(new_state, tuple(deletes), tuple(errors))


def without_deleting(
    state: ShareStatePartitionsValue, topic_ids: frozenset[uuid.UUID]
) -> ShareStatePartitionsValue:
    """Record 15 once the states of these deleting topics are gone."""
    return ShareStatePartitionsValue(
        state.initializing,
        state.initialized,
        tuple(t for t in state.deleting if t.topic_id not in topic_ids),
    )
