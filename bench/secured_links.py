"""What securing the links between nodes costs: three-node Raft clusters with plaintext
links (A) and with SASL_SSL links (B), run alternately A B A B, the same client on both.

    .venv/bin/python bench/secured_links.py [--rounds 3] [--records 200000]
        [--record-bytes 100] [--rate 5000] [--seconds 5] [--quick]

Each run starts a fresh cluster of three combined broker+controller nodes (through
strom.cli.dev_cluster, as bench/replication.py does) under a temporary directory, and
stops it before the next starts. A is the plan of `strom dev` as is. B gives each node a
SASL_SSL listener, makes it the inter-broker listener and the controller listener SASL_SSL
too, PLAIN on both, client certificates required (ssl.client.auth=required): the settings
of tests/integration/test_secured_links.py, with certificates made for the run by
tests/tls_material.py. The client always uses the PLAINTEXT listener, with the producer of
bench/replication.py (confluent-kafka, acks=all, idempotent, linger.ms=5).

Figures per run: time from spawning the nodes until all are ready, and until the first
acknowledged write (a fresh producer, a replication-factor-3 topic created as soon as the
cluster takes it); the CPU the three nodes use together over 3 s with no load, as % of one
core; full-speed produce of `--records` records to a one-partition topic with replication
factor 3 (min.insync.replicas=2) led by a node that is not the active controller; p50 and
p99 latency (produce() to delivery callback) at `--rate` records/s for `--seconds` s to
another such topic; and in both phases the CPU time of the leader, and of the two
followers together, per record. Printed: each figure's median and spread (min-max) over
the rounds, and B/A.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import shlex
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from replication import (
    DRAIN_TIMEOUT_S,
    NODES,
    Cluster,
    Deliveries,
    Pacer,
    ProduceResult,
    cpu_s,
    create_topic,
    drain,
    free_ports,
    interrupt,
    log,
    new_producer,
    produce_phase,
)
from strom.cli.dev_cluster import LocalCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tls_material import TlsMaterial, make_tls_material

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="node" password="node-secret" user_node="node-secret";'
)
LINK_LISTENER = "SASL_SSL"
FIRST_WRITE_TIMEOUT_S = 60.0
IDLE_S = 3.0
QUICK = {"rounds": 1, "records": 20_000, "seconds": 2.0}  # what --quick changes
CONFIGS = {"A": "plaintext links", "B": "SASL_SSL links"}

Figures = dict[str, float]
Run = Callable[[Producer, str, Deliveries], None]


def secured_settings(material: TlsMaterial) -> list[str]:
    """B's keys for every node, as tests/integration/test_secured_links.py sets them."""
    return [
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={material.server.keystore_pem_path}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={material.ca_cert_path}",
        "ssl.client.auth=required",
        f"inter.broker.listener.name={LINK_LISTENER}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_SSL",
        "sasl.enabled.mechanisms=PLAIN",
        "sasl.mechanism.inter.broker.protocol=PLAIN",
        "sasl.mechanism.controller.protocol=PLAIN",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={PLAIN_JAAS}",
        f"listener.name.controller.plain.sasl.jaas.config={PLAIN_JAAS}",
    ]


def make_cluster(root: Path, material: TlsMaterial | None) -> Cluster:
    """A's cluster without material; B's with it: one more listener per node, as
    tests/integration/cluster.py adds one."""
    if material is None:
        return Cluster(root, NODES, [])
    cluster = Cluster(root, NODES, secured_settings(material))
    taken = {p for plan in cluster.plans for p in (plan.client_port, plan.controller_port)}
    ports = free_ports(NODES)
    while taken & set(ports):
        ports = free_ports(NODES)
    for index, (plan, port) in enumerate(zip(cluster.plans, ports, strict=True)):
        planned = dict(plan.properties)
        for key in ("listeners", "advertised.listeners"):
            planned[key] += f",{LINK_LISTENER}://localhost:{port}"
        planned["listener.security.protocol.map"] += f",{LINK_LISTENER}:{LINK_LISTENER}"
        cluster.plans[index] = dataclasses.replace(plan, properties=tuple(planned.items()))
    cluster.local = LocalCluster(cluster.plans)
    return cluster


def established(ports: set[int]) -> int:
    """TCP connections the nodes have accepted on `ports`, from /proc/net/tcp{,6}."""
    count = 0
    for name in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
                fields = line.split()
                port = int(fields[1].rsplit(":", 1)[1], 16)
                count += fields[3] == "01" and port in ports  # 01: ESTABLISHED
    return count


def first_write_s(cluster: Cluster, record_bytes: int) -> tuple[float, float]:
    """Spawn the nodes; seconds until all are ready, and until a fresh producer's first
    record to a new replication-factor-3 topic is acknowledged."""
    started = time.perf_counter()
    cluster.local.start()
    ready = time.perf_counter() - started
    topic = NewTopic("first-write", 1, NODES, config={"min.insync.replicas": "2"})

    def created() -> bool:
        try:
            cluster.admin.create_topics([topic])[topic.topic].result(timeout=5)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
        return True

    cluster.wait_until(created, FIRST_WRITE_TIMEOUT_S, "the first topic to be created")
    deliveries = Deliveries(record_bytes)
    producer = new_producer(cluster.bootstrap, deliveries)
    deliveries.produce(producer, topic.topic)
    drain(producer, deliveries, FIRST_WRITE_TIMEOUT_S, cluster)
    acked = deliveries.acked()
    if not acked:
        raise SystemExit(f"the first write failed: {deliveries.failed}\n{cluster.logs()}")
    return ready, acked[0] - started


def idle_cpu_pct(cluster: Cluster) -> float:
    """The share of one core the three nodes use together over IDLE_S with no client load:
    the Raft quorum, heartbeats and the followers' waiting fetches."""
    pids = {n: cluster.pid(n) for n in cluster.node_ids}
    before = sum(cpu_s(pid) for pid in pids.values())
    started = time.perf_counter()
    while time.perf_counter() - started < IDLE_S:
        cluster.local.pump(0.1)
    used = sum(cpu_s(pid) for pid in pids.values()) - before
    return 100 * used / (time.perf_counter() - started)


def phase(
    cluster: Cluster, args: argparse.Namespace, topic: str, mode: str, replicas: list[int], run: Run
) -> tuple[ProduceResult, Figures]:
    """One produce phase on a fresh RF 3 topic; its result, and the leader's and the
    followers' CPU per record over exactly the records timed (run and drain, no warm-up)."""
    cpu: dict[int, float] = {}

    def measured(producer: Producer, to: str, deliveries: Deliveries) -> None:
        pids = {n: cluster.pid(n) for n in replicas}
        before = {n: cpu_s(pid) for n, pid in pids.items()}
        run(producer, to, deliveries)
        drain(producer, deliveries, DRAIN_TIMEOUT_S, cluster)
        cpu.update({n: cpu_s(pid) - before[n] for n, pid in pids.items()})

    create_topic(cluster, topic, replicas)
    result = produce_phase(cluster, args, topic, replicas, mode, measured)
    if result.acked < result.records:
        raise SystemExit(f"{mode}: {result.failed} of {result.records} records failed")
    us = 1e6 / result.acked  # CPU seconds to µs per record
    return result, {
        f"leader CPU µs/record, {mode}": cpu[replicas[0]] * us,
        f"followers CPU µs/record, {mode}": sum(cpu[n] for n in replicas[1:]) * us,
    }


def secured_ports(cluster: Cluster) -> set[int]:
    """The ports of B's SASL_SSL listeners (none for A)."""
    listeners = [x for p in cluster.plans for x in p.config["listeners"].split(",")]
    prefix = f"{LINK_LISTENER}://"
    return {int(x.rsplit(":", 1)[1]) for x in listeners if x.startswith(prefix)}


def one_run(label: str, material: TlsMaterial | None, args: argparse.Namespace) -> Figures:
    with tempfile.TemporaryDirectory(prefix=f"strom-bench-links-{label}-") as root:
        cluster = make_cluster(Path(root), material)
        try:
            ready_s, first_s = first_write_s(cluster, args.record_bytes)
            controller = cluster.controller()
            leader = next(n for n in cluster.node_ids if n != controller)
            replicas = [leader, *(n for n in cluster.node_ids if n != leader)]

            def full_speed(producer: Producer, topic: str, deliveries: Deliveries) -> None:
                for i in range(args.records):
                    deliveries.produce(producer, topic)
                    if i & 63 == 63:
                        producer.poll(0)

            def fixed_rate(producer: Producer, topic: str, deliveries: Deliveries) -> None:
                total = round(args.rate * args.seconds)
                pacer = Pacer(producer, topic, deliveries, args.rate, total)
                while not pacer.done:
                    pacer.step()

            figures = {"nodes ready, s": ready_s, "start to first acknowledged write, s": first_s}
            figures["idle cluster CPU %"] = idle_cpu_pct(cluster)
            full, full_cpu = phase(cluster, args, "full", "full speed", replicas, full_speed)
            rate = f"{args.rate:,}/s"
            paced, paced_cpu = phase(cluster, args, "paced", rate, replicas, fixed_rate)
            figures["full speed rec/s"] = full.records_per_s
            figures |= {f"p50 ms at {rate}": paced.p50_ms, f"p99 ms at {rate}": paced.p99_ms}
            figures |= full_cpu | paced_cpu
            on_controller = established({p.controller_port for p in cluster.plans})
            on_secured = established(secured_ports(cluster))
            client = f"{full.client_cpu_pct:.0f} % and {paced.client_cpu_pct:.0f} %"
            others = f"{full.others_cpu_pct:.0f} % and {paced.others_cpu_pct:.0f} %"
        finally:
            cluster.local.stop()
    log(
        f"{label} ({CONFIGS[label]}): leader {leader}, controller {controller}; connections "
        f"accepted on the controller listeners {on_controller}, on the SASL_SSL listeners "
        f"{on_secured}; in the two phases the client used {client} of a core, other "
        f"processes {others}; " + ", ".join(f"{k} {v:,.2f}" for k, v in figures.items())
    )
    return figures


def print_report(args: argparse.Namespace, results: dict[str, list[Figures]]) -> None:
    print(
        f"\n{NODES} combined nodes, one partition, RF 3, min.insync.replicas=2, "
        f"{args.records:,} records of {args.record_bytes} bytes at full speed, "
        f"{args.rate:,} records/s for {args.seconds:g} s, {args.rounds} round(s)\n"
    )
    heads = [f"{k} {v}, median (min-max)" for k, v in CONFIGS.items()]
    print(f"| figure | {' | '.join(heads)} | B/A |")
    print("|---" * 4 + "|")
    for figure in results["A"][0]:
        cells, medians = [], []
        for label in CONFIGS:
            values = [run[figure] for run in results[label]]
            medians.append(statistics.median(values))
            digits = 0 if medians[-1] >= 100 else 2
            low, high = min(values), max(values)
            cells.append(f"{medians[-1]:,.{digits}f} ({low:,.{digits}f}-{high:,.{digits}f})")
        print(f"| {figure} | {' | '.join(cells)} | {medians[1] / medians[0]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="A B pairs")
    parser.add_argument("--records", type=int, default=200_000, help="records at full speed")
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5_000, help="records/s of the fixed rate")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the fixed rate")
    parser.add_argument("--quick", action="store_true", help=f"a smoke run: {QUICK}")
    args = parser.parse_args()
    for name, value in QUICK.items() if args.quick else ():
        if getattr(args, name) == parser.get_default(name):  # options given still count
            setattr(args, name, value)
    if args.record_bytes < 8 or min(args.rounds, args.records, args.rate) < 1:
        parser.error("--record-bytes must be at least 8, the counts and the rate positive")
    signal.signal(signal.SIGTERM, interrupt)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strom-bench-links-tls-") as tls_dir:
        material = make_tls_material(Path(tls_dir))
        results: dict[str, list[Figures]] = {label: [] for label in CONFIGS}
        for _ in range(args.rounds):
            results["A"].append(one_run("A", None, args))
            results["B"].append(one_run("B", material, args))
    print_report(args, results)
    command = shlex.join(["python", *sys.argv])
    print(f"\nrun time {time.monotonic() - started:.0f} s; command: {command}")


if __name__ == "__main__":
    main()
