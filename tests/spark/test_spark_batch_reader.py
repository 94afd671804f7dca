"""The batch reader (reader=batches) on its own, without Spark: one task's range read from a
real broker, against the consumer reader and through data loss and a leader change.

Both readers must give the very same Arrow rows for records written by real producers
(every compression codec, headers, null keys, committed and aborted transactions), at
both isolation levels. Records deleted before a task reads them, and a range past the
log's end, are data loss as failOnDataLoss says. A leader stopped in the middle of a
read is found again on another node, and the read goes on without a gap or a repeat.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

import pyarrow as pa
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from spark_helpers import create_topic, unique_topic

from strom.spark.errors import DataLossError
from strom.spark.fetch_reader import read_range_batches
from strom.spark.kafka import read_range
from strom.spark.offsets import OffsetRange
from strom.spark.offsets import TopicPartition as RangePartition
from strom.spark.options import ReadOptions, parse_read_options
from strom.testing import StromCluster

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def options(bootstrap: str, topic: str, **given: str) -> ReadOptions:
    return parse_read_options(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic} | given, streaming=False
    )


def table(batches: Any) -> pa.Table:
    return pa.Table.from_batches(list(batches))


def send(producer: Producer, topic: str, partition: int, count: int, tag: str) -> None:
    for i in range(count):
        key = None if i % 3 == 0 else f"k{i}".encode()
        headers = [("n", str(i).encode()), ("empty", None)] if i % 2 else None
        producer.produce(
            topic, f"{tag}-{i}".encode() * (1 + i % 4), key, partition=partition, headers=headers
        )


@pytest.fixture(scope="module")
def mixed_topic(broker: Any) -> str:
    """Two partitions of records from producers of every codec, and transactions."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("mixed"), 2)
    for codec in CODECS:
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec})
        for partition in (0, 1):
            send(producer, topic, partition, 40, codec)
        assert producer.flush(30) == 0
    for commit in (False, True, False):
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": unique_topic("txn")}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        send(producer, topic, 0, 25, f"txn-{commit}")
        assert producer.flush(30) == 0  # ending a transaction drops what is still queued
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    return topic


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_both_readers_give_the_same_rows(broker: Any, mixed_topic: str, isolation: str) -> None:
    bootstrap = broker.bootstrap
    settings = {"includeHeaders": "true", "kafka.isolation.level": isolation}
    consumer, batches = (
        options(bootstrap, mixed_topic, reader=reader, **settings)
        for reader in ("consumer", "batches")
    )
    for partition, end in ((0, 200 + 75 + 3), (1, 200)):
        rng = OffsetRange(RangePartition(mixed_topic, partition), 0, end)
        expected = table(read_range(rng, consumer))
        assert table(read_range_batches(rng, batches)).equals(expected)
        inner = OffsetRange(rng.topic_partition, 37, end - 11)  # starts and ends inside batches
        assert table(read_range_batches(inner, batches)).equals(table(read_range(inner, consumer)))
    committed = isolation == "read_committed"
    rows = table(read_range_batches(OffsetRange(RangePartition(mixed_topic, 0), 0, 278), batches))
    assert rows.num_rows == 200 + (25 if committed else 75)
    first = rows.slice(1, 1).to_pylist()[0]
    assert first["headers"] == [{"key": "n", "value": b"1"}, {"key": "empty", "value": None}]
    assert rows.slice(0, 1).to_pylist()[0]["key"] is None


def test_deleted_records_are_data_loss(broker: Any) -> None:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("trimmed"), 1)
    producer = Producer({"bootstrap.servers": bootstrap})
    send(producer, topic, 0, 30, "r")
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.delete_records([TopicPartition(topic, 0, 10)]).values()
    assert future.result(30).low_watermark == 10
    rng = OffsetRange(RangePartition(topic, 0), 0, 30)
    with pytest.raises(DataLossError, match=rf"records 0\.\.9 of {topic}-0 were deleted"):
        table(read_range_batches(rng, options(bootstrap, topic)))
    lenient = options(bootstrap, topic, failOnDataLoss="false")
    offsets = table(read_range_batches(rng, lenient)).column("offset").to_pylist()
    assert offsets == list(range(10, 30))
    past_end = OffsetRange(RangePartition(topic, 0), 20, 40)
    with pytest.raises(DataLossError, match=rf"{topic}-0"):
        table(read_range_batches(past_end, options(bootstrap, topic)))
    offsets = table(read_range_batches(past_end, lenient)).column("offset").to_pylist()
    assert offsets == list(range(20, 30))


def test_a_read_goes_on_from_a_new_leader(strom_cluster: StromCluster) -> None:
    bootstrap = strom_cluster.bootstrap_servers
    strom_cluster.create_topic("moving", partitions=1, replication_factor=3)
    total = 120_000
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 20,
            "queue.buffering.max.messages": total,
        }
    )
    for i in range(total):
        producer.produce("moving", i.to_bytes(4, "big"), partition=0)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    leader = strom_cluster.wait_for_leader("moving")
    read = options(
        bootstrap,
        "moving",
        **{"fetchOffset.retryIntervalMs": "100", "kafka.max.partition.fetch.bytes": "100000"},
    )
    batches = read_range_batches(OffsetRange(RangePartition("moving", 0), 0, total), read)
    first = next(batches)
    assert 0 < first.num_rows < total
    strom_cluster.stop_node(leader)
    strom_cluster.wait_for_leader("moving", not_on=leader)
    rows = table([first, *batches])
    assert rows.column("offset").to_pylist() == list(range(total))
    assert [int.from_bytes(v) for v in rows.column("value").to_pylist()] == list(range(total))
