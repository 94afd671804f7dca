"""A streaming query in a process of its own, for the test that kills it with SIGKILL.

    python spark_job.py BOOTSTRAP INPUT OUTPUT CHECKPOINT [--available-now]
        [--exactly-once] [--fail-once]

The test restarts the same query (`start_query`) in its own Spark session.

Reads INPUT from the earliest offset, 100 records per micro-batch, upper-cases each value
in a deliberately slow UDF (so a kill often lands while a batch is half written), and
writes it to OUTPUT with a header `from` = "<partition>:<offset>" of its input record.
With --exactly-once the sink writes in transactions (exactlyOnce=true); with --fail-once
the task holding event-0150 fails on its first attempt, and Spark retries it.
"""

from __future__ import annotations

import argparse
import time
from typing import Any


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
) -> Any:
    """Start the query on `spark` (the `strom` source registered) and return it."""
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
    writer = (
        output.writeStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
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
    query = start_query(
        spark,
        args.bootstrap,
        args.input,
        args.output,
        args.checkpoint,
        available_now=args.available_now,
        exactly_once=args.exactly_once,
        fail_once=args.fail_once,
    )
    print("started", flush=True)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
