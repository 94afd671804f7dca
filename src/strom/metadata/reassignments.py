"""Partition reassignment (KIP-455): AlterPartitionReassignments and
ListPartitionReassignments as pure decisions.

    alter_reassignments(image, targets, is_live=, unclean=) -> (records, [ReassignmentResult])
    list_reassignments(image, topics | None) -> [OngoingReassignment]

A partition's assignment moves like this (Kafka's controller: ReplicationControlManager,
PartitionReassignmentReplicas and PartitionReassignmentRevert in apache/kafka):

    settled --target--> reassigning (replicas = target + removing)
    reassigning --every target replica in the ISR--> settled (replicas = target)
    reassigning --cancel--> settled (replicas = the replicas before the reassignment)
    reassigning --new target--> reassigning toward the new target
    settled --a target already in sync (a reordering, a shrink)--> settled at once

The rules:

- A target is a non-empty list of distinct registered brokers (live or not), else
  INVALID_REPLICA_ASSIGNMENT; an unknown topic or partition is
  UNKNOWN_TOPIC_OR_PARTITION. A target of `None` (the request's null) cancels; an empty
  list is invalid, as in Kafka.
- Starting: adding = target - current replicas (in target order), removing = current -
  target (in current order), replicas = target followed by removing. Kafka sorts adding
  and removing by broker id; strom keeps the orders so that a cancelled reassignment
  gives back the original replica order, and with it the preferred leader. Leader and
  ISR stay; the new replicas are followers (brokers create a replica for every
  partition whose replica list names them) and join the ISR like any follower, by the
  leader's AlterPartition once caught up. Replicas being added never lead before they
  are in the ISR; an unclean election takes them only when no other replica is live
  (elections.py).
- Completing (in elections.complete_reassignment, applied to every partition change of
  every decision, and so to AlterPartition's ISR changes and to the start itself): once
  every target replica is in the ISR, replicas = target, ISR = ISR without the removed
  replicas, adding and removing cleared. A leader that was removed gives way to the
  first live ISR member in target order (or -1 if none is live). As in Kafka the leader
  epoch goes up whenever replicas leave, so the removed replicas are fenced; brokers
  follow the image and drop the logs of partitions they no longer replicate.
- A new target for a partition already being reassigned is planned from its current
  full replica list, as Kafka's controller does: replicas the earlier target was adding
  count as current ones (and become removing if the new target leaves them out). A
  target equal to the current replicas of a settled partition changes nothing.
- Cancelling needs a reassignment in progress (else NO_REASSIGNMENT_IN_PROGRESS). It
  takes the added replicas out of the replica list and the ISR, keeping the removing
  ones: the partition is as it was before. If only added replicas were in sync, the
  first original replica is put in the ISR, which is an unclean election: refused with
  INVALID_REPLICA_ASSIGNMENT unless unclean.leader.election.enable holds for the topic.
  A leader that was an added replica gives way to the first live ISR member.
- Fencing changes nothing in a reassignment: a fenced replica being added stays in the
  replica list and in `adding`, and the reassignment waits for it to come back and
  catch up, or for a new target or a cancel.

Every partition of one request is decided in one decision (one metadata entry), each
seeing the changes before it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from strom.metadata.elections import (
    Liveness,
    PartitionState,
    UncleanPolicy,
    change_record,
    elect_leader,
    partition_change,
)
from strom.metadata.image import MetadataImage, PartitionImage, TopicImage
from strom.metadata.records import MetadataRecord, PartitionChangeRecord
from strom.metadata.refused import Refused


@dataclass(frozen=True, slots=True)
class PartitionTarget:
    """One partition of an AlterPartitionReassignments request."""

    topic: str
    partition: int
    replicas: tuple[int, ...] | None
    """The target replica list; None cancels the pending reassignment."""


@dataclass(frozen=True, slots=True)
class ReassignmentResult:
    topic: str
    partition: int
    error_code: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def plan(
    current: Sequence[int], target: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(replicas, adding, removing) of a reassignment from `current` to `target`."""
    removing = tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    return (*target, *removing), adding, removing


def alter_reassignments(
    image: MetadataImage,
    targets: Sequence[PartitionTarget],
    *,
    is_live: Liveness,
    unclean: UncleanPolicy,
) -> tuple[list[MetadataRecord], list[ReassignmentResult]]:
    """Start, change or cancel the reassignment of each partition of `targets`."""
    records: list[MetadataRecord] = []
    results: list[ReassignmentResult] = []
    decided: dict[tuple[str, int], PartitionImage] = {}
    for target in targets:
        key = (target.topic, target.partition)
        try:
            topic, old = _partition(image, target)
            old = decided.get(key, old)
            if target.replicas is None:
                record = _cancel(topic, old, is_live, unclean)
            else:
                record = _start(image, topic, old, target.replicas, is_live)
        except Refused as refused:
            results.append(
                ReassignmentResult(target.topic, target.partition, refused.code, refused.message)
            )
            continue
        if record is not None:
            records.append(record)
            decided[key] = old.changed(record)
        results.append(ReassignmentResult(target.topic, target.partition))
    return records, results


def _partition(image: MetadataImage, target: PartitionTarget) -> tuple[TopicImage, PartitionImage]:
    topic = image.topics_by_name.get(target.topic)
    if topic is None:
        raise Refused(
            ErrorCode.unknown_topic_or_partition, f"topic {target.topic!r} does not exist"
        )
    partition = topic.partitions.get(target.partition)
    if partition is None:
        raise Refused(
            ErrorCode.unknown_topic_or_partition,
            f"topic {target.topic!r} has no partition {target.partition}",
        )
    return topic, partition


def _start(
    image: MetadataImage,
    topic: TopicImage,
    old: PartitionImage,
    target: Sequence[int],
    is_live: Liveness,
) -> PartitionChangeRecord | None:
    where = f"{topic.name}-{old.partition}"
    if not target:
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            f"the target replica list of {where} is empty (null cancels a reassignment)",
        )
    if len(set(target)) != len(target):
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            f"the target replicas {list(target)} of {where} name a broker more than once",
        )
    unknown = sorted(set(target) - set(image.brokers))
    if unknown:
        raise Refused(
            ErrorCode.invalid_replica_assignment,
            f"the target replicas {list(target)} of {where} name unregistered broker(s) {unknown}",
        )
    if not old.reassigning and tuple(target) == old.replicas:
        return None
    replicas, adding, removing = plan(old.replicas, target)
    state = replace(
        PartitionState.of(old),
        replicas=replicas,
        adding_replicas=adding,
        removing_replicas=removing,
    )
    return partition_change(topic.topic_id, old, state, is_live)


def _cancel(
    topic: TopicImage, old: PartitionImage, is_live: Liveness, unclean: UncleanPolicy
) -> PartitionChangeRecord | None:
    where = f"{topic.name}-{old.partition}"
    if not old.reassigning:
        raise Refused(
            ErrorCode.no_reassignment_in_progress, f"{where} has no reassignment to cancel"
        )
    adding = set(old.adding_replicas)
    replicas = tuple(r for r in old.replicas if r not in adding)
    isr = tuple(r for r in old.isr if r not in adding)
    allow_unclean = unclean(topic.name)
    if not isr:
        if not allow_unclean:
            raise Refused(
                ErrorCode.invalid_replica_assignment,
                f"cancelling the reassignment of {where} would need an unclean leader "
                "election (only replicas being added are in sync), and "
                "unclean.leader.election.enable is false for the topic",
            )
        isr = replicas[:1]
    state = PartitionState(old.leader, isr, replicas)
    return change_record(topic.topic_id, old, elect_leader(state, is_live, unclean=allow_unclean))


def list_reassignments(
    image: MetadataImage, topics: Mapping[str, Sequence[int]] | None
) -> list[OngoingReassignment]:
    """The pending reassignments: of every partition (`topics` None) or of the given
    partitions of the given topics (unknown topics and partitions are left out, as in
    Kafka), by topic name and partition."""
    found: list[OngoingReassignment] = []
    if topics is None:
        wanted = [(t, p) for t, p in image.partitions()]
    else:
        wanted = []
        for name in sorted(topics):
            topic = image.topics_by_name.get(name)
            if topic is None:
                continue
            for index in sorted(set(topics[name])):
                partition = topic.partitions.get(index)
                if partition is not None:
                    wanted.append((topic, partition))
    for topic, partition in wanted:
        if partition.reassigning:
            found.append(
                OngoingReassignment(
                    topic.name,
                    partition.partition,
                    partition.replicas,
                    partition.adding_replicas,
                    partition.removing_replicas,
                )
            )
    return found
