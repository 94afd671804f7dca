"""Client quotas enforced, with confluent-kafka against one broker: a producer and a
consumer over their byte rates are slowed to them (Kafka's throttle: `throttle_time_ms`
in the answers, the connection muted), while clients without a quota keep their speed;
an address over its connection_creation_rate is refused while another is served; and
topic changes over the controller_mutation_rate are let through and told to wait.
Quotas are set with `strom quota`, as an operator would."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import kafka
import kafka_wire as wire
import pytest
from broker import BrokerProcess
from client_helpers import CLIENT_TIMEOUT_S, unique_topic
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

RATE = 20_000
"""The byte rate given to the slow clients: 20 kB a second."""
SECONDS = 2.0
RECORD = b"x" * 1000
BURST_S = 10
"""Kafka measures a first burst over ten one-second windows: a new client may send about
RATE * 10 bytes before its first wait, strom too."""
THROTTLING_QUOTA_EXCEEDED = 89


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(tmp_path_factory.mktemp("quota-throttling") / "data")
    broker.start()
    try:
        for client_id, key in (
            ("slow-writer", "producer_byte_rate"),
            ("slow-reader", "consumer_byte_rate"),
        ):
            done = subprocess.run(
                [sys.executable, "-m", "strom", "quota", "set", "--client-id", client_id,
                 f"{key}={RATE}", "-b", broker.bootstrap],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
        yield broker
    finally:
        broker.kill()


def _produce_for(bootstrap: str, client_id: str, topic: str, throttled: list[Any]) -> int:
    """Bytes acknowledged to a producer writing as fast as it can, within SECONDS."""
    acked = 0

    def on_delivery(error: Any, message: Any) -> None:
        nonlocal acked
        if error is None:
            acked += len(message.value())

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "throttle_cb": throttled.append,
        }
    )
    deadline = time.monotonic() + SECONDS
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, RECORD, partition=0, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.poll(0)
    within = acked
    producer.purge()  # what is still queued or in flight is not waited for
    producer.flush(CLIENT_TIMEOUT_S)
    return within


def test_a_producer_over_its_quota_is_slowed_and_another_is_not(
    quota_broker: BrokerProcess,
) -> None:
    topic = unique_topic("quota-produce")
    slow_throttles: list[Any] = []
    fast_throttles: list[Any] = []
    results: dict[str, int] = {}

    def run(client_id: str, throttles: list[Any]) -> None:
        results[client_id] = _produce_for(quota_broker.bootstrap, client_id, topic, throttles)

    threads = [
        threading.Thread(target=run, args=("slow-writer", slow_throttles)),
        threading.Thread(target=run, args=("fast-writer", fast_throttles)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    slow, fast = results["slow-writer"], results["fast-writer"]
    # The slow one wrote its burst and the request that took it over (librdkafka's
    # batches reach 1 MB), no more; the other about as much as it could.
    assert slow <= RATE * (BURST_S + SECONDS) * 1.25 + 1_048_576, slow
    assert fast >= 5 * slow, (fast, slow)
    assert slow_throttles and all(e.broker_name for e in slow_throttles)
    assert max(e.throttle_time for e in slow_throttles) > 0
    assert fast_throttles == []


def test_a_consumer_over_its_quota_is_slowed_and_another_is_not(
    quota_broker: BrokerProcess,
) -> None:
    topic = unique_topic("quota-fetch")
    producer = Producer({"bootstrap.servers": quota_broker.bootstrap, "linger.ms": 20})
    for _ in range(4_000):  # 4 MB, far more than the slow reader's burst
        producer.produce(topic, RECORD, partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0

    def read_for(client_id: str, throttles: list[Any], seconds: float) -> int:
        consumer = Consumer(
            {
                "bootstrap.servers": quota_broker.bootstrap,
                "client.id": client_id,
                "group.id": f"{client_id}-{topic}",
                "enable.auto.commit": False,
                "throttle_cb": throttles.append,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = 0
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline and read < 4_000 * len(RECORD):
                for message in consumer.consume(500, timeout=0.2):
                    if message.error() is None:
                        read += len(message.value())
        finally:
            consumer.close()
        return read

    slow_throttles: list[Any] = []
    fast_throttles: list[Any] = []
    slow = read_for("slow-reader", slow_throttles, SECONDS)
    # The reader without a quota reads everything; how long that takes on a loaded
    # machine is not what is tested, so it is given more than SECONDS.
    fast = read_for("fast-reader", fast_throttles, CLIENT_TIMEOUT_S)
    assert fast == 4_000 * len(RECORD)
    # Each fetch answer may carry up to a partition's fetch size beyond the burst.
    assert slow <= RATE * (BURST_S + SECONDS) * 1.25 + 1_048_576, slow
    assert slow < fast
    assert slow_throttles and fast_throttles == []


def _answers_from(bootstrap: str, source: str) -> bool:
    """Whether a new connection from `source` (a loopback address) gets an ApiVersions
    answer; False when the broker closes it."""
    host, port = bootstrap.rsplit(":", 1)
    asked = wire.ApiVersionsRequest(client_software_name="t", client_software_version="1")
    with socket.create_connection((host, int(port)), 10, source_address=(source, 0)) as sock:
        wire.send_body(sock, asked)
        try:
            wire.read_frame(sock)
        except (wire.Closed, OSError):
            return False
        return True


def test_an_address_over_its_connection_creation_rate_is_refused(
    quota_broker: BrokerProcess,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strom", "quota", "set", "--ip", "127.0.0.3",
         "connection_creation_rate=2", "-b", quota_broker.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # At 2 a second, a first burst of about 20 connections passes, then they are refused.
    served = [_answers_from(quota_broker.bootstrap, "127.0.0.3") for _ in range(23)]
    assert served[:15] == [True] * 15 and served[-2:] == [False] * 2, served
    # Another address, without a quota of its own, is served all the while.
    assert all(_answers_from(quota_broker.bootstrap, "127.0.0.4") for _ in range(23))
    assert "over its connection_creation_rate client quota" in quota_broker.read_log()


def test_topic_changes_over_the_mutation_rate_are_paced(quota_broker: BrokerProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strom", "quota", "set", "--client-id", "slow-admin",
         "controller_mutation_rate=1", "-b", quota_broker.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    throttles: list[Any] = []
    admin = AdminClient(
        {
            "bootstrap.servers": quota_broker.bootstrap,
            "client.id": "slow-admin",
            "throttle_cb": throttles.append,
        }
    )
    prefix = unique_topic("quota-admin")
    # 30 partitions from a bucket of 11: let through (librdkafka's CreateTopics version
    # predates the strict error) and told to wait 19 s.
    futures = admin.create_topics([NewTopic(f"{prefix}-{i}", 10, 1) for i in range(3)])
    for future in futures.values():
        future.result(CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while not throttles and time.monotonic() < deadline:
        admin.poll(0.1)
    assert throttles and max(e.throttle_time for e in throttles) > 10


def test_a_strict_client_is_refused_the_topics_over_its_mutation_rate(
    quota_broker: BrokerProcess,
) -> None:
    """kafka-python's admin client sends CreateTopics v7, whose clients know
    THROTTLING_QUOTA_EXCEEDED: the topic that finds the bucket below zero is refused."""
    done = subprocess.run(
        [sys.executable, "-m", "strom", "quota", "set", "--client-id", "strict-admin",
         "controller_mutation_rate=1", "-b", quota_broker.bootstrap],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    prefix = unique_topic("quota-strict")
    names = [f"{prefix}-{i}" for i in range(3)]
    admin = kafka.KafkaAdminClient(
        bootstrap_servers=quota_broker.bootstrap, client_id="strict-admin"
    )
    try:
        # A bucket of 11: the first 10 partitions leave 1, the next 10 take it to -9,
        # the last 10 find it below zero.
        answer = admin.create_topics(
            {name: {"num_partitions": 10, "replication_factor": 1} for name in names},
            raise_errors=False,
        )
    finally:
        admin.close()
    errors = {topic["name"]: topic["error_code"] for topic in answer["topics"]}
    assert errors == {names[0]: 0, names[1]: 0, names[2]: THROTTLING_QUOTA_EXCEEDED}, answer
    refused = answer["topics"][2]
    assert refused["error_message"] == "The throttling quota has been exceeded."
