"""The console's message search against a plain consumer, and its page times.

    .venv/bin/python bench/console_search.py [--records 300000] [--record-bytes 100]
        [--partitions 3] [--rounds 3]

One broker (fsync durability) holds a topic of `--records` random values with one record
carrying "strom-needle" at the end. Each round, alternating, (A) the console searches
the whole topic for it (the request the page's script makes, then polling until done),
and (B) a confluent-kafka consumer in this process reads every record and runs the same
case-insensitive search on key and value: the floor for a Python client of librdkafka.
Both read with librdkafka's default fetch settings. Then every page is fetched 20 times.
It prints records/s of each, the ratio A/B, and each page's median and worst time.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from produce_consume import create_topic, free_port, log, produce, start_strom, stop

NEEDLE = b"strom-needle"


def start_console(bootstrap: str, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log_path = root / "console.log"
    with log_path.open("wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "strom",
                "console",
                "-b",
                bootstrap,
                "--listen",
                f"127.0.0.1:{port}",
            ],
            stderr=out,
        )
    deadline = time.monotonic() + 30
    while b"strom console on" not in log_path.read_bytes():
        if time.monotonic() > deadline or process.poll() is not None:
            raise SystemExit(f"the console did not start: {log_path.read_text()}")
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{port}"


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as answer:
        return bytes(answer.read())


def console_search(url: str, topic: str, records: int) -> float:
    started = time.perf_counter()
    query = f"start=earliest&search={NEEDLE.decode()}&scan={records + 10}&limit=1000"
    found = json.loads(get(f"{url}/topics/{topic}/search?{query}"))
    while True:
        page = get(url + found["url"])
        if b'data-state="done"' in page:
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    if b"1 found" not in page:
        raise SystemExit(f"the console did not find the needle: {page[:400]!r}")
    return elapsed


def client_search(bootstrap: str, topic: str, partitions: int, ends: dict[int, int]) -> float:
    pattern = re.compile(re.escape(NEEDLE.decode()), re.IGNORECASE)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    open_partitions, found = set(range(partitions)), 0
    while open_partitions:
        for message in consumer.consume(500, 1.0):
            if message.error() is not None:
                open_partitions.discard(message.partition())
                continue
            for data in (message.key(), message.value()):
                if data is not None and pattern.search(data.decode("utf-8", errors="replace")):
                    found += 1
            if message.offset() + 1 >= ends[message.partition()]:
                open_partitions.discard(message.partition())
    elapsed = time.perf_counter() - started
    consumer.close()
    if found != 1:
        raise SystemExit(f"the client found {found} needles")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    broker = start_strom("fsync")
    console = None
    try:
        topic = "searched"
        create_topic(broker.bootstrap, topic, args.partitions, 1)
        produce(broker.bootstrap, topic, args.records, args.record_bytes)
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        producer.produce(topic, key=b"k", value=b"... " + NEEDLE + b" ...", partition=0)
        producer.flush(30)
        probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe"})
        ends = {
            p: probe.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(args.partitions)
        }
        probe.close()
        total = sum(ends.values())
        console, url = start_console(broker.bootstrap, broker.data_dir)
        timings: dict[str, list[float]] = {"console": [], "client": []}
        for round_ in range(args.rounds):
            timings["console"].append(console_search(url, topic, total))
            timings["client"].append(client_search(broker.bootstrap, topic, args.partitions, ends))
            log(
                f"round {round_ + 1}: console {total / timings['console'][-1]:,.0f} rec/s, "
                f"client {total / timings['client'][-1]:,.0f} rec/s"
            )
        rates = {k: [total / s for s in v] for k, v in timings.items()}
        print(
            f"\n{total:,} records of {args.record_bytes} B in {args.partitions} partitions, "
            f"{args.rounds} rounds"
        )
        for name, values in rates.items():
            print(
                f"{name:8} median {statistics.median(values):>10,.0f} rec/s  "
                f"(min {min(values):,.0f}, max {max(values):,.0f})"
            )
        ratio = statistics.median(rates["console"]) / statistics.median(rates["client"])
        print(f"console / client: {ratio:.2f}")
        print("\npage          median ms   worst ms")
        for page in ("/", "/topics", f"/topics/{topic}", f"/topics/{topic}/messages", "/groups"):
            times = []
            for _ in range(20):
                started = time.perf_counter()
                get(url + page)
                times.append((time.perf_counter() - started) * 1000)
            print(f"{page:22} {statistics.median(times):>8.1f} {max(times):>10.1f}")
    finally:
        if console is not None:
            console.terminate()
            console.wait(10)
        stop(broker)


if __name__ == "__main__":
    main()
