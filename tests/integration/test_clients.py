"""Real Kafka clients (confluent-kafka, kafka-python) round-tripping records through a
strom broker: codecs, idempotent producers, acks and long polls.

Every test talks to a broker (the `strom_broker` fixture: one node, stopped after the
test) over loopback sockets; nothing is mocked. Waiting is done by polling with
deadlines, never by sleeping, and every client a test starts is closed in a `finally`.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from typing import Any

import kafka
import kafka.errors
import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    CODEC_IDS,
    Deliveries,
    Rec,
    check_keys_stick,
    check_round_trip,
    confluent_consumer,
    confluent_producer,
    consume_confluent,
    consume_kafka_python,
    counts_of,
    create_topic,
    expected_by_partition,
    kp_consumer,
    kp_producer,
    make_records,
    produce_confluent,
    produce_kafka_python,
    stored_batches,
    unique_topic,
    wait_until,
    watermarks,
)
from confluent_kafka import TopicPartition
from node_files import log_dir

from strom.testing import StromCluster

# --- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip_100k(strom_broker: StromCluster, codec: str) -> None:
    topic = unique_topic(f"rt-{codec}")
    create_topic(strom_broker.bootstrap_servers, topic, 6)
    records = make_records(100_000, seed=sum(codec.encode()))
    partitions, offsets = produce_confluent(
        strom_broker.bootstrap_servers, topic, records, **{"compression.type": codec}
    )
    assert set(partitions) == set(range(6)), "records should spread over all 6 partitions"
    check_keys_stick(records, partitions)
    expected = expected_by_partition(records, partitions, offsets)
    got = consume_confluent(strom_broker.bootstrap_servers, topic, counts_of(expected))
    check_round_trip(expected, got)
    for partition, want in expected.items():
        assert watermarks(strom_broker.bootstrap_servers, topic, partition) == (0, len(want))
        batches = stored_batches(log_dir(strom_broker), topic, partition)
        assert batches, f"no batches stored for partition {partition}"
        codecs = {attributes & 0x7 for attributes, _ in batches}
        # librdkafka sends a batch uncompressed when compressing does not make it smaller.
        assert CODEC_IDS[codec] in codecs <= {0, CODEC_IDS[codec]}, (
            f"stored codecs {codecs}, produced {codec}"
        )


@pytest.mark.parametrize("codec", [None, "gzip"])
def test_kafka_python_round_trip(strom_broker: StromCluster, codec: str | None) -> None:
    topic = unique_topic(f"kp-{codec}")
    create_topic(strom_broker.bootstrap_servers, topic, 4)
    records = make_records(5_000, seed=11, null_header_values=False)
    partitions, offsets = produce_kafka_python(
        strom_broker.bootstrap_servers, topic, records, compression_type=codec
    )
    check_keys_stick(records, partitions)
    expected = expected_by_partition(records, partitions, offsets)
    got = consume_kafka_python(strom_broker.bootstrap_servers, topic, counts_of(expected))
    check_round_trip(expected, got)


def test_kafka_python_to_confluent(strom_broker: StromCluster) -> None:
    topic = unique_topic("kp2ck")
    create_topic(strom_broker.bootstrap_servers, topic, 3)
    records = make_records(5_000, seed=12, null_header_values=False)
    partitions, offsets = produce_kafka_python(
        strom_broker.bootstrap_servers, topic, records, compression_type="gzip"
    )
    expected = expected_by_partition(records, partitions, offsets)
    check_round_trip(
        expected, consume_confluent(strom_broker.bootstrap_servers, topic, counts_of(expected))
    )


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_confluent_to_kafka_python(strom_broker: StromCluster, codec: str) -> None:
    topic = unique_topic("ck2kp")
    create_topic(strom_broker.bootstrap_servers, topic, 3)
    records = make_records(5_000, seed=13)
    partitions, offsets = produce_confluent(
        strom_broker.bootstrap_servers, topic, records, **{"compression.type": codec}
    )
    expected = expected_by_partition(records, partitions, offsets)
    check_round_trip(
        expected, consume_kafka_python(strom_broker.bootstrap_servers, topic, counts_of(expected))
    )


# --- producer guarantees ---------------------------------------------------------------


def test_idempotent_producer_exactly_once_in_order(strom_broker: StromCluster) -> None:
    topic = unique_topic("idem")
    create_topic(strom_broker.bootstrap_servers, topic, 3)
    records = [Rec(b"k%d" % (i % 50), b"%d" % i, ()) for i in range(20_000)]
    partitions, offsets = produce_confluent(
        strom_broker.bootstrap_servers,
        topic,
        records,
        **{"enable.idempotence": True, "linger.ms": 5, "batch.size": 64 * 1024},
    )
    expected = expected_by_partition(records, partitions, offsets)
    got = consume_confluent(strom_broker.bootstrap_servers, topic, counts_of(expected))
    check_round_trip(expected, got)
    values = sorted(int(rec.value or b"") for have in got.values() for _, rec in have)
    assert values == list(range(len(records))), "each record exactly once"
    for partition in expected:
        assert watermarks(strom_broker.bootstrap_servers, topic, partition)[1] == len(
            expected[partition]
        ), "no duplicates appended beyond what was consumed"
        producer_ids = {pid for _, pid in stored_batches(log_dir(strom_broker), topic, partition)}
        assert len(producer_ids) == 1 and min(producer_ids) >= 0, "batches carry a producer id"


def test_idempotent_producer_across_broker_restart(
    strom_broker: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The producer keeps its id and sequences while the broker restarts underneath it."""
    topic = unique_topic("idem-restart")
    create_topic(strom_broker.bootstrap_servers, topic, 2)
    deliveries = Deliveries(4_000)
    conf = {"enable.idempotence": True, "linger.ms": 5}
    with confluent_producer(strom_broker.bootstrap_servers, **conf) as producer:
        for i in range(4_000):
            if i == 2_000:
                assert producer.flush(CLIENT_TIMEOUT_S) == 0
                strom_broker.restart_node(1)  # a clean stop (NodeError if not) and a start
            producer.produce(
                topic,
                key=b"k%d" % (i % 13),
                value=b"%d" % i,
                on_delivery=functools.partial(deliveries.callback, i),
            )
            producer.poll(0)
        assert producer.flush(CLIENT_TIMEOUT_S * 2) == 0
    assert not deliveries.errors, (list(deliveries.errors.items())[:3], caplog.text)
    records = [Rec(b"k%d" % (i % 13), b"%d" % i, ()) for i in range(4_000)]
    expected = expected_by_partition(records, deliveries.partition, deliveries.offset)
    check_round_trip(
        expected, consume_confluent(strom_broker.bootstrap_servers, topic, counts_of(expected))
    )


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_deliver(strom_broker: StromCluster, acks: str) -> None:
    topic = unique_topic(f"acks{acks}")
    create_topic(strom_broker.bootstrap_servers, topic, 2)
    records = [Rec(b"k%d" % (i % 7), b"acks-%s-%d" % (acks.encode(), i), ()) for i in range(500)]
    deliveries = Deliveries(len(records))
    with confluent_producer(
        strom_broker.bootstrap_servers, acks=acks, **{"linger.ms": 5}
    ) as producer:
        for index, rec in enumerate(records):
            producer.produce(
                topic,
                key=rec.key,
                value=rec.value,
                on_delivery=functools.partial(deliveries.callback, index),
            )
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert not deliveries.errors, deliveries.errors
    # acks=0 gets no offsets back; the consumer is the judge of what arrived.
    counts: dict[int, int] = defaultdict(int)
    for partition in deliveries.partition:
        counts[partition] += 1
    wait_until(
        lambda: (
            sum(watermarks(strom_broker.bootstrap_servers, topic, p)[1] for p in (0, 1))
            == len(records)
        ),
        CLIENT_TIMEOUT_S,
        "all records to become visible",
    )
    got = consume_confluent(strom_broker.bootstrap_servers, topic, dict(counts))
    values = sorted(rec.value or b"" for have in got.values() for _, rec in have)
    assert values == sorted(rec.value or b"" for rec in records)
    for have in got.values():
        order = [int((rec.value or b"").rsplit(b"-", 1)[1]) for _, rec in have]
        assert order == sorted(order), "per-partition order is produce order"


# --- long polling ----------------------------------------------------------------------


def test_long_poll_confluent(strom_broker: StromCluster) -> None:
    topic = unique_topic("lp")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    with confluent_consumer(
        strom_broker.bootstrap_servers, **{"fetch.wait.max.ms": 2000, "fetch.min.bytes": 1}
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        early = consumer.poll(0.5)
        assert early is None or early.error() is not None, "nothing to read yet"
        with confluent_producer(strom_broker.bootstrap_servers) as producer:
            producer.produce(topic, key=b"k", value=b"while you wait", partition=0)
            assert producer.flush(CLIENT_TIMEOUT_S) == 0
        deadline = time.monotonic() + 15
        msg = None
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is not None:
                msg = None
        assert msg is not None, "the waiting consumer never got the record"
        assert (msg.key(), msg.value(), msg.offset()) == (b"k", b"while you wait", 0)


def test_long_poll_kafka_python(strom_broker: StromCluster) -> None:
    topic = unique_topic("lpk")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    with kp_consumer(
        strom_broker.bootstrap_servers, fetch_max_wait_ms=2000, fetch_min_bytes=1
    ) as consumer:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert consumer.poll(timeout_ms=500) == {}
        with kp_producer(strom_broker.bootstrap_servers) as producer:
            producer.send(topic, key=b"k", value=b"while you wait", partition=0).get(
                timeout=CLIENT_TIMEOUT_S
            )
        deadline = time.monotonic() + 15
        batch: list[Any] = []
        while not batch and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200).get(tp, [])
        assert batch, "the waiting consumer never got the record"
        assert (batch[0].key, batch[0].value, batch[0].offset) == (b"k", b"while you wait", 0)
