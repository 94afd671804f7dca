"""Fetch and ListOffsets through real clients: reading from the middle of a batch,
oversized records, offset resets, timestamps and watermarks.
"""

from __future__ import annotations

import random
import time
from typing import Any

import kafka
import kafka.errors
import kafka_wire as wire
import pytest
from client_helpers import (
    CLIENT_TIMEOUT_S,
    Rec,
    admin_client,
    confluent_consumer,
    confluent_producer,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    kp_consumer,
    produce_confluent,
    stored_batches,
    unique_topic,
    wait_until,
    watermarks,
)
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, TopicPartition
from confluent_kafka.admin import OffsetSpec
from node_files import log_dir, port

from strom.protocol.records import Compression, encode_batch
from strom.testing import StromCluster

# --- fetch positions and sizes ---------------------------------------------------------


def test_fetch_from_the_middle_of_a_batch(strom_broker: StromCluster) -> None:
    topic = unique_topic("mid")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    # One gzip batch of ten records, built here so that no producer timing can split it.
    batch = encode_batch(
        [(None, b"v%d" % i, ()) for i in range(10)],
        base_timestamp_ms=int(time.time() * 1000),
        compression=Compression.GZIP,
    )
    assert wire.produce(port(strom_broker), topic, 0, batch).error_code == 0
    assert len(stored_batches(log_dir(strom_broker), topic, 0)) == 1, (
        "the ten records should share a batch"
    )

    with confluent_consumer(strom_broker.bootstrap_servers) as consumer:
        consumer.assign([TopicPartition(topic, 0, 6)])
        values: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 4 and time.monotonic() < deadline:
            for msg in consumer.consume(10, timeout=0.5):
                if msg.error() is None:
                    values.append((msg.offset(), msg.value()))
    assert values == [(i, b"v%d" % i) for i in range(6, 10)]

    with kp_consumer(strom_broker.bootstrap_servers) as kconsumer:
        tp = kafka.TopicPartition(topic, 0)
        kconsumer.assign([tp])
        kconsumer.seek(tp, 3)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < 7 and time.monotonic() < deadline:
            got += [(r.offset, r.value) for r in kconsumer.poll(timeout_ms=500).get(tp, [])]
    assert got == [(i, b"v%d" % i) for i in range(3, 10)]


def test_record_larger_than_fetch_limits_is_still_delivered(strom_broker: StromCluster) -> None:
    topic = unique_topic("huge")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    big = random.Random(3).randbytes(300_000)
    records = [Rec(None, big, ()), Rec(None, b"after", ())]
    produce_confluent(strom_broker.bootstrap_servers, topic, records)
    small_fetch = {
        "max.partition.fetch.bytes": 1024,
        "fetch.max.bytes": 2048,
        "message.max.bytes": 2048,
    }
    got = consume_confluent(strom_broker.bootstrap_servers, topic, {0: 2}, **small_fetch)
    assert [rec.value for _, rec in got[0]] == [big, b"after"]
    got = consume_kafka_python(
        strom_broker.bootstrap_servers,
        topic,
        {0: 2},
        max_partition_fetch_bytes=1024,
        fetch_max_bytes=2048,
    )
    assert [rec.value for _, rec in got[0]] == [big, b"after"]


def test_out_of_range_offset_resets(strom_broker: StromCluster) -> None:
    topic = unique_topic("oor")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    produce_confluent(
        strom_broker.bootstrap_servers, topic, [Rec(None, b"r%d" % i, ()) for i in range(5)]
    )
    with confluent_consumer(
        strom_broker.bootstrap_servers, **{"auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0, 1000)])
        values: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 5 and time.monotonic() < deadline:
            for msg in consumer.consume(10, timeout=0.5):
                if msg.error() is None:
                    values.append(msg.value())
    assert values == [b"r%d" % i for i in range(5)]
    with kp_consumer(strom_broker.bootstrap_servers, auto_offset_reset="latest") as kconsumer:
        tp = kafka.TopicPartition(topic, 0)
        kconsumer.assign([tp])
        kconsumer.seek(tp, 1000)
        kconsumer.poll(timeout_ms=500)
        wait_until(lambda: kconsumer.position(tp) == 5, CLIENT_TIMEOUT_S, "reset to the end")


# --- ListOffsets -----------------------------------------------------------------------


def test_list_offsets_by_time_and_watermarks(strom_broker: StromCluster) -> None:
    topic = unique_topic("times")
    create_topic(strom_broker.bootstrap_servers, topic, 2)
    base = int(time.time() * 1000) - 3_600_000
    # Offsets 0..9 stamped base, base+1000, ... base+9000; offset 10 is a late record.
    stamps = [base + 1000 * i for i in range(10)] + [base + 500]
    with confluent_producer(strom_broker.bootstrap_servers, **{"linger.ms": 50}) as producer:
        for i, stamp in enumerate(stamps):
            producer.produce(topic, value=b"t%d" % i, partition=0, timestamp=stamp)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert watermarks(strom_broker.bootstrap_servers, topic, 0) == (0, 11)
    assert watermarks(strom_broker.bootstrap_servers, topic, 1) == (0, 0)

    cases = {
        base - 1: 0,
        base: 0,
        base + 1: 1,
        base + 400: 1,
        base + 1500: 2,
        base + 2000: 2,
        base + 9000: 9,
        base + 9001: -1,
    }
    with confluent_consumer(strom_broker.bootstrap_servers) as consumer:
        for target, want in cases.items():
            [found] = consumer.offsets_for_times(
                [TopicPartition(topic, 0, target)], timeout=CLIENT_TIMEOUT_S
            )
            assert found.error is None, found.error
            assert found.offset == want, f"target {target - base:+d}: {found.offset} != {want}"
        [empty] = consumer.offsets_for_times(
            [TopicPartition(topic, 1, base)], timeout=CLIENT_TIMEOUT_S
        )
        assert empty.offset == -1

    with kp_consumer(strom_broker.bootstrap_servers) as consumer:
        tp0, tp1 = kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 11, tp1: 0}
        found = consumer.offsets_for_times({tp0: base + 1500, tp1: base})
        assert found[tp1] is None
        assert (found[tp0].offset, found[tp0].timestamp) == (2, base + 2000)
        assert consumer.offsets_for_times({tp0: base + 9001})[tp0] is None

    admin = admin_client(strom_broker.bootstrap_servers)
    specs = {
        TopicPartition(topic, 0): OffsetSpec.earliest(),
        TopicPartition(topic, 1): OffsetSpec.latest(),
    }
    result = {
        tp.partition: f.result(CLIENT_TIMEOUT_S)
        for tp, f in admin.list_offsets(specs, request_timeout=CLIENT_TIMEOUT_S).items()
    }
    assert (result[0].offset, result[1].offset) == (0, 0)
    [max_ts] = admin.list_offsets(
        {TopicPartition(topic, 0): OffsetSpec.max_timestamp()}, request_timeout=CLIENT_TIMEOUT_S
    ).values()
    info = max_ts.result(CLIENT_TIMEOUT_S)
    assert (info.offset, info.timestamp) == (9, base + 9000)


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_log_append_time_topic(strom_broker: StromCluster, codec: str) -> None:
    topic = unique_topic("lat")
    create_topic(
        strom_broker.bootstrap_servers, topic, 1, **{"message.timestamp.type": "LogAppendTime"}
    )
    client_stamp = 1_000_000_000_000  # 2001, far from now
    before = int(time.time() * 1000)
    conf = {"compression.type": codec, "linger.ms": 50}
    with confluent_producer(strom_broker.bootstrap_servers, **conf) as producer:
        for i in range(3):
            producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=client_stamp + i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    after = int(time.time() * 1000)

    got = consume_confluent(strom_broker.bootstrap_servers, topic, {0: 3})
    assert [rec.value for _, rec in got[0]] == [b"v0", b"v1", b"v2"]
    with confluent_consumer(strom_broker.bootstrap_servers) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        stamps = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(stamps) < 3 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                stamps.append(msg.timestamp())
        [found] = consumer.offsets_for_times(
            [TopicPartition(topic, 0, before)], timeout=CLIENT_TIMEOUT_S
        )
    assert len(stamps) == 3
    for kind, stamp in stamps:
        assert kind == TIMESTAMP_LOG_APPEND_TIME, "LogAppendTime topic should say so"
        assert before - 1000 <= stamp <= after + 1000, f"{stamp} is not the broker's time"
    assert found.offset == 0, "the broker time of offset 0 is after `before`"

    with kp_consumer(strom_broker.bootstrap_servers) as consumer:
        tp = kafka.TopicPartition(topic, 0)
        stamped = consumer.offsets_for_times({tp: before - 1000})[tp]
        assert stamped is not None and stamped.offset == 0
        assert before - 1000 <= stamped.timestamp <= after + 1000
        assert consumer.offsets_for_times({tp: client_stamp})[tp].offset == 0
        # kafka-python checks batch CRCs: the broker re-stamped the batch and its CRC.
        consumer.assign([tp])
        consumer.seek(tp, 0)
        records: list[Any] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(records) < 3 and time.monotonic() < deadline:
            records += consumer.poll(timeout_ms=500).get(tp, [])
    assert [r.value for r in records] == [b"v0", b"v1", b"v2"]
    assert {r.timestamp_type for r in records} == {1}
    assert all(before - 1000 <= r.timestamp <= after + 1000 for r in records)


def test_create_time_is_kept(strom_broker: StromCluster) -> None:
    topic = unique_topic("ct")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    stamp = int(time.time() * 1000) - 60_000
    with confluent_producer(strom_broker.bootstrap_servers) as producer:
        producer.produce(topic, value=b"x", partition=0, timestamp=stamp)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    with confluent_consumer(strom_broker.bootstrap_servers) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, stamp)
