"""The controller's topic decisions as pure functions: (image, command) -> (records, results).

Nothing here does I/O or reads a clock: the shell passes the current image, a seeded
`random.Random` for placement and the live (unfenced) brokers, persists the returned
records through the metadata store, and replays them into the image. Broker liveness and
partition leadership are in brokers.py and elections.py (ElectLeaders in
elect_leaders.py), dynamic configs in configs.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from random import Random

from kio.schema.errors import ErrorCode

from strom.metadata.image import MetadataImage
from strom.metadata.placement import check_assignments, initial_state, place_replicas
from strom.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from strom.metadata.refused import Refused
from strom.metadata.topic_names import colliding_topic, validate_topic_name

__all__ = ["place_replicas", "validate_topic_name"]


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int  # -1: the broker default
    replication_factor: int  # -1: the broker default
    assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopicDefaults:
    num_partitions: int
    replication_factor: int


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1


def _racks(image: MetadataImage) -> dict[int, str | None]:
    return {broker_id: broker.rack for broker_id, broker in image.brokers.items()}


def _partition_records(
    topic_id: uuid.UUID, placement: Mapping[int, tuple[int, ...]], live: set[int]
) -> list[MetadataRecord]:
    records: list[MetadataRecord] = []
    for partition, replicas in sorted(placement.items()):
        leader, isr = initial_state(partition, replicas, live)
        records.append(
            PartitionRecord(
                topic_id=topic_id,
                partition=partition,
                replicas=replicas,
                isr=isr,
                leader=leader,
                leader_epoch=0,
                partition_epoch=0,
            )
        )
    return records


def create_topics(
    image: MetadataImage,
    topics: Sequence[NewTopic],
    *,
    defaults: TopicDefaults,
    brokers: Sequence[int],
    rng: Random,
    validate_only: bool = False,
    validate_configs: object = None,
) -> tuple[list[MetadataRecord], list[TopicResult]]:
    """Records creating each valid topic, and one result per requested topic.

    `brokers` are the live (unfenced) brokers new replicas may be placed on; placement is
    rack-aware when brokers have racks. Explicit assignments may name any registered
    broker; a partition's live replicas form its first ISR and the first of them leads.
    `validate_configs`, when given, is called with each topic's configs and raises
    ValueError with a message for an invalid one.
    """
    records: list[MetadataRecord] = []
    results: list[TopicResult] = []
    names_seen: set[str] = set()
    duplicates = {t.name for t in topics if sum(1 for o in topics if o.name == t.name) > 1}
    existing = set(image.topics_by_name)
    for topic in topics:
        if topic.name in duplicates:
            results.append(
                TopicResult(
                    topic.name,
                    ErrorCode.invalid_request,
                    f"topic {topic.name!r} appears more than once in the request",
                )
            )
            continue
        try:
            result, new_records = _create_one(
                topic, existing | names_seen, defaults, brokers, rng, validate_configs, image
            )
        except Refused as refused:
            results.append(TopicResult(topic.name, refused.code, refused.message))
            continue
        results.append(result)
        if not validate_only:
            names_seen.add(topic.name)
            records.extend(new_records)
    return records, results


def _create_one(
    topic: NewTopic,
    existing: set[str],
    defaults: TopicDefaults,
    brokers: Sequence[int],
    rng: Random,
    validate_configs: object,
    image: MetadataImage,
) -> tuple[TopicResult, list[MetadataRecord]]:
    reason = validate_topic_name(topic.name)
    if reason is not None:
        raise Refused(ErrorCode.invalid_topic_exception, reason)
    if topic.name in existing:
        raise Refused(ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists")
    other = colliding_topic(topic.name, existing)
    if other is not None:
        raise Refused(
            ErrorCode.invalid_topic_exception,
            f"topic {topic.name!r} collides with existing topic {other!r} "
            "('.' and '_' are interchangeable in topic names)",
        )
    if callable(validate_configs):
        try:
            validate_configs(topic.configs)
        except ValueError as exc:
            raise Refused(ErrorCode.invalid_config, str(exc)) from None
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise Refused(
                ErrorCode.invalid_request,
                "give either replica assignments or partitions and replication factor, not both",
            )
        placement = check_assignments(topic.assignments, _registered(image, brokers), 0)
    else:
        partitions = defaults.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        factor = (
            defaults.replication_factor
            if topic.replication_factor == -1
            else topic.replication_factor
        )
        if partitions < 1:
            raise Refused(
                ErrorCode.invalid_partitions,
                f"number of partitions must be at least 1, not {partitions}",
            )
        if factor < 1:
            raise Refused(
                ErrorCode.invalid_replication_factor,
                f"replication factor must be at least 1, not {factor}",
            )
        placement = place_replicas(partitions, factor, brokers, rng, racks=_racks(image))
    topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
    while topic_id in image.topics_by_id:
        topic_id = uuid.UUID(int=rng.getrandbits(128), version=4)
    records: list[MetadataRecord] = [TopicRecord(topic.name, topic_id)]
    records.extend(_partition_records(topic_id, placement, set(brokers)))
    records.extend(
        ConfigRecord(ConfigResourceType.TOPIC, topic.name, key, value)
        for key, value in sorted(topic.configs.items())
    )
    result = TopicResult(
        topic.name,
        topic_id=topic_id,
        num_partitions=len(placement),
        replication_factor=len(next(iter(placement.values()))),
    )
    return result, records


def delete_topics(
    image: MetadataImage, names: Sequence[str], ids: Sequence[uuid.UUID] = ()
) -> tuple[list[MetadataRecord], list[TopicResult]]:
    records: list[MetadataRecord] = []
    results: list[TopicResult] = []
    removed: set[uuid.UUID] = set()
    for name in names:
        topic = image.topics_by_name.get(name)
        if topic is None:
            results.append(
                TopicResult(
                    name, ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
                )
            )
            continue
        results.append(TopicResult(name, topic_id=topic.topic_id))
        if topic.topic_id not in removed:
            removed.add(topic.topic_id)
            records.append(RemoveTopicRecord(topic.topic_id))
    for topic_id in ids:
        by_id = image.topics_by_id.get(topic_id)
        if by_id is None:
            results.append(
                TopicResult(
                    "", ErrorCode.unknown_topic_id, f"no topic has id {topic_id}", topic_id=topic_id
                )
            )
            continue
        results.append(TopicResult(by_id.name, topic_id=topic_id))
        if topic_id not in removed:
            removed.add(topic_id)
            records.append(RemoveTopicRecord(topic_id))
    return records, results


@dataclass(frozen=True, slots=True)
class PartitionIncrease:
    name: str
    total: int
    assignments: Sequence[Sequence[int]] | None = None


def create_partitions(
    image: MetadataImage,
    requests: Sequence[PartitionIncrease],
    *,
    brokers: Sequence[int],
    rng: Random,
    validate_only: bool = False,
) -> tuple[list[MetadataRecord], list[TopicResult]]:
    records: list[MetadataRecord] = []
    results: list[TopicResult] = []
    for request in requests:
        try:
            new_records = _increase_one(image, request, brokers, rng)
        except Refused as refused:
            results.append(TopicResult(request.name, refused.code, refused.message))
            continue
        results.append(TopicResult(request.name))
        if not validate_only:
            records.extend(new_records)
    return records, results


def _increase_one(
    image: MetadataImage, request: PartitionIncrease, brokers: Sequence[int], rng: Random
) -> list[MetadataRecord]:
    topic = image.topics_by_name.get(request.name)
    if topic is None:
        raise Refused(
            ErrorCode.unknown_topic_or_partition, f"topic {request.name!r} does not exist"
        )
    current = len(topic.partitions)
    if request.total <= current:
        raise Refused(
            ErrorCode.invalid_partitions,
            f"topic {request.name!r} has {current} partition(s); the new total "
            f"{request.total} must be larger",
        )
    factor = len(topic.partitions[0].replicas)
    if request.assignments is not None:
        if len(request.assignments) != request.total - current:
            raise Refused(
                ErrorCode.invalid_replica_assignment,
                f"{len(request.assignments)} assignment(s) given for "
                f"{request.total - current} new partition(s)",
            )
        placement = check_assignments(
            {current + i: replicas for i, replicas in enumerate(request.assignments)},
            _registered(image, brokers),
            current,
        )
    else:
        placement = place_replicas(
            request.total - current,
            factor,
            brokers,
            rng,
            first_partition=current,
            racks=_racks(image),
        )
    return _partition_records(topic.topic_id, placement, set(brokers))


def _registered(image: MetadataImage, brokers: Sequence[int]) -> set[int]:
    return set(image.brokers) | set(brokers)
