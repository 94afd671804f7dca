"""DescribeLogDirs with kafka-python's admin client (what `kafka-log-dirs.sh` sends) and
strom's own client at the lowest version served, on the `strom_broker` fixture."""

from __future__ import annotations

import asyncio
import subprocess
import sys

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient
from node_files import log_dir

from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey
from strom.testing import StromCluster

RECORDS = 100


def sized_topic(cluster: StromCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("sized", 2, 1)])["sized"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce("sized", b"x" * 100, partition=i % 2)
    assert producer.flush(30) == 0


def test_every_partition_held_here_with_its_size(strom_broker: StromCluster) -> None:
    sized_topic(strom_broker)
    admin = KafkaAdminClient(bootstrap_servers=strom_broker.bootstrap_servers)
    try:
        (answer,) = admin.describe_log_dirs()
        (only,) = admin.describe_log_dirs({"sized": [1]})
        (elsewhere,) = admin.describe_log_dirs({"no-such-topic": [0]})
    finally:
        admin.close()
    assert answer["broker"] == 1
    (directory,) = answer["log_dirs"]
    assert directory["error_code"] == 0
    assert directory["log_dir"] == str(log_dir(strom_broker).resolve())
    assert directory["total_bytes"] >= directory["usable_bytes"] > 0
    topics = {topic["name"]: topic["partitions"] for topic in directory["topics"]}
    sized = topics["sized"]
    assert [p["partition_index"] for p in sized] == [0, 1]
    for partition in sized:
        assert partition["partition_size"] > RECORDS // 2 * 100  # the records and framing
        assert partition["offset_lag"] == 0 and partition["is_future_key"] is False

    (filtered,) = only["log_dirs"]
    assert filtered["topics"] == [{"name": "sized", "partitions": [sized[1]]}]
    assert elsewhere["log_dirs"][0]["topics"] == []  # not held here: left out


def test_version_1_has_no_volume_sizes(strom_broker: StromCluster) -> None:
    sized_topic(strom_broker)
    host, _, port = strom_broker.bootstrap_servers.partition(",")[0].rpartition(":")

    async def ask() -> object:
        connection = await KafkaConnection.connect(host, int(port))
        try:
            return await connection.request(ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": None})
        finally:
            connection.close()

    response = asyncio.run(ask())
    (result,) = response.results  # type: ignore[attr-defined]
    assert [t.name for t in result.topics if t.name == "sized"] == ["sized"]
    assert not hasattr(result, "total_bytes")


def test_strom_cluster_log_dirs(strom_broker: StromCluster) -> None:
    sized_topic(strom_broker)
    command = [sys.executable, "-m", "strom", "cluster", "log-dirs"]
    command += ["-b", strom_broker.bootstrap_servers, "--topic", "sized"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "BROKER",
        "LOG",
        "DIR",
        "TOPIC",
        "PARTITION",
        "SIZE",
        "OFFSET",
        "LAG",
    ]
    rows = [line.split() for line in lines[1:3]]
    assert [(r[0], r[2], r[3], r[-1]) for r in rows] == [
        ("1", "sized", "0", "0"),
        ("1", "sized", "1", "0"),
    ]
    assert rows[0][1] == str(log_dir(strom_broker).resolve())
    assert lines[3].startswith(f"broker 1: {log_dir(strom_broker).resolve()}: ")
    assert "free of" in lines[3]

    command[-1] = "no-such-topic"
    missing = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert missing.returncode != 0 and "no such topic: no-such-topic" in missing.stderr
