"""The exactly-once sink (exactlyOnce=true) on a real Spark and a real broker: a batch write
run again after a failure, a stream whose task fails once, whose process is killed
with SIGKILL, and whose last micro-batch is replayed, and a stream whose driver is killed
half way through committing a micro-batch. Every input row must be seen exactly once by a
read_committed consumer.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from confluent_kafka import Consumer, KafkaError, TopicPartition
from spark_helpers import create_topic, produce, unique_topic
from spark_job import start_query
from test_spark_recovery import kill_group, start_job

from strom.spark.exactly_once import default_prefix, of_write
from strom.spark.txn_coordinator import open_transactions

RECORDS = 400


def read_values(bootstrap: str, topic: str, partitions: int, *, committed: bool) -> list[bytes]:
    """Every value in `topic` as a read_committed (or read_uncommitted) consumer sees it,
    read until each partition's end (the last stable offset, for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "strom-tests-eos",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
        values: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"could not read all of {topic}"
            for message in consumer.consume(1000, 0.5):
                error = message.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error.str()
                    at_end.add(message.partition())
                    continue
                at_end.discard(message.partition())
                values.append(message.value())
        return values
    finally:
        consumer.close()


def open_transactions_of(bootstrap: str, prefix: str) -> list[str]:
    """The ids of the write with `prefix` whose transactions are still open."""
    return sorted(i for i in open_transactions(bootstrap) if of_write(prefix, i))


def write_batch(df: Any, bootstrap: str, topic: str, prefix: str) -> None:
    (
        df.write.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
        .option("exactlyOnce", "true")
        .option("transactionalIdPrefix", prefix)
        .mode("append")
        .save()
    )


def test_batch_write_run_again_after_a_failure_writes_each_row_once(
    spark: Any, bootstrap: str
) -> None:
    from pyspark.sql import functions as F

    sink = create_topic(bootstrap, unique_topic("eos-batch"), 2)
    prefix = unique_topic("eos-job")

    def fail_in_partition_2(value):  # type: ignore[no-untyped-def] # hints make pyspark warn
        time.sleep(0.002)  # so the rows before it are sent (linger.ms is 5) before it fails
        if value == "row-0250":
            raise RuntimeError("a task failing half way through its rows")
        return value

    # Three tasks: rows 0-99, 100-199 and 200-299, in every run. The 4 KB keys fill Spark's
    # 64 KiB buffer towards the writer, so a task's first rows reach it before the failure.
    rows = spark.range(0, 300, 1, 3).selectExpr(
        "repeat('k', 4096) AS key", "format_string('row-%04d', id) AS value"
    )
    fail = F.udf(fail_in_partition_2, "string")
    failing = rows.select("key", fail("value").alias("value"))
    expected = [f"row-{i:04d}".encode() for i in range(300)]
    # Rows reach the sink 5 at a time, so the failing task has sent some when it fails.
    small = {"spark.sql.execution.arrow.maxRecordsPerBatch": "5"}
    small["spark.sql.execution.python.udf.maxRecordsPerBatch"] = "5"
    before = {key: spark.conf.get(key) for key in small}
    try:
        for key, value in small.items():
            spark.conf.set(key, value)
        with pytest.raises(Exception, match="a task failing half way"):
            write_batch(failing, bootstrap, sink, prefix)
    finally:
        for key, value in before.items():
            spark.conf.set(key, value)
    # The driver aborted the two other tasks' transactions, and took over the failed one's
    # id (which, seeing its input end early, may have taken it for the end of its rows).
    assert read_values(bootstrap, sink, 2, committed=True) == []
    assert len(read_values(bootstrap, sink, 2, committed=False)) > 200

    write_batch(rows, bootstrap, sink, prefix)  # run again: every task writes
    assert sorted(read_values(bootstrap, sink, 2, committed=True)) == expected
    write_batch(rows, bootstrap, sink, prefix)  # and a third run writes nothing
    assert sorted(read_values(bootstrap, sink, 2, committed=True)) == expected

    write_batch(rows, bootstrap, sink, prefix + "-new")  # a new prefix is a new job
    assert Counter(read_values(bootstrap, sink, 2, committed=True)) == Counter(expected * 2)


def last_batch(checkpoint: Path) -> int:
    return max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())


def test_stream_with_a_failed_task_a_kill_and_a_replay_writes_each_row_once(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    source = create_topic(bootstrap, unique_topic("eos-in"), 2)
    sink = create_topic(bootstrap, unique_topic("eos-out"), 2)
    produce(bootstrap, source, ((i % 2, None, b"event-%04d" % i) for i in range(RECORDS)))
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "job.log"
    expected = Counter(b"EVENT-%04d" % i for i in range(RECORDS))

    # In its own process: a task of the second micro-batch fails once after writing part
    # of its rows (Spark retries it), and the process is killed once 250 rows are out.
    job = start_job(bootstrap, source, sink, checkpoint, log, "--exactly-once", "--fail-once")
    try:
        deadline = time.monotonic() + 150
        while len(read_values(bootstrap, sink, 2, committed=False)) < 250:
            assert job.poll() is None, f"the job exited early:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no output:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        kill_group(job)
    assert "a task failing once" in log.read_text(), "the task did not fail"

    def run_to_the_end() -> None:
        query = start_query(
            spark, bootstrap, source, sink, str(checkpoint), available_now=True, exactly_once=True
        )
        try:
            assert query.awaitTermination(180), "the restarted query did not finish"
        finally:
            query.stop()

    run_to_the_end()
    # The failed attempt's worker, the killed run's tasks: nothing of theirs is left open.
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    assert open_transactions_of(bootstrap, default_prefix(query_id)) == []
    assert Counter(read_values(bootstrap, sink, 2, committed=True)) == expected
    written = read_values(bootstrap, sink, 2, committed=False)
    print(f"{len(written)} records in the log for {RECORDS} rows (aborted ones included)")
    assert len(written) >= RECORDS  # with the failed attempt's and the killed job's, aborted

    # Forget that the last micro-batch finished: Spark runs it again, with the same id.
    replayed = last_batch(checkpoint)
    (checkpoint / "commits" / str(replayed)).unlink()
    (checkpoint / "commits" / f".{replayed}.crc").unlink(missing_ok=True)
    run_to_the_end()
    assert last_batch(checkpoint) == replayed
    assert Counter(read_values(bootstrap, sink, 2, committed=True)) == expected
    assert len(read_values(bootstrap, sink, 2, committed=False)) == len(written)


def test_stream_whose_driver_dies_half_way_through_a_commit_writes_each_row_once(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    records = 200  # two micro-batches of 100, each written by two tasks of 50
    source = create_topic(bootstrap, unique_topic("eos-commit-in"), 2)
    sink = create_topic(bootstrap, unique_topic("eos-commit-out"), 2)
    produce(bootstrap, source, ((i % 2, None, b"event-%04d" % i) for i in range(records)))
    checkpoint, log, died = tmp_path / "checkpoint", tmp_path / "job.log", tmp_path / "died"

    # In its own process: the driver's commit of micro-batch 1 commits the first task's
    # transaction, then the whole job is killed with SIGKILL, the second left open.
    job = start_job(
        bootstrap,
        source,
        sink,
        checkpoint,
        log,
        "--exactly-once",
        "--die-in-commit",
        "1",
        str(died),
    )
    try:
        job.wait(300)  # a bound for a hang only: the job dies on its own
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the job did not die:\n{log.read_text()[-3000:]}") from None
    finally:
        kill_group(job)
    assert job.returncode == -signal.SIGKILL, log.read_text()[-3000:]
    assert died.exists(), f"the job died elsewhere:\n{log.read_text()[-3000:]}"
    assert died.read_text().endswith("-p0-a0")  # the first task's transaction committed
    assert (checkpoint / "offsets" / "1").exists() and not (checkpoint / "commits" / "1").exists()

    query = start_query(
        spark, bootstrap, source, sink, str(checkpoint), available_now=True, exactly_once=True
    )
    try:
        assert query.awaitTermination(180), "the restarted query did not finish"
    finally:
        query.stop()
    assert last_batch(checkpoint) == 1  # micro-batch 1 ran again, and nothing after it
    expected = Counter(b"EVENT-%04d" % i for i in range(records))
    assert Counter(read_values(bootstrap, sink, 2, committed=True)) == expected
    # In the log: micro-batch 0 (100), micro-batch 1 (100, of which the second task's 50
    # were aborted when its replay took its id over) and that replay (50). The first task's
    # replay found its transaction committed and wrote nothing.
    assert len(read_values(bootstrap, sink, 2, committed=False)) == records + records // 4
