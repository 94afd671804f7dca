"""A streaming query in a process of its own, for the tests that kill it with SIGKILL.

    python spark_job.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]
        [--exactly-once] [--fail-once] [--die-in-commit BATCH MARKER]

The test restarts the same query (`start_query`) in its own Spark session.

Reads INPUT from the earliest offset, 100 records per micro-batch, upper-cases each value
in a deliberately slow UDF (so a kill often lands while a batch is half written), and
writes it to OUTPUT with a header `from` = "<partition>:<offset>" of its input record.
With --exactly-once the sink writes in transactions (exactlyOnce=true); with --fail-once
the task holding event-0150 fails on its first attempt, and Spark retries it. With
--die-in-commit the driver's commit of micro-batch BATCH commits the first task's
transaction, writes its transactional id to the file MARKER, and kills the whole job
with SIGKILL before it ends any other (`dying_in_commit_source`: the sink wrapped here,
not a hook in strom).
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path
from typing import Any

# The options of the sink dying in its commit, taken off before the `strom` sink sees them.
DIE_IN_BATCH, DIE_MARKER, DIE_GROUP = "dieinbatch", "diemarker", "diegroup"
DYING_SINK = "strom-dying-in-commit"


def dying_in_commit_source() -> type:
    """The `strom` data source (named DYING_SINK), but its stream writer's commit of
    micro-batch `dieInBatch` ends the first task's transaction, writes its transactional
    id to the file `dieMarker`, then kills the process group `dieGroup` (the job: driver,
    JVM, workers) and its own process with SIGKILL. Defined in a function so that the
    test modules importing this one need no pyspark, and Spark pickles it by value."""
    from strom.spark.source import StromDataSource, StromStreamWriter

    class DyingInCommitWriter(StromStreamWriter):
        def __init__(self, writer: StromStreamWriter, die_in: tuple[int, str, int]) -> None:
            super().__init__(writer.options, writer.plan)
            self.die_in = die_in

        def commit(self, messages: list[Any], batchId: int) -> None:
            batch, marker, group = self.die_in
            if batchId == batch:
                import strom.spark.txn_coordinator as coordinator

                end_transaction = coordinator.end_transaction

                def end_and_die(
                    bootstrap: str, pending: Any, *, commit: bool, security: Any = None
                ) -> None:
                    end_transaction(bootstrap, pending, commit=commit, security=security)
                    Path(marker).write_text(pending.transactional_id)
                    os.killpg(group, signal.SIGKILL)
                    os.kill(os.getpid(), signal.SIGKILL)  # if not in that group

                coordinator.end_transaction = end_and_die  # source looks it up there
            super().commit(messages, batchId)

    class DyingInCommitSource(StromDataSource):
        @classmethod
        def name(cls) -> str:
            return DYING_SINK

        def __init__(self, options: dict[str, str]) -> None:
            given = {key.lower(): value for key, value in options.items()}
            ours = (DIE_IN_BATCH, DIE_MARKER, DIE_GROUP)
            self.die_in = (int(given[DIE_IN_BATCH]), given[DIE_MARKER], int(given[DIE_GROUP]))
            super().__init__({k: v for k, v in given.items() if k not in ours})

        def streamWriter(self, schema: Any, overwrite: bool) -> StromStreamWriter:
            return DyingInCommitWriter(super().streamWriter(schema, overwrite), self.die_in)

    return DyingInCommitSource


def start_query(
    spark: Any,
    bootstrap: str,
    source: str,
    sink: str,
    checkpoint: str,
    *,
    available_now: bool,
    exactly_once: bool = False,
    fail_once: bool = False,
    die_in_commit: tuple[int, str] | None = None,
) -> Any:
    """Start the query on `spark` (the `strom` source registered) and return it;
    `die_in_commit` (batch, marker file) needs `dying_in_commit_source()` registered."""
    from pyspark.sql import functions as F

    def slow_upper(value):  # type: ignore[no-untyped-def] # hints make pyspark warn
        time.sleep(0.004)
        if fail_once and value == b"event-0150":
            from pyspark import TaskContext

            context = TaskContext.get()
            if context is not None and context.attemptNumber() == 0:
                raise RuntimeError("a task failing once, half way through its rows")
        return value.decode().upper()

    records = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    origin = F.concat_ws(":", "partition", "offset").cast("binary")
    output = records.select(
        F.udf(slow_upper, "string")("value").alias("value"),
        F.array(F.struct(F.lit("from").alias("key"), origin.alias("value"))).alias("headers"),
    )
    writer = output.writeStream.format("strom" if die_in_commit is None else DYING_SINK)
    if die_in_commit is not None:
        batch, marker = die_in_commit
        group = str(os.getpgrp())
        writer = writer.options(**{DIE_IN_BATCH: str(batch), DIE_MARKER: marker, DIE_GROUP: group})
    writer = (
        writer.option("kafka.bootstrap.servers", bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", checkpoint)
    )
    if exactly_once:
        writer = writer.option("exactlyOnce", "true")
    if available_now:
        writer = writer.trigger(availableNow=True)
    return writer.start()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("bootstrap")
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("checkpoint")
    parser.add_argument("--available-now", action="store_true")
    parser.add_argument("--exactly-once", action="store_true")
    parser.add_argument("--fail-once", action="store_true")
    parser.add_argument("--die-in-commit", nargs=2, metavar=("BATCH", "MARKER"))
    args = parser.parse_args()

    import strom.spark

    spark = strom.spark.local_session(
        "strom-killed-query",
        # local[2, 4]: a failed task is tried up to 4 times (local[2] gives up at once).
        "local[2,4]" if args.fail_once else "local[2]",
        # Small batches between Spark and Python, so records reach the sink a few at a time.
        **{
            "spark.sql.execution.python.udf.maxRecordsPerBatch": "5",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "5",
            # Spark's buffer towards Python workers (64 KiB) would hold a task's rows until
            # its end; a small one lets a failing task send some rows before it fails.
            **({"spark.buffer.size": "512"} if args.fail_once else {}),
        },
    )
    die_in_commit = None
    if args.die_in_commit:
        spark.dataSource.register(dying_in_commit_source())
        die_in_commit = (int(args.die_in_commit[0]), args.die_in_commit[1])
    query = start_query(
        spark,
        args.bootstrap,
        args.input,
        args.output,
        args.checkpoint,
        available_now=args.available_now,
        exactly_once=args.exactly_once,
        fail_once=args.fail_once,
        die_in_commit=die_in_commit,
    )
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
