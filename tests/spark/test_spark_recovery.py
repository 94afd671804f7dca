"""A streaming query killed with SIGKILL mid-stream and restarted from its checkpoint.

The sink is at least once: a micro-batch interrupted after some of its records were
written is written again in full on restart. The test checks that no input is missing
and that every duplicate comes from that one replayed micro-batch.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition
from spark_helpers import consume_all, create_topic, produce, unique_topic
from spark_job import start_query

from strom.spark.offsets import offsets_from_json

JOB = Path(__file__).with_name("spark_job.py")
RECORDS = 400
PER_TRIGGER = 100  # the job's maxOffsetsPerTrigger


def start_job(
    bootstrap: str, source: str, sink: str, checkpoint: Path, log: Path, *extra: str
) -> Any:
    with log.open("ab") as output:
        return subprocess.Popen(
            [sys.executable, str(JOB), bootstrap, source, sink, str(checkpoint), *extra],
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the JVM and workers die with it
        )


def kill_group(job: Any) -> None:
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGKILL)
    job.wait(30)


def output_count(consumer: Any, sink: str) -> int:
    return sum(
        consumer.get_watermark_offsets(TopicPartition(sink, p), timeout=10)[1] for p in (0, 1)
    )


def replayed_range(checkpoint: Path) -> tuple[dict[Any, int], dict[Any, int]] | None:
    """(start, end) of the micro-batch planned but not committed at the kill, if any."""
    planned = sorted(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    committed = {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}
    if not planned or planned[-1] in committed:
        return None

    def offsets(batch: int) -> dict[Any, int]:
        lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
        return offsets_from_json(json.loads(lines[2]))

    last = planned[-1]
    return (offsets(last - 1) if last > 0 else {}), offsets(last)


def test_killed_query_restarts_with_nothing_missing(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:

    source = create_topic(bootstrap, unique_topic("killed-in"), 2)
    sink = create_topic(bootstrap, unique_topic("killed-out"), 2)
    produce(bootstrap, source, ((i % 2, None, b"event-%04d" % i) for i in range(RECORDS)))
    checkpoint, log = tmp_path / "checkpoint", tmp_path / "job.log"

    job = start_job(bootstrap, source, sink, checkpoint, log)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "strom-tests"})
    mid_batch = False
    try:
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            assert job.poll() is None, f"the job exited early:\n{log.read_text()[-3000:]}"
            written = output_count(consumer, sink)
            if written >= PER_TRIGGER and written % PER_TRIGGER:
                mid_batch = True  # a micro-batch is half written: kill it now
                break
            if written >= RECORDS - PER_TRIGGER:
                break  # never caught one half written; kill anyway
            time.sleep(0.01)
        else:
            raise AssertionError(f"no output after 150 s:\n{log.read_text()[-3000:]}")
    finally:
        kill_group(job)
        consumer.close()
    written_at_kill = written
    replay = replayed_range(checkpoint)

    # Restart from the checkpoint (in this process's Spark session) and run until caught up.
    rerun = start_query(spark, bootstrap, source, sink, str(checkpoint), available_now=True)
    try:
        assert rerun.awaitTermination(180), "the restarted query did not finish"
    finally:
        rerun.stop()

    output = consume_all(bootstrap, sink, 2)
    counts = Counter(record.value for record in output)
    expected = {b"EVENT-%04d" % i for i in range(RECORDS)}
    missing = expected - set(counts)
    assert not missing, f"{len(missing)} input records missing from the output"
    assert set(counts) == expected
    duplicates = [r for r in output if counts[r.value] > 1]
    duplicate_count = sum(n - 1 for n in counts.values())
    print(
        f"killed at {written_at_kill} output records (mid-batch: {mid_batch}); "
        f"{len(output)} records out for {RECORDS} in: {duplicate_count} duplicate(s)"
    )
    if replay is None:
        assert duplicate_count == 0
        return
    start, end = replay
    for record in duplicates:  # every duplicate is from the replayed micro-batch
        assert record.headers is not None
        partition, offset = map(int, record.headers[0][1].split(b":"))
        tp = next(tp for tp in end if tp.partition == partition)
        assert start.get(tp, 0) <= offset < end[tp]
    replayed_size = sum(end[tp] - start.get(tp, 0) for tp in end)
    assert duplicate_count <= replayed_size
    if mid_batch:
        assert duplicate_count > 0  # the half-written batch was written again
