"""Durability across SIGTERM and SIGKILL: an acknowledged record survives any stop, and a
consumer never sees a record a crash could take back.

Real `strom serve` processes and real clients (confluent-kafka); the `new_broker` and
`data_dir` fixtures are in conftest.py, the helpers in durability_helpers.py.
"""

from __future__ import annotations

import datetime
import select
import socket
import time
from collections.abc import Callable

from broker import BrokerProcess
from durability_helpers import (
    TOPIC,
    WAIT_S,
    RecordingConsumer,
    SequentialProducer,
    check_log_against_acks,
    consume_all,
    create_topic,
    produce_values,
    seeded_rng,
    wait_until,
    watermarks,
)
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic

from strom.protocol.codec import encode_request

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
