"""ElectLeaders (API 43, KIP-183 and KIP-460): leader elections an operator asks for, as
one pure decision.

    elect_leaders(image, election_type, requested | None, is_live=)
        -> (records, [TopicElections])

The rules are Kafka's controller's (ReplicationControlManager.electLeader and
PartitionChangeBuilder in apache/kafka), on top of strom's election rules
(elections.py):

- PREFERRED (0; what v0 always asks for): a partition led by its preferred (first)
  replica needs no election, ELECTION_NOT_NEEDED. Otherwise its preferred replica leads
  if it is live (registered and unfenced) and in the ISR. If it is not, the election
  keeps a live in-sync leader and answers PREFERRED_LEADER_NOT_AVAILABLE; a partition
  with no live in-sync leader gets the first live ISR member in replica order instead
  (the clean election any leader change makes, and a success, as in Kafka), and with
  none, PREFERRED_LEADER_NOT_AVAILABLE.
- UNCLEAN (1): a partition with a leader needs no election, ELECTION_NOT_NEEDED. One
  without gets the first live ISR member, else the first live replica outside the ISR,
  which then leads alone in the ISR (records only the others had may be lost; replicas
  a pending reassignment is adding come last, elections.unclean_candidate). Asked for by
  an operator, it does not depend on unclean.leader.election.enable, as in Kafka. With
  no live replica at all: ELIGIBLE_LEADERS_NOT_AVAILABLE.
- An unknown topic or partition: UNKNOWN_TOPIC_OR_PARTITION.
- `requested` None (the request's null topic_partitions) asks for every partition of
  every topic. Then, as in Kafka's controller, partitions that needed no election are
  left out of the answer (every topic is still listed, maybe with no partition), so an
  answer lists only the elections made and those that failed.

An election is one PartitionChangeRecord through elections.partition_change, like every
leadership change: the new leader (and, unclean, the new ISR), leader epoch + 1,
partition epoch + 1, and a pending reassignment the change completes completed. Every
partition of one request is decided in one decision (one metadata entry), each seeing
the changes before it: a partition asked for twice needs no second election.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import IntEnum

from kio.schema.errors import ErrorCode

from strom.metadata.elections import Liveness, PartitionState, elect_leader, partition_change
from strom.metadata.image import NO_LEADER, MetadataImage, PartitionImage, TopicImage
from strom.metadata.records import MetadataRecord, PartitionChangeRecord
from strom.metadata.refused import Refused


class ElectionType(IntEnum):
    """ElectLeaders' election_type (Kafka's ElectionType)."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """One topic of an ElectLeaders request and the partitions asked for."""

    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PartitionElection:
    """What became of one partition asked for."""

    partition: int
    error_code: ErrorCode = ErrorCode.none
    message: str | None = None
    leader: int = NO_LEADER
    """The leader elected; NO_LEADER when none was."""


@dataclass(frozen=True, slots=True)
class TopicElections:
    topic: str
    partitions: tuple[PartitionElection, ...]


def elect_leaders(
    image: MetadataImage,
    election_type: ElectionType,
    requested: Sequence[TopicPartitions] | None,
    *,
    is_live: Liveness,
) -> tuple[list[MetadataRecord], list[TopicElections]]:
    """The elections of one ElectLeaders request, and its answer topic by topic (in the
    request's order; every topic by name, partitions by index, for `requested` None)."""
    every_partition = requested is None
    if requested is None:
        requested = [
            TopicPartitions(name, tuple(sorted(topic.partitions)))
            for name, topic in sorted(image.topics_by_name.items())
        ]
    records: list[MetadataRecord] = []
    answers: list[TopicElections] = []
    decided: dict[tuple[str, int], PartitionImage] = {}
    for asked in requested:
        results: list[PartitionElection] = []
        for index in asked.partitions:
            key = (asked.topic, index)
            try:
                topic, old = _partition(image, asked.topic, index)
                old = decided.get(key, old)
                record = _elect(topic, old, election_type, is_live)
            except Refused as refused:
                if not (every_partition and refused.code == ErrorCode.election_not_needed):
                    results.append(PartitionElection(index, refused.code, refused.message))
                continue
            records.append(record)
            decided[key] = old.changed(record)
            results.append(PartitionElection(index, leader=record.leader))
        answers.append(TopicElections(asked.topic, tuple(results)))
    return records, answers


def _partition(image: MetadataImage, name: str, index: int) -> tuple[TopicImage, PartitionImage]:
    topic = image.topics_by_name.get(name)
    if topic is None:
        raise Refused(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
    partition = topic.partitions.get(index)
    if partition is None:
        raise Refused(
            ErrorCode.unknown_topic_or_partition, f"topic {name!r} has no partition {index}"
        )
    return topic, partition


def _elect(
    topic: TopicImage, old: PartitionImage, election_type: ElectionType, is_live: Liveness
) -> PartitionChangeRecord:
    """The record of one partition's election; Refused if none is needed or possible."""
    where = f"{topic.name}-{old.partition}"
    state = PartitionState.of(old)
    if election_type is ElectionType.PREFERRED:
        preferred = old.replicas[0] if old.replicas else NO_LEADER
        if old.leader == preferred:
            raise Refused(
                ErrorCode.election_not_needed,
                f"{where} is already led by its preferred replica {preferred}",
            )
        if preferred in old.isr and is_live(preferred):
            new = replace(state, leader=preferred)
        else:
            new = elect_leader(state, is_live, unclean=False)
        why = "is not live" if not is_live(preferred) else f"is not in the ISR {list(old.isr)}"
        failed = Refused(
            ErrorCode.preferred_leader_not_available,
            f"the preferred replica {preferred} of {where} {why}",
        )
    else:
        if old.leader != NO_LEADER:
            raise Refused(
                ErrorCode.election_not_needed, f"{where} has a leader already ({old.leader})"
            )
        new = elect_leader(state, is_live, unclean=True)
        failed = Refused(
            ErrorCode.eligible_leaders_not_available,
            f"no replica of {where} ({list(old.replicas)}) is live",
        )
    record = (
        None if new.leader == old.leader else partition_change(topic.topic_id, old, new, is_live)
    )
    if record is None:
        raise failed
    return record
