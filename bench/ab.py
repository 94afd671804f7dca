"""One harness for every broker: two brokers, A and B, alternating A B A B with a fresh
broker and fresh topics each round, the same clients and settings for both; prints each
figure's median and spread and the ratio B/A.

    .venv/bin/python bench/ab.py --a strom:fsync --b strom:interval [--rounds 3]
        [--figures produce,consume,kafka-python,latency,startup] [--partitions 1,8]
        [--records 500000] [--record-bytes 100] [--latency-rates 5000,20000,50000]
        [--connections 4000]

A broker is one of:
  strom:fsync | strom:interval   `python -m strom serve` of this tree, flushing every record
                                 before acknowledging it, or once a second
  command:CMD                    any broker started by a shell command, fresh each round:
                                 {port} is replaced by a free port and {dir} by an empty
                                 data directory, e.g. another strom version with
                                 "command:PYTHONPATH=/tmp/old/src python -m strom serve
                                 --listen 127.0.0.1:{port} --data-dir {dir}", or a Kafka
                                 built locally (its own start script and a config using
                                 {port} and {dir})
  bootstrap:HOST:PORT            a broker already running (not fresh; topics still are)

Figures, per round and broker:
  produce, consume     confluent-kafka records/s (produce_consume.py's clients: acks=all,
                       1 MB batches; one assigned consumer without librdkafka's 1 s queue
                       backoff, then one with librdkafka's defaults), for each --partitions
                       count; and the broker's CPU microseconds per record (started here)
  kafka-python         kafka-python producer (acks=all) and consumer records/s, 1 partition
  latency              p50, p99 and p99.9 from produce() to its delivery report, for 1 KiB
                       records sent at each fixed rate for --latency-seconds (acks=all,
                       librdkafka's defaults otherwise)
  connections          new connections a second (--connections of them from 4 threads:
                       connect, ApiVersions v0, close)
  startup              spawn until a metadata request answers, spawn until the first
                       acknowledged write, and peak resident memory (started brokers only)
"""

from __future__ import annotations

import argparse
import os
import secrets
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException, Producer
from kio.schema.api_versions.v0.request import ApiVersionsRequest as ApiVersionsRequestV0

from produce_consume import (
    Broker,
    admin,
    consume,
    cpu_s,
    create_topic,
    free_port,
    log,
    memory_mb,
    produce,
    start_strom,
    stop,
)
from strom.protocol.codec import encode_request

STARTUP_LIMIT_S = 120.0
Figures = dict[str, float]


@dataclass(frozen=True, slots=True)
class Started:
    broker: Broker
    spawned_at: float
    group: bool = False
    """The process leads its own process group (a shell command): stop the whole group."""


def start(spec: str) -> Started:
    kind, _, rest = spec.partition(":")
    spawned_at = time.perf_counter()
    if kind == "strom":
        return Started(start_strom(rest), spawned_at)
    if kind == "bootstrap":
        return Started(Broker(rest), spawned_at)
    if kind == "command":
        data_dir = Path(tempfile.mkdtemp(prefix="ab-broker-"))
        port = free_port()
        command = rest.replace("{port}", str(port)).replace("{dir}", str(data_dir / "data"))
        with (data_dir / "broker.log").open("wb") as out:
            process = subprocess.Popen(
                command, shell=True, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        bootstrap = f"127.0.0.1:{port}"
        wait_answering(bootstrap, process, data_dir)
        startup_ms = (time.perf_counter() - spawned_at) * 1000
        broker = Broker(bootstrap, process, data_dir, startup_ms, None)
        return Started(broker, spawned_at, group=True)
    raise SystemExit(f"unknown broker {spec!r}: use strom:DURABILITY, command:CMD or bootstrap:")


def wait_answering(bootstrap: str, process: subprocess.Popen[bytes], data_dir: Path) -> None:
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.perf_counter() + STARTUP_LIMIT_S
    client = None
    while time.perf_counter() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the broker exited: {(data_dir / 'broker.log').read_text()[-2000:]}")
        try:
            socket.create_connection((host, int(port)), timeout=0.5).close()
            client = client or admin(bootstrap, {"reconnect.backoff.ms": 10})
            client.list_topics(timeout=1)
            return
        except (OSError, KafkaException):
            time.sleep(0.01)
    raise SystemExit(f"the broker did not answer within {STARTUP_LIMIT_S:g} s")


def finish(started: Started) -> None:
    process = started.broker.process
    if started.group and process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        if started.broker.data_dir is not None:
            shutil.rmtree(started.broker.data_dir, ignore_errors=True)
        return
    stop(started.broker)


def first_ack_ms(started: Started) -> float:
    """Spawn until the first write to a new topic is acknowledged (acks=all)."""
    topic = f"first-{secrets.token_hex(3)}"
    create_topic(started.broker.bootstrap, topic, 1, 1)
    producer = Producer({"bootstrap.servers": started.broker.bootstrap, "acks": "all"})
    acked: list[float] = []
    producer.produce(topic, b"x", on_delivery=lambda e, _m: acked.append(time.perf_counter()))
    producer.flush(30)
    if not acked:
        raise SystemExit("the first write was not acknowledged within 30 s")
    return (acked[0] - started.spawned_at) * 1000


def throughput(started: Started, args: argparse.Namespace) -> Figures:
    broker = started.broker
    pid = broker.process.pid if broker.process is not None and not started.group else None
    figures: Figures = {}
    for partitions in args.partitions:
        topic = f"ab-{partitions}p-{secrets.token_hex(3)}"
        create_topic(broker.bootstrap, topic, partitions, 1)
        before = cpu_s(pid)
        produce_s = produce(broker.bootstrap, topic, args.records, args.record_bytes)
        middle = cpu_s(pid)
        consume_s = consume(broker.bootstrap, topic, partitions, args.records)
        after = cpu_s(pid)
        defaults_s = consume(
            broker.bootstrap, topic, partitions, args.records, client_defaults=True
        )
        figures[f"produce rec/s, {partitions}p"] = args.records / produce_s
        figures[f"consume rec/s, {partitions}p"] = args.records / consume_s
        figures[f"consume rec/s, {partitions}p, client defaults"] = args.records / defaults_s
        if before is not None and middle is not None and after is not None:
            figures[f"broker CPU µs/rec produce, {partitions}p"] = (
                (middle - before) / args.records * 1e6
            )
            figures[f"broker CPU µs/rec consume, {partitions}p"] = (
                (after - middle) / args.records * 1e6
            )
    return figures


def kafka_python(started: Started, args: argparse.Namespace) -> Figures:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    bootstrap = started.broker.bootstrap
    topic = f"ab-kp-{secrets.token_hex(3)}"
    create_topic(bootstrap, topic, 1, 1)
    records = args.kafka_python_records
    value = os.urandom(args.record_bytes)
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        batch_size=1_048_576,
        max_request_size=2_097_152,
    )
    started_at = time.perf_counter()
    for _ in range(records):
        producer.send(topic, value)
    producer.flush()
    produce_s = time.perf_counter() - started_at
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    started_at = time.perf_counter()
    count = 0
    while count < records:
        for batch in consumer.poll(timeout_ms=1000, max_records=10_000).values():
            count += len(batch)
    consume_s = time.perf_counter() - started_at
    consumer.close()
    return {
        "kafka-python produce rec/s": records / produce_s,
        "kafka-python consume rec/s": records / consume_s,
    }


def latency(started: Started, args: argparse.Namespace) -> Figures:
    figures: Figures = {}
    for rate in args.latency_rates:
        waits = latencies_at(started.broker.bootstrap, rate, args.latency_seconds)
        cuts = statistics.quantiles(waits, n=1000)
        figures[f"latency ms p50 at {rate}/s"] = cuts[499] * 1000
        figures[f"latency ms p99 at {rate}/s"] = cuts[989] * 1000
        figures[f"latency ms p99.9 at {rate}/s"] = cuts[998] * 1000
    return figures


def latencies_at(bootstrap: str, rate: int, seconds: float) -> list[float]:
    """Seconds from produce() to each delivery report, for 1 KiB records sent at `rate`."""
    topic = f"ab-lat-{rate}-{secrets.token_hex(3)}"
    create_topic(bootstrap, topic, 1, 1)
    sent: dict[int, float] = {}
    waits: list[float] = []

    def delivered(error: Any, message: Any) -> None:
        if error is None:
            waits.append(time.perf_counter() - sent.pop(int(message.key())))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "on_delivery": delivered})
    value = os.urandom(1024)
    total = int(rate * seconds)
    began = time.perf_counter()
    for index in range(total):
        due = began + index / rate
        while (now := time.perf_counter()) < due:
            producer.poll(0)
            if due - now > 0.0005:
                time.sleep(0.0002)
        sent[index] = time.perf_counter()
        producer.produce(topic, value, key=str(index).encode())
        producer.poll(0)
    producer.flush(60)
    achieved = total / (time.perf_counter() - began)
    if len(waits) != total:
        raise SystemExit(f"{total - len(waits)} of {total} records were not acknowledged")
    if achieved < 0.95 * rate:
        log(f"sent only {achieved:,.0f} records/s of the {rate:,}/s asked")
    return waits


def startup(started: Started, args: argparse.Namespace) -> Figures:
    broker = started.broker
    if broker.process is None:
        return {}
    figures = {
        "startup ms (metadata answers)": broker.startup_ms or 0.0,
        "startup ms (first acknowledged write)": first_ack_ms(started),
    }
    if not started.group:
        figures["peak RSS MB"] = memory_mb(broker.process.pid)[1]
    return figures


def connections(started: Started, args: argparse.Namespace) -> Figures:
    """New connections a second: --connections of them, from 4 threads, each a TCP
    connect, one ApiVersions request answered, and a close (the broker's accept path,
    connection limits included)."""
    host, _, port_text = started.broker.bootstrap.split(",")[0].rpartition(":")
    request = encode_request(18, 0, 1, ApiVersionsRequestV0())
    count = args.connections
    each = count // 4

    def connect_many() -> None:
        for _ in range(each):
            with socket.create_connection((host, int(port_text)), timeout=30) as sock:
                sock.sendall(request)
                size = int.from_bytes(_read(sock, 4), "big")
                _read(sock, size)

    threads = [threading.Thread(target=connect_many) for _ in range(4)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "new connections/s (connect, ApiVersions, close)": 4 * each / (time.perf_counter() - began)
    }


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise SystemExit("the broker closed a benchmark connection")
        data += chunk
    return data


FIGURES: dict[str, Callable[[Started, argparse.Namespace], Figures]] = {
    "startup": startup,  # first: the first write is part of it
    "connections": connections,
    "produce": throughput,
    "consume": throughput,
    "kafka-python": kafka_python,
    "latency": latency,
}


def one_round(spec: str, args: argparse.Namespace) -> Figures:
    started = start(spec)
    figures: Figures = {}
    try:
        done: set[Callable[..., Figures]] = set()
        for name in FIGURES:
            measure = FIGURES[name]
            if name in args.figures and measure not in done:
                done.add(measure)
                figures |= measure(started, args)
        if "startup" in args.figures and started.broker.process and not started.group:
            figures["peak RSS MB"] = memory_mb(started.broker.process.pid)[1]
    finally:
        finish(started)
    return figures


def numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(__doc__ or "").split("\n\n", 2)[-1],
    )
    parser.add_argument("--a", required=True, metavar="BROKER")
    parser.add_argument("--b", required=True, metavar="BROKER")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--figures",
        type=lambda t: t.split(","),
        default=["startup", "produce", "consume", "kafka-python", "latency"],
    )
    parser.add_argument("--partitions", type=numbers, default=[1, 8])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--kafka-python-records", type=int, default=100_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--latency-rates", type=numbers, default=[5_000, 20_000, 50_000])
    parser.add_argument("--latency-seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=4000)
    args = parser.parse_args()
    unknown = set(args.figures) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figures {sorted(unknown)}: choose from {', '.join(FIGURES)}")
    runs: dict[str, dict[str, list[float]]] = {"A": defaultdict(list), "B": defaultdict(list)}
    for round_ in range(args.rounds):
        for label, spec in (("A", args.a), ("B", args.b)):
            log(f"round {round_ + 1}, {label} ({spec})")
            for name, value in one_round(spec, args).items():
                runs[label][name].append(value)
    print(f"\nA = {args.a}\nB = {args.b}\n{args.rounds} rounds, alternating A B\n")
    names = list(dict.fromkeys([*runs["A"], *runs["B"]]))
    rows = [("figure", "A median (min-max)", "B median (min-max)", "B/A")]
    for name in names:
        cells, medians = [], []
        for label in ("A", "B"):
            values = runs[label].get(name, [])
            median = statistics.median(values) if values else float("nan")
            medians.append(median)
            cells.append(
                f"{median:,.1f} ({min(values):,.1f}-{max(values):,.1f})" if values else "-"
            )
        ratio = medians[1] / medians[0] if medians[0] else float("nan")
        rows.append((name, cells[0], cells[1], f"{ratio:.2f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print(
            f"{row[0]:{widths[0]}}  "
            + "  ".join(f"{c:>{w}}" for c, w in zip(row[1:], widths[1:], strict=True))
        )
    print("\ncommand: " + shlex.join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
