"""Streaming reads and writes: checkpoints, AvailableNow, admission control, new partitions,
data loss. Real Spark (local[2]) and a real broker."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from spark_helpers import (
    add_partitions,
    consume_all,
    create_topic,
    produce,
    unique_topic,
    wait_for,
    wait_until_steady,
    watermarks,
)

QUERY_TIMEOUT_S = 120


def stream(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    read = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for name, value in options.items():
        read = read.option(name, value)
    return read.load()


def finish(query: Any) -> None:
    """Wait for an AvailableNow query to end; its failure is raised here."""
    try:
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the query did not finish"
    finally:
        query.stop()


def collect_batches(
    df: Any, checkpoint: Path, batches: list[tuple[int, list[Any]]], **trigger: Any
) -> Any:
    """Start df with foreachBatch, appending (batch id, rows) to `batches`."""

    def collect(batch: Any, batch_id: int) -> None:
        batches.append((batch_id, batch.select("partition", "offset", "value").collect()))

    writer = df.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint))
    return writer.trigger(**(trigger or {"availableNow": True})).start()


def test_stream_transform_write_exactly_once_across_runs(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    source = create_topic(bootstrap, unique_topic("orders"), 3)
    sink = create_topic(bootstrap, unique_topic("orders-upper"), 2)
    produce(bootstrap, source, ((i % 3, b"k", f"order-{i}".encode()) for i in range(300)))

    def run() -> None:
        upper = stream(spark, bootstrap, source).selectExpr(
            "key",
            "upper(CAST(value AS STRING)) AS value",
            "array(named_struct('key', 'from', 'value', "
            "CAST(concat(partition, ':', offset) AS BINARY))) AS headers",
        )
        query = (
            upper.writeStream.format("strom")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        finish(query)

    run()
    first = consume_all(bootstrap, sink, 2)
    assert Counter(r.value for r in first) == Counter(f"ORDER-{i}".encode() for i in range(300))
    produce(bootstrap, source, ((i % 3, b"k", f"order-{i}".encode()) for i in range(300, 500)))
    run()  # again from the checkpoint: only the new records
    output = consume_all(bootstrap, sink, 2)
    counts = Counter(r.value for r in output)
    assert set(counts) == {f"ORDER-{i}".encode() for i in range(500)}  # nothing missing
    assert max(counts.values()) == 1  # and nothing twice: no failure, so no replay
    origins = Counter(r.headers[0][1] for r in output if r.headers)
    assert len(origins) == 500 and max(origins.values()) == 1


def test_max_offsets_per_trigger_is_shared_by_backlog(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(bootstrap, unique_topic("skewed"), 3)
    produce(bootstrap, topic, [(0, None, b"x")] * 100 + [(1, None, b"y")] * 20)
    batches: list[tuple[int, list[Any]]] = []
    df = stream(spark, bootstrap, topic, maxOffsetsPerTrigger="40")
    finish(collect_batches(df, tmp_path / "checkpoint", batches))
    sizes = [Counter(row.partition for row in rows) for _, rows in sorted(batches) if rows]
    assert all(sum(size.values()) <= 40 for size in sizes)
    assert sum(sum(size.values()) for size in sizes) == 120
    # 40 records shared 100:20 (33.3 and 6.7, rounded by largest remainder).
    assert sizes[0] == Counter({0: 33, 1: 7})
    offsets = sorted((row.partition, row.offset) for _, rows in batches for row in rows)
    assert offsets == [(0, o) for o in range(100)] + [(1, o) for o in range(20)]


def test_partition_added_mid_stream_is_read(spark: Any, bootstrap: str) -> None:
    topic = create_topic(bootstrap, unique_topic("growing"), 1)
    produce(bootstrap, topic, [(0, None, b"before")] * 5)
    name = f"growing_{topic.replace('-', '_')}"
    query = stream(spark, bootstrap, topic).writeStream.format("memory").queryName(name).start()
    try:
        query.processAllAvailable()
        assert spark.table(name).count() == 5
        add_partitions(bootstrap, topic, 2)
        produce(bootstrap, topic, [(1, None, b"after")] * 4)
        query.processAllAvailable()
        rows = spark.table(name).select("partition", "offset", "value").collect()
        assert sorted((r.partition, r.offset) for r in rows) == [(0, o) for o in range(5)] + [
            (1, o) for o in range(4)
        ]
    finally:
        query.stop()


def test_records_deleted_before_they_were_read(spark: Any, bootstrap: str, tmp_path: Path) -> None:
    config = {"segment.bytes": "1024", "retention.bytes": "1024"}
    topic = create_topic(bootstrap, unique_topic("retained"), 1, config)
    produce(
        bootstrap, topic, [(0, None, b"early-%02d" % i) for i in range(10)], one_batch_each=True
    )
    checkpoint = tmp_path / "checkpoint"
    batches: list[tuple[int, list[Any]]] = []
    finish(collect_batches(stream(spark, bootstrap, topic), checkpoint, batches))
    assert sum(len(rows) for _, rows in batches) == 10
    # Enough records to roll segments; retention then deletes the oldest, unread ones too.
    later = [(0, None, b"later-%02d" % i) for i in range(60)]
    produce(bootstrap, topic, later, one_batch_each=True)
    wait_for(lambda: watermarks(bootstrap, topic, 0)[0] > 10, 30, "retention to delete records")
    # Retention checks every 200 ms: once the log start stops moving, it is done.
    log_start = wait_until_steady(
        lambda: watermarks(bootstrap, topic, 0)[0], 1.0, 30, "retention to finish"
    )
    log_end = watermarks(bootstrap, topic, 0)[1]

    failing = collect_batches(stream(spark, bootstrap, topic), checkpoint, [])
    with pytest.raises(
        Exception, match=rf"records 10\.\.{log_start - 1} of {topic}-0 were deleted"
    ):
        finish(failing)

    batches.clear()
    lenient = stream(spark, bootstrap, topic, failOnDataLoss="false")
    finish(collect_batches(lenient, checkpoint, batches))
    offsets = sorted(row.offset for _, rows in batches for row in rows)
    assert offsets == list(range(log_start, log_end))
