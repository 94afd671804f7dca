"""What transactions cost on strom: transactional against idempotent produce, and
read_committed against read_uncommitted consume, on the same broker in the same run.

    .venv/bin/python bench/transactions.py [--records 200000] [--rounds 3]
        [--partitions 1,10] [--txn-records 100,1000,10000] [--commits 300]
        [--bootstrap HOST:PORT] [--durability fsync|os] [--json FILE]

Without `--bootstrap`, one `strom serve` child process (strom.testing.StromCluster with
processes=True and in_memory=False: data on disk; `--durability fsync`, the default,
fsyncs before acknowledging, as strom does by default; `--durability os` leaves flushing
to the operating system, `log.flush.interval.messages` at Kafka's default, the setting a
Kafka broker runs with); with it, any Kafka-compatible broker (fresh topics are created there,
replication factor 1). Per partition count, a fresh topic per figure, confluent-kafka
with acks=all, linger.ms=5 and 100-byte values.
Each round runs, in alternating order (A B A B):

  idempotent      produce `--records` with enable.idempotence (the baseline)
  txn/N           produce `--records` transactionally, committing every N records
  consume ru      read the first txn/N topic back with isolation.level=read_uncommitted
  consume rc      the same with isolation.level=read_committed
  commit latency  `--commits` transactions of one record each: begin, produce, commit;
                  p50 and p99 of the time commit_transaction() takes

Figures are each measurement's median and spread (min-max) over the rounds, and the
ratio of the medians to the baseline. The first round is a warm-up and is not counted.
The last line printed is the exact command.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from strom.testing import StromCluster

VALUE_BYTES = 100
TIMEOUT_S = 60.0
STALL_LIMIT_S = 30.0
NO_FSYNC = 9_223_372_036_854_775_807
"""Kafka's default `log.flush.interval.messages`: the operating system flushes."""


def producer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "linger.ms": 5,
        "batch.size": 1_048_576,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_097_151,
        "log_level": 0,
        **extra,
    }


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1)], operation_timeout=10)
    futures[name].result(timeout=TIMEOUT_S)


def produce(bootstrap: str, topic: str, records: int, per_txn: int | None) -> float:
    """Seconds to write `records` values, acknowledged (and committed, per transaction)."""
    extra: dict[str, Any] = {"enable.idempotence": True}
    if per_txn is not None:
        extra["transactional.id"] = "bench-" + secrets.token_hex(4)
    producer = Producer(producer_config(bootstrap, **extra))
    value = os.urandom(VALUE_BYTES)
    if per_txn is not None:
        producer.init_transactions(TIMEOUT_S)
    started = time.perf_counter()
    written = 0
    while written < records:
        chunk = min(per_txn or records, records - written)
        if per_txn is not None:
            producer.begin_transaction()
        for _ in range(chunk):
            while True:
                try:
                    producer.produce(topic, value)
                    break
                except BufferError:
                    producer.poll(0.001)
        written += chunk
        if per_txn is not None:
            producer.commit_transaction(TIMEOUT_S)
    while producer.flush(1.0):
        pass
    return time.perf_counter() - started


def consume(bootstrap: str, topic: str, partitions: int, records: int, isolation: str) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-" + secrets.token_hex(4),
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "log_level": 0,
        }
    )
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    count = 0
    last_progress = started
    while count < records:
        batch = consumer.consume(10_000, 1.0)
        count += sum(1 for m in batch if m.error() is None)
        now = time.perf_counter()
        if batch:
            last_progress = now
        elif now - last_progress > STALL_LIMIT_S:
            raise SystemExit(f"{isolation} consumer stalled at {count} of {records}")
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def commit_latencies(bootstrap: str, topic: str, partitions: int, commits: int) -> list[float]:
    producer = Producer(
        producer_config(bootstrap, **{"transactional.id": "lat-" + secrets.token_hex(4)})
    )
    producer.init_transactions(TIMEOUT_S)
    value = os.urandom(VALUE_BYTES)
    latencies = []
    for i in range(commits):
        producer.begin_transaction()
        producer.produce(topic, value, partition=i % partitions)
        began = time.perf_counter()
        producer.commit_transaction(TIMEOUT_S)
        latencies.append(1000 * (time.perf_counter() - began))
    return latencies


def one_round(
    bootstrap: str, args: argparse.Namespace, partitions: int, flip: bool
) -> dict[str, float]:
    figures: dict[str, float] = {}
    kinds: list[int | None] = [None, *args.txn_records]
    if flip:
        kinds.reverse()
    topics = {}
    for per_txn in kinds:
        name = "idempotent" if per_txn is None else f"txn/{per_txn}"
        topic = f"bench-{name.replace('/', '-')}-{secrets.token_hex(3)}"
        create_topic(bootstrap, topic, partitions)
        figures[name] = args.records / produce(bootstrap, topic, args.records, per_txn)
        topics[name] = topic
    read_from = topics[f"txn/{args.txn_records[0]}"]
    isolations = ["read_uncommitted", "read_committed"]
    if flip:
        isolations.reverse()
    for isolation in isolations:
        label = "consume ru" if isolation == "read_uncommitted" else "consume rc"
        elapsed = consume(bootstrap, read_from, partitions, args.records, isolation)
        figures[label] = args.records / elapsed
    latencies = sorted(commit_latencies(bootstrap, read_from, partitions, args.commits))
    figures["commit p50 ms"] = latencies[len(latencies) // 2]
    figures["commit p99 ms"] = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    return figures


def report(partitions: int, rounds: list[dict[str, float]]) -> dict[str, float]:
    names = list(rounds[0])
    medians = {n: statistics.median(r[n] for r in rounds) for n in names}
    print(f"\n{partitions} partition(s)")
    print(f"{'figure':<16}{'median':>12}{'spread':>24}{'ratio':>8}")
    for name in names:
        samples = [r[name] for r in rounds]
        if name.startswith("consume"):
            base: float | None = medians["consume ru"]
        elif name.startswith("commit"):
            base = None
        else:
            base = medians["idempotent"]
        ratio = f"{medians[name] / base:.2f}" if base else ""
        spread = f"{min(samples):,.1f}-{max(samples):,.1f}"
        print(f"{name:<16}{medians[name]:>12,.1f}{spread:>24}{ratio:>8}")
    return medians


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, object]:
    results: dict[str, object] = {}
    for partitions in args.partitions:
        rounds: list[dict[str, float]] = []
        for i in range(args.rounds + 1):
            figures = one_round(bootstrap, args, partitions, flip=i % 2 == 1)
            label = " (warm-up)" if i == 0 else ""
            print(f"{partitions}p round {i}{label}: {figures}", flush=True)
            if i > 0:
                rounds.append(figures)
        results[str(partitions)] = {"rounds": rounds, "medians": report(partitions, rounds)}
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--txn-records",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[100, 1000, 10000],
    )
    parser.add_argument(
        "--partitions", type=lambda text: [int(x) for x in text.split(",")], default=[1, 10]
    )
    parser.add_argument("--bootstrap", help="a running Kafka-compatible broker to measure")
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--durability", choices=["fsync", "os"], default="fsync")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    if args.bootstrap:
        results = run(args.bootstrap, args)
    else:
        config = {} if args.durability == "fsync" else {"log.flush.interval.messages": NO_FSYNC}
        with StromCluster(processes=True, in_memory=False, config=config) as cluster:
            results = run(cluster.bootstrap_servers, args)
    print("records/s except the commit latencies (ms); ratio to idempotent produce or ru consume")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print("command: .venv/bin/python bench/transactions.py " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
