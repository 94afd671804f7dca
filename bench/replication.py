"""Partition replication: produce throughput and latency with three replicas against one,
and how long producers stall when a partition leader dies.

    .venv/bin/python bench/replication.py [--records 300000] [--record-bytes 100]
        [--rate 20000] [--seconds 10] [--kills 5] [--failover-rate 2000]
        [--leader-on-controller] [--set KEY=VALUE ...] [--quick] [--json FILE]

Starts one cluster of three combined broker+controller nodes (as `strom dev` does, through
strom.cli.dev_cluster) under a temporary directory, with the short broker sessions the
integration tests use (broker.session.timeout.ms=3000, broker.heartbeat.interval.ms=300):
a dead broker is fenced, and its partitions get new leaders, about 3 s after it dies.

produce: one confluent-kafka producer (acks=all, enable.idempotence=true, linger.ms=5,
librdkafka's defaults otherwise) writes to a one-partition topic with replication factor 3
(min.insync.replicas=2), and to one with replication factor 1 on the same cluster, both
led by the same node, which is not the active controller. Full speed: `--records` records
as fast as the client goes. Fixed rate: `--rate` records/s for `--seconds` s. Latency is
per record, from its produce() call to its delivery callback (the client polls at least
every millisecond); at full speed it is mostly time spent queued in the client. "RTT max"
is the slowest request to the leader in librdkafka's statistics (a slow broker, not a slow
client). CPU is the share of one core used while the phase ran by the client process (all
its threads), the leader, the followers, and "others": everything else on the machine,
which client and cluster share. --set passes a setting to every node (e.g. the flush
policy: strom fsyncs before acknowledging by default).

failover: a producer writes `--failover-rate` records/s (acks=all, idempotent) to a fresh
RF 3 topic (min.insync.replicas=2) per round, led by a node other than the active
controller (by it with --leader-on-controller, so that the Raft quorum fails over too);
after 2 s that node gets SIGKILL. Measured from the kill: until a node's metadata names a
new leader (polled every 50 ms), and until the first acknowledgement of a record produced
after the kill; and the largest gap between two consecutive acknowledgements in the round.
The node is then restarted, the round ends once the ISR is full again (timed from the
restart), and a consumer checks that every acknowledged record is in the log once.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import resource
import shlex
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from strom.cli.dev_cluster import LocalCluster, exit_reason
from strom.cli.dev_plan import parse_settings, plan_local_cluster

NODES = 3
SESSION_SETTINGS = ["broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=300"]
PRODUCER_SETTINGS: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "compression.type": "none",
}
WARMUP_RECORDS = 2_000
DRAIN_TIMEOUT_S = 60.0
KILL_AFTER_S = 2.0
AFTER_RECOVERY_S = 2.0
FAILOVER_LIMIT_S = 60.0
ISR_TIMEOUT_S = 60.0
LOG_LINES = 30
QUICK = {"records": 20_000, "seconds": 3.0, "kills": 2}  # what --quick changes
MB = 1_000_000

T = TypeVar("T")


class Stalled(Exception):
    """The cluster did not do what a phase waited for; the message has the node logs."""


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports (all held until chosen, so none comes twice)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def cpu_s(pid: int | None) -> float:
    """User plus system CPU seconds of a process, from /proc (0 if it is gone)."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every process on the machine has used (all cores), from /proc/stat."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle, iowait


def client_cpu_s() -> float:
    """CPU seconds of this process, librdkafka's threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Partition 0 of a topic as one node's metadata reports it."""

    leader: int
    isr: tuple[int, ...]
    controller: int


def partition_state(client: AdminClient, topic: str, timeout_s: float = 5.0) -> PartitionState:
    metadata = client.list_topics(topic, timeout=timeout_s)
    found = metadata.topics.get(topic)
    if found is None or 0 not in found.partitions:
        raise LookupError(f"no partition {topic}-0 in the metadata")
    partition = found.partitions[0]
    isr = tuple(sorted(int(b) for b in partition.isrs))
    return PartitionState(int(partition.leader), isr, int(metadata.controller_id))


class Cluster:
    """NODES combined broker+controller nodes with ids 1..N on free ports under `root`."""

    def __init__(self, root: Path, nodes: int, settings: Sequence[str]) -> None:
        ports = free_ports(2 * nodes)
        self.plans = plan_local_cluster(
            nodes,
            root,
            client_ports=ports[:nodes],
            controller_ports=ports[nodes:],
            settings=parse_settings(settings),
        )
        self.local = LocalCluster(self.plans)
        self.bootstrap = self.local.bootstrap
        self.node_ids = [plan.node_id for plan in self.plans]
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:  # made once the nodes listen: librdkafka backs off refusals
            self._admin = admin(self.bootstrap)
        return self._admin

    def pid(self, node_id: int) -> int | None:
        process = self.local.node(node_id).process
        return None if process is None or process.poll() is not None else process.pid

    def state(self, topic: str) -> PartitionState:
        return partition_state(self.admin, topic)

    def controller(self) -> int:
        return self.wait_until(
            lambda: max(0, int(self.admin.list_topics(timeout=5).controller_id)),
            30,
            "an active controller",
        )

    def logs(self, lines: int = LOG_LINES) -> str:
        parts = []
        for node_id, node in self.local.nodes.items():
            state = exit_reason(node) if node.process is not None else "was never started"
            tail = node.log_tail(lines).rstrip() or "(empty)"
            parts.append(f"--- node {node_id} ({state}), {node.plan.log_path}:\n{tail}")
        return "\n".join(parts)

    def wait_until(self, predicate: Callable[[], T | None], timeout_s: float, what: str) -> T:
        """Poll `predicate` until it returns something true; an exception counts as "not
        yet". Stalled, with every node's log tail, on timeout."""
        deadline = time.monotonic() + timeout_s
        last_error: Exception | None = None
        while True:
            try:
                result = predicate()
            except Exception as exc:
                last_error = exc
            else:
                if result:
                    return result
            if time.monotonic() >= deadline:
                error = "" if last_error is None else f" (last error: {last_error!r})"
                raise Stalled(f"waited {timeout_s:g} s for {what}{error}\n{self.logs()}")
            self.local.pump(0.05)  # reads the nodes' stdout, so no pipe fills up

    def wait_isr(self, topic: str) -> None:
        def full() -> bool:
            state = self.state(topic)
            return state.isr == tuple(self.node_ids) and state.leader > 0

        self.wait_until(full, ISR_TIMEOUT_S, f"{topic}-0 to have a full ISR")


def create_topic(cluster: Cluster, name: str, replicas: list[int]) -> None:
    """One partition on `replicas`, the first leading; waits until it leads and all are in
    sync."""
    config = {"min.insync.replicas": str(min(2, len(replicas)))}
    future = cluster.admin.create_topics(
        [NewTopic(name, 1, replica_assignment=[replicas], config=config)]
    )
    future[name].result(timeout=30)

    def ready() -> bool:
        state = cluster.state(name)
        return state.leader == replicas[0] and state.isr == tuple(sorted(replicas))

    cluster.wait_until(ready, ISR_TIMEOUT_S, f"{name}-0 led by node {replicas[0]}, all in sync")


class Monitor:
    """Polls a partition's leader and ISR from a thread; the changes, with their time."""

    def __init__(self, bootstrap: str, topic: str, interval_s: float) -> None:
        self.changes: list[tuple[float, PartitionState]] = []
        self._client = admin(bootstrap)
        self._topic = topic
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"monitor-{topic}", daemon=True)

    def __enter__(self) -> Monitor:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                state = partition_state(self._client, self._topic, timeout_s=1.0)
            except (KafkaException, LookupError):
                pass  # the node asked has died or does not know yet
            else:
                if not self.changes or self.changes[-1][1] != state:
                    self.changes.append((time.perf_counter(), state))
            self._stop.wait(self._interval_s)

    def min_isr(self) -> int:
        return min((len(state.isr) for _, state in self.changes), default=0)

    def new_leader(self, since: float, old: int) -> tuple[float, int] | None:
        """(when, who): the first leader other than `old` seen after `since`."""
        for when, state in self.changes:
            if when > since and state.leader not in (-1, old):
                return when, state.leader
        return None


class Deliveries:
    """Send and acknowledgement times (perf_counter s) of one producer's records, by index.

    Each value starts with its index (8 bytes, big-endian, from `base`), so a delivery
    callback knows which record it reports. reset() starts a new measurement.
    """

    def __init__(self, record_bytes: int) -> None:
        self.padding = os.urandom(record_bytes - 8)
        self.base = 0
        self.sent_s: list[float] = []
        self.acked_s: list[float] = []  # NaN until acknowledged
        self.failed: list[str] = []
        self.errors: list[str] = []  # error_cb: connection trouble and the like
        self.fatal: str | None = None
        self.rtt_max_ms: dict[int, float] = {}  # librdkafka's statistics, by node

    def reset(self) -> None:
        self.base += len(self.sent_s)
        self.sent_s, self.acked_s, self.failed, self.rtt_max_ms = [], [], [], {}

    def produce(self, producer: Producer, topic: str) -> None:
        value = (self.base + len(self.sent_s)).to_bytes(8, "big") + self.padding
        while True:
            sent = time.perf_counter()
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:  # the client's queue is full: wait for acknowledgements
                producer.poll(0.001)
        self.sent_s.append(sent)
        self.acked_s.append(math.nan)

    def on_delivery(self, error: KafkaError | None, message: Message) -> None:
        now = time.perf_counter()
        if error is not None:
            self.failed.append(str(error))
            return
        value = message.value()
        assert value is not None
        self.acked_s[int.from_bytes(value[:8], "big") - self.base] = now

    def on_error(self, error: KafkaError) -> None:
        self.errors.append(str(error))
        if error.fatal():
            self.fatal = str(error)

    def on_stats(self, text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            if broker["nodeid"] > 0 and broker["rtt"]["cnt"] > 0:
                node, rtt_ms = int(broker["nodeid"]), broker["rtt"]["max"] / 1000
                self.rtt_max_ms[node] = max(rtt_ms, self.rtt_max_ms.get(node, 0.0))

    def acked(self) -> list[float]:
        return sorted(a for a in self.acked_s if not math.isnan(a))

    def first_ack_from(self, index: int) -> float | None:
        """The earliest acknowledgement of a record with this index or a later one."""
        return min((a for a in self.acked_s[index:] if not math.isnan(a)), default=None)

    def latencies_ms(self) -> list[float]:
        pairs = zip(self.sent_s, self.acked_s, strict=True)
        return sorted(1000 * (a - s) for s, a in pairs if not math.isnan(a))


def new_producer(bootstrap: str, deliveries: Deliveries) -> Producer:
    return Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_SETTINGS,
            "on_delivery": deliveries.on_delivery,
            "error_cb": deliveries.on_error,
            "stats_cb": deliveries.on_stats,
            "statistics.interval.ms": 1000,
            "log_level": 0,
        }
    )


def drain(producer: Producer, deliveries: Deliveries, timeout_s: float, cluster: Cluster) -> None:
    """Wait until every record is acknowledged or has failed; Stalled after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while producer.flush(0.5) > 0:
        if deliveries.fatal is not None or time.monotonic() > deadline:
            raise stalled(producer, deliveries, cluster, f"waited {timeout_s:g} s")


def stalled(producer: Producer, deliveries: Deliveries, cluster: Cluster, reason: str) -> Stalled:
    """Give up on the producer's records: Stalled, with its errors and the node logs."""
    waiting = len(producer)
    producer.purge(in_queue=True, in_flight=True, blocking=False)
    errors = "; ".join(dict.fromkeys(deliveries.errors[-20:])) or "none"
    return Stalled(
        f"{waiting} records unacknowledged ({deliveries.fatal or reason}); the producer's "
        f"recent errors: {errors}\n{cluster.logs()}"
    )


class Pacer:
    """Produces at `rate` records/s: whatever is due, then waits up to 1 ms (serving
    delivery callbacks meanwhile)."""

    def __init__(
        self, producer: Producer, topic: str, deliveries: Deliveries, rate: float, total: float
    ) -> None:
        self.producer, self.topic, self.deliveries = producer, topic, deliveries
        self.rate, self.total = rate, total
        self.sent = 0
        self.started = time.perf_counter()

    @property
    def done(self) -> bool:
        return self.sent >= self.total

    def step(self) -> None:
        due = min(self.total, int((time.perf_counter() - self.started) * self.rate) + 1)
        while self.sent < due:
            self.deliveries.produce(self.producer, self.topic)
            self.sent += 1
        self.producer.poll(0)
        wait_s = self.started + self.sent / self.rate - time.perf_counter()
        if wait_s >= 0.001:
            self.producer.poll(0.001)  # returns early when a callback is served
        elif wait_s > 0:
            time.sleep(wait_s)


def number(value: float, digits: int) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of a sorted, non-empty sequence."""
    return ordered[min(len(ordered) - 1, max(0, math.ceil(pct / 100 * len(ordered)) - 1))]


# --- produce: RF 3 against RF 1 -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProduceResult:
    replication_factor: int
    mode: str
    records: int
    acked: int = 0
    failed: int = 0
    seconds: float = math.nan
    records_per_s: float = math.nan
    mb_per_s: float = math.nan
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan
    min_isr: int = 0
    client_cpu_pct: float = math.nan
    leader_cpu_pct: float = math.nan
    followers_cpu_pct: float = math.nan
    others_cpu_pct: float = math.nan
    leader_rtt_max_ms: float = math.nan
    stalled: str | None = None
    """Why the phase did not finish (the first line of the Stalled message)."""

    def cells(self) -> list[str]:
        head = [f"RF {self.replication_factor}", self.mode]
        if self.stalled is not None:
            return [*head, f"{self.records:,}", "stalled", *["-"] * 12]
        figures = [self.acked, self.records_per_s, self.mb_per_s, self.p50_ms, self.p99_ms]
        figures += [self.max_ms, self.leader_rtt_max_ms, self.min_isr, self.failed]
        figures += [self.client_cpu_pct, self.leader_cpu_pct, self.followers_cpu_pct]
        figures += [self.leader_cpu_pct + self.followers_cpu_pct, self.others_cpu_pct]
        digits = [0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
        return [*head, *(number(v, d) for v, d in zip(figures, digits, strict=True))]


PRODUCE_HEADERS = ["topic", "mode", "acked", "rec/s", "MB/s", "p50 ms", "p99 ms", "max ms"]
PRODUCE_HEADERS += ["RTT max ms"]
PRODUCE_HEADERS += ["min ISR", "failed", "client CPU %", "leader CPU %", "followers CPU %"]
PRODUCE_HEADERS += ["cluster CPU %", "others CPU %"]


def produce_phase(
    cluster: Cluster,
    args: argparse.Namespace,
    topic: str,
    replicas: list[int],
    mode: str,
    run: Callable[[Producer, str, Deliveries], None],
) -> ProduceResult:
    """Warm a producer up, then time `run` and the acknowledgement of all it produced."""
    deliveries = Deliveries(args.record_bytes)
    producer = new_producer(cluster.bootstrap, deliveries)
    for _ in range(WARMUP_RECORDS):  # connections, metadata and the producer id
        deliveries.produce(producer, topic)
    drain(producer, deliveries, DRAIN_TIMEOUT_S, cluster)
    deliveries.reset()
    pids = {node_id: cluster.pid(node_id) for node_id in cluster.node_ids}
    cpu_before = {node_id: cpu_s(pid) for node_id, pid in pids.items()}
    client_before, machine_before = client_cpu_s(), machine_busy_s()
    started = time.perf_counter()
    with Monitor(cluster.bootstrap, topic, 0.2) as monitor:
        run(producer, topic, deliveries)
        drain(producer, deliveries, DRAIN_TIMEOUT_S, cluster)
    wall_s = time.perf_counter() - started
    node_pct = {n: 100 * (cpu_s(pid) - cpu_before[n]) / wall_s for n, pid in pids.items()}
    client_pct = 100 * (client_cpu_s() - client_before) / wall_s
    machine_pct = 100 * (machine_busy_s() - machine_before) / wall_s
    acked = deliveries.acked()
    latencies = deliveries.latencies_ms() or [math.nan]
    seconds = (acked[-1] if acked else started) - deliveries.sent_s[0]
    rate = len(acked) / seconds if seconds > 0 else math.nan
    return ProduceResult(
        replication_factor=len(replicas),
        mode=mode,
        records=len(deliveries.sent_s),
        acked=len(acked),
        failed=len(deliveries.failed),
        seconds=seconds,
        records_per_s=rate,
        mb_per_s=rate * args.record_bytes / MB,
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        max_ms=latencies[-1],
        min_isr=monitor.min_isr(),
        client_cpu_pct=client_pct,
        leader_cpu_pct=node_pct[replicas[0]],
        followers_cpu_pct=sum(pct for n, pct in node_pct.items() if n != replicas[0]),
        others_cpu_pct=max(0.0, machine_pct - client_pct - sum(node_pct.values())),
        leader_rtt_max_ms=deliveries.rtt_max_ms.get(replicas[0], math.nan),
    )


def produce_phases(cluster: Cluster, args: argparse.Namespace, leader: int) -> list[ProduceResult]:
    followers = [n for n in cluster.node_ids if n != leader]

    def full_speed(producer: Producer, topic: str, deliveries: Deliveries) -> None:
        for i in range(args.records):
            deliveries.produce(producer, topic)
            if i & 63 == 63:
                producer.poll(0)

    def fixed_rate(producer: Producer, topic: str, deliveries: Deliveries) -> None:
        pacer = Pacer(producer, topic, deliveries, args.rate, round(args.rate * args.seconds))
        while not pacer.done:
            pacer.step()

    results = []
    phases = [("full speed", full_speed), (f"{args.rate:,} rec/s", fixed_rate)]
    for mode, run in phases:
        for replicas in ([leader], [leader, *followers]):
            topic = f"rf{len(replicas)}-{mode.split()[0].replace(',', '')}"
            log(f"produce: {topic}, replicas {replicas}, {mode} ...")
            try:
                create_topic(cluster, topic, replicas)
                result = produce_phase(cluster, args, topic, replicas, mode, run)
            except Stalled as exc:
                log(f"produce: {topic} STALLED: {exc}")
                reason = str(exc).split("\n")[0]
                result = ProduceResult(len(replicas), mode, 0, stalled=reason)
            else:
                log(
                    f"produce: {topic}: {result.acked:,} records at {result.records_per_s:,.0f}"
                    f" rec/s, p50 {result.p50_ms:.1f} ms, p99 {result.p99_ms:.1f} ms"
                )
            results.append(result)
    return results


# --- leader failover ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FailoverResult:
    round: int
    killed: int
    was_controller: bool
    new_leader: int | None
    leader_elected_s: float | None
    first_new_ack_s: float | None
    largest_gap_s: float
    records: int
    failed: int
    missing: int
    duplicates: int
    restart_ready_s: float
    isr_full_s: float
    producer_errors: int

    def cells(self) -> list[str]:
        return [
            str(self.round),
            f"{self.killed}{' (controller)' if self.was_controller else ''}",
            "-" if self.new_leader is None else str(self.new_leader),
            seconds(self.leader_elected_s),
            seconds(self.first_new_ack_s),
            seconds(self.largest_gap_s),
            f"{self.records:,}",
            str(self.failed),
            str(self.missing),
            str(self.duplicates),
            seconds(self.isr_full_s),
        ]


FAILOVER_HEADERS = ["round", "killed", "new leader", "leader in metadata s"]
FAILOVER_HEADERS += ["first new-record ack s", "largest ack gap s", "records", "failed", "lost"]
FAILOVER_HEADERS += ["duplicates", "ISR full after restart s"]


def seconds(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def read_indexes(bootstrap: str, topic: str) -> list[int]:
    """The index in every record of topic-0, in log order."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "log_level": 0})
    try:
        partition = TopicPartition(topic, 0, OFFSET_BEGINNING)
        _, end = consumer.get_watermark_offsets(partition, timeout=10)
        consumer.assign([partition])
        indexes: list[int] = []
        deadline = time.monotonic() + 60
        position = 0
        while position < end and time.monotonic() < deadline:
            for message in consumer.consume(10_000, 0.5):
                value = message.value()
                if message.error() is None and value is not None:
                    indexes.append(int.from_bytes(value[:8], "big"))
                    position = (message.offset() or 0) + 1
        return indexes
    finally:
        consumer.close()


def failover_round(
    cluster: Cluster, args: argparse.Namespace, round_: int, leader: int, controller: int
) -> FailoverResult:
    """Produce to a fresh topic led by `leader`, kill it, measure, restart it."""
    topic = f"failover-{round_}"
    create_topic(cluster, topic, [leader, *(n for n in cluster.node_ids if n != leader)])
    deliveries = Deliveries(args.record_bytes)
    producer = new_producer(cluster.bootstrap, deliveries)
    with Monitor(cluster.bootstrap, topic, 0.05) as monitor:
        pacer = Pacer(producer, topic, deliveries, args.failover_rate, math.inf)
        while time.perf_counter() < pacer.started + KILL_AFTER_S:
            pacer.step()
        if not deliveries.acked():
            reason = f"none acknowledged in {KILL_AFTER_S:g} s"
            raise stalled(producer, deliveries, cluster, reason)
        kill_index = len(deliveries.sent_s)
        killed_at = time.perf_counter()
        cluster.local.kill(leader)
        next_check = killed_at
        while True:
            pacer.step()
            now = time.perf_counter()
            if now < next_check:
                continue
            next_check = now + 0.1
            recovered = deliveries.first_ack_from(kill_index)
            if recovered is not None and now - recovered >= AFTER_RECOVERY_S:
                break
            if now - killed_at > FAILOVER_LIMIT_S or deliveries.fatal is not None:
                reason = f"none produced after the kill acknowledged in {FAILOVER_LIMIT_S:g} s"
                raise stalled(producer, deliveries, cluster, reason)
        drain(producer, deliveries, DRAIN_TIMEOUT_S, cluster)
    acked = deliveries.acked()
    gaps = [b - a for a, b in itertools.pairwise(acked)]
    first_new = deliveries.first_ack_from(kill_index)
    elected = monitor.new_leader(killed_at, leader)

    restarted_at = time.perf_counter()
    cluster.local.start_node(leader)
    ready_s = time.perf_counter() - restarted_at
    cluster.wait_isr(topic)
    isr_full_s = time.perf_counter() - restarted_at

    stored = read_indexes(cluster.bootstrap, topic)
    acked_indexes = {i for i, a in enumerate(deliveries.acked_s) if not math.isnan(a)}
    return FailoverResult(
        round=round_,
        killed=leader,
        was_controller=leader == controller,
        new_leader=None if elected is None else elected[1],
        leader_elected_s=None if elected is None else elected[0] - killed_at,
        first_new_ack_s=None if first_new is None else first_new - killed_at,
        largest_gap_s=max(gaps, default=math.nan),
        records=len(deliveries.sent_s),
        failed=len(deliveries.failed),
        missing=len(acked_indexes - set(stored)),
        duplicates=len(stored) - len(set(stored)),
        restart_ready_s=ready_s,
        isr_full_s=isr_full_s,
        producer_errors=len(deliveries.errors),
    )


def failovers(cluster: Cluster, args: argparse.Namespace) -> list[FailoverResult]:
    results: list[FailoverResult] = []
    for round_ in range(1, args.kills + 1):
        controller = cluster.controller()
        others = [n for n in cluster.node_ids if n != controller]
        leader = controller if args.leader_on_controller else others[round_ % len(others)]
        result = failover_round(cluster, args, round_, leader, controller)
        log(
            f"failover {round_}: node {leader} killed; new leader {result.new_leader} in "
            f"metadata after {seconds(result.leader_elected_s)} s, a record produced after the "
            f"kill acknowledged after {seconds(result.first_new_ack_s)} s, largest gap "
            f"{seconds(result.largest_gap_s)} s; ISR full {seconds(result.isr_full_s)} s after "
            f"the restart (ready after {result.restart_ready_s:.2f} s); "
            f"{result.producer_errors} producer errors"
        )
        results.append(result)
    return results


# --- report ---------------------------------------------------------------------------------


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))


def summary(results: list[FailoverResult]) -> list[list[str]]:
    rows = []
    for name, pick in (("median", statistics.median), ("max", max)):
        row = [name, "", ""]
        for field in ("leader_elected_s", "first_new_ack_s", "largest_gap_s"):
            values = [v for r in results if (v := getattr(r, field)) is not None]
            row.append(seconds(pick(values)) if values else "-")
        row += ["", "", "", ""]
        row.append(seconds(pick(r.isr_full_s for r in results)))
        rows.append(row)
    return rows


def report(
    args: argparse.Namespace,
    leader: int,
    controller: int,
    produced: list[ProduceResult],
    failed_over: list[FailoverResult],
) -> None:
    settings = ", ".join([*SESSION_SETTINGS, *args.set])
    load = " / ".join(f"{value:.1f}" for value in os.getloadavg())
    print()
    print(
        f"cluster: {NODES} combined broker+controller nodes, {settings}; client and cluster "
        f"share {os.cpu_count()} cores (load average {load} at the end)"
    )
    if produced:
        print(
            f"produce: one partition, {args.record_bytes}-byte records, confluent-kafka with "
            + ", ".join(f"{key}={value}" for key, value in PRODUCER_SETTINGS.items())
            + f"; RF 1 and RF 3 (min.insync.replicas=2) both led by node {leader}, the active"
            f" controller is node {controller}. Latency: produce() to delivery callback; RTT:"
            " the slowest request to the leader in librdkafka's statistics; CPU: % of one core,"
            " others = the rest of the machine"
        )
        print_table(PRODUCE_HEADERS, [r.cells() for r in produced])
    if failed_over:
        print()
        print(
            f"failover: {args.failover_rate:,} records/s, acks=all, RF 3, min.insync.replicas=2;"
            " seconds from the SIGKILL of the partition leader. broker.session.timeout.ms=3000"
            " makes up most of it; librdkafka looks for the leader of a leaderless partition"
            " once a second (its topic scan), which adds up to 1 s after the new leader is in"
            " the metadata, 2 s when it first takes the partition off the dead broker"
        )
        print_table(FAILOVER_HEADERS, [r.cells() for r in failed_over] + summary(failed_over))


def interrupt(signum: int, _frame: object) -> None:
    """SIGTERM as Ctrl-C: unwinds through the `finally` that stops the nodes. (SystemExit
    raised inside a confluent-kafka callback turns into a SystemError.)"""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=300_000, help="records at full speed")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--rate", type=int, default=20_000, help="records/s of the fixed rate")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the fixed rate")
    parser.add_argument("--kills", type=int, default=5, help="failover rounds")
    parser.add_argument("--failover-rate", type=int, default=2_000, help="records/s")
    parser.add_argument(
        "--leader-on-controller",
        action="store_true",
        help="kill the active controller's node, so the Raft quorum fails over too",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting for every node, after the session settings (repeatable)",
    )
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results here")
    args = parser.parse_args()
    for name, value in QUICK.items() if args.quick else ():
        if getattr(args, name) == parser.get_default(name):  # options given still count
            setattr(args, name, value)
    if args.record_bytes < 8 or min(args.records, args.rate, args.failover_rate) < 1:
        parser.error("--record-bytes must be at least 8, the counts and rates positive")
    signal.signal(signal.SIGTERM, interrupt)
    started = time.monotonic()
    stalled: list[str] = []
    produced: list[ProduceResult] = []
    failed_over: list[FailoverResult] = []
    with tempfile.TemporaryDirectory(prefix="strom-bench-replication-") as root:
        cluster = Cluster(Path(root), NODES, [*SESSION_SETTINGS, *args.set])
        try:
            cluster.local.start()
            controller = cluster.controller()
            leader = next(n for n in cluster.node_ids if n != controller)
            log(f"cluster ready at {cluster.bootstrap}; active controller node {controller}")
            produced = produce_phases(cluster, args, leader)
            stalled += [r.stalled for r in produced if r.stalled is not None]
            try:
                failed_over = failovers(cluster, args)
            except Stalled as exc:
                log(f"failover STALLED: {exc}")
                stalled.append(str(exc).split("\n")[0])
        finally:
            cluster.local.close()
    report(args, leader, controller, produced, failed_over)
    command = shlex.join(["python", *sys.argv])
    if args.json:
        results = {
            "command": command,
            "produce": [asdict(r) for r in produced],
            "failover": [asdict(r) for r in failed_over],
            "stalled": stalled,
        }
        args.json.write_text(json.dumps(results, indent=2) + "\n")
        print(f"results written to {args.json}")
    print(f"run time {time.monotonic() - started:.0f} s; command: {command}")
    if stalled:
        raise SystemExit(f"{len(stalled)} phase(s) stalled: {'; '.join(stalled)}")


if __name__ == "__main__":
    main()
