"""The image changes only by replay: brokers, partitions, configs, cluster, producer ids."""

from __future__ import annotations

import time
import uuid

from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)

BROKER = ConfigResourceType.BROKER
TOPIC = ConfigResourceType.TOPIC


def registration(broker_id: int, **kwargs: object) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id,
        uuid.UUID(int=broker_id),
        "h",
        9092,
        None,
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_broker_epoch_is_the_offset_of_its_registration() -> None:
    image = MetadataImage.empty().replay([registration(1)], offset=41)
    assert image.offset == 41
    assert image.brokers[1].epoch == 41 and image.brokers[1].fenced
    image = image.replay([registration(2)])  # no offset: the next one
    assert image.offset == 42 and image.brokers[2].epoch == 42
    assert image.live_broker_ids() == [] and image.unfenced_brokers() == []


def test_fence_and_unfence_need_the_current_epoch() -> None:
    image = MetadataImage.empty().replay([registration(1)], offset=5)
    image = image.replay([UnfenceBrokerRecord(1, 4)])  # stale: ignored
    assert image.brokers[1].fenced
    image = image.replay([UnfenceBrokerRecord(1, 5)])
    assert not image.brokers[1].fenced and image.live_broker_ids() == [1]
    assert image.is_live(1) and not image.is_live(2)
    image = image.replay([FenceBrokerRecord(1, 5)])
    assert image.brokers[1].fenced
    image = image.replay([UnregisterBrokerRecord(1, 99), FenceBrokerRecord(7, 1)])  # ignored
    assert 1 in image.brokers
    image = image.replay([UnregisterBrokerRecord(1, 5)])
    assert image.brokers == {}


def test_a_snapshot_registration_keeps_its_epoch_and_state() -> None:
    image = MetadataImage.empty().replay([registration(1, fenced=False, epoch=3)], offset=10)
    assert image.brokers[1].epoch == 3 and not image.brokers[1].fenced


def test_partition_changes_replace_leader_isr_and_epochs() -> None:
    topic_id = uuid.UUID(int=9)
    image = MetadataImage.empty().replay(
        [TopicRecord("t", topic_id), PartitionRecord(topic_id, 0, (1, 2), (1, 2), 1, 0, 0)]
    )
    image = image.replay([PartitionChangeRecord(topic_id, 0, 2, (2,), 1, 1)])
    p = image.topics_by_name["t"].partitions[0]
    assert (p.replicas, p.isr, p.leader, p.leader_epoch, p.partition_epoch) == (
        (1, 2),
        (2,),
        2,
        1,
        1,
    )
    image = image.replay([PartitionChangeRecord(topic_id, 0, 3, (3,), 2, 2, replicas=(3,))])
    assert image.topics_by_id[topic_id].partitions[0].replicas == (3,)
    assert image.topics_by_id[topic_id] is image.topics_by_name["t"]
    unchanged = image.replay([PartitionChangeRecord(uuid.UUID(int=1), 0, 1, (1,), 1, 1)])
    assert unchanged.topics_by_name == image.topics_by_name


def test_configs_cluster_and_producer_ids() -> None:
    image = MetadataImage.empty().replay(
        [
            ClusterRecord("id-1", "prod"),
            ConfigRecord(BROKER, "", "log.retention.ms", "1"),
            ConfigRecord(BROKER, "2", "message.max.bytes", "10"),
            ProducerIdsRecord(2, 0, 1000),
        ]
    )
    assert (image.cluster_id, image.cluster_name, image.next_producer_id) == ("id-1", "prod", 1000)
    assert image.cluster_default_configs() == {"log.retention.ms": "1"}
    assert image.broker_configs(2) == {"message.max.bytes": "10"}
    assert image.broker_configs(3) == {}
    image = image.replay([ConfigRecord(BROKER, "2", "message.max.bytes", None)])
    assert (BROKER, "2") not in image.configs  # no empty leftovers


def test_removing_a_topic_removes_its_configs() -> None:
    topic_id = uuid.UUID(int=3)
    image = MetadataImage.empty().replay(
        [TopicRecord("t", topic_id), ConfigRecord(TOPIC, "t", "retention.ms", "5")]
    )
    image = image.replay([RemoveTopicRecord(topic_id)])
    assert image.topics_by_name == {} and image.topics_by_id == {} and image.configs == {}


def test_replay_leaves_the_old_image_alone() -> None:
    topic_id = uuid.UUID(int=3)
    before = MetadataImage.empty().replay(
        [TopicRecord("t", topic_id), PartitionRecord(topic_id, 0, (1,), (1,), 1, 0, 0)]
    )
    after = before.replay([PartitionChangeRecord(topic_id, 0, -1, (1,), 1, 1)])
    assert before.topics_by_name["t"].partitions[0].leader == 1
    assert after.topics_by_name["t"].partitions[0].leader == -1
    assert after.brokers is before.brokers  # untouched parts are shared


def test_replaying_a_thousand_topic_creations_entry_by_entry_is_fast() -> None:
    entries = []
    for index in range(1000):
        topic_id = uuid.UUID(int=index + 1)
        entry = [TopicRecord(f"topic-{index}", topic_id)]
        entry += [PartitionRecord(topic_id, p, (1, 2, 3), (1, 2, 3), 1 + p, 0, 0) for p in range(3)]
        entry.append(ConfigRecord(TOPIC, f"topic-{index}", "retention.ms", "1000"))
        entries.append(entry)
    started = time.perf_counter()
    image = MetadataImage.empty()
    for offset, entry in enumerate(entries):
        image = image.replay(entry, offset=offset)
    elapsed_s = time.perf_counter() - started
    assert len(image.topics_by_name) == 1000 and image.offset == 999
    assert sum(len(t.partitions) for t in image.topics_by_id.values()) == 3000
    assert elapsed_s < 1.0, f"replay took {elapsed_s:.2f} s"
