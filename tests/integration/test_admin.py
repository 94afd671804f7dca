"""Topic admin through real admin clients (confluent-kafka and kafka-python) over
loopback: create, describe, list, their errors, and delete (also while producing).

Every test runs on the `strom_broker` fixture (one node, stopped after the test).
Waiting is done by polling with deadlines; every client a test starts is closed in a
`finally`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from typing import Any

import kafka
import kafka.admin
import kafka.errors
import pytest
from admin_helpers import (
    NODE_ID,
    TIMEOUT_S,
    ck_admin,
    ck_create,
    ck_create_error,
    ck_describe,
    ck_topic_configs,
    ck_topic_names,
    consume,
    kp_admin,
    kp_create_codes,
    partition_dirs,
    produce,
    unique_topic,
    wait_until,
    watermarks,
)
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from node_files import log_dir

from strom.testing import StromCluster

# --- create, describe, list ------------------------------------------------------------


def test_create_describe_list_confluent(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    topic = unique_topic("ck")
    configs = {"retention.ms": "86400000", "max.message.bytes": "50000"}
    ck_create(admin, NewTopic(topic, num_partitions=3, replication_factor=1, config=configs))

    assert topic in ck_topic_names(admin)
    description = ck_describe(admin, topic)
    assert description.name == topic
    assert str(description.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert not description.is_internal
    assert [p.id for p in description.partitions] == [0, 1, 2]
    for partition in description.partitions:
        assert partition.leader.id == NODE_ID
        assert [n.id for n in partition.replicas] == [NODE_ID]
        assert [n.id for n in partition.isr] == [NODE_ID]
    assert [p.name for p in partition_dirs(log_dir(strom_broker), topic)] == [
        f"{topic}-{i}" for i in range(3)
    ]

    metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    assert [b.id for b in metadata.brokers.values()] == [NODE_ID]

    entries = ck_topic_configs(admin, topic)
    assert entries["retention.ms"].value == "86400000"
    assert entries["max.message.bytes"].value == "50000"

    missing = unique_topic("missing")
    with pytest.raises(KafkaException) as raised:
        ck_describe(admin, missing)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert missing not in ck_topic_names(admin), "describing must not auto-create"


def test_create_describe_list_kafka_python(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("kp")
    with kp_admin(bootstrap) as admin:
        codes = kp_create_codes(
            admin,
            {
                topic: {
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "configs": {"cleanup.policy": "delete", "segment.bytes": "1048576"},
                }
            },
        )
        assert codes == {topic: 0}
        assert topic in admin.list_topics()
        [description] = admin.describe_topics([topic])
        assert description["name"] == topic
        assert description["error_code"] == 0
        partitions = sorted(description["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in partitions] == [0, 1]
        for partition in partitions:
            assert partition["leader_id"] == NODE_ID
            assert list(partition["replica_nodes"]) == [NODE_ID]
            assert list(partition["isr_nodes"]) == [NODE_ID]

        missing = unique_topic("missing")
        [absent] = admin.describe_topics([missing])
        assert absent["error_code"] == kafka.errors.UnknownTopicOrPartitionError.errno
        assert missing not in admin.list_topics(), "describing must not auto-create"

        # Created with kafka-python, visible to confluent-kafka's admin.
        assert topic in ck_topic_names(ck_admin(bootstrap))


def test_create_topic_errors_confluent(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    topic = unique_topic("dup")
    ck_create(admin, NewTopic(topic, num_partitions=1, replication_factor=1))

    again = ck_create_error(admin, NewTopic(topic, num_partitions=1, replication_factor=1))
    assert again.code() == KafkaError.TOPIC_ALREADY_EXISTS, again

    validated = unique_topic("validate")
    ck_create(
        admin, NewTopic(validated, num_partitions=4, replication_factor=1), validate_only=True
    )
    assert validated not in ck_topic_names(admin)
    assert partition_dirs(log_dir(strom_broker), validated) == []
    invalid_validated = ck_create_error(
        admin, NewTopic(topic, num_partitions=1, replication_factor=1), validate_only=True
    )
    assert invalid_validated.code() == KafkaError.TOPIC_ALREADY_EXISTS

    for bad in ("has space", "x" * 250, "..", ".", "bad/slash"):
        error = ck_create_error(admin, NewTopic(bad, num_partitions=1, replication_factor=1))
        assert error.code() == KafkaError.TOPIC_EXCEPTION, (bad, error)
    assert not any(" " in name or name == ".." for name in ck_topic_names(admin))

    # The longest legal name works.
    longest = "y" * 249
    ck_create(admin, NewTopic(longest, num_partitions=1, replication_factor=1))
    assert longest in ck_topic_names(admin)

    base = f"col.{uuid.uuid4().hex[:6]}"
    ck_create(admin, NewTopic(base, num_partitions=1, replication_factor=1))
    clash = ck_create_error(
        admin, NewTopic(base.replace(".", "_"), num_partitions=1, replication_factor=1)
    )
    assert clash.code() == KafkaError.TOPIC_EXCEPTION, clash

    factor = ck_create_error(admin, NewTopic(unique_topic("rf2"), 1, replication_factor=2))
    assert factor.code() == KafkaError.INVALID_REPLICATION_FACTOR, factor

    unknown_broker = ck_create_error(
        admin, NewTopic(unique_topic("asg"), 2, replica_assignment=[[NODE_ID], [NODE_ID + 41]])
    )
    assert unknown_broker.code() in (
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
        KafkaError.BROKER_NOT_AVAILABLE,
    ), unknown_broker

    assigned = unique_topic("asg")
    ck_create(admin, NewTopic(assigned, 2, replica_assignment=[[NODE_ID], [NODE_ID]]))
    description = ck_describe(admin, assigned)
    assert [p.id for p in description.partitions] == [0, 1]
    assert all([n.id for n in p.replicas] == [NODE_ID] for p in description.partitions)

    bad_config = ck_create_error(
        admin,
        NewTopic(unique_topic("cfg"), 1, 1, config={"cleanup.policy": "sometimes"}),
    )
    assert bad_config.code() == KafkaError.INVALID_CONFIG, bad_config


def test_create_topic_errors_kafka_python(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("kdup")
    with kp_admin(bootstrap) as admin:
        one = {"num_partitions": 1, "replication_factor": 1}
        assert kp_create_codes(admin, {topic: one}) == {topic: 0}
        assert kp_create_codes(admin, {topic: one}) == {
            topic: kafka.errors.TopicAlreadyExistsError.errno
        }
        with pytest.raises(kafka.errors.TopicAlreadyExistsError):
            admin.create_topics({topic: one})

        validated = unique_topic("kval")
        result = admin.create_topics({validated: one}, validate_only=True)
        assert [t["error_code"] for t in result["topics"]] == [0]
        assert validated not in admin.list_topics()

        invalid = kafka.errors.InvalidTopicError.errno
        for bad in ("a b", "z" * 250, ".."):
            assert kp_create_codes(admin, {bad: one}) == {bad: invalid}

        dotted = f"kcol.{uuid.uuid4().hex[:6]}"
        underscored = dotted.replace(".", "_")
        assert kp_create_codes(admin, {underscored: one}) == {underscored: 0}
        assert kp_create_codes(admin, {dotted: one}) == {dotted: invalid}

        factor = unique_topic("krf")
        assert kp_create_codes(admin, {factor: {"num_partitions": 1, "replication_factor": 2}}) == {
            factor: kafka.errors.InvalidReplicationFactorError.errno
        }

        assigned = unique_topic("kasg")
        codes = kp_create_codes(admin, {assigned: {"assignments": {0: [NODE_ID], 1: [NODE_ID]}}})
        assert codes == {assigned: 0}
        [description] = admin.describe_topics([assigned])
        assert sorted(p["partition_index"] for p in description["partitions"]) == [0, 1]

        defaults = unique_topic("kdef")
        assert kp_create_codes(admin, {defaults: {}}) == {defaults: 0}
        [description] = admin.describe_topics([defaults])
        assert len(description["partitions"]) == 1  # num.partitions defaults to 1


# --- delete ----------------------------------------------------------------------------


def test_delete_and_recreate(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    topic = unique_topic("del")
    ck_create(admin, NewTopic(topic, num_partitions=2, replication_factor=1))
    first_id = str(ck_describe(admin, topic).topic_id)
    produce(bootstrap, topic, {0: [b"a", b"b"], 1: [b"c"]})
    assert watermarks(bootstrap, topic, 0) == (0, 2)
    assert len(partition_dirs(log_dir(strom_broker), topic)) == 2

    [future] = admin.delete_topics([topic], request_timeout=TIMEOUT_S).values()
    future.result(timeout=TIMEOUT_S)
    wait_until(lambda: topic not in ck_topic_names(admin), TIMEOUT_S, "topic to leave metadata")
    wait_until(
        lambda: not partition_dirs(log_dir(strom_broker), topic), TIMEOUT_S, "partition dirs to go"
    )
    # librdkafka asks for auto-creation when a producer-type handle names a topic.
    no_auto = AdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False})
    metadata = no_auto.list_topics(topic, timeout=TIMEOUT_S)
    assert metadata.topics[topic].error is not None
    assert metadata.topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    [missing] = admin.delete_topics([topic], request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as raised:
        missing.result(timeout=TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    ck_create(admin, NewTopic(topic, num_partitions=1, replication_factor=1))
    second = ck_describe(admin, topic)
    assert str(second.topic_id) != first_id, "a re-created topic gets a new id"
    assert [p.id for p in second.partitions] == [0]
    assert watermarks(bootstrap, topic, 0) == (0, 0), "a re-created topic starts empty"
    produce(bootstrap, topic, {0: [b"fresh"]})
    assert consume(bootstrap, topic, {0: 1}) == {0: [b"fresh"]}


def test_delete_kafka_python(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("kdel")
    with kp_admin(bootstrap) as admin:
        admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}})
        assert len(partition_dirs(log_dir(strom_broker), topic)) == 3
        result = admin.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        wait_until(lambda: topic not in admin.list_topics(), TIMEOUT_S, "topic to go")
        wait_until(
            lambda: not partition_dirs(log_dir(strom_broker), topic),
            TIMEOUT_S,
            "partition dirs to go",
        )
        with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
            admin.delete_topics([topic])

        # By topic id (DeleteTopics v6, KIP-516), after describing it by id (Metadata v12).
        by_id = unique_topic("kdelid")
        admin.create_topics({by_id: {"num_partitions": 1, "replication_factor": 1}})
        [description] = admin.describe_topics([by_id])
        topic_id = uuid.UUID(str(description["topic_id"]))
        assert topic_id.int != 0
        [same] = admin.describe_topics([topic_id])
        assert same["name"] == by_id
        result = admin.delete_topics([topic_id])
        assert [t["error_code"] for t in result["topics"]] == [0]
        wait_until(lambda: by_id not in admin.list_topics(), TIMEOUT_S, "topic to go")
        assert not partition_dirs(log_dir(strom_broker), by_id)
        with pytest.raises(kafka.errors.UnknownTopicIdError):
            admin.delete_topics([topic_id])


def test_delete_topic_while_producing(
    strom_broker: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="strom")  # what `strom serve` logs
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    victim = unique_topic("victim")
    ck_create(admin, NewTopic(victim, num_partitions=4, replication_factor=1))
    stop = threading.Event()
    sent = [0, 0]

    def pump(slot: int) -> None:
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 0,
                "acks": "all",
                "allow.auto.create.topics": False,
                "message.timeout.ms": 3000,
            }
        )
        try:
            while not stop.is_set():
                for _ in range(100):
                    with contextlib.suppress(BufferError):
                        producer.produce(victim, value=b"x" * 100)
                        sent[slot] += 1
                producer.poll(0.001)
        finally:
            producer.purge()
            producer.flush(1)

    threads = [threading.Thread(target=pump, args=(slot,), daemon=True) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: sum(sent) > 5_000, TIMEOUT_S, "producers to get going")
        [future] = admin.delete_topics([victim], request_timeout=TIMEOUT_S).values()
        future.result(timeout=TIMEOUT_S)
        wait_until(lambda: victim not in ck_topic_names(admin), TIMEOUT_S, "topic to go")
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)

    survivor = unique_topic("survivor")
    ck_create(admin, NewTopic(survivor, num_partitions=1, replication_factor=1))
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 5000})
    try:
        producer.produce(survivor, value=b"still here", on_delivery=lambda e, _m: errors.append(e))
        producer.flush(TIMEOUT_S)
    finally:
        producer.purge()
        producer.flush(1)
    assert len(errors) == 1 and errors[0] is None, (
        f"produce after the delete: {errors}\n{caplog.text[-3000:]}"
    )
    assert "background task flusher failed" not in caplog.text


def test_describe_topic_partitions_pages_with_kafka_python(strom_broker: StromCluster) -> None:
    """DescribeTopicPartitions (KIP-966), which Kafka 4.0's kafka-topics.sh --describe uses,
    through kafka-python's admin client: the partitions a page at a time, then the rest."""
    client = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    created = client.create_topics([NewTopic("paged-a", 3, 1), NewTopic("paged-b", 4, 1)])
    for future in created.values():
        future.result(30)
    admin = kafka.KafkaAdminClient(bootstrap_servers=strom_broker.bootstrap_servers)
    try:
        first = admin.describe_topic_partitions(["paged-b", "paged-a"], 5)
        rest = admin.describe_topic_partitions(["paged-a", "paged-b"], 5, first["next_cursor"])
        missing = admin.describe_topic_partitions(["paged-none"])
    finally:
        admin.close()
    pages = [
        [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in answer["topics"]]
        for answer in (first, rest)
    ]
    assert pages == [[("paged-a", [0, 1, 2]), ("paged-b", [0, 1])], [("paged-b", [2, 3])]]
    assert first["next_cursor"] == {"topic_name": "paged-b", "partition_index": 2}
    assert rest["next_cursor"] is None
    for topic in first["topics"] + rest["topics"]:
        assert topic["error_code"] == 0 and topic["topic_id"] is not None
        for partition in topic["partitions"]:
            assert partition["leader_id"] == 1 and partition["isr_nodes"] == [1]
    (unknown,) = missing["topics"]
    assert unknown["error_code"] == kafka.errors.UnknownTopicOrPartitionError.errno
