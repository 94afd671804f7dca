"""Random histories of images: each image round-trips through its znodes, and a diff
takes one image's tree to the next's.
"""

from __future__ import annotations

import itertools
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from znode_harness import (
    BINDINGS,
    BROKER,
    EPOCH,
    TOPIC,
    acl_notices,
    apply,
    assert_notices_come_last,
    notified,
    render,
    settled,
)

from strom.metadata.acl_records import ResourcePattern, acl_record
from strom.metadata.acl_znodes import parse_acl_change
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity, QuotaValueType
from strom.metadata.quota_znodes import entity_path
from strom.metadata.records import (
    ClientQuotaRecord,
    ClusterRecord,
    ConfigRecord,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from strom.metadata.znode_diff import diff
from strom.metadata.znodes import config_path, image_from_znodes, operator_topics, user_path

# ----------------------------------------------------------------- random images

NAMES = ("orders", "a.b", "a_b", "x-1")
DECISIONS = (
    "cluster",
    "broker",
    "broker state",
    "topic",
    "partition",
    "change",
    "remove",
    "config",
    "producer",
    "scram",
    "acl",
    "quota",
)
USERS = ("alice", "bob,=x", "ü*~")
QUOTA_ENTITIES = (
    *(QuotaEntity.user(name) for name in (*USERS, None)),
    *(
        QuotaEntity.user_client(name, client)
        for name in ("alice", None)
        for client in ("app", None)
    ),
    QuotaEntity.user_client("ü*~", "a/b é"),
    *(QuotaEntity.client(client) for client in ("app", "a/b é", None)),
    *(QuotaEntity.ip(address) for address in ("10.0.0.1", "::1", None)),
)
REPLICAS = st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True).map(tuple)
EPOCHS = st.integers(0, 20)


def _subset(draw: st.DrawFn, items: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.sampled_from(items), unique=True))) if items else ()


def _leadership(draw: st.DrawFn, replicas: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    isr = _subset(draw, replicas)
    return (draw(st.sampled_from(isr)) if isr else -1), isr


def _moving(draw: st.DrawFn, replicas: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Disjoint replicas a reassignment adds and removes."""
    moving = _subset(draw, replicas)
    split = draw(st.integers(0, len(moving)))
    return moving[:split], moving[split:]


def _partition(draw: st.DrawFn, topic_id: uuid.UUID, index: int) -> PartitionRecord:
    replicas = draw(REPLICAS)
    leader, isr = _leadership(draw, replicas)
    adding, removing = _moving(draw, replicas)
    epochs = draw(EPOCHS), draw(EPOCHS)
    return PartitionRecord(topic_id, index, replicas, isr, leader, *epochs, adding, removing)


def _decision(draw: st.DrawFn, image: MetadataImage, fresh: uuid.UUID) -> list[MetadataRecord]:
    """The records of one random decision that is valid against `image`."""
    topics = sorted(image.topics_by_name)
    kind = draw(st.sampled_from(DECISIONS))
    if kind == "cluster":
        return [
            ClusterRecord(draw(st.sampled_from(["c1", "c2"])), draw(st.sampled_from(["", "n"])))
        ]
    if kind == "broker":
        broker_id, incarnation = draw(st.integers(0, 4)), uuid.UUID(int=draw(st.integers(1, 3)))
        rack, fenced = draw(st.sampled_from([None, "r1"])), draw(st.booleans())
        return [RegisterBrokerRecord(broker_id, incarnation, "h", 9092, rack, fenced)]
    if kind == "broker state" and image.brokers:
        broker = image.brokers[draw(st.sampled_from(sorted(image.brokers)))]
        ways: list[MetadataRecord] = [
            FenceBrokerRecord(broker.broker_id, broker.epoch),
            UnfenceBrokerRecord(broker.broker_id, broker.epoch),
            UnregisterBrokerRecord(broker.broker_id, broker.epoch),
        ]
        return [draw(st.sampled_from(ways))]
    if kind == "topic":
        name = draw(st.sampled_from(NAMES))
        old = image.topics_by_name.get(name)
        records: list[MetadataRecord] = [] if old is None else [RemoveTopicRecord(old.topic_id)]
        records.append(TopicRecord(name, fresh))
        records += [_partition(draw, fresh, index) for index in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()):
            records.append(ConfigRecord(TOPIC, name, "retention.ms", "1000"))
        return records
    if kind == "partition" and topics:
        topic = image.topics_by_name[draw(st.sampled_from(topics))]
        return [_partition(draw, topic.topic_id, len(topic.partitions))]
    partitions = list(image.partitions())
    if kind == "change" and partitions:
        topic, partition = draw(st.sampled_from(partitions))
        replicas = draw(st.none() | REPLICAS)
        leader, isr = _leadership(draw, partition.replicas if replicas is None else replicas)
        adding, removing = _moving(draw, partition.replicas if replicas is None else replicas)
        moved = draw(st.booleans())
        return [
            PartitionChangeRecord(
                topic.topic_id,
                partition.partition,
                leader,
                isr,
                draw(EPOCHS),
                draw(EPOCHS),
                replicas,
                adding if moved else None,
                removing if moved else None,
            )
        ]
    if kind == "remove" and topics:
        return [RemoveTopicRecord(image.topics_by_name[draw(st.sampled_from(topics))].topic_id)]
    if kind == "config":
        entities = [(TOPIC, name) for name in topics] + [(BROKER, ""), (BROKER, "1"), (BROKER, "2")]
        resource_type, resource_name = draw(st.sampled_from(entities))
        key, value = draw(st.sampled_from(["k1", "k2"])), draw(st.sampled_from([None, "v1", "v2"]))
        return [ConfigRecord(resource_type, resource_name, key, value)]
    if kind == "producer":
        return [ProducerIdsRecord(0, 0, draw(st.integers(0, 10**12)))]
    if kind == "scram":
        name, mechanism = draw(st.sampled_from(USERS)), draw(st.sampled_from([1, 2]))
        if image.scram_credential(name, mechanism) is not None and draw(st.booleans()):
            return [RemoveUserScramCredentialRecord(name, mechanism)]
        key = draw(st.binary(min_size=1, max_size=8))
        iterations = draw(st.integers(4096, 16384))
        return [UserScramCredentialRecord(name, mechanism, key, key * 2, key * 3, iterations)]
    if kind == "acl":
        # As a controller on ZooKeeper writes them: ids derived from the bindings.
        if image.acls and draw(st.booleans()):
            return [RemoveAccessControlEntryRecord(draw(st.sampled_from(sorted(image.acls))))]
        return [acl_record(draw(BINDINGS))]
    if kind == "quota":
        entity = draw(st.sampled_from(QUOTA_ENTITIES))
        key = draw(st.sampled_from(sorted(entity.quota_keys())))
        whole = entity.quota_keys()[key] is not QuotaValueType.DOUBLE
        value = st.integers(1, 2**31 - 1).map(float) if whole else st.floats(0.001, 1e9)
        return [ClientQuotaRecord(entity, key, draw(st.none() | value))]
    return []


@st.composite
def histories(draw: st.DrawFn) -> list[MetadataImage]:
    """The images after each of a few random entries of one or two valid decisions."""
    images = [MetadataImage.empty()]
    for entry in range(draw(st.integers(1, 10))):
        first = _decision(draw, images[-1], uuid.UUID(int=2 * entry + 1))
        second = _decision(draw, images[-1].replay(first), uuid.UUID(int=2 * entry + 2))
        images.append(images[-1].replay(first + second, offset=images[-1].offset + 1))
    return images


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 50))
def test_any_image_round_trips_through_its_znodes(
    images: list[MetadataImage], controller_epoch: int
) -> None:
    image = images[-1]
    tree = render(image, controller_epoch=controller_epoch)
    rebuilt = image_from_znodes(tree, offset=image.offset)
    assert rebuilt.topics_by_name == image.topics_by_name
    assert rebuilt.topics_by_id == image.topics_by_id
    assert rebuilt.brokers == image.brokers
    assert rebuilt.configs == image.configs
    assert (rebuilt.cluster_id, rebuilt.cluster_name) == (image.cluster_id, image.cluster_name)
    assert rebuilt.next_producer_id == image.next_producer_id
    assert rebuilt.acls == image.acls
    assert set(rebuilt.acl_index) == set(image.acl_index)
    assert rebuilt == image
    assert operator_topics(tree, rebuilt) == []


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_a_diff_takes_one_images_tree_to_the_others(
    images: list[MetadataImage], data: st.DataObject
) -> None:
    pairs = list(itertools.pairwise(images))
    pairs.append((data.draw(st.sampled_from(images)), data.draw(st.sampled_from(images))))
    for old, new in pairs:
        ops = diff(old, new, controller_epoch=EPOCH)
        assert_notices_come_last(ops)
        tree = apply(render(old), ops)  # asserts each op is valid where it stands in the multi
        assert settled(tree) == settled(render(new))
        changed = {
            config_path(*key).removeprefix("/config/")
            for key in old.configs.keys() | new.configs.keys()
            if old.configs.get(key, {}) != new.configs.get(key, {})
        }
        changed |= {
            user_path(name).removeprefix("/config/")
            for name in old.scram_users.keys() | new.scram_users.keys()
            if old.scram_users.get(name) != new.scram_users.get(name)
        }
        changed |= {
            entity_path(entity).removeprefix("/config/")
            for entity in old.client_quotas.keys() | new.client_quotas.keys()
            if old.client_quotas.get(entity) != new.client_quotas.get(entity)
        }
        assert sorted(notified(ops)) == sorted(changed)
        moved = set(old.acls.values()) ^ set(new.acls.values())
        named = [parse_acl_change(f"{op.path}0", op.data) for op in acl_notices(ops)]
        assert sorted(named) == sorted({ResourcePattern.of(binding) for binding in moved})
        assert diff(new, new, controller_epoch=EPOCH) == []
