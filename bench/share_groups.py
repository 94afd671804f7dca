"""Share-group (queue) speed: records/s through 1, 3 and 10 share consumers on one
partition, and how long an acknowledgement takes to be durable.

    .venv/bin/python bench/share_groups.py [--bootstrap HOST:PORT] [--records 100000]
        [--size 100] [--consumers 1,3,10] [--rounds 3] [--acks 300] [--json FILE]

throughput: a topic with one partition holds `--records` records of `--size` bytes; a
fresh share group (share.auto.offset.reset=earliest, set as a group config before anyone
joins) with `--consumers` confluent-kafka ShareConsumers, each polling in its own thread
with implicit acknowledgement, reads until every record was delivered once and
acknowledged. The figure is distinct records per second from the first record's arrival
until the last one's; the time from the first subscribe to the first record (joining the
group: its first heartbeat initializes the share-partition; Kafka assigns it at the next
heartbeat, an interval later, strom in the same answer) is given apart, and so is how
many records were delivered more than once (a redelivery means a lock ran out or a
consumer's acknowledgement was refused: none is expected).
Each consumer count is measured `--rounds` times, the counts taking turns, each round
with a fresh group on the same topic.

ack latency: one ShareConsumer in explicit mode polls, accepts every record of the poll,
and times `commit_sync()` (a ShareAcknowledge answered once the share-partition's state
is written to `__share_group_state` and fsynced), `--acks` times; p50, p99 and max.

A warm-up group reads 1,000 records first, unmeasured: the first share group makes the
broker create `__share_group_state`. Without --bootstrap the script starts strom itself
(fsync before every acknowledgement, the default) as bench/produce_consume.py does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from typing import Any

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from produce_consume import admin, create_topic, log, start_strom, stop

POLL_TIMEOUT_S = 0.5
STALL_LIMIT_S = 60.0


def fill(bootstrap: str, topic: str, records: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    payload = b"x" * size
    for i in range(records):
        while True:
            try:
                producer.produce(topic, payload, key=str(i).encode(), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(60) != 0:
        raise SystemExit("the producer could not deliver every record")


def earliest_group(bootstrap: str) -> str:
    group = f"share-bench-{uuid.uuid4().hex[:8]}"
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    client = admin(bootstrap)  # kept until the answer is in: librdkafka drops it otherwise
    for future in client.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    return group


def share_consumer(bootstrap: str, group: str, explicit: bool = False) -> ShareConsumer:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
    if explicit:
        config["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(config)


def bench_throughput(bootstrap: str, topic: str, records: int, consumers: int) -> dict[str, Any]:
    group = earliest_group(bootstrap)
    seen: set[int] = set()
    deliveries = [0]
    first_at = [0.0]
    last_at = [0.0]
    lock = threading.Lock()
    done = threading.Event()
    errors: list[str] = []

    def run() -> None:
        consumer = share_consumer(bootstrap, group)
        try:
            consumer.subscribe([topic])
            while not done.is_set():
                for message in consumer.poll(POLL_TIMEOUT_S):
                    if message.error() is not None:
                        errors.append(str(message.error()))
                        continue
                    with lock:
                        deliveries[0] += 1
                        seen.add(message.offset())
                        last_at[0] = time.perf_counter()
                        first_at[0] = first_at[0] or last_at[0]
                        if len(seen) >= records:
                            done.set()
            consumer.commit_sync()  # the last poll's records, accepted
        finally:
            consumer.close()

    began = time.perf_counter()
    threads = [threading.Thread(target=run, daemon=True) for _ in range(consumers)]
    for thread in threads:
        thread.start()
    progress = (0, began)
    while not done.wait(1.0):
        with lock:
            count = len(seen)
        if count != progress[0]:
            progress = (count, time.perf_counter())
        elif time.perf_counter() - progress[1] > STALL_LIMIT_S:
            done.set()
            raise SystemExit(f"{consumers} consumers stalled at {count} of {records} records")
    for thread in threads:
        thread.join(30)
    elapsed = last_at[0] - first_at[0]
    return {
        "consumers": consumers,
        "records_per_s": records / elapsed,
        "seconds": elapsed,
        "first_record_s": first_at[0] - began,
        "redelivered": deliveries[0] - len(seen),
        "errors": errors[:5],
    }


def bench_ack_latency(bootstrap: str, topic: str, acks: int) -> dict[str, Any]:
    group = earliest_group(bootstrap)
    consumer = share_consumer(bootstrap, group, explicit=True)
    latencies: list[float] = []
    try:
        consumer.subscribe([topic])
        deadline = time.perf_counter() + STALL_LIMIT_S
        while len(latencies) < acks and time.perf_counter() < deadline:
            messages = [m for m in consumer.poll(POLL_TIMEOUT_S) if m.error() is None]
            if not messages:
                continue
            for message in messages:
                consumer.acknowledge(message)
            began = time.perf_counter()
            consumer.commit_sync()
            latencies.append((time.perf_counter() - began) * 1000)
    finally:
        consumer.close()
    if not latencies:
        raise SystemExit("no acknowledgement was timed: the consumer received nothing")
    latencies.sort()
    return {
        "commits": len(latencies),
        "p50_ms": latencies[len(latencies) // 2],
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "max_ms": latencies[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--consumers", default="1,3,10")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--acks", type=int, default=300)
    parser.add_argument("--json")
    args = parser.parse_args()
    counts = [int(c) for c in args.consumers.split(",")]
    broker = None if args.bootstrap else start_strom("fsync")
    bootstrap = args.bootstrap or (broker.bootstrap if broker else "")
    try:
        topic = f"share-bench-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, topic, 1, 1)
        fill(bootstrap, topic, args.records, args.size)
        log(f"{args.records} records of {args.size} bytes in {topic}")
        # Warm-up, not measured: the first share group makes the broker create
        # __share_group_state (50 partitions), which would count against round 1.
        warm = f"share-warm-{uuid.uuid4().hex[:6]}"
        create_topic(bootstrap, warm, 1, 1)
        fill(bootstrap, warm, 1000, args.size)
        bench_throughput(bootstrap, warm, 1000, 1)
        rounds: dict[int, list[dict[str, Any]]] = {c: [] for c in counts}
        for round_no in range(args.rounds):
            for i in range(len(counts)):
                count = counts[(round_no + i) % len(counts)]
                result = bench_throughput(bootstrap, topic, args.records, count)
                log(f"round {round_no + 1}: {count} consumers: {result}")
                rounds[count].append(result)
        latency = bench_ack_latency(bootstrap, topic, args.acks)
        log(f"ack latency: {latency}")
    finally:
        if broker is not None:
            stop(broker)
    print("| consumers | records/s (median) | spread | first record after (s) | redelivered |")
    print("|---|---|---|---|---|")
    for count, results in rounds.items():
        rates = [r["records_per_s"] for r in results]
        first = statistics.median(r["first_record_s"] for r in results)
        print(
            f"| {count} | {statistics.median(rates):,.0f} | {min(rates):,.0f}-{max(rates):,.0f}"
            f" | {first:.1f} | {sum(r['redelivered'] for r in results)} |"
        )
    print(
        f"\nacknowledgement (commit_sync, explicit mode, {latency['commits']} commits): "
        f"p50 {latency['p50_ms']:.2f} ms, p99 {latency['p99_ms']:.2f} ms, "
        f"max {latency['max_ms']:.2f} ms"
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"throughput": rounds, "ack_latency": latency}, out, indent=2)


if __name__ == "__main__":
    main()
