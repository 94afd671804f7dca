"""Incremental fetch sessions (KIP-227) with a real client that uses them: kafka-python
reads a topic of many partitions through one session per broker while records keep
coming, and gets every record once, in order."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import kafka
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).parent))

from broker import BrokerProcess
from prometheus import scrape

PARTITIONS = 12
ROUNDS = 4
PER_ROUND = 1_200


def produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, b"%08d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def test_kafka_python_reads_many_partitions_through_a_session(
    metered: tuple[BrokerProcess, str],
) -> None:
    broker, url = metered
    topic = "sessions"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    got: dict[int, list[tuple[int, int]]] = {p: [] for p in range(PARTITIONS)}
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
    )
    try:
        partitions = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        for round_ in range(ROUNDS):
            # Each round writes to every partition, then reads until all of it is back:
            # the session's incremental answers must carry each partition's news.
            produce(broker.bootstrap, topic, round_ * PER_ROUND, PER_ROUND)
            wanted = (round_ + 1) * PER_ROUND
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < wanted:
                assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
                for tp, records in consumer.poll(timeout_ms=500).items():
                    got[tp.partition] += [(r.offset, int(r.value)) for r in records]
            # kafka-python leaves out of its next fetch (the session forgets them) the
            # partitions whose records it still holds, so a scrape between two polls can
            # count one fewer: poll on until the session holds every partition again.
            while True:
                metrics = scrape(url)
                assert metrics[("strom_fetch_sessions", ())] == 1, "kafka-python: one session"
                if metrics[("strom_fetch_session_partitions", ())] == PARTITIONS:
                    break
                assert time.monotonic() < deadline, metrics[("strom_fetch_session_partitions", ())]
                for tp, records in consumer.poll(timeout_ms=100).items():
                    got[tp.partition] += [(r.offset, int(r.value)) for r in records]
    finally:
        consumer.close()
    for p, records in got.items():
        values = [value for _, value in records]
        assert [offset for offset, _ in records] == list(range(len(records))), p
        assert values == list(range(p, ROUNDS * PER_ROUND, PARTITIONS)), p
    assert scrape(url)[("strom_fetch_session_evictions_total", ())] == 0
