"""The metadata image: an immutable view of the cluster, changed only by replay.

    MetadataImage.empty() --replay(records)--> MetadataImage --replay(...)--> ...

Every broker answers clients from its current image; the controller decides against it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from strom.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    incarnation_id: uuid.UUID
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True, slots=True)
class MetadataImage:
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    brokers: Mapping[int, BrokerImage] = field(default_factory=dict)
    configs: Mapping[tuple[ConfigResourceType, str], Mapping[str, str]] = field(
        default_factory=dict
    )
    offset: int = -1  # offset of the last replayed record in the metadata log

    @staticmethod
    def empty() -> MetadataImage:
        return MetadataImage()

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ConfigResourceType.TOPIC, name), {})

    def replay(
        self, records: Iterable[MetadataRecord], *, offset: int | None = None
    ) -> MetadataImage:
        by_name = dict(self.topics_by_name)
        by_id = dict(self.topics_by_id)
        brokers = dict(self.brokers)
        configs = dict(self.configs)
        for record in records:
            match record:
                case RegisterBrokerRecord():
                    brokers[record.broker_id] = BrokerImage(
                        record.broker_id,
                        record.incarnation_id,
                        record.host,
                        record.port,
                        record.rack,
                    )
                case TopicRecord():
                    topic = TopicImage(record.name, record.topic_id, {})
                    by_name[record.name] = topic
                    by_id[record.topic_id] = topic
                case PartitionRecord():
                    old = by_id[record.topic_id]
                    partitions = dict(old.partitions)
                    partitions[record.partition] = PartitionImage(
                        record.partition,
                        record.replicas,
                        record.isr,
                        record.leader,
                        record.leader_epoch,
                        record.partition_epoch,
                    )
                    topic = replace(old, partitions=partitions)
                    by_name[topic.name] = topic
                    by_id[topic.topic_id] = topic
                case RemoveTopicRecord():
                    removed = by_id.pop(record.topic_id)
                    by_name.pop(removed.name, None)
                    configs.pop((ConfigResourceType.TOPIC, removed.name), None)
                case ConfigRecord():
                    key = (record.resource_type, record.resource_name)
                    entries = dict(configs.get(key, {}))
                    if record.value is None:
                        entries.pop(record.name, None)
                    else:
                        entries[record.name] = record.value
                    configs[key] = entries
        return MetadataImage(
            topics_by_name=by_name,
            topics_by_id=by_id,
            brokers=brokers,
            configs=configs,
            offset=self.offset if offset is None else offset,
        )
