"""Builds metadata images the way a cluster does: decisions, committed one entry at a time."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from strom.metadata import brokers, controller, isr
from strom.metadata.controller import NewTopic, TopicDefaults
from strom.metadata.image import MetadataImage, PartitionImage
from strom.metadata.records import MetadataRecord

DEFAULTS = TopicDefaults(num_partitions=1, replication_factor=1)


def never(_topic: str) -> bool:
    return False


def always(_topic: str) -> bool:
    return True


def commit(image: MetadataImage, records: Sequence[MetadataRecord]) -> MetadataImage:
    """One entry, at the next offset."""
    return image.replay(records)


def incarnation(broker_id: int, generation: int = 0) -> uuid.UUID:
    return uuid.UUID(int=broker_id << 16 | generation)


def register(
    image: MetadataImage, broker_id: int, *, rack: str | None = None, generation: int = 0
) -> MetadataImage:
    records, result = brokers.register_broker(
        image,
        broker_id,
        incarnation(broker_id, generation),
        "localhost",
        9000 + broker_id,
        rack,
        session_alive=False,
    )
    assert result.error_code == ErrorCode.none, result
    return commit(image, records)


def heartbeat(
    image: MetadataImage,
    broker_id: int,
    *,
    want_fence: bool = False,
    want_shutdown: bool = False,
    unclean: brokers.UncleanPolicy = never,
) -> tuple[MetadataImage, brokers.HeartbeatResult]:
    """A heartbeat from a broker that has applied everything in `image`."""
    records, result = brokers.broker_heartbeat(
        image,
        broker_id,
        image.brokers[broker_id].epoch,
        image.offset,
        want_fence,
        want_shutdown,
        unclean=unclean,
    )
    return commit(image, records), result


def cluster(*broker_ids: int, racks: Mapping[int, str] | None = None) -> MetadataImage:
    """Registered, caught-up, unfenced brokers."""
    image = MetadataImage.empty()
    for broker_id in broker_ids:
        image = register(image, broker_id, rack=(racks or {}).get(broker_id))
        image, result = heartbeat(image, broker_id)
        assert not result.is_fenced
    return image


def create_topic(
    image: MetadataImage, name: str, assignments: Mapping[int, Sequence[int]]
) -> MetadataImage:
    records, results = controller.create_topics(
        image,
        [NewTopic(name, -1, -1, assignments=dict(assignments))],
        defaults=DEFAULTS,
        brokers=image.live_broker_ids(),
        rng=random.Random(0),
    )
    assert results[0].error_code == ErrorCode.none, results[0]
    return commit(image, records)


def fence(
    image: MetadataImage, *broker_ids: int, unclean: brokers.UncleanPolicy = never
) -> MetadataImage:
    return commit(image, brokers.fence_brokers(image, broker_ids, unclean=unclean))


def partition(image: MetadataImage, topic: str, index: int = 0) -> PartitionImage:
    return image.topics_by_name[topic].partitions[index]


def state(image: MetadataImage, topic: str, index: int = 0) -> tuple[int, tuple[int, ...]]:
    """(leader, isr)."""
    p = partition(image, topic, index)
    return p.leader, p.isr


def rejoin(image: MetadataImage, topic: str, index: int, broker_id: int) -> MetadataImage:
    """The partition's leader adds `broker_id` back to its ISR (AlterPartition)."""
    p = partition(image, topic, index)
    records, result = isr.alter_partition(
        image,
        broker_id=p.leader,
        broker_epoch=image.brokers[p.leader].epoch,
        topic_id=image.topics_by_name[topic].topic_id,
        partition=index,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr=(*p.isr, broker_id),
        is_live=image.is_live,
    )
    assert result.error_code == ErrorCode.none, result
    return commit(image, records)
