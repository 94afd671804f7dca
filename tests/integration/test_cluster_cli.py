"""`strom cluster status`, `strom config` and `strom dev` against a real 3-node cluster."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_runner import strom
from cluster import TestCluster, free_ports, running_cluster
from zookeeper import kazoo_client

from strom.cli.dev_cluster import port_in_use

STATUS_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestCluster]:
    """One 3-node cluster shared by the tests of this module; only the last one stops a
    node, and it starts it again. A short session fences a killed broker quickly."""
    settings = ["broker.session.timeout.ms=3000", "broker.heartbeat.interval.ms=500"]
    with running_cluster(tmp_path_factory.mktemp("cluster"), settings=settings) as started:
        yield started


def table_rows(output: str, first_header: str) -> list[list[str]]:
    """The rows of the table whose header line starts with `first_header`."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def config_value(cluster: TestCluster, topic: str, key: str) -> tuple[str, str]:
    """(value, source) of one topic config, as `strom config get` prints it."""
    result = strom("config", "get", "--topic", topic, key, "-b", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    rows = table_rows(result.stdout, "KEY")
    assert len(rows) == 1 and rows[0][0] == key, result.stdout
    return rows[0][1], rows[0][2]


def test_cluster_status_shows_three_voters_a_leader_and_three_live_brokers(
    cluster: TestCluster,
) -> None:
    def healthy() -> subprocess.CompletedProcess[str] | None:
        result = strom("cluster", "status", "-b", cluster.bootstrap)
        if result.returncode == 0 and "Brokers: 3 live, 0 fenced" in result.stdout:
            return result
        return None

    result = cluster.wait_until(healthy, STATUS_TIMEOUT_S, "3 live brokers in cluster status")
    out = result.stdout
    assert "Cluster id:" in out and "Cluster name:  strom" in out
    voters = table_rows(out, "NODE   ROLE")
    assert sorted(row[0] for row in voters) == ["1", "2", "3"]
    roles = sorted(row[1] for row in voters)
    assert roles == ["follower", "follower", "leader"]
    leader = next(row[0] for row in voters if row[1] == "leader")
    assert f"Controller:    node {leader}" in out
    assert f"leader node {leader}" in out
    controller_addresses = {cluster.plan(i).controller_address for i in cluster.node_ids}
    assert {row[2] for row in voters} == controller_addresses
    brokers = table_rows(out, "NODE   ADDRESS")
    assert [(row[0], row[1], row[-1]) for row in brokers] == [
        (str(i), cluster.address(i), "live") for i in cluster.node_ids
    ]


def test_unreachable_cluster_exits_3() -> None:
    [port] = free_ports(1)
    result = strom("cluster", "status", "-b", f"127.0.0.1:{port}", "--timeout", "2")
    assert result.returncode == 3
    assert result.stderr == (
        f"strom: cannot reach a broker at 127.0.0.1:{port} (connection refused)\n"
    )


def test_topic_config_set_get_delete(cluster: TestCluster) -> None:
    b = ["-b", cluster.bootstrap]
    created = strom("topic", "create", "configured", *b)
    assert created.returncode == 0, created.stderr
    default_value, default_source = config_value(cluster, "configured", "retention.ms")
    assert default_source != "DYNAMIC_TOPIC_CONFIG"

    changed = strom("config", "set", "--topic", "configured", "retention.ms=1234", *b)
    assert changed.returncode == 0, changed.stderr
    assert changed.stdout == "set retention.ms=1234 for topic 'configured'\n"
    assert config_value(cluster, "configured", "retention.ms") == ("1234", "DYNAMIC_TOPIC_CONFIG")

    deleted = strom("config", "delete", "--topic", "configured", "retention.ms", *b)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout == "deleted retention.ms for topic 'configured'\n"
    assert config_value(cluster, "configured", "retention.ms") == (default_value, default_source)


def test_config_errors_are_one_line_each(cluster: TestCluster) -> None:
    b = ["-b", cluster.bootstrap]
    missing = strom("config", "get", "--topic", "no-such-topic", *b)
    assert missing.returncode == 1
    assert missing.stderr == "strom: topic 'no-such-topic' does not exist\n"

    assert strom("topic", "create", "strict", *b).returncode == 0
    bad = strom("config", "set", "--topic", "strict", "retention.ms=soon", *b)
    assert bad.returncode == 1
    assert bad.stderr.startswith("strom: topic 'strict': INVALID_CONFIG: ")
    assert bad.stderr.count("\n") == 1

    static = strom("config", "set", "--broker", "1", "log.dirs=/elsewhere", *b)
    assert static.returncode == 1
    assert static.stderr.startswith("strom: broker 1: ")
    assert static.stderr.count("\n") == 1

    unknown_key = strom("config", "get", "--topic", "strict", "no.such.key", *b)
    assert unknown_key.returncode == 1
    assert unknown_key.stderr == "strom: topic 'strict' has no config 'no.such.key'\n"


def test_cluster_default_set_get_delete(cluster: TestCluster) -> None:
    b = ["-b", cluster.bootstrap]
    changed = strom("config", "set", "--cluster-default", "log.retention.ms=7200000", *b)
    assert changed.returncode == 0, changed.stderr
    try:
        shown = strom("config", "get", "--cluster-default", "log.retention.ms", *b)
        assert shown.returncode == 0, shown.stderr
        rows = table_rows(shown.stdout, "KEY")
        assert rows == [["log.retention.ms", "7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG"]]
    finally:
        deleted = strom("config", "delete", "--cluster-default", "log.retention.ms", *b)
    assert deleted.returncode == 0, deleted.stderr


def broker_states(cluster: TestCluster) -> dict[int, str]:
    result = strom("cluster", "status", "-b", cluster.bootstrap)
    assert result.returncode == 0, result.stderr
    return {int(row[0]): row[-1] for row in table_rows(result.stdout, "NODE   ADDRESS")}


def test_a_killed_broker_is_fenced_unregistered_and_registers_again(cluster: TestCluster) -> None:
    """Runs last among the tests on the shared cluster: it kills a node (not the leader),
    unregisters it (`strom cluster unregister`), and starts it again."""
    status = strom("cluster", "status", "-b", cluster.bootstrap)
    voters = table_rows(status.stdout, "NODE   ROLE")
    victim = next(int(row[0]) for row in voters if row[1] != "leader")
    cluster.kill(victim)
    cluster.wait_until(
        lambda: broker_states(cluster).get(victim) == "fenced", 30, f"broker {victim} fenced"
    )
    done = strom("cluster", "unregister", str(victim), "-b", cluster.bootstrap)
    assert (done.returncode, done.stdout) == (0, f"broker {victim} unregistered\n"), done.stderr
    assert victim not in broker_states(cluster)
    again = strom("cluster", "unregister", str(victim), "-b", cluster.bootstrap)
    assert again.returncode == 1
    assert again.stderr.strip() == (
        f"strom: broker {victim}: BROKER_ID_NOT_REGISTERED: broker {victim} is not registered"
    )
    cluster.start(victim)
    cluster.wait_until(
        lambda: broker_states(cluster) == dict.fromkeys(cluster.node_ids, "live"),
        30,
        f"broker {victim} live again",
    )


# --- strom dev ------------------------------------------------------------------------


def free_base_port() -> int:
    """A base port whose client (base..base+2), controller (base+100..) and secure
    (base+200.., strom dev --secure) ports are free."""
    for _ in range(50):
        [base] = free_ports(1)
        ports = [base + offset + i for offset in (0, 100, 200) for i in range(3)]
        if max(ports) <= 65535 and not any(port_in_use("127.0.0.1", p) for p in ports):
            return base
    raise AssertionError("no free range of ports for strom dev")


def read_until(process: subprocess.Popen[bytes], marker: str, timeout_s: float) -> str:
    """Stdout until a line containing `marker` (select, as broker.py reads the ready line)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buffered = b""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buffered += chunk
            if marker.encode() in buffered and buffered.endswith(b"\n"):
                return buffered.decode()
        elif process.poll() is not None:
            break
    raise AssertionError(f"no {marker!r} from strom dev; its output:\n{buffered.decode()}")


@contextlib.contextmanager
def running_dev(
    data_dir: Path, base_port: int, stderr_path: Path, *options: str
) -> Iterator[DevRun]:
    """`strom dev --nodes 3 [options]` until its bootstrap line; killed (with its nodes)
    at the end unless the test stopped it."""
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "strom", "dev", "--nodes", "3"),
                *("--data-dir", str(data_dir), "--base-port", str(base_port)),
                *options,
            ],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        try:
            output = read_until(process, "bootstrap servers:", 90)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nstderr:\n{stderr_path.read_text()}") from None
        yield DevRun(process, output, stderr_path)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        kill_orphaned_nodes(data_dir)


@dataclass(frozen=True)
class DevRun:
    process: subprocess.Popen[bytes]
    output: str
    stderr_path: Path

    @property
    def bootstrap(self) -> str:
        return self.output.split("bootstrap servers: ", 1)[1].split()[0]

    def cluster_id(self) -> str:
        result = strom("cluster", "status", "-b", self.bootstrap)
        assert result.returncode == 0, result.stderr
        return result.stdout.split("Cluster id:", 1)[1].split()[0]

    def stop(self) -> str:
        """SIGTERM; what it wrote to stderr, once it has exited with code 0."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(60) == 0, self.stderr_path.read_text()
        return self.stderr_path.read_text()


def produce_one(bootstrap: str, topic: str, value: bytes) -> list[object]:
    """The delivery errors of one acks=all record (None: delivered); the producer is gone
    on return, so it does not go on trying to reach a stopped cluster."""
    from confluent_kafka import Producer

    errors: list[object] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, value, on_delivery=lambda error, _message: errors.append(error))
    assert producer.flush(30) == 0
    return errors


def test_strom_dev_runs_a_cluster_a_producer_can_write_to(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    base = free_base_port()
    with running_dev(data_dir, base, tmp_path / "dev-1.stderr") as first:
        expected = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        assert f"bootstrap servers: {expected}" in first.output
        for i in (1, 2, 3):
            assert (data_dir / f"node-{i}.properties").is_file()
            assert (data_dir / f"node-{i}.pid").is_file()
        # Three replicas (strom dev's default): the acks=all record is on every node, so
        # whichever leads after the full restart has it.
        created = strom("topic", "create", "dev-events", "-b", first.bootstrap)
        assert created.returncode == 0, created.stderr
        assert produce_one(first.bootstrap, "dev-events", b"hello") == [None]
        cluster_id = first.cluster_id()
        status = first.stop()
        assert "stopping every node" in status and status.rstrip().endswith("stopped"), status
        assert not list(data_dir.glob("node-*.pid"))

    with running_dev(data_dir, base, tmp_path / "dev-2.stderr") as again:
        assert "with the data of the last run" in again.stderr_path.read_text()
        assert again.cluster_id() == cluster_id
        consumed = strom(
            "consume", "dev-events", "--from-beginning", "--count", "1", "-b", again.bootstrap
        )
        assert (consumed.returncode, consumed.stdout) == (0, "hello\n"), consumed.stderr
        again.stop()


def test_strom_dev_keeps_the_metadata_in_zookeeper_when_told(
    tmp_path: Path, zk_connect: str
) -> None:
    data_dir = tmp_path / "dev"
    with running_dev(
        data_dir, free_base_port(), tmp_path / "dev.stderr", "--zookeeper", zk_connect
    ) as run:
        assert f"metadata in ZooKeeper {zk_connect}" in run.stderr_path.read_text()
        assert "controller.quorum.voters" not in (data_dir / "node-1.properties").read_text()
        created = strom("topic", "create", "zk-events", "-b", run.bootstrap)
        assert created.returncode == 0, created.stderr
        assert produce_one(run.bootstrap, "zk-events", b"kept") == [None]
        status = strom("cluster", "status", "-b", run.bootstrap)
        assert status.returncode == 0, status.stderr
        assert f"Metadata:      ZooKeeper {zk_connect}" in status.stdout
        assert "Brokers: 3 live, 0 fenced" in status.stdout
        with kazoo_client(zk_connect) as client:
            assert sorted(client.get_children("/brokers/ids")) == ["1", "2", "3"]
            assert client.exists("/brokers/topics/zk-events/partitions/0/state")
        run.stop()


def test_strom_dev_refuses_a_zookeeper_nobody_answers_at(tmp_path: Path) -> None:
    [port] = free_ports(1)
    result = strom(
        "dev", "--data-dir", str(tmp_path / "dev"), "--zookeeper", f"127.0.0.1:{port}/strom"
    )
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"strom: no ZooKeeper server of --zookeeper 127.0.0.1:{port}/strom accepts connections"
    )
    assert not (tmp_path / "dev").exists()


def kill_orphaned_nodes(data_dir: Path) -> None:
    """SIGKILL the nodes a killed `strom dev` left behind (their pid files say which)."""
    for pid_file in data_dir.glob("node-*.pid"):
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            if b"strom" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


def test_strom_dev_secure_serves_tls_and_scram_with_the_settings_it_prints(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "dev"
    base = free_base_port()
    with running_dev(data_dir, base, tmp_path / "dev.stderr", "--secure") as run:
        printed = read_until(run.process, "Try:", 60)
        secured = ",".join(f"127.0.0.1:{base + 200 + i}" for i in range(3))
        assert f"TLS and SCRAM-SHA-512 on: {secured}" in printed
        properties = data_dir / "client.properties"
        settings = dict(
            line.split("=", 1) for line in properties.read_text().splitlines() if "=" in line
        )
        assert settings["security.protocol"] == "SASL_SSL"
        assert settings["sasl.username"] == "admin"
        assert f"sasl.password={settings['sasl.password']}" in printed
        assert properties.stat().st_mode & 0o077 == 0  # the password is its owner's only
        secure_bootstrap = f"127.0.0.1:{base + 200}"
        config = ("-b", secure_bootstrap, "--command-config", str(properties))
        created = strom("topic", "create", "secret-events", *config)
        assert created.returncode == 0, created.stderr
        produced = strom("produce", "secret-events", *config, stdin="s3cret\n")
        assert produced.returncode == 0, produced.stderr
        consumed = strom("consume", "secret-events", "--from-beginning", "--count", "1", *config)
        assert (consumed.returncode, consumed.stdout) == (0, "s3cret\n"), consumed.stderr
        status = strom("cluster", "status", *config)  # strom's own client, SCRAM over TLS
        assert status.returncode == 0, status.stderr
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(properties.read_text().replace(settings["sasl.password"], "nope"))
        refused = strom("topic", "list", "-b", secure_bootstrap, "--command-config", str(wrong))
        assert refused.returncode != 0
        assert "(authentication failed)" in refused.stderr
        run.stop()
