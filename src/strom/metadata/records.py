"""Metadata records: every decision the controller makes is one of these.

State changes only by replaying records (see image.py), the same way at the controller,
on every broker and at restart. Records are stored as JSON documents, one per Kafka
record, in the metadata log; `encode`/`decode` are the only serialisation.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass
from enum import IntEnum
from typing import Any


class ConfigResourceType(IntEnum):
    """Kafka's DescribeConfigs resource types."""

    TOPIC = 2
    BROKER = 4


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    broker_id: int
    incarnation_id: uuid.UUID
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None  # None removes the override


MetadataRecord = (
    RegisterBrokerRecord | TopicRecord | PartitionRecord | RemoveTopicRecord | ConfigRecord
)

_TYPES: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (RegisterBrokerRecord, TopicRecord, PartitionRecord, RemoveTopicRecord, ConfigRecord)
}


class MetadataDecodeError(ValueError):
    pass


def encode(record: MetadataRecord) -> bytes:
    body = asdict(record)
    for key, value in body.items():
        if isinstance(value, uuid.UUID):
            body[key] = str(value)
        elif isinstance(value, tuple):
            body[key] = list(value)
    body["type"] = type(record).__name__
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode(data: bytes) -> MetadataRecord:
    try:
        body = json.loads(data)
        cls = _TYPES[body.pop("type")]
        for key in ("topic_id", "incarnation_id"):
            if key in body:
                body[key] = uuid.UUID(body[key])
        for key in ("replicas", "isr"):
            if key in body:
                body[key] = tuple(body[key])
        if "resource_type" in body:
            body["resource_type"] = ConfigResourceType(body["resource_type"])
        record: MetadataRecord = cls(**body)
    except (ValueError, KeyError, TypeError) as exc:
        raise MetadataDecodeError(f"bad metadata record {data[:200]!r}: {exc}") from exc
    return record
