"""Real clients against strom's limits and defaults: oversized messages refused, topics
auto-created (or not) on produce, and kcat producing, consuming and listing.
"""

from __future__ import annotations

import random
import shutil
import subprocess

import kafka
import kafka.errors
import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    admin_client,
    confluent_producer,
    create_topic,
    kp_consumer,
    kp_producer,
    unique_topic,
    watermarks,
)
from confluent_kafka import KafkaError, KafkaException
from node_files import log_dir

from strom.testing import StromCluster

# --- limits ----------------------------------------------------------------------------


def test_message_too_large_confluent(strom_broker: StromCluster) -> None:
    topic = unique_topic("big")
    create_topic(strom_broker.bootstrap_servers, topic, 1, **{"max.message.bytes": "2000"})
    with confluent_producer(strom_broker.bootstrap_servers, **{"linger.ms": 0}) as producer:
        producer.produce(topic, value=b"s" * 100, partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert watermarks(strom_broker.bootstrap_servers, topic) == (0, 1)

    errors: list[KafkaError] = []
    with confluent_producer(
        strom_broker.bootstrap_servers, **{"message.send.max.retries": 0}
    ) as producer:
        producer.produce(
            topic,
            value=bytes(random.Random(1).randbytes(5000)),
            partition=0,
            on_delivery=lambda err, msg: errors.append(err),
        )
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert len(errors) == 1 and errors[0] is not None, "the oversized record was accepted"
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors[0]
    assert watermarks(strom_broker.bootstrap_servers, topic) == (0, 1), "nothing may be appended"


def test_message_too_large_kafka_python(strom_broker: StromCluster) -> None:
    topic = unique_topic("bigk")
    create_topic(strom_broker.bootstrap_servers, topic, 1, **{"max.message.bytes": "2000"})
    with kp_producer(strom_broker.bootstrap_servers, retries=0) as producer:
        future = producer.send(topic, value=random.Random(2).randbytes(5000), partition=0)
        with pytest.raises(kafka.errors.MessageSizeTooLargeError):
            future.get(timeout=CLIENT_TIMEOUT_S)
        producer.send(topic, value=b"small", partition=0).get(timeout=CLIENT_TIMEOUT_S)
    assert watermarks(strom_broker.bootstrap_servers, topic) == (0, 1), (
        "only the small record is stored"
    )


# --- auto-creation ---------------------------------------------------------------------


@pytest.mark.strom(config={"num.partitions": 3})
def test_auto_create_on_produce(
    strom_broker: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    topic = unique_topic("auto")
    with confluent_producer(strom_broker.bootstrap_servers) as producer:
        for i in range(30):
            producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0, caplog.text
    metadata = admin_client(strom_broker.bootstrap_servers).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic in metadata.topics, caplog.text
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    total = sum(watermarks(strom_broker.bootstrap_servers, topic, p)[1] for p in range(3))
    assert total == 30

    # kafka-python asks for auto-creation too.
    other = unique_topic("autok")
    with kp_producer(strom_broker.bootstrap_servers) as kproducer:
        kproducer.send(other, value=b"x").get(timeout=CLIENT_TIMEOUT_S)
    with kp_consumer(strom_broker.bootstrap_servers) as consumer:
        assert consumer.partitions_for_topic(other) == {0, 1, 2}


@pytest.mark.strom(config={"auto.create.topics.enable": False})
def test_auto_create_disabled(strom_broker: StromCluster) -> None:
    topic = unique_topic("noauto")
    errors: list[KafkaError] = []
    conf = {"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10_000}
    with confluent_producer(strom_broker.bootstrap_servers, **conf) as producer:
        try:
            producer.produce(topic, value=b"x", on_delivery=lambda err, m: errors.append(err))
        except KafkaException as exc:  # librdkafka may already know the topic is missing
            errors.append(exc.args[0])
        producer.flush(CLIENT_TIMEOUT_S)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
    ), errors[0]

    metadata = admin_client(strom_broker.bootstrap_servers).list_topics(
        topic, timeout=CLIENT_TIMEOUT_S
    )
    entry = metadata.topics.get(topic)
    assert entry is not None and entry.error is not None
    assert entry.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    all_topics = admin_client(strom_broker.bootstrap_servers).list_topics(timeout=CLIENT_TIMEOUT_S)
    assert topic not in all_topics.topics
    assert not (log_dir(strom_broker) / f"{topic}-0").exists()


# --- kcat ------------------------------------------------------------------------------


def test_kcat_produce_consume_list(strom_broker: StromCluster) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    topic = unique_topic("kcat")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    lines = [f"line {i}" for i in range(20)]
    subprocess.run(
        [kcat, "-b", strom_broker.bootstrap_servers, "-P", "-t", topic],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    consumed = subprocess.run(
        [
            kcat,
            "-b",
            strom_broker.bootstrap_servers,
            "-C",
            "-t",
            topic,
            "-e",
            "-o",
            "beginning",
            "-q",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert consumed.stdout.splitlines() == lines

    keyed = [f"k{i % 3}:value {i}" for i in range(10)]
    subprocess.run(
        [kcat, "-b", strom_broker.bootstrap_servers, "-P", "-t", topic, "-K", ":", "-p", "0"],
        input="\n".join(keyed) + "\n",
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    consumed = subprocess.run(
        [
            kcat,
            "-b",
            strom_broker.bootstrap_servers,
            "-C",
            "-t",
            topic,
            "-e",
            "-q",
            "-o",
            "20",
            "-f",
            "%o %k:%s\n",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert consumed.stdout.splitlines() == [f"{20 + i} {line}" for i, line in enumerate(keyed)]
    listing = subprocess.run(
        [kcat, "-b", strom_broker.bootstrap_servers, "-L"],
        capture_output=True,
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert f'topic "{topic}"' in listing.stdout
