"""What the durability tests share: topics, producing numbered values, watermarks,
consuming everything, a producer that records each acknowledgement, a consumer that records
what it read, and the check of a partition's log against the acknowledged records.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path

from broker import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "events"
CLIENT_LOG = {"log_level": 0}
# Reconnect quickly after a restart instead of backing off for up to 10 s.
RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}
WAIT_S = 60.0


# --- helpers --------------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.02)


def seeded_rng() -> random.Random:
    """A seeded generator; the seed is printed, and STROM_SEED=<seed> replays it."""
    seed = int(os.environ.get("STROM_SEED") or random.randrange(2**32))
    print(f"seed={seed} (replay with STROM_SEED={seed})")
    return random.Random(seed)


def create_topic(
    broker: BrokerProcess, name: str, partitions: int, config: Mapping[str, str] | None = None
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **CLIENT_LOG})
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1, config=dict(config or {}))], operation_timeout=10
    )
    for future in futures.values():
        future.result(timeout=10)


def watermarks(broker: BrokerProcess, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "watermarks", **CLIENT_LOG}
    )
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=10, cached=False
        )
        return int(low), int(high)
    finally:
        consumer.close()


def consume_all(
    broker: BrokerProcess, topic: str, partitions: int, *, start: Mapping[int, int] | None = None
) -> dict[int, list[tuple[int, bytes]]]:
    """Every (offset, value) of each partition from `start` (default: its log start) up
    to its high watermark, read with CRC checks on."""
    ends = {p: watermarks(broker, topic, p) for p in range(partitions)}
    begin = {p: (start or {}).get(p, ends[p][0]) for p in range(partitions)}
    records: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    pending = {p for p in range(partitions) if begin[p] < ends[p][1]}
    if not pending:
        return records
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "verify",
            "enable.auto.commit": False,
            "check.crcs": True,
            **CLIENT_LOG,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, begin[p]) for p in pending])
        deadline = time.monotonic() + WAIT_S
        while pending:
            assert time.monotonic() < deadline, f"partitions {pending} not read to the end"
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                error = message.error()
                assert error is None, f"consumer error: {error}"
                partition, offset = message.partition(), message.offset()
                records[partition].append((offset, message.value()))
                if offset + 1 >= ends[partition][1]:
                    pending.discard(partition)
    finally:
        consumer.close()
    return records


def log_files(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


class SequentialProducer:
    """Produces values 0, 1, 2, ... (value i to partition i % partitions) from a thread.

    `acked[p]` lists the values the broker acknowledged on partition p, in the order the
    delivery callbacks reported them.
    """

    def __init__(self, broker: BrokerProcess, topic: str, partitions: int, **config: object):
        self.topic = topic
        self.partitions = partitions
        self.producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 2,
                "message.timeout.ms": 120_000,
                **RECONNECT,
                **CLIENT_LOG,
                **config,
            }
        )
        self.sent = 0
        self.acked: dict[int, list[int]] = defaultdict(list)
        self.acked_count = 0
        self.failures: list[tuple[int, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SequentialProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop(flush_timeout_s=0)

    def _on_delivery(self, err: KafkaError | None, message: Message) -> None:
        value = int(message.value())
        with self._lock:
            if err is not None:
                self.failures.append((value, str(err)))
            else:
                self.acked[message.partition()].append(value)
                self.acked_count += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.sent - self.acked_count - len(self.failures) > 20_000:
                self.producer.poll(0.01)
                continue
            i = self.sent
            try:
                self.producer.produce(
                    self.topic,
                    value=b"%d" % i,
                    partition=i % self.partitions,
                    on_delivery=self._on_delivery,
                )
            except BufferError:
                self.producer.poll(0.01)
                continue
            self.sent += 1
            self.producer.poll(0)

    def wait_acked(self, count: int) -> None:
        wait_until(lambda: self.acked_count >= count, f"{count} acknowledged records")

    def stop(self, flush_timeout_s: float = 30.0) -> None:
        """Stop producing; wait up to `flush_timeout_s` for outstanding acknowledgements."""
        self._stop.set()
        self._thread.join(10)
        if flush_timeout_s:
            remaining = self.producer.flush(flush_timeout_s)
            assert remaining == 0, f"{remaining} records still unacknowledged"

    def snapshot(self) -> dict[int, list[int]]:
        with self._lock:
            return {p: list(values) for p, values in self.acked.items()}


class RecordingConsumer:
    """Reads every partition of a topic from offset 0 in a thread, recording
    (partition, offset, value) of everything it is served, across broker restarts."""

    def __init__(self, broker: BrokerProcess, topic: str, partitions: int, **config: object):
        self.seen: list[tuple[int, int, bytes]] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "recorder",
                "enable.auto.commit": False,
                **RECONNECT,
                **CLIENT_LOG,
                **config,
            }
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RecordingConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(15)
        self.consumer.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer.consume(num_messages=500, timeout=0.1):
                if message.error() is None:
                    self.seen.append((message.partition(), message.offset(), message.value()))

    def check_still_stored(self, stored: Mapping[int, list[tuple[int, bytes]]]) -> None:
        """Everything this consumer was served is in the log at the same offset."""
        by_offset = {(p, offset): value for p, rows in stored.items() for offset, value in rows}
        for partition, offset, value in self.seen:
            assert by_offset.get((partition, offset)) == value, (partition, offset, value)


def check_log_against_acks(
    records: Mapping[int, list[tuple[int, bytes]]],
    acked: Mapping[int, list[int]],
    *,
    sent: int,
    partitions: int,
) -> None:
    """Every acknowledged value exactly once, per partition in acknowledgement order; every
    stored value one that was sent to that partition; offsets contiguous."""
    for partition in range(partitions):
        stored = records.get(partition, [])
        offsets = [offset for offset, _ in stored]
        if offsets:
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        values = [int(value) for _, value in stored]
        assert len(values) == len(set(values)), f"partition {partition} has duplicates"
        for value in values:
            assert 0 <= value < sent and value % partitions == partition, value
        acked_values = acked.get(partition, [])
        acked_set = set(acked_values)
        assert acked_set <= set(values), (
            f"partition {partition} lost acknowledged values {sorted(acked_set - set(values))[:20]}"
        )
        assert [v for v in values if v in acked_set] == acked_values, (
            f"partition {partition}: acknowledged values out of order"
        )


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


def produce_values(broker: BrokerProcess, topic: str, values: range, size: int = 100) -> None:
    # Small batches, so that a topic with small segments gets many of them.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "batch.size": 1000, **CLIENT_LOG}
    )
    for i in values:
        producer.produce(topic, value=b"%d:" % i + b"x" * size, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0
