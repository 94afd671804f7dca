"""Consumer-group speed: offset commits per second, and how long a rebalance stops a group.

    .venv/bin/python bench/groups.py [--bootstrap HOST:PORT] [--committers 100]
        [--commit-seconds 10] [--members 10] [--heartbeat-ms 1000] [--rounds 3] [--json FILE]

commits: `--committers` confluent-kafka consumers, each in its own thread with its own
partition, commit synchronously in a loop into one group for `--commit-seconds`; the
figure is commits acknowledged per second (each one fsynced by the broker first) with
latency percentiles.

rebalance: `--members` consumers share a topic with two partitions per member while a
producer writes to every partition; one more member subscribes, and the figure is the
time from its subscribe until every member (the new one included) holds its final
partitions and has received a record from them again. Measured with the classic
protocol's eager `range` assignor and its `cooperative-sticky` one, and with the consumer
protocol of KIP-848 (`group.protocol=consumer`, the broker's `uniform` assignor). Members
heartbeat every `--heartbeat-ms`, which bounds how fast they learn that a rebalance
started: the classic members by their own config, the KIP-848 members by the broker's
`group.consumer.heartbeat.interval.ms` (the strom this script starts is given the same
interval; a broker named by --bootstrap keeps its own).

Without --bootstrap the script starts strom itself (fsync before every acknowledgement,
the default) as bench/produce_consume.py does. The rebalance is measured `--rounds` times
per protocol, the three taking turns (each round starts with the next one), each with a
fresh group and topic on the same broker; the table gives the median and the spread.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from produce_consume import Broker, busy_pct, cpu_s, create_topic, log, start_strom, stop


@dataclass
class MemberState:
    consumer: Consumer
    assigned_at: float = 0.0
    owned: set[int] = field(default_factory=set)
    last_record_at: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    revocations: int = 0
    """How many times the member gave up partitions (rebalance callbacks)."""
    on_record: Callable[[int], None] | None = None
    """Called with the partition of each record received (bench/group_migration.py)."""


def bench_commits(
    bootstrap: str, committers: int, seconds: float, pid: int | None
) -> dict[str, Any]:
    topic = f"commits-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, committers, 1)
    group = f"commit-bench-{uuid.uuid4().hex[:6]}"
    latencies: list[list[float]] = [[] for _ in range(committers)]
    errors: list[str] = []
    consumers = [
        Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
        for _ in range(committers)
    ]
    for i, consumer in enumerate(consumers):  # connect and find the coordinator first
        consumer.commit(offsets=[TopicPartition(topic, i, 0)], asynchronous=False)
    start = threading.Barrier(committers + 1)
    deadline = [0.0]

    def run(i: int) -> None:
        consumer = consumers[i]
        offset = 1
        start.wait()
        while time.perf_counter() < deadline[0]:
            began = time.perf_counter()
            try:
                consumer.commit(offsets=[TopicPartition(topic, i, offset)], asynchronous=False)
            except KafkaException as exc:
                errors.append(str(exc))
                return
            latencies[i].append(time.perf_counter() - began)
            offset += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(committers)]
    for thread in threads:
        thread.start()
    cpu_before = cpu_s(pid)
    began = time.perf_counter()
    deadline[0] = began + seconds
    start.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    cpu = busy_pct(cpu_before, cpu_s(pid), elapsed)
    for consumer in consumers:
        consumer.close()
    if errors:
        raise SystemExit(f"commits failed: {errors[:3]}")
    flat = sorted(x for each in latencies for x in each)
    return {
        "committers": committers,
        "commits": len(flat),
        "seconds": elapsed,
        "commits_per_s": len(flat) / elapsed,
        "p50_ms": statistics.median(flat) * 1000,
        "p99_ms": flat[int(len(flat) * 0.99)] * 1000,
        "broker_cpu_pct": cpu,
    }


CONSUMER_PROTOCOL = "consumer protocol (KIP-848)"
"""The `strategy` that runs the members with group.protocol=consumer."""


def new_member(
    bootstrap: str, topic: str, group: str, strategy: str, heartbeat_ms: int
) -> MemberState:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "latest",
        "enable.auto.commit": True,
        "log_level": 0,
    }
    if strategy == CONSUMER_PROTOCOL:  # the broker assigns and sets the heartbeat
        config["group.protocol"] = "consumer"
    else:
        config |= {
            "partition.assignment.strategy": strategy,
            "heartbeat.interval.ms": heartbeat_ms,
            "session.timeout.ms": 10000,
        }
    return MemberState(Consumer(config))


def run_member(state: MemberState, topic: str, incremental: bool) -> None:
    def assigned(_c: Consumer, partitions: list[TopicPartition]) -> None:
        got = {p.partition for p in partitions}
        state.owned = state.owned | got if incremental else got
        state.assigned_at = time.perf_counter()

    def revoked(_c: Consumer, partitions: list[TopicPartition]) -> None:
        state.owned = state.owned - {p.partition for p in partitions}
        state.assigned_at = time.perf_counter()
        state.revocations += bool(partitions)

    state.consumer.subscribe([topic], on_assign=assigned, on_revoke=revoked)
    while not state.stop.is_set():
        message = state.consumer.poll(0.05)
        if message is not None and not message.error():
            state.last_record_at = time.perf_counter()
            partition = message.partition()
            if state.on_record is not None and partition is not None:
                state.on_record(partition)
    state.consumer.close()


def all_consuming(states: Sequence[MemberState], partitions: int, since: float) -> bool:
    """Every member "consumes again": together they own every partition once, evenly
    (sizes differ by one at most), and each has received a record after its last
    assignment change and after `since`."""
    owned = [s.owned for s in states]
    union = set().union(*owned)
    sizes = [len(o) for o in owned]
    return (
        union == set(range(partitions))
        and sum(sizes) == len(union)
        and max(sizes) - min(sizes) <= 1
        and all(s.last_record_at > max(s.assigned_at, since) for s in states)
    )


def keep_producing(
    bootstrap: str,
    topic: str,
    partitions: int,
    producing: threading.Event,
    backlog: dict[str, int] | None = None,
) -> None:
    """One record to every partition about every 5 ms while `producing` is set. When the
    client's queue is full (the broker is behind) it waits for it to drain rather than
    stop; `backlog` gets the most records ever waiting for an acknowledgement ("max") and
    how often the queue was full ("full")."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1, "log_level": 0})
    while producing.is_set():
        for p in range(partitions):
            try:
                producer.produce(topic, b"x", partition=p)
            except BufferError:
                if backlog is not None:
                    backlog["full"] = backlog.get("full", 0) + 1
                producer.poll(0.1)
        producer.poll(0)
        if backlog is not None:
            backlog["max"] = max(backlog.get("max", 0), len(producer))
        time.sleep(0.005)
    producer.purge()  # what the broker has not acknowledged yet is not needed
    producer.flush(1)


def bench_rebalance(
    bootstrap: str, members: int, strategy: str, heartbeat_ms: int
) -> dict[str, Any]:
    partitions = 2 * (members + 1)
    topic = f"rebalance-{uuid.uuid4().hex[:6]}"
    group = f"rebalance-bench-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, partitions, 1)
    incremental = strategy in ("cooperative-sticky", CONSUMER_PROTOCOL)
    producing = threading.Event()
    producing.set()
    states = [new_member(bootstrap, topic, group, strategy, heartbeat_ms) for _ in range(members)]
    threads = [threading.Thread(target=run_member, args=(s, topic, incremental)) for s in states]
    producer_thread = threading.Thread(
        target=keep_producing, args=(bootstrap, topic, partitions, producing)
    )
    producer_thread.start()
    for thread in threads:
        thread.start()

    try:
        wait(lambda: all_consuming(states, partitions, 0.0), 60, "the first members to settle")
        newcomer = new_member(bootstrap, topic, group, strategy, heartbeat_ms)
        everyone = [*states, newcomer]
        joined_at = time.perf_counter()
        threads.append(threading.Thread(target=run_member, args=(newcomer, topic, incremental)))
        threads[-1].start()
        wait(
            lambda: all_consuming(everyone, partitions, joined_at),
            60,
            "the group to consume again",
        )
        elapsed = time.perf_counter() - joined_at
    finally:
        producing.clear()
        for state in [*states, *([newcomer] if "newcomer" in locals() else [])]:
            state.stop.set()
        for thread in threads:
            thread.join(30)
        producer_thread.join(30)
    return {
        "strategy": strategy,
        "members_before": members,
        "heartbeat_ms": heartbeat_ms,
        "seconds_until_all_consume": elapsed,
    }


def heartbeat_settings(heartbeat_ms: int) -> list[str]:
    """The broker settings that give KIP-848 members the classic members' heartbeat
    interval (it is the broker's; Kafka's floor for it is 5 s)."""
    return [
        f"group.consumer.min.heartbeat.interval.ms={min(heartbeat_ms, 5000)}",
        f"group.consumer.heartbeat.interval.ms={heartbeat_ms}",
    ]


def wait(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        if condition():
            return
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap")
    parser.add_argument("--committers", type=int, default=100)
    parser.add_argument("--commit-seconds", type=float, default=10.0)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--heartbeat-ms", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    broker = (
        Broker(args.bootstrap)
        if args.bootstrap
        else start_strom("fsync", heartbeat_settings(args.heartbeat_ms))
    )
    pid = broker.process.pid if broker.process is not None else None
    results: dict[str, Any] = {}
    try:
        log(f"commits: {args.committers} consumers for {args.commit_seconds:g} s")
        results["commits"] = bench_commits(
            broker.bootstrap, args.committers, args.commit_seconds, pid
        )
        results["rebalance"] = []
        strategies = ["range", "cooperative-sticky", CONSUMER_PROTOCOL]
        for round_ in range(args.rounds):
            turn = strategies[round_ % 3 :] + strategies[: round_ % 3]
            for strategy in turn:
                log(f"rebalance {round_ + 1}: {strategy}, one member joining {args.members}")
                results["rebalance"].append(
                    bench_rebalance(broker.bootstrap, args.members, strategy, args.heartbeat_ms)
                )
    finally:
        stop(broker)
    c = results["commits"]
    cpu = f"{c['broker_cpu_pct']:.0f} %" if c["broker_cpu_pct"] is not None else "-"
    print()
    print("| committers | commits/s | p50 ms | p99 ms | broker CPU |")
    print("|---|---|---|---|---|")
    print(
        f"| {c['committers']} | {c['commits_per_s']:,.0f} | {c['p50_ms']:.1f} | "
        f"{c['p99_ms']:.1f} | {cpu} |"
    )
    print()
    print(
        "| protocol and assignor | members before | heartbeat ms | "
        "join -> all consuming, s, median (min-max) | / eager range |"
    )
    print("|---|---|---|---|---|")
    medians: dict[str, float] = {}
    for strategy in dict.fromkeys(r["strategy"] for r in results["rebalance"]):
        times = [
            r["seconds_until_all_consume"]
            for r in results["rebalance"]
            if r["strategy"] == strategy
        ]
        medians[strategy] = statistics.median(times)
        ratio = medians[strategy] / medians["range"] if medians.get("range") else float("nan")
        print(
            f"| {strategy} | {args.members} | {args.heartbeat_ms} | "
            f"{medians[strategy]:.2f} ({min(times):.2f}-{max(times):.2f}) | {ratio:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)


if __name__ == "__main__":
    main()
