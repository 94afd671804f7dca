"""Real Kafka clients (confluent-kafka, kafka-python, kcat) against a real strom process.

Every test talks to a broker over loopback sockets; nothing is mocked. Waiting is done by
polling with deadlines, never by sleeping, and every client and broker a test starts is
closed in a `finally` (the `broker` fixture kills its process after the test).
"""

from __future__ import annotations

import functools
import random
import shutil
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kafka
import kafka.errors
import kafka_wire as wire
import pytest
from broker import BrokerProcess
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from strom.protocol.records import Compression, encode_batch

Headers = tuple[tuple[str, bytes | None], ...]

CLIENT_TIMEOUT_S = 30.0
BIG_FETCH = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 16 * 1024 * 1024,
    "fetch.wait.max.ms": 100,
}


@dataclass(frozen=True, slots=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: Headers


# --- helpers ---------------------------------------------------------------------------


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def make_records(count: int, *, seed: int, null_header_values: bool = True) -> list[Rec]:
    """Keyed records: ~300 distinct keys, unique values of varying size, some headers.

    A few records have a null key; exactly one has an empty value; some carry headers
    (with a repeated header key and, if asked, a null header value).
    """
    rng = random.Random(seed)
    filler = b"strom-kafka-compatible-" * 40
    records = []
    for i in range(count):
        key: bytes | None = b"key-%03d" % rng.randrange(300)
        if i % 4999 == 7:
            key = None
        size = rng.randrange(0, 300)
        if i == 3:
            value = b""
        elif i % 2:
            value = b"%d|" % i + rng.randbytes(size)
        else:
            value = b"%d|" % i + filler[:size]
        headers: Headers = ()
        if i % 5 == 0:
            headers = (("trace", b"t-%d" % i), ("kind", b"even" if i % 2 == 0 else b"odd"))
        if i % 1000 == 1:
            headers = (("dup", b"a"), ("dup", b"b"), ("empty", b""))
            if null_header_values:
                headers += (("null", None),)
        records.append(Rec(key, value, headers))
    return records


def confluent_headers(raw: Any) -> Headers:
    if not raw:
        return ()
    return tuple((str(k), None if v is None else bytes(v)) for k, v in raw)


def admin_client(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int, **configs: str) -> None:
    admin = admin_client(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs)],
        operation_timeout=10,
        request_timeout=CLIENT_TIMEOUT_S,
    )
    futures[name].result(timeout=CLIENT_TIMEOUT_S)


@contextmanager
def confluent_producer(bootstrap: str, **conf: Any) -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    try:
        yield producer
    finally:
        producer.purge()
        producer.flush(5)


@contextmanager
def confluent_consumer(bootstrap: str, **conf: Any) -> Iterator[Consumer]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "strom-it-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            **BIG_FETCH,
            **conf,
        }
    )
    try:
        yield consumer
    finally:
        consumer.close()


@contextmanager
def kp_producer(bootstrap: str, **conf: Any) -> Iterator[kafka.KafkaProducer]:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, **conf)
    try:
        yield producer
    finally:
        producer.close(timeout=5)


@contextmanager
def kp_consumer(bootstrap: str, **conf: Any) -> Iterator[kafka.KafkaConsumer]:
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "fetch_max_bytes": 64 * 1024 * 1024,
        "max_partition_fetch_bytes": 16 * 1024 * 1024,
        "fetch_max_wait_ms": 100,
    }
    settings.update(conf)
    consumer = kafka.KafkaConsumer(**settings)
    try:
        yield consumer
    finally:
        consumer.close()


class Deliveries:
    """Delivery reports of a confluent producer, by record index."""

    def __init__(self, count: int) -> None:
        self.partition = [-1] * count
        self.offset = [-1] * count
        self.errors: dict[int, KafkaError] = {}
        self.reported = 0

    def callback(self, index: int, err: KafkaError | None, msg: Any) -> None:
        self.reported += 1
        if err is not None:
            self.errors[index] = err
            return
        self.partition[index] = msg.partition()
        self.offset[index] = msg.offset()


def produce_confluent(
    bootstrap: str, topic: str, records: list[Rec], **conf: Any
) -> tuple[list[int], list[int]]:
    """Produce all records; return (partition, offset) of each from delivery reports."""
    deliveries = Deliveries(len(records))
    settings = {"linger.ms": 20, "batch.size": 1_000_000, "acks": "all", **conf}
    with confluent_producer(bootstrap, **settings) as producer:
        for index, rec in enumerate(records):
            callback = functools.partial(deliveries.callback, index)
            while True:
                try:
                    producer.produce(
                        topic,
                        key=rec.key,
                        value=rec.value,
                        headers=list(rec.headers) or None,
                        on_delivery=callback,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        remaining = producer.flush(CLIENT_TIMEOUT_S * 2)
    assert remaining == 0, f"{remaining} records not delivered"
    assert deliveries.reported == len(records)
    assert not deliveries.errors, f"delivery errors: {list(deliveries.errors.items())[:5]}"
    return deliveries.partition, deliveries.offset


def produce_kafka_python(
    bootstrap: str, topic: str, records: list[Rec], **conf: Any
) -> tuple[list[int], list[int]]:
    settings = {"linger_ms": 20, "batch_size": 1_000_000, "acks": "all", **conf}
    with kp_producer(bootstrap, **settings) as producer:
        futures = [
            producer.send(
                topic,
                key=rec.key,
                value=rec.value,
                headers=[(k, v) for k, v in rec.headers] or None,
            )
            for rec in records
        ]
        producer.flush(timeout=CLIENT_TIMEOUT_S * 2)
        metadata = [f.get(timeout=CLIENT_TIMEOUT_S) for f in futures]
    return [m.partition for m in metadata], [m.offset for m in metadata]


def expected_by_partition(
    records: list[Rec], partitions: list[int], offsets: list[int]
) -> dict[int, list[Rec]]:
    """Records per partition in produce order; checks offsets follow that order 0, 1, ..."""
    by_partition: dict[int, list[Rec]] = defaultdict(list)
    offsets_seen: dict[int, list[int]] = defaultdict(list)
    for rec, partition, offset in zip(records, partitions, offsets, strict=True):
        by_partition[partition].append(rec)
        offsets_seen[partition].append(offset)
    for partition, seen in offsets_seen.items():
        assert seen == list(range(len(seen))), (
            f"partition {partition}: offsets in produce order are not 0..{len(seen) - 1}"
        )
    return dict(by_partition)


def check_keys_stick(records: list[Rec], partitions: list[int]) -> None:
    where: dict[bytes, set[int]] = defaultdict(set)
    for rec, partition in zip(records, partitions, strict=True):
        if rec.key is not None:
            where[rec.key].add(partition)
    spread = {k: p for k, p in where.items() if len(p) > 1}
    assert not spread, f"keys in more than one partition: {list(spread.items())[:5]}"


def consume_confluent(
    bootstrap: str, topic: str, counts: dict[int, int], **conf: Any
) -> dict[int, list[tuple[int, Rec]]]:
    """Read each partition from offset 0 until `counts[partition]` records arrived."""
    got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in counts}
    total = sum(counts.values())
    received = 0
    with confluent_consumer(bootstrap, **conf) as consumer:
        consumer.assign([TopicPartition(topic, p, 0) for p in counts])
        deadline = time.monotonic() + CLIENT_TIMEOUT_S * 2
        while received < total:
            assert time.monotonic() < deadline, (
                f"consumed {received} of {total} records: "
                f"{ {p: len(v) for p, v in got.items()} } of {counts}"
            )
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    assert not err.fatal() and msg.topic() is None, f"consumer error: {err}"
                    continue
                got[msg.partition()].append(
                    (msg.offset(), Rec(msg.key(), msg.value(), confluent_headers(msg.headers())))
                )
                received += 1
    return got


def consume_kafka_python(
    bootstrap: str, topic: str, counts: dict[int, int], **conf: Any
) -> dict[int, list[tuple[int, Rec]]]:
    got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in counts}
    total = sum(counts.values())
    received = 0
    with kp_consumer(bootstrap, **conf) as consumer:
        tps = [kafka.TopicPartition(topic, p) for p in counts]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        deadline = time.monotonic() + CLIENT_TIMEOUT_S * 2
        while received < total:
            assert time.monotonic() < deadline, (
                f"consumed {received} of {total} records: "
                f"{ {p: len(v) for p, v in got.items()} } of {counts}"
            )
            for tp, batch in consumer.poll(timeout_ms=500, max_records=10_000).items():
                for r in batch:
                    headers = tuple((k, v) for k, v in (r.headers or ()))
                    got[tp.partition].append((r.offset, Rec(r.key, r.value, headers)))
                    received += 1
    return got


def check_round_trip(expected: dict[int, list[Rec]], got: dict[int, list[tuple[int, Rec]]]) -> None:
    for partition, want in expected.items():
        have = got[partition]
        offsets = [offset for offset, _ in have]
        assert offsets == list(range(len(want))), (
            f"partition {partition}: offsets {offsets[:5]}... are not 0..{len(want) - 1}"
        )
        for offset, (rec, (_, back)) in enumerate(zip(want, have, strict=True)):
            assert back == rec, f"partition {partition} offset {offset}: sent {rec}, got {back}"


def counts_of(expected: dict[int, list[Rec]]) -> dict[int, int]:
    return {p: len(v) for p, v in expected.items()}


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    with confluent_consumer(bootstrap) as consumer:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S
        )
    return int(low), int(high)


def stored_batches(broker: BrokerProcess, topic: str, partition: int) -> list[tuple[int, int]]:
    """(attributes, producer id) of each batch in a partition's segment files, as stored."""
    found = []
    for segment in sorted((broker.data_dir / f"{topic}-{partition}").glob("*.log")):
        data = segment.read_bytes()
        position = 0
        while position + 61 <= len(data):
            batch_length = int.from_bytes(data[position + 8 : position + 12], "big")
            attributes = int.from_bytes(data[position + 21 : position + 23], "big")
            producer_id = int.from_bytes(data[position + 43 : position + 51], "big", signed=True)
            found.append((attributes, producer_id))
            position += 12 + batch_length
    return found


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# --- round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip_100k(broker: BrokerProcess, codec: str) -> None:
    topic = unique_topic(f"rt-{codec}")
    create_topic(broker.bootstrap, topic, 6)
    records = make_records(100_000, seed=sum(codec.encode()))
    partitions, offsets = produce_confluent(
        broker.bootstrap, topic, records, **{"compression.type": codec}
    )
    assert set(partitions) == set(range(6)), "records should spread over all 6 partitions"
    check_keys_stick(records, partitions)
    expected = expected_by_partition(records, partitions, offsets)
    got = consume_confluent(broker.bootstrap, topic, counts_of(expected))
    check_round_trip(expected, got)
    for partition, want in expected.items():
        assert watermarks(broker.bootstrap, topic, partition) == (0, len(want))
        batches = stored_batches(broker, topic, partition)
        assert batches, f"no batches stored for partition {partition}"
        codecs = {attributes & 0x7 for attributes, _ in batches}
        # librdkafka sends a batch uncompressed when compressing does not make it smaller.
        assert CODEC_IDS[codec] in codecs <= {0, CODEC_IDS[codec]}, (
            f"stored codecs {codecs}, produced {codec}"
        )


@pytest.mark.parametrize("codec", [None, "gzip"])
def test_kafka_python_round_trip(broker: BrokerProcess, codec: str | None) -> None:
    topic = unique_topic(f"kp-{codec}")
    create_topic(broker.bootstrap, topic, 4)
    records = make_records(5_000, seed=11, null_header_values=False)
    partitions, offsets = produce_kafka_python(
        broker.bootstrap, topic, records, compression_type=codec
    )
    check_keys_stick(records, partitions)
    expected = expected_by_partition(records, partitions, offsets)
    got = consume_kafka_python(broker.bootstrap, topic, counts_of(expected))
    check_round_trip(expected, got)


def test_kafka_python_to_confluent(broker: BrokerProcess) -> None:
    topic = unique_topic("kp2ck")
    create_topic(broker.bootstrap, topic, 3)
    records = make_records(5_000, seed=12, null_header_values=False)
    partitions, offsets = produce_kafka_python(
        broker.bootstrap, topic, records, compression_type="gzip"
    )
    expected = expected_by_partition(records, partitions, offsets)
    check_round_trip(expected, consume_confluent(broker.bootstrap, topic, counts_of(expected)))


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_confluent_to_kafka_python(broker: BrokerProcess, codec: str) -> None:
    topic = unique_topic("ck2kp")
    create_topic(broker.bootstrap, topic, 3)
    records = make_records(5_000, seed=13)
    partitions, offsets = produce_confluent(
        broker.bootstrap, topic, records, **{"compression.type": codec}
    )
    expected = expected_by_partition(records, partitions, offsets)
    check_round_trip(expected, consume_kafka_python(broker.bootstrap, topic, counts_of(expected)))


# --- producer guarantees ---------------------------------------------------------------


def test_idempotent_producer_exactly_once_in_order(broker: BrokerProcess) -> None:
    topic = unique_topic("idem")
    create_topic(broker.bootstrap, topic, 3)
    records = [Rec(b"k%d" % (i % 50), b"%d" % i, ()) for i in range(20_000)]
    partitions, offsets = produce_confluent(
        broker.bootstrap,
        topic,
        records,
        **{"enable.idempotence": True, "linger.ms": 5, "batch.size": 64 * 1024},
    )
    expected = expected_by_partition(records, partitions, offsets)
    got = consume_confluent(broker.bootstrap, topic, counts_of(expected))
    check_round_trip(expected, got)
    values = sorted(int(rec.value or b"") for have in got.values() for _, rec in have)
    assert values == list(range(len(records))), "each record exactly once"
    for partition in expected:
        assert watermarks(broker.bootstrap, topic, partition)[1] == len(expected[partition]), (
            "no duplicates appended beyond what was consumed"
        )
        producer_ids = {pid for _, pid in stored_batches(broker, topic, partition)}
        assert len(producer_ids) == 1 and min(producer_ids) >= 0, "batches carry a producer id"


def test_idempotent_producer_across_broker_restart(broker: BrokerProcess) -> None:
    """The producer keeps its id and sequences while the broker restarts underneath it."""
    topic = unique_topic("idem-restart")
    create_topic(broker.bootstrap, topic, 2)
    deliveries = Deliveries(4_000)
    conf = {"enable.idempotence": True, "linger.ms": 5}
    with confluent_producer(broker.bootstrap, **conf) as producer:
        for i in range(4_000):
            if i == 2_000:
                assert producer.flush(CLIENT_TIMEOUT_S) == 0
                assert broker.stop() == 0, broker.read_log()
                broker.start()
            producer.produce(
                topic,
                key=b"k%d" % (i % 13),
                value=b"%d" % i,
                on_delivery=functools.partial(deliveries.callback, i),
            )
            producer.poll(0)
        assert producer.flush(CLIENT_TIMEOUT_S * 2) == 0
    assert not deliveries.errors, (list(deliveries.errors.items())[:3], broker.read_log())
    records = [Rec(b"k%d" % (i % 13), b"%d" % i, ()) for i in range(4_000)]
    expected = expected_by_partition(records, deliveries.partition, deliveries.offset)
    check_round_trip(expected, consume_confluent(broker.bootstrap, topic, counts_of(expected)))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_deliver(broker: BrokerProcess, acks: str) -> None:
    topic = unique_topic(f"acks{acks}")
    create_topic(broker.bootstrap, topic, 2)
    records = [Rec(b"k%d" % (i % 7), b"acks-%s-%d" % (acks.encode(), i), ()) for i in range(500)]
    deliveries = Deliveries(len(records))
    with confluent_producer(broker.bootstrap, acks=acks, **{"linger.ms": 5}) as producer:
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
        lambda: sum(watermarks(broker.bootstrap, topic, p)[1] for p in (0, 1)) == len(records),
        CLIENT_TIMEOUT_S,
        "all records to become visible",
    )
    got = consume_confluent(broker.bootstrap, topic, dict(counts))
    values = sorted(rec.value or b"" for have in got.values() for _, rec in have)
    assert values == sorted(rec.value or b"" for rec in records)
    for have in got.values():
        order = [int((rec.value or b"").rsplit(b"-", 1)[1]) for _, rec in have]
        assert order == sorted(order), "per-partition order is produce order"


# --- long polling ----------------------------------------------------------------------


def test_long_poll_confluent(broker: BrokerProcess) -> None:
    topic = unique_topic("lp")
    create_topic(broker.bootstrap, topic, 1)
    with confluent_consumer(
        broker.bootstrap, **{"fetch.wait.max.ms": 2000, "fetch.min.bytes": 1}
    ) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        early = consumer.poll(0.5)
        assert early is None or early.error() is not None, "nothing to read yet"
        with confluent_producer(broker.bootstrap) as producer:
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


def test_long_poll_kafka_python(broker: BrokerProcess) -> None:
    topic = unique_topic("lpk")
    create_topic(broker.bootstrap, topic, 1)
    with kp_consumer(broker.bootstrap, fetch_max_wait_ms=2000, fetch_min_bytes=1) as consumer:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert consumer.poll(timeout_ms=500) == {}
        with kp_producer(broker.bootstrap) as producer:
            producer.send(topic, key=b"k", value=b"while you wait", partition=0).get(
                timeout=CLIENT_TIMEOUT_S
            )
        deadline = time.monotonic() + 15
        batch: list[Any] = []
        while not batch and time.monotonic() < deadline:
            batch = consumer.poll(timeout_ms=200).get(tp, [])
        assert batch, "the waiting consumer never got the record"
        assert (batch[0].key, batch[0].value, batch[0].offset) == (b"k", b"while you wait", 0)


# --- fetch positions and sizes ---------------------------------------------------------


def test_fetch_from_the_middle_of_a_batch(broker: BrokerProcess) -> None:
    topic = unique_topic("mid")
    create_topic(broker.bootstrap, topic, 1)
    # One gzip batch of ten records, built here so that no producer timing can split it.
    batch = encode_batch(
        [(None, b"v%d" % i, ()) for i in range(10)],
        base_timestamp_ms=int(time.time() * 1000),
        compression=Compression.GZIP,
    )
    assert wire.produce(broker.port, topic, 0, batch).error_code == 0
    assert len(stored_batches(broker, topic, 0)) == 1, "the ten records should share a batch"

    with confluent_consumer(broker.bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0, 6)])
        values: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 4 and time.monotonic() < deadline:
            for msg in consumer.consume(10, timeout=0.5):
                if msg.error() is None:
                    values.append((msg.offset(), msg.value()))
    assert values == [(i, b"v%d" % i) for i in range(6, 10)]

    with kp_consumer(broker.bootstrap) as kconsumer:
        tp = kafka.TopicPartition(topic, 0)
        kconsumer.assign([tp])
        kconsumer.seek(tp, 3)
        got: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < 7 and time.monotonic() < deadline:
            got += [(r.offset, r.value) for r in kconsumer.poll(timeout_ms=500).get(tp, [])]
    assert got == [(i, b"v%d" % i) for i in range(3, 10)]


def test_record_larger_than_fetch_limits_is_still_delivered(broker: BrokerProcess) -> None:
    topic = unique_topic("huge")
    create_topic(broker.bootstrap, topic, 1)
    big = random.Random(3).randbytes(300_000)
    records = [Rec(None, big, ()), Rec(None, b"after", ())]
    produce_confluent(broker.bootstrap, topic, records)
    small_fetch = {
        "max.partition.fetch.bytes": 1024,
        "fetch.max.bytes": 2048,
        "message.max.bytes": 2048,
    }
    got = consume_confluent(broker.bootstrap, topic, {0: 2}, **small_fetch)
    assert [rec.value for _, rec in got[0]] == [big, b"after"]
    got = consume_kafka_python(
        broker.bootstrap, topic, {0: 2}, max_partition_fetch_bytes=1024, fetch_max_bytes=2048
    )
    assert [rec.value for _, rec in got[0]] == [big, b"after"]


def test_out_of_range_offset_resets(broker: BrokerProcess) -> None:
    topic = unique_topic("oor")
    create_topic(broker.bootstrap, topic, 1)
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"r%d" % i, ()) for i in range(5)])
    with confluent_consumer(broker.bootstrap, **{"auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0, 1000)])
        values: list[bytes] = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(values) < 5 and time.monotonic() < deadline:
            for msg in consumer.consume(10, timeout=0.5):
                if msg.error() is None:
                    values.append(msg.value())
    assert values == [b"r%d" % i for i in range(5)]
    with kp_consumer(broker.bootstrap, auto_offset_reset="latest") as kconsumer:
        tp = kafka.TopicPartition(topic, 0)
        kconsumer.assign([tp])
        kconsumer.seek(tp, 1000)
        kconsumer.poll(timeout_ms=500)
        wait_until(lambda: kconsumer.position(tp) == 5, CLIENT_TIMEOUT_S, "reset to the end")


# --- ListOffsets -----------------------------------------------------------------------


def test_list_offsets_by_time_and_watermarks(broker: BrokerProcess) -> None:
    topic = unique_topic("times")
    create_topic(broker.bootstrap, topic, 2)
    base = int(time.time() * 1000) - 3_600_000
    # Offsets 0..9 stamped base, base+1000, ... base+9000; offset 10 is a late record.
    stamps = [base + 1000 * i for i in range(10)] + [base + 500]
    with confluent_producer(broker.bootstrap, **{"linger.ms": 50}) as producer:
        for i, stamp in enumerate(stamps):
            producer.produce(topic, value=b"t%d" % i, partition=0, timestamp=stamp)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert watermarks(broker.bootstrap, topic, 0) == (0, 11)
    assert watermarks(broker.bootstrap, topic, 1) == (0, 0)

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
    with confluent_consumer(broker.bootstrap) as consumer:
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

    with kp_consumer(broker.bootstrap) as consumer:
        tp0, tp1 = kafka.TopicPartition(topic, 0), kafka.TopicPartition(topic, 1)
        assert consumer.beginning_offsets([tp0, tp1]) == {tp0: 0, tp1: 0}
        assert consumer.end_offsets([tp0, tp1]) == {tp0: 11, tp1: 0}
        found = consumer.offsets_for_times({tp0: base + 1500, tp1: base})
        assert found[tp1] is None
        assert (found[tp0].offset, found[tp0].timestamp) == (2, base + 2000)
        assert consumer.offsets_for_times({tp0: base + 9001})[tp0] is None

    admin = admin_client(broker.bootstrap)
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
def test_log_append_time_topic(broker: BrokerProcess, codec: str) -> None:
    topic = unique_topic("lat")
    create_topic(broker.bootstrap, topic, 1, **{"message.timestamp.type": "LogAppendTime"})
    client_stamp = 1_000_000_000_000  # 2001, far from now
    before = int(time.time() * 1000)
    conf = {"compression.type": codec, "linger.ms": 50}
    with confluent_producer(broker.bootstrap, **conf) as producer:
        for i in range(3):
            producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=client_stamp + i)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    after = int(time.time() * 1000)

    got = consume_confluent(broker.bootstrap, topic, {0: 3})
    assert [rec.value for _, rec in got[0]] == [b"v0", b"v1", b"v2"]
    with confluent_consumer(broker.bootstrap) as consumer:
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

    with kp_consumer(broker.bootstrap) as consumer:
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


def test_create_time_is_kept(broker: BrokerProcess) -> None:
    topic = unique_topic("ct")
    create_topic(broker.bootstrap, topic, 1)
    stamp = int(time.time() * 1000) - 60_000
    with confluent_producer(broker.bootstrap) as producer:
        producer.produce(topic, value=b"x", partition=0, timestamp=stamp)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    with confluent_consumer(broker.bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        msg = None
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None
        assert msg.timestamp() == (TIMESTAMP_CREATE_TIME, stamp)


# --- limits ----------------------------------------------------------------------------


def test_message_too_large_confluent(broker: BrokerProcess) -> None:
    topic = unique_topic("big")
    create_topic(broker.bootstrap, topic, 1, **{"max.message.bytes": "2000"})
    with confluent_producer(broker.bootstrap, **{"linger.ms": 0}) as producer:
        producer.produce(topic, value=b"s" * 100, partition=0)
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert watermarks(broker.bootstrap, topic) == (0, 1)

    errors: list[KafkaError] = []
    with confluent_producer(broker.bootstrap, **{"message.send.max.retries": 0}) as producer:
        producer.produce(
            topic,
            value=bytes(random.Random(1).randbytes(5000)),
            partition=0,
            on_delivery=lambda err, msg: errors.append(err),
        )
        assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert len(errors) == 1 and errors[0] is not None, "the oversized record was accepted"
    assert errors[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, errors[0]
    assert watermarks(broker.bootstrap, topic) == (0, 1), "nothing may be appended"


def test_message_too_large_kafka_python(broker: BrokerProcess) -> None:
    topic = unique_topic("bigk")
    create_topic(broker.bootstrap, topic, 1, **{"max.message.bytes": "2000"})
    with kp_producer(broker.bootstrap, retries=0) as producer:
        future = producer.send(topic, value=random.Random(2).randbytes(5000), partition=0)
        with pytest.raises(kafka.errors.MessageSizeTooLargeError):
            future.get(timeout=CLIENT_TIMEOUT_S)
        producer.send(topic, value=b"small", partition=0).get(timeout=CLIENT_TIMEOUT_S)
    assert watermarks(broker.bootstrap, topic) == (0, 1), "only the small record is stored"


# --- auto-creation ---------------------------------------------------------------------


@contextmanager
def own_broker(tmp_path: Path, *settings: str) -> Iterator[BrokerProcess]:
    extra: list[str] = []
    for setting in settings:
        extra += ["--set", setting]
    process = BrokerProcess(tmp_path / "own", extra=extra)
    process.start()
    try:
        yield process
    finally:
        process.kill()


def test_auto_create_on_produce(tmp_path: Path) -> None:
    with own_broker(tmp_path, "num.partitions=3") as broker:
        topic = unique_topic("auto")
        with confluent_producer(broker.bootstrap) as producer:
            for i in range(30):
                producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
            assert producer.flush(CLIENT_TIMEOUT_S) == 0, broker.read_log()
        metadata = admin_client(broker.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S)
        assert topic in metadata.topics, broker.read_log()
        assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
        total = sum(watermarks(broker.bootstrap, topic, p)[1] for p in range(3))
        assert total == 30

        # kafka-python asks for auto-creation too.
        other = unique_topic("autok")
        with kp_producer(broker.bootstrap) as kproducer:
            kproducer.send(other, value=b"x").get(timeout=CLIENT_TIMEOUT_S)
        with kp_consumer(broker.bootstrap) as consumer:
            assert consumer.partitions_for_topic(other) == {0, 1, 2}


def test_auto_create_disabled(tmp_path: Path) -> None:
    with own_broker(tmp_path, "auto.create.topics.enable=false") as broker:
        topic = unique_topic("noauto")
        errors: list[KafkaError] = []
        conf = {"topic.metadata.propagation.max.ms": 1000, "message.timeout.ms": 10_000}
        with confluent_producer(broker.bootstrap, **conf) as producer:
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

        metadata = admin_client(broker.bootstrap).list_topics(topic, timeout=CLIENT_TIMEOUT_S)
        entry = metadata.topics.get(topic)
        assert entry is not None and entry.error is not None
        assert entry.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
        all_topics = admin_client(broker.bootstrap).list_topics(timeout=CLIENT_TIMEOUT_S)
        assert topic not in all_topics.topics
        assert not (broker.data_dir / f"{topic}-0").exists()


# --- kcat ------------------------------------------------------------------------------


def test_kcat_produce_consume_list(broker: BrokerProcess) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    topic = unique_topic("kcat")
    create_topic(broker.bootstrap, topic, 1)
    lines = [f"line {i}" for i in range(20)]
    subprocess.run(
        [kcat, "-b", broker.bootstrap, "-P", "-t", topic],
        input="\n".join(lines) + "\n",
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    consumed = subprocess.run(
        [kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-e", "-o", "beginning", "-q"],
        capture_output=True,
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert consumed.stdout.splitlines() == lines

    keyed = [f"k{i % 3}:value {i}" for i in range(10)]
    subprocess.run(
        [kcat, "-b", broker.bootstrap, "-P", "-t", topic, "-K", ":", "-p", "0"],
        input="\n".join(keyed) + "\n",
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    consumed = subprocess.run(
        [
            kcat,
            "-b",
            broker.bootstrap,
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
        [kcat, "-b", broker.bootstrap, "-L"],
        capture_output=True,
        text=True,
        check=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert f'topic "{topic}"' in listing.stdout
