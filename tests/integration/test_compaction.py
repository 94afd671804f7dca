"""Log compaction on a real broker: the last value of each key, tombstones, kill -9,
transactions.

Real `strom serve` processes, confluent-kafka clients. The cleaner looks for work every
100 ms here (`log.cleaner.backoff.ms`) and topics have small segments, so cleaning
happens within the tests' time.
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError
from kafka.errors import KafkaError as KafkaPythonError

from strom.protocol.records import iter_batches

TOPIC = "state"
CLIENT_LOG = {"log_level": 0}
RECONNECT = {"reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 300}
CLEANER = ["--set", "log.cleaner.backoff.ms=100"]
WAIT_S = 30.0

Read = list[tuple[int, bytes, bytes | None]]


def seeded_rng() -> random.Random:
    """A seeded generator; the seed is printed, and STROM_SEED=<seed> replays it."""
    seed = int(os.environ.get("STROM_SEED") or random.randrange(2**32))
    print(f"seed={seed} (replay with STROM_SEED={seed})")
    return random.Random(seed)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    brokers: list[BrokerProcess] = []

    def start(*extra: str) -> BrokerProcess:
        broker = BrokerProcess(tmp_path / "data", extra=[*CLEANER, *extra])
        broker.start()
        brokers.append(broker)
        return broker

    yield start
    for broker in brokers:
        broker.kill()


def create_topic(broker: BrokerProcess, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, **CLIENT_LOG})
    futures = admin.create_topics([NewTopic(TOPIC, 1, 1, config=config)], operation_timeout=10)
    for future in futures.values():
        future.result(timeout=10)


def produce(
    broker: BrokerProcess, records: list[tuple[bytes, bytes | None]], compression: str = "lz4"
) -> None:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 16_000,
            "compression.type": compression,
            **CLIENT_LOG,
        }
    )
    for key, value in records:
        while True:
            try:
                producer.produce(TOPIC, key=key, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0


def read_all(broker: BrokerProcess, isolation: str = "read_committed") -> Read:
    """Every (offset, key, value) from the log start to the end, as a consumer sees them."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "verify",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "check.crcs": True,
            **RECONNECT,
            **CLIENT_LOG,
        }
    )
    out: Read = []
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(TOPIC, 0), timeout=10, cached=False
        )
        if high == 0:
            return out
        consumer.assign([TopicPartition(TOPIC, 0, low)])
        deadline = time.monotonic() + WAIT_S
        while True:
            assert time.monotonic() < deadline, "the partition was not read to its end"
            for message in consumer.consume(num_messages=10_000, timeout=0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    if message.offset() >= high:
                        return out
                    continue
                assert error is None, f"consumer error: {error}"
                out.append((message.offset(), message.key(), message.value()))
    finally:
        consumer.close()


def partition_dir(broker: BrokerProcess) -> Path:
    return broker.data_dir / f"{TOPIC}-0"


def active_base(broker: BrokerProcess) -> int:
    return max(int(p.name[:20]) for p in partition_dir(broker).glob("*.log"))


def compacted_below_active(broker: BrokerProcess, read: Read) -> bool:
    """True when the sealed segments hold at most one record per key."""
    base = active_base(broker)
    keys = [key for offset, key, _ in read if offset < base]
    return len(keys) == len(set(keys))


def wait_for(
    condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S, poll_s: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)


def last_values(read: Read) -> dict[bytes, bytes | None]:
    return {key: value for _, key, value in read}


def test_a_full_read_returns_the_last_value_of_each_key(
    started: Callable[..., BrokerProcess],
) -> None:
    broker = started()
    create_topic(
        broker,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "100000",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    updates = [(b"key-%04d" % (i % 1_000), b"value-%06d" % i) for i in range(100_000)]
    produce(broker, updates)
    expected = dict(updates)
    reads: list[Read] = []

    def compacted() -> bool:
        reads.append(read_all(broker))
        return compacted_below_active(broker, reads[-1])

    wait_for(compacted, "the cleaner to compact every sealed segment")
    read = reads[-1]
    assert last_values(read) == expected
    offsets = [offset for offset, _, _ in read]
    assert offsets == sorted(set(offsets)) and offsets[-1] == 99_999
    for offset, key, value in read:  # every record is the one written at its offset
        assert value == b"value-%06d" % offset and key == b"key-%04d" % (offset % 1_000)
    # How many records the active (never cleaned) segment holds depends on how the client
    # batched and compressed them, so the bound comes from the log itself: below the
    # active segment exactly the last record of each key written there is left, and the
    # active segment keeps every record. Nothing is produced any more: its base stays.
    base = active_base(broker)
    last_below_active = {offset % 1_000: offset for offset in range(base)}
    assert [o for o in offsets if o < base] == sorted(last_below_active.values())
    assert [o for o in offsets if o >= base] == list(range(base, 100_000))
    assert len(read) == len(last_below_active) + 100_000 - base < len(updates)
    assert "cleaned offsets 0.." in broker.read_log() and "[node 1]" in broker.read_log()


def test_tombstoned_keys_vanish_after_delete_retention(
    started: Callable[..., BrokerProcess],
) -> None:
    broker = started()
    create_topic(
        broker,
        {
            "cleanup.policy": "compact",
            "segment.bytes": "16384",
            "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "1000",
        },
    )
    keys = [b"key-%03d" % i for i in range(200)]
    produce(broker, [(key, b"first-" + key) for key in keys], "none")
    produce(broker, [(key, None) for key in keys[:100]], "none")  # tombstones
    # more updates of the other keys push the tombstones out of the active segment
    filler = [(key, b"%d-" % n + b"x" * 100) for n in range(4) for key in keys[100:]]
    produce(broker, filler, "none")
    assert None in last_values(read_all(broker)).values()
    expected = {key: b"3-" + b"x" * 100 for key in keys[100:]}

    def tombstones_gone() -> bool:
        read = read_all(broker)
        return last_values(read) == expected and compacted_below_active(broker, read)

    wait_for(tombstones_gone, "the tombstoned keys to vanish")
    assert "tombstone(s)" in broker.read_log()
    # a record without a key is refused, as Kafka refuses it
    errors: list[KafkaError] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", **CLIENT_LOG})
    producer.produce(TOPIC, value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(10) == 0
    assert errors[0] is not None and errors[0].code() == KafkaError.INVALID_RECORD
    # KIP-467: the answer names the bad record in its batch, and why; kafka-python fails
    # that record with the broker's message and the good one of the same batch apart.
    sender = KafkaProducer(bootstrap_servers=broker.bootstrap, linger_ms=100)
    try:
        good, bad = sender.send(TOPIC, key=b"k", value=b"ok"), sender.send(TOPIC, value=b"x")
        sender.flush(10)
    finally:
        sender.close(5)
    with pytest.raises(InvalidRecordError, match=f"without key in topic partition {TOPIC}-0"):
        bad.get(0)
    with pytest.raises(KafkaPythonError, match="part of a batch which had one more more invalid"):
        good.get(0)


def test_kill_9_in_the_middle_of_cleaning_leaves_the_partition_whole(
    started: Callable[..., BrokerProcess],
) -> None:
    """Each round writes a large dirty range with the cleaner off, restarts the broker
    with it on, waits until a pass is writing its files and kills the broker at a random
    moment of the first 100 ms of that pass (passes here write their files for 150-700
    ms); the broker then starts with the partition whole and correct. At least five
    rounds, and more (up to eight) until two kills have landed in a pass: a kill that
    comes after a short pass has ended still checks the restart, but not the pass."""
    rng = seeded_rng()
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "524288",
        "min.cleanable.dirty.ratio": "0.01",
    }
    expected: dict[bytes, bytes | None] = {}
    written = 0
    hits = 0
    rounds = 0
    while rounds < 5 or (hits < 2 and rounds < 8):
        round_ = rounds
        rounds += 1
        broker = started("--set", "log.cleaner.enable=false")
        if round_ == 0:
            create_topic(broker, config)
        records = [
            (b"key-%05d" % rng.randrange(50_000), b"%d-%d-" % (round_, i) + rng.randbytes(200))
            for i in range(40_000)
        ]
        produce(broker, records, "none")
        expected.update(records)
        written += len(records)
        assert broker.stop() == 0
        broker = started("--set", "log.cleaner.backoff.ms=20")
        directory = partition_dir(broker)
        wait_for(
            lambda directory=directory: any(directory.glob("*.cleaned")),
            "the cleaner to start a pass",
            timeout_s=15,
            poll_s=0.002,
        )
        assert broker.process is not None
        try:  # a random moment of the pass's first 100 ms
            broker.process.wait(timeout=rng.uniform(0.0, 0.1))
            raise AssertionError("the broker exited by itself")
        except subprocess.TimeoutExpired:
            pass
        broker.process.kill()
        broker.process.wait(10)
        names = os.listdir(directory)
        if any(name.endswith(".cleaned") or name == "cleaner-swap" for name in names):
            hits += 1  # killed with a pass under way
        broker.kill()
        # Restart; read everything back while the cleaner resumes its work.
        broker = started("--set", "log.cleaner.backoff.ms=20")
        read = read_all(broker)
        assert last_values(read) == expected, f"round {round_}"
        offsets = [offset for offset, _, _ in read]
        assert offsets == sorted(set(offsets)) and offsets[-1] == written - 1
        assert broker.stop() == 0  # a clean stop, most likely in the middle of a pass too
    print(f"{hits} of {rounds} kills landed in the middle of a cleaning pass")
    assert hits >= 2, f"only {hits} kill(s) landed in the middle of a cleaning pass"


def markers_below_active(broker: BrokerProcess) -> int | None:
    """Transaction markers (control batches with a record) in the sealed segments; None
    when a segment went while they were counted (a swap)."""
    base = active_base(broker)
    count = 0
    for path in partition_dir(broker).glob("*.log"):
        if int(path.name[:20]) < base:
            try:
                data = path.read_bytes()
            except FileNotFoundError:
                return None
            count += sum(1 for _, h in iter_batches(data) if h.is_control and h.records_count)
    return count


def test_read_committed_after_cleaning_committed_and_aborted_transactions(
    started: Callable[..., BrokerProcess],
) -> None:
    broker = started()
    config = {
        "cleanup.policy": "compact",
        "segment.bytes": "2048",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0",
    }
    create_topic(broker, config)
    keys = [b"key-%d" % k for k in range(8)]
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-compact", **CLIENT_LOG}
    )
    try:
        producer.init_transactions(WAIT_S)
        for round_ in range(12):
            for outcome in ("commit", "abort"):
                producer.begin_transaction()
                for key in keys:
                    producer.produce(TOPIC, key=key, value=b"%s-%d" % (outcome.encode(), round_))
                if outcome == "commit":
                    producer.commit_transaction(WAIT_S)
                else:
                    producer.flush(WAIT_S)
                    producer.abort_transaction(WAIT_S)
    finally:
        producer.flush(WAIT_S)
    filler = [(b"filler-%d" % i, b"x" * 100) for i in range(40)]
    for i in range(0, len(filler), 10):  # batches smaller than segment.bytes
        produce(broker, filler[i : i + 10], "none")
    expected = {key: b"commit-11" for key in keys} | dict(filler)
    assert last_values(read_all(broker)) == expected
    reads: list[Read] = []

    def cleaned() -> bool:
        reads.append(read_all(broker, "read_uncommitted"))
        below = [value for offset, _, value in reads[-1] if offset < active_base(broker)]
        markers = markers_below_active(broker)
        return (
            not any(value is not None and value.startswith(b"abort") for value in below)
            and compacted_below_active(broker, reads[-1])
            and markers is not None
            and markers <= 2  # of the 24 written: those its producer's last batch keeps
        )

    wait_for(cleaned, "aborted records and emptied transactions' markers to go")
    committed = read_all(broker)
    assert last_values(committed) == expected
    # read_uncommitted now differs only by the aborted records of the active segment
    assert committed == [e for e in reads[-1] if not (e[2] or b"").startswith(b"abort")]
