"""The `strom` command against a real broker, as a user runs it.

The client commands run against the `strom_broker` fixture; `strom serve` itself, and a
broker that is not there, need no fixture.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from broker import free_port
from cli_runner import strom
from confluent_kafka import Producer

from strom.testing import StromCluster


def test_topic_produce_consume_round_trip(strom_broker: StromCluster) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    created = strom(
        "topic", "create", "events", "--partitions", "3", "--config", "retention.ms=60000", *b
    )
    assert created.returncode == 0, created.stderr
    assert strom("topic", "create", "events", *b).returncode == 1

    listed = strom("topic", "list", *b)
    assert listed.returncode == 0 and "events" in listed.stdout and "3" in listed.stdout

    described = strom("topic", "describe", "events", *b)
    assert described.returncode == 0, described.stderr
    assert "retention.ms" in described.stdout and "60000" in described.stdout

    lines = "".join(f"user{i % 4}:event {i}\n" for i in range(50))
    produced = strom(
        "produce", "events", "--key-separator", ":", "--compression", "zstd", *b, stdin=lines
    )
    assert produced.returncode == 0, produced.stderr
    assert "produced 50 records" in produced.stderr

    consumed = strom("consume", "events", "--from-beginning", "--count", "50", "--print-key", *b)
    assert consumed.returncode == 0, consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert sorted(value for _, value in rows) == sorted(f"event {i}" for i in range(50))
    for key in {key for key, _ in rows}:
        numbers = [int(value.split()[1]) for k, value in rows if k == key]
        assert numbers == sorted(numbers), f"records of key {key} out of order: {numbers}"
    assert {key for key, _ in rows} == {f"user{i}" for i in range(4)}

    grown = strom("topic", "add-partitions", "events", "--total", "5", *b)
    assert grown.returncode == 0, grown.stderr
    assert "5" in strom("topic", "list", *b).stdout

    deleted = strom("topic", "delete", "events", *b)
    assert deleted.returncode == 0, deleted.stderr
    assert "events" not in strom("topic", "list", *b).stdout
    missing = strom("consume", "events", "--count", "1", *b)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_consume_stops_after_timeout_without_records(strom_broker: StromCluster) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    assert strom("topic", "create", "quiet", *b).returncode == 0
    result = strom("consume", "quiet", "--from-beginning", "--timeout-ms", "1500", *b)
    assert result.returncode == 0 and result.stdout == ""


def test_consume_from_a_time_and_only_matching_records(strom_broker: StromCluster) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    assert strom("topic", "create", "timed", "--partitions", "2", *b).returncode == 0
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers})
    for i, fruit in enumerate(["apple", "banana", "apricot", "cherry"]):  # at 1 s, 2 s, ...
        producer.produce("timed", fruit.encode(), f"user{i % 2}", i % 2, timestamp=(i + 1) * 1000)
    assert producer.flush(10) == 0

    def read(*options: str) -> list[str]:
        done = strom("consume", "timed", "--timeout-ms", "1500", *options, *b)
        assert done.returncode == 0, done.stderr
        return sorted(done.stdout.splitlines())

    assert read("--from-timestamp", "2000") == ["apricot", "banana", "cherry"]
    assert read("--from-timestamp", "1970-01-01T00:00:03Z") == ["apricot", "cherry"]
    assert read("--from-timestamp", "1970-01-01T01:00:03+01:00") == ["apricot", "cherry"]
    assert read("--from-timestamp", "5000") == []  # none that late: from the end
    assert read("--from-beginning", "--grep", "^ap") == ["apple", "apricot"]
    assert read("--from-beginning", "--grep", "user1", "--print-key") == [
        "user1\tbanana",
        "user1\tcherry",
    ]
    wrong = strom("consume", "timed", "--from-timestamp", "tomorrow", *b)
    assert wrong.returncode == 2 and "milliseconds since the epoch or an ISO 8601" in wrong.stderr


def test_command_config_settings_reach_librdkafka(
    strom_broker: StromCluster, tmp_path: Path
) -> None:
    b = ["-b", strom_broker.bootstrap_servers]
    assert strom("topic", "create", "configured", *b).returncode == 0
    settings = tmp_path / "client.properties"
    settings.write_text("# as for kafka-topics.sh\nclient.id = ops-tools\n")
    # librdkafka's debug log names each client "<client.id>#<kind>-<n>".
    listed = strom(
        "topic",
        "list",
        "--command-config",
        str(settings),
        *b,
        env={"STROM_LIBRDKAFKA_DEBUG": "broker"},
    )
    assert listed.returncode == 0, listed.stderr
    assert "configured" in listed.stdout
    assert "|ops-tools#" in listed.stderr and "|strom-cli#" not in listed.stderr

    unknown = tmp_path / "unknown.properties"
    unknown.write_text("client.id=ops-tools\nsasl.mechanismz=PLAIN\n")
    refused = strom("topic", "list", "--command-config", str(unknown), *b)
    assert refused.returncode == 2
    assert "'sasl.mechanismz'" in refused.stderr and str(unknown) in refused.stderr
    assert "Traceback" not in refused.stderr

    # strom's own client (cluster status) reads the same file's security keys.
    tls = tmp_path / "tls.properties"
    tls.write_text("security.protocol=SSL\nssl.ca.location=/nonexistent/ca.pem\n")
    status = strom("cluster", "status", "--command-config", str(tls), *b)
    assert status.returncode == 2
    assert "cannot use its TLS settings" in status.stderr
    status = strom("cluster", "status", "--command-config", str(settings), *b)
    assert status.returncode == 0, status.stderr


def test_unreachable_broker_fails_fast_with_exit_code_3() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    result = strom("topic", "list", "-b", address, "--timeout", "2")
    assert result.returncode == 3
    assert f"cannot reach a broker at {address}" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


KAFKA_KRAFT_COMBINED = """\
# The single-node KRaft combined-mode file Kafka ships, with free ports and a temp dir.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:{controller_port}
listeners=PLAINTEXT://:{port},CONTROLLER://:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={log_dirs}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""


def test_kafka_kraft_config_starts_strom_as_is(tmp_path: Path) -> None:
    port, controller_port = free_port(), free_port()
    config = tmp_path / "server.properties"
    config.write_text(
        KAFKA_KRAFT_COMBINED.format(
            port=port, controller_port=controller_port, log_dirs=tmp_path / "kraft-logs"
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "strom", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert f"strom ready on localhost:{port}" in ready, ready
        produced = strom(
            "produce", "kraft", "-b", f"localhost:{port}", stdin="hello\n", timeout_s=60
        )
        assert produced.returncode == 0, produced.stderr
        consumed = strom(
            "consume", "kraft", "--from-beginning", "--count", "1", "-b", f"localhost:{port}"
        )
        assert consumed.stdout == "hello\n"
        assert (tmp_path / "kraft-logs" / "kraft-0").is_dir()
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
    assert "num.network.threads is accepted but has no effect" in stderr


def test_cluster_status_of_one_embedded_node_names_the_address_it_is_reached_at(
    tmp_path: Path,
) -> None:
    """`strom serve` alone (no controller.quorum.voters, no controller listener): the
    quorum's one voter is listed at the node's client listener, not at localhost:0."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    serve = ["serve", "--data-dir", str(tmp_path / "data"), "--listen", address, "--node-id", "1"]
    process = subprocess.Popen(
        [sys.executable, "-m", "strom", *serve],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        ready = process.stdout.readline()
        assert f"strom ready on {address}" in ready, ready
        status = strom("cluster", "status", "-b", address)
        assert status.returncode == 0, status.stderr
        rows = [line.split() for line in status.stdout.splitlines()]
        voters = [row[:3] for row in rows if row[1:2] == ["leader"]]  # NODE ROLE ADDRESS
        assert voters == [["1", "leader", address]], status.stdout
        assert "localhost:0" not in status.stdout
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
