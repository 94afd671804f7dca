"""What the client tests share: records with headers, producers and consumers of both
libraries, producing and consuming by partition, and the checks of what came back.
"""

from __future__ import annotations

import functools
import random
import re
import subprocess
import sys
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
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

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


def authentication_error(conf: dict[str, Any]) -> str:
    """The error a librdkafka producer with `conf` reports, which must be an
    authentication failure, without librdkafka's "(after 66ms in state AUTH_REQ)"."""
    errors: list[KafkaError] = []
    producer = Producer({**conf, "error_cb": errors.append})
    wait_until(
        lambda: producer.poll(0.2) is not None and bool(errors),
        CLIENT_TIMEOUT_S,
        "an authentication error",
    )
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors
    text: str = errors[0].str()
    return re.sub(r" \(after \d+ms in state \w+\)$", "", text.split(": ", 1)[-1])


def kafka_python_round_trip(settings: dict[str, Any], count: int, prefix: str) -> list[bytes]:
    """`count` records written to a new topic with acks=all by a kafka-python producer with
    `settings`, then read back by a kafka-python consumer with the same: their values."""
    topic = unique_topic(prefix)
    producer = kafka.KafkaProducer(acks="all", **settings)
    try:
        for i in range(count):
            producer.send(topic, f"kp{i}".encode(), partition=0).get(timeout=CLIENT_TIMEOUT_S)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=int(CLIENT_TIMEOUT_S * 1000),
        **settings,
    )
    try:
        return [message.value for _, message in zip(range(count), consumer, strict=False)]
    finally:
        consumer.close()


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


def stored_batches(log_dir: Path, topic: str, partition: int) -> list[tuple[int, int]]:
    """(attributes, producer id) of each batch in a partition's segment files in the
    broker's `log_dir`, as stored."""
    found = []
    for segment in sorted((log_dir / f"{topic}-{partition}").glob("*.log")):
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


def round_trip(conf: dict[str, Any], count: int, prefix: str = "round-trip") -> list[bytes]:
    """`count` values v0, v1, ... produced (acks=all) to partition 0 of a new topic with
    client settings `conf`, then consumed back from the start in a new group: the values
    read, in order."""
    topic = unique_topic(prefix)
    producer = Producer({**conf, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        for _ in range(60):
            for message in consumer.consume(1000, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
            if len(values) >= count:
                break
    finally:
        consumer.close()
    return values


def add_scram_user(
    bootstrap: str,
    user: str,
    password: str,
    mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512,
) -> None:
    """Give `user` a SCRAM credential (4096 iterations) through the broker at `bootstrap`."""
    upsertion = UserScramCredentialUpsertion(
        user, ScramCredentialInfo(mechanism, 4096), password.encode()
    )
    admin = admin_client(bootstrap)  # kept until the answer: a dropped client fails its futures
    admin.alter_user_scram_credentials([upsertion])[user].result(timeout=CLIENT_TIMEOUT_S)


def strom_with(
    properties: Path, text: str, port: int, *args: str
) -> subprocess.CompletedProcess[str]:
    """`strom <args>` against localhost:<port>, with `text` written to `properties` as
    its --command-config."""
    properties.write_text(text)
    return subprocess.run(
        [sys.executable, "-m", "strom", *args, "--command-config", str(properties),
         "-b", f"localhost:{port}", "--timeout", "10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
