"""Durability across SIGTERM and SIGKILL, retention, and repair of damaged data at start.

Real `strom serve` processes and real clients (confluent-kafka). An acknowledged record
must survive any stop; a consumer must never see a record a crash could take back; a
torn or garbled log tail is cut off at start instead of being served.
"""

from __future__ import annotations

import datetime
import os
import random
import select
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest
from broker import BrokerProcess, free_port
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from strom.protocol.codec import encode_request
from strom.protocol.records import LOG_OVERHEAD, encode_batch, iter_batches

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


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def new_broker(data_dir: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """Start brokers on `data_dir`; all are killed at the end."""
    started: list[BrokerProcess] = []

    def start(*extra: str) -> BrokerProcess:
        broker = BrokerProcess(data_dir, extra=list(extra))
        started.append(broker)
        broker.start()
        return broker

    try:
        yield start
    finally:
        for broker in started:
            broker.kill()


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


# --- stopping -------------------------------------------------------------------------


def test_sigterm_while_producing_exits_cleanly_and_keeps_acked_records(
    new_broker: Callable[..., BrokerProcess],
) -> None:
    broker = new_broker()
    create_topic(broker, TOPIC, 3)
    # A consumer whose fetches wait long for data must not hold up the shutdown.
    long_poll = {"fetch.wait.max.ms": 4000, "fetch.min.bytes": 50_000_000}
    with (
        RecordingConsumer(broker, TOPIC, 3, **long_poll) as consumer,
        SequentialProducer(broker, TOPIC, 3) as producer,
    ):
        producer.wait_acked(2000)
        started = time.monotonic()
        exit_code = broker.stop()
        elapsed_s = time.monotonic() - started
        assert exit_code == 0
        assert elapsed_s < 5.0, f"shutdown took {elapsed_s:.1f} s"
        assert "stopped cleanly" in broker.read_log()
        acked_at_stop = producer.snapshot()
        broker.start()
        # The producer carries on against the restarted broker; its sequence numbers
        # continue, so nothing it retries is stored twice.
        producer.stop(flush_timeout_s=30)
        assert not producer.failures, producer.failures[:5]
    records = consume_all(broker, TOPIC, 3)
    check_log_against_acks(records, producer.acked, sent=producer.sent, partitions=3)
    check_log_against_acks(records, acked_at_stop, sent=producer.sent, partitions=3)
    assert sum(len(r) for r in records.values()) == producer.sent
    consumer.check_still_stored(records)
    assert "Traceback" not in broker.read_log()


def test_sigterm_with_a_client_that_never_reads_its_responses(
    new_broker: Callable[..., BrokerProcess],
) -> None:
    """A client pipelines fetches and never reads the answers: the broker's sender is stuck
    and its queue of answers is full. It still exits cleanly within the deadline."""
    broker = new_broker()
    create_topic(broker, TOPIC, 1)
    produce_values(broker, TOPIC, range(2000), size=1000)
    request = FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        forgotten_topics_data=(),
        rack_id="",
        topics=(
            FetchTopic(
                topic=TOPIC,
                partitions=(
                    FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20),
                ),
            ),
        ),
    )
    frame = encode_request(1, 12, 1, request)
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", broker.port))
        sock.setblocking(False)
        # Send until the broker stops reading: it does so only when its queue of
        # unanswered requests is full, because its answers cannot be written.
        pending = frame * 200_000
        deadline = time.monotonic() + WAIT_S
        while pending:
            assert time.monotonic() < deadline, "the broker kept reading"
            try:
                pending = pending[sock.send(pending[: 1 << 16]) :]
            except BlockingIOError:
                _, writable, _ = select.select([], [sock], [], 0.5)
                if not writable:
                    break
        assert pending, "the broker read 200,000 requests without answers being read"
        started = time.monotonic()
        exit_code = broker.stop()
        elapsed_s = time.monotonic() - started
    assert exit_code == 0
    assert elapsed_s < 5.0, f"shutdown took {elapsed_s:.1f} s"
    assert "stopped cleanly" in broker.read_log()
    assert "Traceback" not in broker.read_log()


def test_kill_9_during_acks_all_produce_loses_no_acknowledged_record(
    new_broker: Callable[..., BrokerProcess],
) -> None:
    rng = seeded_rng()
    partitions = 3
    broker = new_broker()
    create_topic(broker, TOPIC, partitions)
    acked_before_kill: list[dict[int, list[int]]] = []
    with SequentialProducer(broker, TOPIC, partitions) as producer:
        for _round in range(3):
            producer.wait_acked(producer.acked_count + 2000 + rng.randrange(2000))
            time.sleep(rng.uniform(0, 0.2))  # a random point of the produce loop
            broker.kill()
            acked_before_kill.append(producer.snapshot())
            broker.start()
            # Whatever was acknowledged before the kill is there after the restart.
            records = consume_all(broker, TOPIC, partitions)
            check_log_against_acks(
                records, acked_before_kill[-1], sent=producer.sent, partitions=partitions
            )
        producer.wait_acked(producer.acked_count + 500)
        producer.stop(flush_timeout_s=30)
        assert not producer.failures, producer.failures[:5]
    records = consume_all(broker, TOPIC, partitions)
    check_log_against_acks(records, producer.acked, sent=producer.sent, partitions=partitions)
    # The idempotent producer retried everything the kills cut off: no gaps, no copies.
    for partition in range(partitions):
        values = [int(v) for _, v in records[partition]]
        assert values == list(range(partition, producer.sent, partitions))
    assert "Traceback" not in broker.read_log()


def test_consumer_never_sees_a_record_that_a_kill_loses(
    new_broker: Callable[..., BrokerProcess],
) -> None:
    rng = seeded_rng()
    partitions = 2
    broker = new_broker()
    create_topic(broker, TOPIC, partitions)
    with (
        RecordingConsumer(broker, TOPIC, partitions, **{"fetch.wait.max.ms": 10}) as consumer,
        SequentialProducer(broker, TOPIC, partitions) as producer,
    ):
        for _round in range(2):
            producer.wait_acked(producer.acked_count + 1500 + rng.randrange(1500))
            time.sleep(rng.uniform(0, 0.1))  # a random point of the produce loop
            broker.kill()
            seen_at_kill = len(consumer.seen)
            broker.start()
        wait_until(lambda: len(consumer.seen) > seen_at_kill + 100, "the consumer to resume")
        producer.stop(flush_timeout_s=30)
    assert len(consumer.seen) > 3000
    consumer.check_still_stored(consume_all(broker, TOPIC, partitions))


def test_interval_flush_keeps_everything_across_sigterm(
    new_broker: Callable[..., BrokerProcess],
) -> None:
    broker = new_broker(
        "--set",
        "log.flush.interval.messages=9223372036854775807",
        "--set",
        "log.flush.interval.ms=1000",
    )
    create_topic(broker, TOPIC, 2)
    with SequentialProducer(broker, TOPIC, 2) as producer:
        producer.wait_acked(3000)
        producer.stop(flush_timeout_s=30)
    assert not producer.failures
    sent = producer.sent
    assert watermarks(broker, TOPIC, 0) == (0, (sent + 1) // 2)
    assert broker.stop() == 0
    broker.start()
    assert "truncated" not in broker.read_log()
    records = consume_all(broker, TOPIC, 2)
    check_log_against_acks(records, producer.acked, sent=sent, partitions=2)
    assert sum(len(r) for r in records.values()) == sent


# --- retention ------------------------------------------------------------------------


def produce_values(broker: BrokerProcess, topic: str, values: range, size: int = 100) -> None:
    # Small batches, so that a topic with small segments gets many of them.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "acks": "all", "batch.size": 1000, **CLIENT_LOG}
    )
    for i in values:
        producer.produce(topic, value=b"%d:" % i + b"x" * size, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def test_retention_by_time_deletes_old_segments_but_never_the_active_one(
    new_broker: Callable[..., BrokerProcess], data_dir: Path
) -> None:
    broker = new_broker("--set", "log.retention.check.interval.ms=200")
    create_topic(broker, TOPIC, 1, {"segment.bytes": "4096", "retention.ms": "1000"})
    directory = partition_dir(data_dir, TOPIC, 0)
    produce_values(broker, TOPIC, range(400))
    segments_before = len(log_files(directory))
    assert segments_before > 3
    assert watermarks(broker, TOPIC, 0) == (0, 400)
    # Every closed segment ages out; the active one stays however old it gets.
    wait_until(lambda: len(log_files(directory)) == 1, "retention to delete old segments")
    low, high = watermarks(broker, TOPIC, 0)
    assert 0 < low < high == 400
    assert "retention deleted" in broker.read_log()
    remaining = consume_all(broker, TOPIC, 1)[0]
    assert [offset for offset, _ in remaining] == list(range(low, 400))
    assert all(value.startswith(b"%d:" % offset) for offset, value in remaining)
    produce_values(broker, TOPIC, range(400, 450))
    assert watermarks(broker, TOPIC, 0)[1] == 450
    assert consume_all(broker, TOPIC, 1, start={0: 445})[0][-1][0] == 449


def test_retention_by_size(new_broker: Callable[..., BrokerProcess], data_dir: Path) -> None:
    broker = new_broker("--set", "log.retention.check.interval.ms=200")
    retention_bytes = 8192
    create_topic(
        broker, TOPIC, 1, {"segment.bytes": "4096", "retention.bytes": str(retention_bytes)}
    )
    directory = partition_dir(data_dir, TOPIC, 0)
    produce_values(broker, TOPIC, range(400))

    def total_bytes() -> int:
        return sum(path.stat().st_size for path in log_files(directory))

    wait_until(lambda: watermarks(broker, TOPIC, 0)[0] > 0, "retention to move the log start")
    wait_until(lambda: total_bytes() <= retention_bytes + 4096, "the log to shrink")
    assert len(log_files(directory)) >= 2  # only the oldest segments go
    low, high = watermarks(broker, TOPIC, 0)
    assert high == 400
    remaining = consume_all(broker, TOPIC, 1)[0]
    assert [offset for offset, _ in remaining] == list(range(low, 400))
    produce_values(broker, TOPIC, range(400, 420))
    assert watermarks(broker, TOPIC, 0)[1] == 420


# --- damaged data at start --------------------------------------------------------------


def _append_random_garbage(log_path: Path, rng: random.Random) -> int:
    with open(log_path, "ab") as f:
        f.write(rng.randbytes(rng.randrange(1, 300)))
    return 0


def _append_batch_with_bad_crc(log_path: Path, rng: random.Random) -> int:
    """A plausible next batch (right base offset, sane length) whose CRC does not match."""
    data = log_path.read_bytes()
    last = [header for _, header in iter_batches(data)][-1]
    batch = bytearray(
        encode_batch(
            [(None, b"999999", [])],
            base_timestamp_ms=int(time.time() * 1000),
            base_offset=last.next_offset,
        )
    )
    batch[-1] ^= 0x55
    with open(log_path, "ab") as f:
        f.write(bytes(batch))
    return 0


def _cut_last_batch_in_half(log_path: Path, rng: random.Random) -> int:
    data = log_path.read_bytes()
    position, last = [(pos, header) for pos, header in iter_batches(data)][-1]
    assert position + last.size_bytes == len(data)
    cut = rng.randrange(1, last.size_bytes - 1)
    os.truncate(log_path, len(data) - cut)
    return last.records_count


def _cut_inside_last_header(log_path: Path, rng: random.Random) -> int:
    data = log_path.read_bytes()
    position, last = [(pos, header) for pos, header in iter_batches(data)][-1]
    os.truncate(log_path, position + rng.randrange(1, LOG_OVERHEAD + 10))
    return last.records_count


DAMAGE: dict[str, Callable[[Path, random.Random], int]] = {
    "random-garbage": _append_random_garbage,
    "batch-with-bad-crc": _append_batch_with_bad_crc,
    "last-batch-cut": _cut_last_batch_in_half,
    "cut-inside-header": _cut_inside_last_header,
}


# With the clean-shutdown marker kept, the broker trusts the log as Kafka does and only
# checks its structure (index entries, batch headers after the last one, the file's end):
# a CRC-only corruption is found by the batch-by-batch check of an unclean start.
TORN_TAIL_CASES = [
    pytest.param(damage, keep_marker, id=f"{damage}-{'marker-kept' if keep_marker else 'unclean'}")
    for damage in DAMAGE
    for keep_marker in (False, True)
    if not (keep_marker and damage == "batch-with-bad-crc")
]


@pytest.mark.parametrize(("damage", "keep_marker"), TORN_TAIL_CASES)
def test_torn_tail_is_repaired_at_start(
    new_broker: Callable[..., BrokerProcess], data_dir: Path, damage: str, keep_marker: bool
) -> None:
    rng = seeded_rng()
    broker = new_broker()
    create_topic(broker, TOPIC, 1)
    produce_values(broker, TOPIC, range(300), size=20)
    assert broker.stop() == 0
    directory = partition_dir(data_dir, TOPIC, 0)
    marker = directory / ".clean_shutdown"
    assert marker.exists()
    if not keep_marker:
        marker.unlink()
    lost = DAMAGE[damage](log_files(directory)[-1], rng)
    broker.start()
    assert "truncated" in broker.read_log()
    end = 300 - lost
    assert watermarks(broker, TOPIC, 0) == (0, end)
    records = consume_all(broker, TOPIC, 1)[0]
    assert [offset for offset, _ in records] == list(range(end))
    assert all(value.startswith(b"%d:" % offset) for offset, value in records)
    # Producing continues right after the last whole record.
    produce_values(broker, TOPIC, range(end, end + 10), size=20)
    records = consume_all(broker, TOPIC, 1)[0]
    assert [int(value.split(b":")[0]) for _, value in records] == list(range(end + 10))
    # And the repair itself was made durable: a clean restart finds nothing to fix.
    assert broker.stop() == 0
    log_before = len(broker.read_log())
    broker.start()
    assert "truncated" not in broker.read_log()[log_before:]
    assert watermarks(broker, TOPIC, 0) == (0, end + 10)


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "killed"])
def test_missing_index_is_rebuilt(
    new_broker: Callable[..., BrokerProcess], data_dir: Path, clean: bool
) -> None:
    broker = new_broker()
    create_topic(broker, TOPIC, 1, {"segment.bytes": "65536"})
    produce_values(broker, TOPIC, range(1500), size=100)
    if clean:
        assert broker.stop() == 0
    else:
        broker.kill()
    directory = partition_dir(data_dir, TOPIC, 0)
    assert len(log_files(directory)) > 2
    removed = sorted(directory.glob("*.index"))
    assert len(removed) > 2
    for path in (removed[0], removed[-1]):  # a closed segment and the active one
        path.unlink()
    broker.start()
    assert "rebuilt indexes" in broker.read_log()
    for path in (removed[0], removed[-1]):
        assert path.exists()
    assert watermarks(broker, TOPIC, 0) == (0, 1500)
    for offset in (0, 7, 333, 1000, 1499):
        first = consume_all(broker, TOPIC, 1, start={0: offset})[0][0]
        assert first[0] == offset and first[1].startswith(b"%d:" % offset)
    assert len(consume_all(broker, TOPIC, 1)[0]) == 1500


# --- refusing to start --------------------------------------------------------------------


def run_serve(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            f"127.0.0.1:{free_port()}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_data_dir_of_another_node_is_refused(
    new_broker: Callable[..., BrokerProcess], data_dir: Path
) -> None:
    broker = new_broker("--node-id", "1")
    assert broker.stop() == 0
    meta = (data_dir / "meta.properties").read_text()
    result = run_serve(data_dir, "--node-id", "2")
    assert result.returncode != 0
    assert "node 1" in result.stderr, result.stderr
    assert "ready" not in result.stdout
    assert (data_dir / "meta.properties").read_text() == meta


def test_invalid_config_key_is_refused_before_touching_disk(tmp_path: Path) -> None:
    data_dir = tmp_path / "never-created"
    result = run_serve(data_dir, "--set", "log.retension.ms=5")
    assert result.returncode != 0
    assert "log.retension.ms" in result.stderr, result.stderr
    assert not data_dir.exists()
