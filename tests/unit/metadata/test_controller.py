import random
import uuid

from kio.schema.errors import ErrorCode

from strom.metadata import controller, records
from strom.metadata.controller import NewTopic, PartitionIncrease, TopicDefaults
from strom.metadata.image import MetadataImage
from strom.metadata.records import ConfigResourceType, RegisterBrokerRecord

DEFAULTS = TopicDefaults(num_partitions=3, replication_factor=1)


def image_with_brokers(*ids: int) -> MetadataImage:
    return MetadataImage.empty().replay(
        RegisterBrokerRecord(i, uuid.UUID(int=i), "127.0.0.1", 9092 + i, None) for i in ids
    )


def create(image: MetadataImage, *topics: NewTopic, validate_only: bool = False, seed: int = 7):
    return controller.create_topics(
        image,
        list(topics),
        defaults=DEFAULTS,
        brokers=sorted(image.brokers),
        rng=random.Random(seed),
        validate_only=validate_only,
    )


def test_create_topic_uses_defaults_and_replays_into_image() -> None:
    image = image_with_brokers(1)
    recs, results = create(image, NewTopic("orders", -1, -1, configs={"retention.ms": "1000"}))
    assert [r.error_code for r in results] == [ErrorCode.none]
    image = image.replay(recs)
    topic = image.topics_by_name["orders"]
    assert sorted(topic.partitions) == [0, 1, 2]
    assert all(
        p.replicas == (1,) and p.isr == (1,) and p.leader == 1 for p in topic.partitions.values()
    )
    assert image.topics_by_id[topic.topic_id] is topic
    assert image.topic_configs("orders") == {"retention.ms": "1000"}
    assert results[0].topic_id == topic.topic_id


def test_validate_only_writes_nothing() -> None:
    recs, results = create(image_with_brokers(1), NewTopic("a", 2, 1), validate_only=True)
    assert recs == [] and results[0].error_code == ErrorCode.none and results[0].num_partitions == 2


def test_refusals_name_the_problem() -> None:
    image = image_with_brokers(1)
    image = image.replay(create(image, NewTopic("a.b", 1, 1))[0])
    _, results = create(
        image,
        NewTopic("a.b", 1, 1),
        NewTopic("a_b", 1, 1),
        NewTopic("bad name", 1, 1),
        NewTopic("x" * 250, 1, 1),
        NewTopic("rf", 1, 3),
        NewTopic("zero", 0, 1),
        NewTopic("dup", 1, 1),
        NewTopic("dup", 1, 1),
        NewTopic("asg", 1, 1, assignments={0: (1,)}),
        NewTopic("asg2", -1, -1, assignments={0: (1,), 2: (1,)}),
        NewTopic("asg3", -1, -1, assignments={0: (5,)}),
    )
    codes = [r.error_code for r in results]
    assert codes == [
        ErrorCode.topic_already_exists,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_topic_exception,
        ErrorCode.invalid_replication_factor,
        ErrorCode.invalid_partitions,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
        ErrorCode.invalid_request,
        ErrorCode.invalid_replica_assignment,
        ErrorCode.invalid_replica_assignment,
    ]
    assert "collides" in (results[1].error_message or "")
    assert all(r.error_message for r in results)


def test_placement_spreads_leaders_and_never_repeats_a_broker() -> None:
    placement = controller.place_replicas(12, 3, [1, 2, 3, 4], random.Random(1))
    leaders = [replicas[0] for replicas in placement.values()]
    assert {leaders.count(b) for b in (1, 2, 3, 4)} == {3}
    assert all(len(set(r)) == 3 for r in placement.values())


def test_delete_and_recreate() -> None:
    image = image_with_brokers(1)
    image = image.replay(create(image, NewTopic("t", 1, 1, configs={"a": "b"}))[0])
    old_id = image.topics_by_name["t"].topic_id
    recs, results = controller.delete_topics(image, ["t", "missing"])
    assert [r.error_code for r in results] == [ErrorCode.none, ErrorCode.unknown_topic_or_partition]
    image = image.replay(recs)
    assert "t" not in image.topics_by_name and old_id not in image.topics_by_id
    assert image.topic_configs("t") == {}
    image = image.replay(create(image, NewTopic("t", 1, 1), seed=8)[0])
    assert image.topics_by_name["t"].topic_id != old_id


def test_create_partitions() -> None:
    image = image_with_brokers(1)
    image = image.replay(create(image, NewTopic("t", 2, 1))[0])
    recs, results = controller.create_partitions(
        image,
        [PartitionIncrease("t", 5), PartitionIncrease("t2", 3), PartitionIncrease("t", 1)],
        brokers=[1],
        rng=random.Random(1),
    )
    assert [r.error_code for r in results] == [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.invalid_partitions,
    ]
    assert sorted(image.replay(recs).topics_by_name["t"].partitions) == [0, 1, 2, 3, 4]


def test_records_round_trip() -> None:
    topic_id = uuid.uuid4()
    for record in [
        records.TopicRecord("t", topic_id),
        records.PartitionRecord(topic_id, 0, (1, 2), (1,), 1, 3, 4),
        records.RemoveTopicRecord(topic_id),
        records.ConfigRecord(ConfigResourceType.TOPIC, "t", "retention.ms", None),
        records.RegisterBrokerRecord(1, topic_id, "h", 1, "r"),
    ]:
        assert records.decode(records.encode(record)) == record
