"""DeleteRecords with real clients: confluent-kafka's and kafka-python's admin clients on
three nodes (followers start where their leader starts, so a new leader hides the same
records), `strom topic delete-records`, and a broker killed with SIGKILL right after a
deletion keeps it, with every record above the new start still there, once and in order.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from broker import BrokerProcess
from cli_runner import strom
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as PyTopicPartition

from strom.testing import StromCluster

RECORDS = 50


def written(bootstrap: str, topic: str, partitions: int, replicas: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replicas, config=configs)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for partition in range(partitions):
        for i in range(RECORDS):
            producer.produce(
                topic, f"{partition}-{i}".encode(), key=b"k%d" % i, partition=partition
            )
    assert producer.flush(30) == 0


def read_from_start(bootstrap: str, topic: str, partition: int) -> list[tuple[int, str]]:
    """(offset, value) of everything a consumer reads from the earliest offset on."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{topic}", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, -2)])  # OFFSET_BEGINNING
        got: list[tuple[int, str]] = []
        while len(got) < high - low:
            message = consumer.poll(10)
            assert message is not None, f"read {len(got)} of {high - low} records"
            assert message.error() is None, message.error()
            got.append((message.offset(), message.value().decode()))
        return got
    finally:
        consumer.close()


def earliest(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low)
    finally:
        consumer.close()


def leader_of(admin: AdminClient, topic: str, partition: int) -> int:
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return int(partitions[partition].leader)


@pytest.mark.strom(config={"default.replication.factor": "3", "min.insync.replicas": "2"})
def test_both_admin_clients_on_three_nodes_and_a_new_leader_hides_the_same_records(
    strom_cluster: StromCluster,
) -> None:
    bootstrap = strom_cluster.bootstrap_servers
    written(bootstrap, "trimmed", 2, 3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records(
        [TopicPartition("trimmed", 0, 20), TopicPartition("trimmed", 1, -1)],
        operation_timeout=30,
        request_timeout=30,
    )
    low = {tp.partition: future.result(30).low_watermark for tp, future in futures.items()}
    assert low == {0: 20, 1: RECORDS}

    python_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        answer = python_admin.delete_records(
            {PyTopicPartition("trimmed", 0): 30}, timeout_ms=30_000
        )
    finally:
        python_admin.close()
    assert [value["low_watermark"] for value in answer.values()] == [30]

    assert read_from_start(bootstrap, "trimmed", 0) == [(i, f"0-{i}") for i in range(30, RECORDS)]
    assert read_from_start(bootstrap, "trimmed", 1) == []
    leader = leader_of(admin, "trimmed", 0)
    strom_cluster.crash_node(leader)
    try:
        deadline = time.monotonic() + 30
        while leader_of(admin, "trimmed", 0) in (leader, -1):
            assert time.monotonic() < deadline, "no new leader of trimmed-0 within 30 s"
            time.sleep(0.2)
        # A follower leads now: it answered only once both followers started at 30.
        assert earliest(bootstrap, "trimmed", 0) == 30
        assert read_from_start(bootstrap, "trimmed", 0)[0] == (30, "0-30")
    finally:
        strom_cluster.start_node(leader)


def test_a_compacted_topic_and_an_offset_past_the_end_are_refused(
    strom_broker: StromCluster,
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    written(bootstrap, "kept", 1, **{"cleanup.policy": "compact"})
    written(bootstrap, "plain", 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records(
        [TopicPartition("kept", 0, 10), TopicPartition("plain", 0, RECORDS + 1)]
    )
    errors = {}
    for tp, future in futures.items():
        with pytest.raises(KafkaException) as refused:
            future.result(30)
        errors[tp.topic] = refused.value.args[0].name()
    assert errors == {"kept": "POLICY_VIOLATION", "plain": "OFFSET_OUT_OF_RANGE"}
    assert earliest(bootstrap, "kept", 0) == 0
    assert earliest(bootstrap, "plain", 0) == 0


def test_strom_topic_delete_records_and_its_errors(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    written(bootstrap, "cli-trim", 3)
    done = strom("topic", "delete-records", "cli-trim", "--before", "12", "-p", "0", "-p", "2",
                 "-b", bootstrap)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["PARTITION", "STARTS", "AT", "0", "12", "2", "12"]
    assert [earliest(bootstrap, "cli-trim", p) for p in range(3)] == [12, 0, 12]
    done = strom("topic", "delete-records", "cli-trim", "--before", "end", "-b", bootstrap)
    assert done.returncode == 0, done.stderr
    assert [earliest(bootstrap, "cli-trim", p) for p in range(3)] == [RECORDS] * 3

    refused = strom("topic", "delete-records", "cli-trim", "--before", "99", "-b", bootstrap)
    assert refused.returncode == 1
    assert "cli-trim-0: OFFSET_OUT_OF_RANGE" in refused.stderr
    bad = strom("topic", "delete-records", "cli-trim", "--before", "soon", "-b", bootstrap)
    assert bad.returncode == 1
    assert "--before must be an offset (0 or more) or 'end', not 'soon'" in bad.stderr
    missing = strom("topic", "delete-records", "cli-trim", "--before", "1", "-p", "7",
                    "-b", bootstrap)  # fmt: skip
    assert missing.returncode == 1
    assert "topic 'cli-trim' has no partition 7 (it has 3)" in missing.stderr
    absent = strom("topic", "delete-records", "nope", "--before", "1", "-b", bootstrap)
    assert absent.returncode == 1
    assert "topic 'nope' does not exist" in absent.stderr


def test_a_deletion_survives_kill_9_and_every_record_above_it_stays(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", extra=["--set", "log.segment.bytes=2000"])
    broker.start()
    try:
        written(broker.bootstrap, "durable", 1)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        (future,) = admin.delete_records([TopicPartition("durable", 0, 33)]).values()
        assert future.result(30).low_watermark == 33
        broker.kill()
        broker.start()
        assert earliest(broker.bootstrap, "durable", 0) == 33
        expected = [(i, f"0-{i}") for i in range(33, RECORDS)]
        assert read_from_start(broker.bootstrap, "durable", 0) == expected
    finally:
        broker.kill()
