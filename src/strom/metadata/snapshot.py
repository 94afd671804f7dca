"""Metadata snapshots: the records that rebuild an image, with the image's offset.

    encode_snapshot(image) -> bytes -> decode_snapshot(bytes) == image

A snapshot is one JSON document:

    {"format": "strom-metadata-snapshot", "version": 1, "offset": N, "records": [...]}

The records are those `snapshot_records` lists, replayed as one entry at `offset`. A
broker's epoch is normally the offset of the entry that registered it; in a snapshot every
record shares one offset, so its RegisterBrokerRecords carry `epoch` (and `fenced`)
explicitly. ACL bindings keep their ids (a binding held under two ids keeps both). Client
quotas are one ClientQuotaRecord per entity and key.
"""

from __future__ import annotations

import json

from strom.metadata.acl_records import acl_record
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import (
    ClientQuotaRecord,
    ClusterRecord,
    ConfigRecord,
    MetadataDecodeError,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    record_from_json,
    record_to_json,
)

SNAPSHOT_FORMAT = "strom-metadata-snapshot"
SNAPSHOT_VERSION = 1


def snapshot_records(image: MetadataImage) -> list[MetadataRecord]:
    """Records that, replayed as one entry at `image.offset` onto an empty image, rebuild it."""
    records: list[MetadataRecord] = []
    if image.cluster_id or image.cluster_name:
        records.append(ClusterRecord(image.cluster_id, image.cluster_name))
    for broker_id in sorted(image.brokers):
        broker = image.brokers[broker_id]
        records.append(
            RegisterBrokerRecord(
                broker.broker_id,
                broker.incarnation_id,
                broker.host,
                broker.port,
                broker.rack,
                fenced=broker.fenced,
                epoch=broker.epoch,
                endpoints=broker.endpoints,
            )
        )
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        records.append(TopicRecord(topic.name, topic.topic_id))
        for index in sorted(topic.partitions):
            p = topic.partitions[index]
            records.append(
                PartitionRecord(
                    topic.topic_id,
                    p.partition,
                    p.replicas,
                    p.isr,
                    p.leader,
                    p.leader_epoch,
                    p.partition_epoch,
                    p.adding_replicas,
                    p.removing_replicas,
                )
            )
    for resource_type, resource_name in sorted(image.configs):
        entries = image.configs[(resource_type, resource_name)]
        records.extend(
            ConfigRecord(resource_type, resource_name, name, entries[name])
            for name in sorted(entries)
        )
    if image.next_producer_id:
        records.append(ProducerIdsRecord(-1, -1, image.next_producer_id))
    for name in sorted(image.scram_users):
        credentials = image.scram_users[name]
        records.extend(credentials[mechanism] for mechanism in sorted(credentials))
    records.extend(acl_record(image.acls[acl_id], acl_id) for acl_id in sorted(image.acls))
    for entity in sorted(image.client_quotas, key=QuotaEntity.sort_key):
        quotas = image.client_quotas[entity]
        records.extend(ClientQuotaRecord(entity, key, quotas[key]) for key in sorted(quotas))
    return records


def encode_snapshot(image: MetadataImage) -> bytes:
    document = {
        "format": SNAPSHOT_FORMAT,
        "version": SNAPSHOT_VERSION,
        "offset": image.offset,
        "records": [record_to_json(record) for record in snapshot_records(image)],
    }
    return json.dumps(document, separators=(",", ":"), sort_keys=True).encode()


def decode_snapshot(data: bytes) -> MetadataImage:
    """The image a snapshot holds; MetadataDecodeError if it is malformed or too new."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MetadataDecodeError(f"metadata snapshot is not JSON: {exc}") from exc
    if not isinstance(document, dict) or document.get("format") != SNAPSHOT_FORMAT:
        raise MetadataDecodeError(f"not a strom metadata snapshot: {data[:100]!r}")
    version = document.get("version")
    if version != SNAPSHOT_VERSION:
        raise MetadataDecodeError(
            f"metadata snapshot version {version!r} is not supported (this strom reads "
            f"version {SNAPSHOT_VERSION})"
        )
    offset, items = document.get("offset"), document.get("records")
    if type(offset) is not int or not isinstance(items, list):
        raise MetadataDecodeError("metadata snapshot lacks an integer offset or its records")
    return MetadataImage.empty().replay([record_from_json(item) for item in items], offset=offset)
