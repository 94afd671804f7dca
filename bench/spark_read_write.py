"""Spark connector throughput: streaming reads into a no-op sink with each reader, next to
plain confluent-kafka, and a batch write.

    .venv/bin/python bench/spark_read_write.py [--bootstrap HOST:PORT] [--records 1000000]
        [--record-bytes 100] [--partitions 4] [--master local[2]] [--rounds 3]
        [--exactly-once] [--json FILE]

Without --bootstrap it starts `python -m strom serve` (the default fsync durability) on a
free port with a fresh data directory, as produce_consume.py does, and stops it at the end.
Steps: produce the records with confluent-kafka; then, --rounds times, read them all with
one plain confluent-kafka consumer (the baseline) and with a Spark streaming query
(Trigger.AvailableNow) into Spark's `noop` sink through each reader (`reader=batches`,
whole record batches decoded at once, and `reader=consumer`, librdkafka record by record),
the two readers' order alternating between rounds; each figure is printed as its median
and range. Last, write the same number of records from a Spark DataFrame with
df.write.format("strom"). With --exactly-once the same write runs
again with exactlyOnce=true (to another topic), so both modes are measured in one run.
Spark's start-up is not timed; a small warm-up query runs first so the timed one does not
pay the JVM's first-query costs.
"""

from __future__ import annotations

import argparse
import json
import secrets
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from produce_consume import (
    Broker,
    consume,
    create_topic,
    delete_topic,
    log,
    produce,
    start_strom,
    stop,
)


def spark_session(master: str) -> Any:
    import strom.spark

    return strom.spark.local_session("strom-bench", master)


READERS = ("batches", "consumer")


def stream_read_s(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, reader: str = "batches"
) -> tuple[float, float, int]:
    """(seconds from start() to the end of an AvailableNow query reading the whole topic into
    the noop sink, seconds its micro-batches took, records read)."""
    source = (
        spark.readStream.format("strom")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("reader", reader)
        .load()
    )
    started = time.perf_counter()
    query = (
        source.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in batches)
    batch_s = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    return elapsed, batch_s, rows


def batch_write_s(
    spark: Any,
    bootstrap: str,
    topic: str,
    records: int,
    record_bytes: int,
    *,
    exactly_once: bool = False,
) -> float:
    """Seconds for df.write to send `records` rows of `record_bytes`-byte values."""
    df = spark.range(records).selectExpr(
        "CAST(id AS STRING) AS key", f"CAST(repeat('x', {record_bytes}) AS BINARY) AS value"
    )
    df = df.cache()
    df.count()  # materialise first: the figure is the write, not the generation
    started = time.perf_counter()
    write = df.write.format("strom").option("kafka.bootstrap.servers", bootstrap)
    if exactly_once:
        write = write.option("exactlyOnce", "true").option(
            "transactionalIdPrefix", f"bench-{secrets.token_hex(4)}"
        )
    write.option("topic", topic).mode("append").save()
    elapsed = time.perf_counter() - started
    df.unpersist()
    return elapsed


def warm_up(
    spark: Any, bootstrap: str, partitions: int, scratch: Path, *, exactly_once: bool
) -> None:
    topic = f"bench-spark-warmup-{secrets.token_hex(3)}"
    create_topic(bootstrap, topic, partitions, 1)
    produce(bootstrap, topic, 10_000, 100)
    for reader in READERS:
        stream_read_s(spark, bootstrap, topic, scratch / f"warmup-{reader}", reader)
    batch_write_s(spark, bootstrap, topic, 10_000, 100)
    if exactly_once:
        batch_write_s(spark, bootstrap, topic, 10_000, 100, exactly_once=True)
    delete_topic(bootstrap, topic)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", help="measure this broker instead of starting strom")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=3, help="reads of each kind (default 3)")
    parser.add_argument(
        "--exactly-once", action="store_true", help="also time the write with exactlyOnce=true"
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results here")
    args = parser.parse_args()
    if min(args.records, args.record_bytes, args.partitions, args.rounds) < 1:
        parser.error("--records, --record-bytes, --partitions and --rounds must be positive")

    broker = Broker(args.bootstrap) if args.bootstrap else start_strom("fsync")
    replication = -1 if args.bootstrap else 1
    scratch = Path(tempfile.mkdtemp(prefix="strom-bench-spark-"))
    topics: list[str] = []
    try:
        spark = spark_session(args.master)
        warm_up(spark, broker.bootstrap, args.partitions, scratch, exactly_once=args.exactly_once)
        source = f"bench-spark-in-{secrets.token_hex(3)}"
        sink = f"bench-spark-out-{secrets.token_hex(3)}"
        topics += [source, sink]
        create_topic(broker.bootstrap, source, args.partitions, replication)
        create_topic(broker.bootstrap, sink, args.partitions, replication)
        produce_s = produce(broker.bootstrap, source, args.records, args.record_bytes)
        log(f"produced {args.records:,} records in {produce_s:.2f} s")
        reads: dict[str, list[float]] = {"plain": []}
        for round_ in range(args.rounds):
            plain_s = consume(broker.bootstrap, source, args.partitions, args.records)
            reads["plain"].append(plain_s)
            log(f"round {round_ + 1}: confluent-kafka consumer {plain_s:.2f} s")
            order = READERS if round_ % 2 == 0 else READERS[::-1]
            for reader in order:
                checkpoint = scratch / f"checkpoint-{reader}-{round_}"
                spark_s, batch_s, rows = stream_read_s(
                    spark, broker.bootstrap, source, checkpoint, reader
                )
                if rows != args.records:
                    raise SystemExit(
                        f"the streaming query ({reader}) read {rows} records, not {args.records}"
                    )
                reads.setdefault(f"{reader} query", []).append(spark_s)
                reads.setdefault(f"{reader} batches", []).append(batch_s)
                log(
                    f"round {round_ + 1}: Spark streaming read, reader={reader}: {spark_s:.2f} s,"
                    f" {batch_s:.2f} s of it in micro-batches"
                )
        write_s = batch_write_s(spark, broker.bootstrap, sink, args.records, args.record_bytes)
        log(f"Spark batch write: {write_s:.2f} s")
        eos_s = None
        if args.exactly_once:
            eos_sink = f"bench-spark-eos-{secrets.token_hex(3)}"
            topics.append(eos_sink)
            create_topic(broker.bootstrap, eos_sink, args.partitions, replication)
            eos_s = batch_write_s(
                spark,
                broker.bootstrap,
                eos_sink,
                args.records,
                args.record_bytes,
                exactly_once=True,
            )
            log(f"Spark batch write, exactly once: {eos_s:.2f} s ({eos_s / write_s:.2f}x)")
        spark.stop()
    finally:
        for topic in topics:
            delete_topic(broker.bootstrap, topic)
        stop(broker)

    size_mb = args.records * args.record_bytes / 1_000_000
    rows_out = [
        ("confluent-kafka consumer, plain Python (1 consumer)", reads["plain"]),
    ]
    for reader in READERS:
        rows_out += [
            (
                f"Spark streaming read, reader={reader}, AvailableNow -> noop",
                reads[f"{reader} query"],
            ),
            (
                "  of which micro-batches (query start-up and stop excluded)",
                reads[f"{reader} batches"],
            ),
        ]
    rows_out.append((f"Spark batch write, df.write ({args.master})", [write_s]))
    if eos_s is not None:
        rows_out.append((f"Spark batch write, exactlyOnce=true ({args.master})", [eos_s]))
    width = max(len(name) for name, _ in rows_out)
    print(f"{'':{width}}  {'seconds':>8}  {'records/s, median (min-max)':>32}  {'MB/s':>6}")
    for name, seconds in rows_out:
        mid = statistics.median(seconds)
        rates = f"{args.records / mid:,.0f} ({args.records / max(seconds):,.0f}-"
        rates += f"{args.records / min(seconds):,.0f})"
        print(f"{name:{width}}  {mid:8.2f}  {rates:>32}  {size_mb / mid:6.1f}")
    plain = statistics.median(reads["plain"])
    for what in ("query", "batches"):
        batches = statistics.median(reads[f"batches {what}"])
        consumer = statistics.median(reads[f"consumer {what}"])
        print(
            f"reader=batches against reader=consumer ({what}): {consumer / batches:.2f}x; "
            f"against the plain consumer: {plain / batches:.2f}x"
        )
    command = shlex.join(["python", *sys.argv])
    if args.json:
        report = {
            "command": command,
            "records": args.records,
            "record_bytes": args.record_bytes,
            "partitions": args.partitions,
            "master": args.master,
            "rounds": args.rounds,
            "seconds": {name: seconds for name, seconds in rows_out},
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"command: {command}")


if __name__ == "__main__":
    main()
