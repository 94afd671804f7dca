"""Topics, records and waiting, for the Spark connector tests (confluent-kafka, no Spark)."""

from __future__ import annotations

import itertools
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic  # type: ignore[attr-defined]

_names = itertools.count()


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{secrets.token_hex(3)}"


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)


def wait_until_steady(read: Callable[[], int], settle_s: float, timeout_s: float, what: str) -> int:
    """Poll `read` until its value has not changed for `settle_s`; return that value."""
    value, since = read(), time.monotonic()
    deadline = since + timeout_s
    while time.monotonic() - since < settle_s:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.05)
        current = read()
        if current != value:
            value, since = current, time.monotonic()
    return value


def create_topic(
    bootstrap: str, name: str, partitions: int, config: dict[str, str] | None = None
) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    wait_for(lambda: len(partition_ids(admin, name)) == partitions, 30, f"{name} to exist")
    return name


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_partitions([NewPartitions(name, total)])[name].result(30)
    wait_for(lambda: len(partition_ids(admin, name)) == total, 30, f"{name} to grow")


def partition_ids(admin: AdminClient, name: str) -> list[int]:
    topic = admin.list_topics(timeout=10).topics.get(name)
    if topic is None or topic.error is not None:
        return []
    return sorted(p for p, meta in topic.partitions.items() if meta.leader >= 0)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[int | None, bytes | None, bytes | None]],
    *,
    headers: list[tuple[str, bytes]] | None = None,
    timestamp_ms: int = 0,
    one_batch_each: bool = False,
) -> int:
    """Send (partition, key, value) records and wait for every acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if one_batch_each else 5})
    failures: list[str] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failures.append(error.str())

    count = 0
    for partition, key, value in records:
        producer.produce(
            topic,
            value,
            key,
            partition=-1 if partition is None else partition,
            headers=headers,
            timestamp=timestamp_ms,
            on_delivery=delivered,
        )
        count += 1
        if one_batch_each:
            producer.flush(10)
    assert producer.flush(30) == 0, "records still unsent after 30 s"
    assert not failures, failures[:3]
    return count


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] | None
    timestamp_ms: int


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strom-tests"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[Record]:
    """Every record now in the topic, read from the start of each partition to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"strom-tests-{secrets.token_hex(4)}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            ends[p] = high
        assignment = [TopicPartition(topic, p, -2) for p in range(partitions) if ends[p] > 0]
        if not assignment:
            return []
        consumer.assign(assignment)
        records: list[Record] = []
        positions = {p: -1 for p in ends}
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] - 1 for p in ends if ends[p] > 0):
            assert time.monotonic() < deadline, f"could not read all of {topic}"
            for message in consumer.consume(1000, 0.5):
                if message.error() is not None:
                    continue
                p = message.partition()
                positions[p] = message.offset()
                if message.offset() < ends[p]:
                    records.append(
                        Record(
                            p,
                            message.offset(),
                            message.key(),
                            message.value(),
                            message.headers(),
                            message.timestamp()[1],
                        )
                    )
        return records
    finally:
        consumer.close()
