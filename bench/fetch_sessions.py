"""Fetch sessions (KIP-227): what a fetcher of many partitions costs the broker with every
fetch naming every partition (no session, as before strom kept sessions) and with an
incremental session, alternating in one run against one broker.

    .venv/bin/python bench/fetch_sessions.py [--partitions 1000] [--rounds 3]
        [--seconds 5] [--records 100000] [--busy 10]

One broker of this tree (fsync durability), two topics of --partitions partitions each,
one never written to. Each round runs both ways of each figure, no session first:

  idle fetch     strom's own client, over a real socket, fetches every partition of the
                 topic never written to, with max_wait 0, back to back for --seconds.
                 No session: session id 0, epoch -1, every partition named each time.
                 Session: one full fetch, then incremental ones naming nothing.
                 Figures: fetches/s, request bytes, and the broker's CPU microseconds
                 per fetch.
  kafka-python   a kafka-python 3 consumer of every partition (enable_incremental_fetch_
                 sessions off, then on, its default) reads --records records that were
                 written to --busy of the partitions; the others stay idle, as in a topic
                 whose traffic is skewed. Figures: records/s and broker CPU microseconds
                 per record.

Prints each figure per round, the medians, and the ratio session / no session.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

import kafka
from confluent_kafka import Producer

from produce_consume import cpu_s, create_topic, log, start_strom, stop
from strom.client import KafkaConnection, codec
from strom.protocol.apis import ApiKey

FETCH_VERSION = 12
TOPIC = "sessions"
IDLE_TOPIC = "idle"


def fetch_body(
    partitions: list[int], session_id: int, epoch: int, forgotten: list[int] | None = None
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 50 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": IDLE_TOPIC,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for p in partitions
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def request_bytes(body: dict[str, Any]) -> int:
    built = codec.build_request(ApiKey.FETCH, FETCH_VERSION, body)
    return len(codec.encode_request(ApiKey.FETCH, FETCH_VERSION, 1, built, client_id="bench"))


async def idle_fetches(bootstrap: str, partitions: int, seconds: float, session: bool) -> int:
    """Fetches answered in `seconds`, each reading every (idle) partition."""
    host, port = bootstrap.rsplit(":", 1)
    connection = await KafkaConnection.connect(host, int(port), client_id="bench")
    everything = list(range(partitions))
    try:
        if session:
            first = await connection.request(
                ApiKey.FETCH, FETCH_VERSION, fetch_body(everything, 0, 0)
            )
            session_id, epoch = int(first.session_id), 1
            assert session_id != 0, "the broker opened no session"
        count = 0
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            body = fetch_body([], session_id, epoch) if session else fetch_body(everything, 0, -1)
            response = await connection.request(ApiKey.FETCH, FETCH_VERSION, body)
            assert response.error_code == 0, response.error_code
            if session:
                epoch += 1
            count += 1
        return count
    finally:
        connection.close()


def fill(bootstrap: str, records: int, busy: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    value = bytes(100)
    for i in range(records):
        producer.produce(TOPIC, value, partition=i % busy)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def kafka_python_read(bootstrap: str, partitions: int, records: int, session: bool) -> float:
    """Seconds for a kafka-python consumer of every partition to read `records`."""
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        enable_incremental_fetch_sessions=session,
    )
    try:
        consumer.assign([kafka.TopicPartition(TOPIC, p) for p in range(partitions)])
        started = time.perf_counter()
        seen = 0
        while seen < records:
            if time.perf_counter() - started > 300:
                raise SystemExit(f"kafka-python read {seen} of {records} in 300 s")
            seen += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
        return time.perf_counter() - started
    finally:
        consumer.close()


def measured(pid: int | None, action: Callable[[], Any]) -> tuple[Any, float]:
    """What `action` returns, and the broker CPU seconds it cost."""
    before = cpu_s(pid)
    result = action()
    after = cpu_s(pid)
    assert before is not None and after is not None
    return result, after - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--busy", type=int, default=10)
    args = parser.parse_args()

    broker = start_strom("fsync")
    pid = broker.process.pid if broker.process is not None else None
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    try:
        create_topic(broker.bootstrap, TOPIC, args.partitions, 1)
        create_topic(broker.bootstrap, IDLE_TOPIC, args.partitions, 1)
        everything = list(range(args.partitions))
        log(
            f"request bytes: no session {request_bytes(fetch_body(everything, 0, -1))}, "
            f"session {request_bytes(fetch_body([], 1, 1))}"
        )
        fill(broker.bootstrap, args.records, args.busy)
        for round_ in range(1, args.rounds + 1):
            for session in (False, True):
                way = "session" if session else "no session"
                fetches, cpu = measured(
                    pid,
                    lambda s=session: asyncio.run(  # type: ignore[misc]
                        idle_fetches(broker.bootstrap, args.partitions, args.seconds, s)
                    ),
                )
                note(f"idle fetches/s, {way}", fetches / args.seconds)
                note(f"broker µs per idle fetch, {way}", cpu / fetches * 1e6)
                took, cpu = measured(
                    pid,
                    lambda s=session: kafka_python_read(  # type: ignore[misc]
                        broker.bootstrap, args.partitions, args.records, s
                    ),
                )
                note(f"kafka-python records/s, {way}", args.records / took)
                note(f"broker µs per record read, {way}", cpu / args.records * 1e6)
                log(
                    f"round {round_} {way}: {fetches / args.seconds:,.0f} idle fetches/s, "
                    f"kafka-python {args.records / took:,.0f} records/s"
                )
    finally:
        stop(broker)

    print(f"\n{args.partitions} partitions, {args.rounds} rounds (median, min-max):")
    for name, values in figures.items():
        low, high = min(values), max(values)
        print(f"  {name:42} {statistics.median(values):>12,.1f}  ({low:,.1f}-{high:,.1f})")
    print("ratios, session / no session (medians):")
    for name in [n for n in figures if n.endswith(", session")]:
        base = name.removesuffix(", session")
        ratio = statistics.median(figures[name]) / statistics.median(figures[f"{base}, no session"])
        print(f"  {base:42} {ratio:>6.2f}x")


if __name__ == "__main__":
    main()
