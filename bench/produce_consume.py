"""Produce and consume throughput against strom (started here) or any Kafka-compatible broker.

    .venv/bin/python bench/produce_consume.py [--bootstrap HOST:PORT] [--records 1000000]
        [--record-bytes 100] [--partitions 1,8] [--durability fsync,interval]
        [--profile] [--json FILE]

Without --bootstrap the script starts `python -m strom serve` once per durability setting
(fsync: flush every record; interval: flush once a second) on a free port with a fresh data
directory, and reports its startup time and memory too. With --bootstrap it measures that
broker as it is configured ("external"). Clients are confluent-kafka with large batches.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

DURABILITY_SETTINGS = {
    "fsync": ["log.flush.interval.messages=1"],
    "interval": ["log.flush.interval.messages=9223372036854775807", "log.flush.interval.ms=1000"],
}
STARTUP_LIMIT_S = 30.0
STALL_LIMIT_S = 30.0
MB = 1_000_000
_NO_SETTINGS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Broker:
    bootstrap: str
    process: subprocess.Popen[bytes] | None = None
    data_dir: Path | None = None
    startup_ms: float | None = None
    idle_rss_mb: float | None = None


@dataclass(frozen=True, slots=True)
class Result:
    durability: str
    partitions: int
    records: int
    record_bytes: int
    produce_s: float
    consume_s: float
    startup_ms: float | None
    idle_rss_mb: float | None
    final_rss_mb: float | None
    peak_rss_mb: float | None
    produce_cpu_pct: float | None = None
    consume_cpu_pct: float | None = None

    def rates(self) -> tuple[float, float, float, float]:
        """(produce rec/s, produce MB/s, consume rec/s, consume MB/s)."""
        size_mb = self.records * self.record_bytes / MB
        return (
            self.records / self.produce_s,
            size_mb / self.produce_s,
            self.records / self.consume_s,
            size_mb / self.consume_s,
        )

    def cells(self) -> list[str]:
        """The row of the results table."""
        memory = (self.startup_ms, self.idle_rss_mb, self.final_rss_mb, self.peak_rss_mb)
        cpu = (self.produce_cpu_pct, self.consume_cpu_pct)
        digits = (0, 1, 0, 1, 0, 0, 0, 1, 1, 1)
        values = zip((*self.rates(), *cpu, *memory), digits, strict=True)
        return [self.durability, str(self.partitions), *(number(v, d) for v, d in values)]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cpu_s(pid: int | None) -> float | None:
    """User plus system CPU seconds the broker has used, from /proc (None if not ours)."""
    if pid is None:
        return None
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def busy_pct(before: float | None, after: float | None, elapsed_s: float) -> float | None:
    """Share of one core the broker kept busy while a phase ran."""
    if before is None or after is None:
        return None
    return 100 * (after - before) / elapsed_s


def memory_mb(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MB, from /proc."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) * 1024 / MB
    return fields["VmRSS"], fields["VmHWM"]


def admin(bootstrap: str, extra: dict[str, Any] | None = None) -> AdminClient:
    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "log_level": 0}
    return AdminClient(config | (extra or {}))


def start_strom(
    durability: str,
    extra: list[str] | None = None,
    more_listeners: Sequence[str] = (),
    log_level: str = "warning",
) -> Broker:
    """Start a broker and wait until a TCP connect and a metadata request both succeed;
    `extra` are more KEY=VALUE settings, `more_listeners` listeners (e.g.
    "SSL://localhost:9093", advertised as written) beside the PLAINTEXT one the returned
    bootstrap names. Its output goes to `broker.log` in `Broker.data_dir`, which `stop`
    removes."""
    data_dir = Path(tempfile.mkdtemp(prefix=f"strom-bench-{durability}-"))
    port = free_port()
    command = [sys.executable, "-m", "strom", "serve", "--listen", f"127.0.0.1:{port}"]
    if more_listeners:
        listeners = ",".join([f"PLAINTEXT://127.0.0.1:{port}", *more_listeners])
        command[-2:] = ["--set", f"listeners={listeners}"]
        command += ["--set", f"advertised.listeners={listeners}"]
    command += ["--data-dir", str(data_dir / "data"), "--log-level", log_level]
    for setting in [*DURABILITY_SETTINGS[durability], *(extra or [])]:
        command += ["--set", setting]
    started = time.perf_counter()
    with (data_dir / "broker.log").open("wb") as log_file:
        process = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{port}"
    client = None  # created once the port is open: librdkafka backs off after refusals
    while True:
        if process.poll() is not None:
            output = (data_dir / "broker.log").read_text(errors="replace")
            shutil.rmtree(data_dir, ignore_errors=True)
            raise SystemExit(f"strom exited with {process.returncode}:\n{output}")
        if time.perf_counter() - started > STARTUP_LIMIT_S:
            stop(Broker(bootstrap, process, data_dir))
            raise SystemExit(f"strom did not answer within {STARTUP_LIMIT_S:g} s")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            if client is None:
                client = admin(bootstrap, {"reconnect.backoff.ms": 10})
            client.list_topics(timeout=1)
            break
        except (OSError, KafkaException):
            time.sleep(0.005)
    startup_ms = (time.perf_counter() - started) * 1000
    idle_rss_mb, _ = memory_mb(process.pid)
    log(f"strom ({durability}) pid {process.pid} ready in {startup_ms:.0f} ms")
    return Broker(bootstrap, process, data_dir, startup_ms, idle_rss_mb)


def stop(broker: Broker) -> None:
    if broker.process is not None:
        broker.process.send_signal(signal.SIGTERM)
        try:
            broker.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            log("strom did not stop within 10 s of SIGTERM; killing it")
            broker.process.kill()
            broker.process.wait()
    if broker.data_dir is not None:
        shutil.rmtree(broker.data_dir, ignore_errors=True)


def create_topic(bootstrap: str, name: str, partitions: int, replication: int) -> None:
    client = admin(bootstrap)
    future = client.create_topics([NewTopic(name, partitions, replication)])[name]
    future.result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # wait until every partition has a leader
        topic = client.list_topics(timeout=5).topics.get(name)
        leaders = [p.leader for p in topic.partitions.values()] if topic else []
        if len(leaders) == partitions and min(leaders) >= 0:
            return
        time.sleep(0.05)
    raise SystemExit(f"topic {name} has no leader for every partition after 30 s")


def delete_topic(bootstrap: str, name: str) -> None:
    client = admin(bootstrap)  # referenced until the future completes
    try:
        client.delete_topics([name])[name].result(timeout=30)
    except Exception as exc:  # cleanup only; the numbers are already taken
        log(f"could not delete {name}: {exc}")


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    record_bytes: int,
    client: Mapping[str, Any] = _NO_SETTINGS,
) -> float:
    """Seconds to produce `records` values and have every one acknowledged (acks=all);
    `client`: more librdkafka settings (security.protocol, say)."""
    failures: list[str] = []

    def on_error(error: Any, _message: Any) -> None:
        failures.append(str(error))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "compression.type": "none",
            "linger.ms": 5,
            "batch.size": 1_048_576,
            "batch.num.messages": 1_000_000,
            "message.max.bytes": 2_097_152,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_097_151,
            "delivery.report.only.error": True,
            "on_delivery": on_error,
            "log_level": 0,
            **client,
        }
    )
    pool = os.urandom(record_bytes + 255)  # 256 distinct values, sliced once
    values = [pool[i : i + record_bytes] for i in range(256)]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, values[i & 255])
                break
            except BufferError:
                producer.poll(0.001)
        if i & 0x3FFF == 0:
            producer.poll(0)
    while producer.flush(1.0):
        pass
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{len(failures)} records failed, first: {failures[0]}")
    return elapsed


def consume(
    bootstrap: str,
    topic: str,
    partitions: int,
    records: int,
    *,
    client_defaults: bool = False,
    client: Mapping[str, Any] = _NO_SETTINGS,
) -> float:
    """Seconds for one assigned consumer to read all `records` from the beginning; with
    `client_defaults`, librdkafka's default fetch and queue settings; `client`: more
    librdkafka settings."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{secrets.token_hex(4)}",
        "enable.auto.commit": False,
        "log_level": 0,
        **client,
    }
    if not client_defaults:
        config |= {
            "fetch.max.bytes": 52_428_800,
            "receive.message.max.bytes": 53_477_376,
            "queued.max.messages.kbytes": 1_048_576,
            # librdkafka pauses fetching for fetch.queue.backoff.ms (1 s) whenever its
            # local queue holds queued.min.messages (100,000) records; a fast broker fills
            # that in milliseconds, so with the defaults the figure measures the pause,
            # not the broker. These two keep the client fetching.
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 0,
        }
    consumer = Consumer(config)
    started = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    count = 0
    last_progress = started
    while count < records:
        batch = consumer.consume(10_000, 1.0)
        for message in batch:
            if message.error() is None:
                count += 1
        now = time.perf_counter()
        if batch:
            last_progress = now
        elif now - last_progress > STALL_LIMIT_S:
            raise SystemExit(f"consumer stalled at {count} of {records} records")
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def start_profiler(pid: int, label: str) -> tuple[subprocess.Popen[bytes], Path] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(py_spy).exists():
        log("--profile: py-spy not found; install the dev dependencies")
        return None
    output = Path(f"profile-{label}.svg").resolve()
    command = [py_spy, "record", "--pid", str(pid), "--output", str(output), "--nonblocking"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # let py-spy attach before the clock starts
    return process, output


def stop_profiler(profiler: tuple[subprocess.Popen[bytes], Path] | None) -> None:
    if profiler is None:
        return
    process, output = profiler
    process.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
    _, errors = process.communicate(timeout=60)
    if output.exists():
        log(f"profile written to {output}")
    else:
        log(f"py-spy failed: {errors.decode(errors='replace').strip()}")


def run(args: argparse.Namespace, durability: str) -> list[Result]:
    broker = Broker(args.bootstrap) if args.bootstrap else start_strom(durability)
    results = []
    try:
        for partitions in args.partitions:
            topic = f"bench-{durability}-{partitions}p-{secrets.token_hex(3)}"
            create_topic(broker.bootstrap, topic, partitions, -1 if args.bootstrap else 1)
            profiler = None
            if args.profile and broker.process is not None:
                profiler = start_profiler(broker.process.pid, f"{durability}-{partitions}p")
            pid = broker.process.pid if broker.process else None
            cpu_start = cpu_s(pid)
            try:
                produce_s = produce(broker.bootstrap, topic, args.records, args.record_bytes)
            finally:
                stop_profiler(profiler)
            cpu_produced = cpu_s(pid)
            consume_s = consume(broker.bootstrap, topic, partitions, args.records)
            cpu = (
                busy_pct(cpu_start, cpu_produced, produce_s),
                busy_pct(cpu_produced, cpu_s(pid), consume_s),
            )
            log(f"{durability} {partitions}p: produce {produce_s:.2f} s, consume {consume_s:.2f} s")
            delete_topic(broker.bootstrap, topic)
            memory = memory_mb(broker.process.pid) if broker.process else (None, None)
            timings = (args.records, args.record_bytes, produce_s, consume_s)
            stats = (broker.startup_ms, broker.idle_rss_mb, *memory)
            results.append(Result(durability, partitions, *timings, *stats, *cpu))
    finally:
        stop(broker)
    return results


def number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


HEADERS = ["durability", "parts", "produce rec/s", "produce MB/s", "consume rec/s"]
HEADERS += ["consume MB/s", "broker CPU % (produce)", "broker CPU % (consume)"]
HEADERS += ["startup ms", "idle RSS MB", "RSS after MB", "peak RSS MB"]


def print_table(results: list[Result]) -> None:
    rows = [result.cells() for result in results]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(HEADERS)]
    for row in [HEADERS, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


def int_list(text: str) -> list[int]:
    values = [int(part) for part in text.split(",") if part.strip()]
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("expected positive integers, e.g. 1,8")
    return values


def durability_list(text: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [v for v in values if v not in DURABILITY_SETTINGS]
    if not values or unknown:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(DURABILITY_SETTINGS)}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--bootstrap", help="measure this broker instead of starting strom")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int_list, default=[1, 8], help="e.g. 1,8")
    parser.add_argument("--durability", type=durability_list, default=["fsync", "interval"])
    parser.add_argument("--profile", action="store_true", help="py-spy the broker's produce")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results here")
    args = parser.parse_args()
    if args.records < 1 or args.record_bytes < 1:
        parser.error("--records and --record-bytes must be positive")
    if args.bootstrap and args.profile:
        log("--profile needs a broker started by this script; ignoring it")
    durabilities = ["external"] if args.bootstrap else args.durability
    results = [result for durability in durabilities for result in run(args, durability)]
    print_table(results)
    command = shlex.join(["python", *sys.argv])
    if args.json:
        rates = ["produce_records_per_s", "produce_mb_per_s"]
        rates += ["consume_records_per_s", "consume_mb_per_s"]
        rows = [asdict(r) | dict(zip(rates, r.rates(), strict=True)) for r in results]
        report = {"command": command, "results": rows}
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"results written to {args.json}")
    print(f"command: {command}")


if __name__ == "__main__":
    main()
