"""A small pipeline on Spark against strom: page views in, page statistics out.

    examples/spark_pipeline/run [--bootstrap HOST:PORT] [--events 3000]

1. Starts `strom serve` on a free port with a temporary data directory (unless
   --bootstrap names a running broker) and creates the topics `page-views` and
   `page-stats` with the `strom` command.
2. Produces page-view events (`user:{"page": ..., "ms": ...}` lines) with `strom produce`.
3. Runs a streaming query with Trigger.AvailableNow: read `page-views` with the `strom`
   source, parse the JSON, drop robots, count views and average time per page, and write
   the statistics to `page-stats` (key: the page, value: JSON; complete output mode, so
   every micro-batch writes every page's current figures).
4. Produces more events and runs the same query again from its checkpoint: only the new
   events are read; the counts carry on from the state kept in the checkpoint.
5. Shows `page-stats` with `strom consume`; the last record of each key is that page's
   current count.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PAGES = ["/", "/search", "/product", "/cart", "/checkout"]
READY_TIMEOUT_S = 30


def say(message: str) -> None:
    print(f"\n== {message}", flush=True)


def strom(*args: str, stdin: str | None = None) -> str:
    """Run the `strom` command of this environment; its output."""
    result = subprocess.run(
        [sys.executable, "-m", "strom", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"strom {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


@contextmanager
def broker(bootstrap: str | None) -> Iterator[str]:
    """A running broker's address: the given one, or a fresh `strom serve`."""
    if bootstrap:
        yield bootstrap
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data_dir = Path(tempfile.mkdtemp(prefix="strom-example-"))
    address = f"127.0.0.1:{port}"
    command = [sys.executable, "-m", "strom", "serve", "--listen", address]
    command += ["--data-dir", str(data_dir / "data"), "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        ready = process.stdout.readline().strip()  # strom prints one line when it is ready
        if not ready:
            raise SystemExit(f"strom serve exited with {process.wait(READY_TIMEOUT_S)}")
        say(ready)
        yield address
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


def produce_views(bootstrap: str, count: int, rng: random.Random) -> None:
    lines = []
    for _ in range(count):
        user = f"bot-{rng.randrange(3)}" if rng.random() < 0.1 else f"user-{rng.randrange(50)}"
        view = {"page": rng.choice(PAGES), "ms": rng.randrange(50, 3000)}
        lines.append(f"{user}:{json.dumps(view)}")
    strom("produce", "page-views", "-b", bootstrap, "--key-separator", ":", stdin="\n".join(lines))
    say(f"produced {count} page views to page-views")


def run_pipeline(spark: object, bootstrap: str, checkpoint: Path) -> None:
    from pyspark.sql import functions as F

    views = (
        spark.readStream.format("strom")  # type: ignore[attr-defined]
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "page-views")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "2000")
        .load()
    )
    parsed = views.select(
        F.col("key").cast("string").alias("user"),
        F.from_json(F.col("value").cast("string"), "page string, ms int").alias("view"),
    )
    stats = (
        parsed.where(~F.col("user").startswith("bot-"))
        .groupBy(F.col("view.page").alias("page"))
        .agg(F.count("*").alias("views"), F.round(F.avg("view.ms"), 1).alias("avg_ms"))
    )
    records = stats.select(
        F.col("page").alias("key"), F.to_json(F.struct("page", "views", "avg_ms")).alias("value")
    )
    query = (
        records.writeStream.format("strom")
        .outputMode("complete")  # Spark offers Python sinks append and complete, not update
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", "page-stats")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in batches)
    say(f"streaming query done: {rows} page views read in {len(batches)} micro-batch(es)")


def spark_session() -> object:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # everything here is on loopback
    import strom.spark

    return strom.spark.local_session("strom-example")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", help="use this broker instead of starting strom")
    parser.add_argument("--events", type=int, default=3000, help="page views per round")
    args = parser.parse_args()
    rng = random.Random(7)
    work = Path(tempfile.mkdtemp(prefix="strom-example-spark-"))
    started = time.monotonic()
    try:
        with broker(args.bootstrap) as bootstrap:
            for topic, partitions in (("page-views", "3"), ("page-stats", "1")):
                strom(
                    "topic", "create", topic, "-p", partitions, "--if-not-exists", "-b", bootstrap
                )
            say("topics: page-views (3 partitions), page-stats (1 partition)")
            produce_views(bootstrap, args.events, rng)
            say("starting Spark (local[2])")
            spark = spark_session()
            run_pipeline(spark, bootstrap, work / "checkpoint")
            produce_views(bootstrap, args.events // 3, rng)
            say("the same query again, from its checkpoint: only the new views are read")
            run_pipeline(spark, bootstrap, work / "checkpoint")
            spark.stop()  # type: ignore[attr-defined]
            say(f"strom consume page-stats --from-beginning --print-key -b {bootstrap}")
            output = strom(
                "consume", "page-stats", "--from-beginning", "--print-key",
                "--timeout-ms", "2000", "-b", bootstrap,
            )  # fmt: skip
            print(output, end="")
            latest = {}
            for line in output.splitlines():
                key, _, value = line.partition("\t")
                latest[key] = json.loads(value)
            say("current statistics (the last record of each page):")
            for page in sorted(latest):
                print(f"{page:10} {latest[page]['views']:6} views  {latest[page]['avg_ms']:8} ms")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"done in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
