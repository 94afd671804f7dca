"""Diffs between two images as znode ops, by example: what each change sets, creates or
deletes, and which changes write a config change notification.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import replace

from znode_harness import BROKER, EPOCH, ORDERS, TOPIC, apply, notified, render, settled

from strom.metadata.image import MetadataImage, PartitionImage, TopicImage
from strom.metadata.records import (
    ClusterRecord,
    ConfigRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from strom.metadata.znode_diff import diff
from strom.metadata.znodes import OpKind, ZnodeOp

# ----------------------------------------------------------------- diffs, by example


def _topic(image: MetadataImage, name: str = "t", topic_id: uuid.UUID = ORDERS) -> MetadataImage:
    return image.replay(
        [
            TopicRecord(name, topic_id),
            PartitionRecord(topic_id, 0, (1, 2), (1, 2), 1, 0, 0),
            PartitionRecord(topic_id, 1, (2, 1), (2, 1), 2, 0, 0),
        ]
    )


def test_a_leader_change_sets_one_state_with_the_writers_epoch() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay([PartitionChangeRecord(ORDERS, 1, 1, (1,), 1, 1)])
    assert diff(before, after, controller_epoch=9) == [
        ZnodeOp(
            OpKind.SET,
            "/brokers/topics/t/partitions/1/state",
            b'{"controller_epoch":9,"isr":[1],"leader":1,"leader_epoch":1,'
            b'"partition_epoch":1,"version":1}',
        )
    ]
    tree = apply(render(before, controller_epoch=4), diff(before, after, controller_epoch=9))
    assert json.loads(tree["/brokers/topics/t/partitions/0/state"])["controller_epoch"] == 4


def test_a_reassignment_sets_the_topic_znode() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay(
        [PartitionChangeRecord(ORDERS, 0, 1, (1, 2), 0, 0, (1, 2, 3), adding_replicas=(3,))]
    )
    ops = diff(before, after, controller_epoch=EPOCH)
    assert [(op.kind, op.path) for op in ops] == [(OpKind.SET, "/brokers/topics/t")]
    assert json.loads(ops[0].data)["adding_replicas"] == {"0": [3]}


def test_a_new_partition_is_created_under_its_topic() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay([PartitionRecord(ORDERS, 2, (1,), (1,), 1, 0, 0)])
    ops = diff(before, after, controller_epoch=EPOCH)
    assert [(op.kind, op.path) for op in ops] == [
        (OpKind.CREATE, "/brokers/topics/t/partitions/2"),
        (OpKind.CREATE, "/brokers/topics/t/partitions/2/state"),
        (OpKind.SET, "/brokers/topics/t"),
    ]


def test_a_deleted_topic_goes_children_first_with_its_config() -> None:
    before = _topic(MetadataImage.empty())
    ops = diff(before, before.replay([RemoveTopicRecord(ORDERS)]), controller_epoch=EPOCH)
    assert ops == [
        ZnodeOp(OpKind.DELETE, path)
        for path in (
            "/brokers/topics/t/partitions/0/state",
            "/brokers/topics/t/partitions/0",
            "/brokers/topics/t/partitions/1/state",
            "/brokers/topics/t/partitions/1",
            "/brokers/topics/t/partitions",
            "/brokers/topics/t",
            "/config/topics/t",
        )
    ]


def test_a_topic_recreated_under_its_name_is_deleted_then_created() -> None:
    before = _topic(MetadataImage.empty())
    reborn = uuid.UUID(int=77)
    after = _topic(before.replay([RemoveTopicRecord(ORDERS)]), topic_id=reborn)
    ops = diff(before, after, controller_epoch=EPOCH)
    deleted = [op.path for op in ops if op.kind is OpKind.DELETE]
    created = [op.path for op in ops if op.kind is OpKind.CREATE]
    assert "/brokers/topics/t" in deleted and "/brokers/topics/t" in created
    assert ops.index(ZnodeOp(OpKind.DELETE, "/brokers/topics/t")) < len(deleted)
    assert settled(apply(render(before), ops)) == settled(render(after))


def test_brokers_are_created_set_and_deleted_by_value() -> None:
    before = MetadataImage.empty().replay([RegisterBrokerRecord(1, uuid.UUID(int=1), "h", 1, None)])
    fenced = before.replay([UnfenceBrokerRecord(1, before.brokers[1].epoch)])
    assert [(op.kind, op.path) for op in diff(before, fenced, controller_epoch=EPOCH)] == [
        (OpKind.SET, "/strom/brokers/1")
    ]
    gone = fenced.replay([UnregisterBrokerRecord(1, fenced.brokers[1].epoch)])
    assert diff(fenced, gone, controller_epoch=EPOCH) == [
        ZnodeOp(OpKind.DELETE, "/strom/brokers/1")
    ]


class _Untouchable(Mapping[int, PartitionImage]):
    """Partitions that fail the test if anyone reads them."""

    def __getitem__(self, index: int) -> PartitionImage:
        raise AssertionError("diff read the partitions of an unchanged topic")

    def __iter__(self) -> Iterator[int]:
        raise AssertionError("diff read the partitions of an unchanged topic")

    def __len__(self) -> int:
        raise AssertionError("diff read the partitions of an unchanged topic")


def test_an_unchanged_topic_costs_one_identity_check() -> None:
    big_id = uuid.UUID(int=42)
    big = TopicImage("big", big_id, _Untouchable())
    image = replace(MetadataImage.empty(), topics_by_name={"big": big}, topics_by_id={big_id: big})
    created = _topic(image)
    changed = created.replay([PartitionChangeRecord(ORDERS, 0, 2, (2,), 1, 1)])
    assert created.topics_by_name["big"] is big and changed.topics_by_name["big"] is big
    assert all("big" not in op.path for op in diff(image, created, controller_epoch=EPOCH))
    assert len(diff(created, changed, controller_epoch=EPOCH)) == 1


# ----------------------------------------------------------------- change notifications


def test_nothing_but_config_changes_notify() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay(
        [
            PartitionChangeRecord(ORDERS, 0, 2, (2,), 1, 1),
            RegisterBrokerRecord(4, uuid.UUID(int=4), "h", 1, None),
            ProducerIdsRecord(4, 1, 1000),
            ClusterRecord("c", "n"),
        ]
    )
    assert notified(diff(before, after, controller_epoch=EPOCH)) == []
    assert notified(diff(MetadataImage.empty(), before, controller_epoch=EPOCH)) == []


def test_each_changed_config_entity_notifies_once() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay(
        [
            ConfigRecord(TOPIC, "t", "retention.ms", "1"),
            ConfigRecord(TOPIC, "t", "cleanup.policy", "compact"),
            ConfigRecord(BROKER, "", "min.insync.replicas", "2"),
            ConfigRecord(BROKER, "2", "log.cleaner.threads", "2"),
        ]
    )
    assert notified(diff(before, after, controller_epoch=EPOCH)) == [
        "topics/t",
        "brokers/<default>",
        "brokers/2",
    ]
    back = after.replay([ConfigRecord(BROKER, "2", "log.cleaner.threads", None)])
    ops = diff(after, back, controller_epoch=EPOCH)
    assert notified(ops) == ["brokers/2"]
    assert ZnodeOp(OpKind.DELETE, "/config/brokers/2") in ops


def test_creating_or_deleting_a_topic_with_overrides_notifies() -> None:
    bare = _topic(MetadataImage.empty())
    configured = bare.replay([ConfigRecord(TOPIC, "t", "retention.ms", "1")])
    assert notified(diff(MetadataImage.empty(), configured, controller_epoch=EPOCH)) == ["topics/t"]
    gone = configured.replay([RemoveTopicRecord(ORDERS)])
    assert notified(diff(configured, gone, controller_epoch=EPOCH)) == ["topics/t"]
    assert notified(diff(bare, bare.replay([RemoveTopicRecord(ORDERS)]), controller_epoch=1)) == []
