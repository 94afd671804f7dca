"""kafka.isolation.level on the reader: a topic written by transactional producers, with
committed and aborted transactions and one still open, read by a batch read and by a
Trigger.AvailableNow stream, read_committed and read_uncommitted. Real Spark, real broker.

Offsets of the topic (m: a transaction marker, which no consumer is given):

    partition 0: a0 a1 m | b0 b1 m (aborted) | c0 c1 m | d0 (open)   LSO 9, end 10
    partition 1: a2 a3 m | c2 c3 m                                     LSO 6, end 6
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Producer
from spark_helpers import create_topic, unique_topic
from test_spark_streaming import collect_batches, finish, stream

COMMITTED = [b"a0", b"a1", b"a2", b"a3", b"c0", b"c1", b"c2", b"c3"]
EVERYTHING = [*COMMITTED, b"b0", b"b1", b"d0"]


def transaction(
    bootstrap: str, topic: str, name: str, records: list[tuple[int, bytes]]
) -> Producer:
    """A transactional producer that has sent `records` in a transaction it leaves open."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": unique_topic(name),
            "transaction.timeout.ms": 600_000,  # the open one must outlive the tests
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for partition, value in records:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(30) == 0
    return producer


@pytest.fixture(scope="module")
def transactional_topic(broker: Any) -> Iterator[str]:
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, unique_topic("txn-read"), 2)
    both = [(0, "0"), (0, "1"), (1, "2"), (1, "3")]
    transaction(
        bootstrap, topic, "a", [(p, b"a" + i.encode()) for p, i in both]
    ).commit_transaction(30)
    transaction(bootstrap, topic, "b", [(0, b"b0"), (0, b"b1")]).abort_transaction(30)
    transaction(
        bootstrap, topic, "c", [(p, b"c" + i.encode()) for p, i in both]
    ).commit_transaction(30)
    still_open = transaction(bootstrap, topic, "d", [(0, b"d0")])
    try:
        yield topic
    finally:
        still_open.abort_transaction(30)


def values(rows: list[Any]) -> Counter[bytes]:
    return Counter(row.value for row in rows)


def test_batch_read_committed_reads_committed_records_up_to_the_last_stable_offset(
    spark: Any, bootstrap: str, transactional_topic: str
) -> None:
    def read(**options: str) -> list[Any]:
        reader = spark.read.format("strom").option("kafka.bootstrap.servers", bootstrap)
        for name, value in (options | {"subscribe": transactional_topic}).items():
            reader = reader.option(name, value)
        return list(reader.load().collect())

    # Three offsets per task: ranges end on a commit marker ([0, 3)), hold nothing but an
    # aborted transaction ([3, 6) of partition 0) and end where the open one starts ([6, 9)).
    committed = read(**{"kafka.isolation.level": "read_committed", "maxRecordsPerPartition": "3"})
    assert values(committed) == Counter(COMMITTED)
    assert sorted((r.partition, r.offset) for r in committed) == [
        (0, 0),
        (0, 1),
        (0, 6),
        (0, 7),
        (1, 0),
        (1, 1),
        (1, 3),
        (1, 4),
    ]
    everything = read()  # read_uncommitted, the default
    assert values(everything) == Counter(EVERYTHING)
    assert max(r.offset for r in everything if r.partition == 0) == 9  # the open one's d0


def test_stream_read_committed_stops_at_the_last_stable_offset(
    spark: Any, bootstrap: str, transactional_topic: str, tmp_path: Path
) -> None:
    # 5 offsets per micro-batch, shared by backlog (9 and 6 offsets up to the LSOs): 3 and 2
    # each time. Partition 0's ranges: [0, 3) ends on a commit marker, [3, 6) is the
    # aborted transaction and its marker, [6, 9) ends where the open transaction starts.
    df = stream(
        spark,
        bootstrap,
        transactional_topic,
        **{"kafka.isolation.level": "read_committed", "maxOffsetsPerTrigger": "5"},
    )
    batches: list[tuple[int, list[Any]]] = []
    finish(collect_batches(df, tmp_path / "committed", batches))
    assert [sorted((r.partition, r.offset) for r in rows) for _, rows in sorted(batches)] == [
        [(0, 0), (0, 1), (1, 0), (1, 1)],
        [(1, 3)],
        [(0, 6), (0, 7), (1, 4)],
    ]
    assert values([row for _, rows in batches for row in rows]) == Counter(COMMITTED)

    df = stream(
        spark, bootstrap, transactional_topic, **{"kafka.isolation.level": "read_uncommitted"}
    )
    batches = []
    finish(collect_batches(df, tmp_path / "uncommitted", batches))
    rows = [row for _, rows in batches for row in rows]
    assert values(rows) == Counter(EVERYTHING)
    assert sorted((r.partition, r.offset) for r in rows if r.partition == 0)[-1] == (0, 9)
