"""Transactions end to end with real clients: confluent-kafka's and kafka-python's
transactional producers, read_committed consumers, offsets committed with the output,
fencing, the coordinator's timeout, and a broker killed in the middle of transactions.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kafka
import pytest
from client_helpers import CLIENT_TIMEOUT_S, confluent_consumer, create_topic, unique_topic
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from strom.testing import StromCluster

TXN_TIMEOUT_S = 30.0


@contextmanager
def txn_producer(bootstrap: str, txn_id: str | None = None, **conf: Any) -> Iterator[Producer]:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id or "txn-" + uuid.uuid4().hex[:8],
            "linger.ms": 5,
            **conf,
        }
    )
    try:
        producer.init_transactions(TXN_TIMEOUT_S)
        yield producer
    finally:
        producer.purge()
        with contextlib.suppress(KafkaException):  # a fenced producer's flush raises
            producer.flush(5)


def read_values(
    bootstrap: str, topic: str, partitions: int, *, committed: bool, want: int | None = None
) -> dict[int, list[bytes]]:
    """Every value of the topic by partition, as one isolation level sees it. Reads until
    the consumer has reached the end it may read to (the LSO for read_committed) on each
    partition, or `want` values arrived."""
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    isolation = "read_committed" if committed else "read_uncommitted"
    with confluent_consumer(
        bootstrap, **{"isolation.level": isolation, "enable.partition.eof": True}
    ) as consumer:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(at_end) < partitions or (want is not None and _count(got) < want):
            assert time.monotonic() < deadline, f"read {got} ({isolation}) and no end"
            for msg in consumer.consume(1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                at_end.discard(msg.partition())
                got[msg.partition()].append(msg.value())
    return got


def _count(got: dict[int, list[bytes]]) -> int:
    return sum(len(v) for v in got.values())


def test_read_committed_sees_committed_transactions_only(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("txn")
    create_topic(bootstrap, topic, 2)
    with txn_producer(bootstrap) as producer:
        for name, commit in (("a", True), ("b", False), ("c", True)):
            producer.begin_transaction()
            for i in range(10):
                producer.produce(topic, f"{name}{i}".encode(), partition=i % 2)
            if commit:
                producer.commit_transaction(TXN_TIMEOUT_S)
            else:
                # written first: abort_transaction purges what is not yet sent
                assert producer.flush(TXN_TIMEOUT_S) == 0
                producer.abort_transaction(TXN_TIMEOUT_S)

    committed = read_values(bootstrap, topic, 2, committed=True)
    for p in (0, 1):
        assert committed[p] == [f"{n}{i}".encode() for n in "ac" for i in range(p, 10, 2)]
    everything = read_values(bootstrap, topic, 2, committed=False)
    for p in (0, 1):
        assert everything[p] == [f"{n}{i}".encode() for n in "abc" for i in range(p, 10, 2)]


def test_an_open_transaction_holds_back_read_committed_readers(
    strom_broker: StromCluster,
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("lso")
    create_topic(bootstrap, topic, 1)
    with txn_producer(bootstrap) as producer, confluent_producer_plain(bootstrap) as plain:
        producer.begin_transaction()
        producer.produce(topic, b"inside")
        producer.flush(TXN_TIMEOUT_S)
        plain.produce(topic, b"after")  # not transactional, but behind the open one
        assert plain.flush(TXN_TIMEOUT_S) == 0

        assert read_values(bootstrap, topic, 1, committed=True) == {0: []}
        assert read_values(bootstrap, topic, 1, committed=False) == {0: [b"inside", b"after"]}
        with confluent_consumer(bootstrap, **{"isolation.level": "read_committed"}) as c:
            low, high = c.get_watermark_offsets(TopicPartition(topic, 0), CLIENT_TIMEOUT_S)
            assert (low, high) == (0, 0), "read_committed's end offset is the LSO"

        producer.commit_transaction(TXN_TIMEOUT_S)
    assert read_values(bootstrap, topic, 1, committed=True) == {0: [b"inside", b"after"]}


@contextmanager
def confluent_producer_plain(bootstrap: str) -> Iterator[Producer]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    try:
        yield producer
    finally:
        producer.flush(5)


def test_consume_transform_produce_commits_input_offsets_with_the_output(
    strom_broker: StromCluster,
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    source, sink = unique_topic("in"), unique_topic("out")
    create_topic(bootstrap, source, 1)
    create_topic(bootstrap, sink, 1)
    with confluent_producer_plain(bootstrap) as plain:
        for i in range(20):
            plain.produce(source, str(i).encode())
    group = "ctp-" + uuid.uuid4().hex[:6]
    with (
        txn_producer(bootstrap) as producer,
        confluent_consumer(
            bootstrap, **{"group.id": group, "isolation.level": "read_committed"}
        ) as consumer,
    ):
        consumer.subscribe([source])
        done = 0
        aborted_once = False
        deadline = time.monotonic() + CLIENT_TIMEOUT_S * 2
        while done < 20:
            assert time.monotonic() < deadline, f"transformed {done} of 20"
            messages = [m for m in consumer.consume(5, timeout=0.5) if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, b"x" + m.value())
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                TXN_TIMEOUT_S,
            )
            if not aborted_once:
                # The first batch is aborted: its output vanishes and its offsets are not
                # committed, so it is read again.
                producer.abort_transaction(TXN_TIMEOUT_S)
                aborted_once = True
                for tp in consumer.assignment():
                    consumer.seek(TopicPartition(tp.topic, tp.partition, 0))
                continue
            producer.commit_transaction(TXN_TIMEOUT_S)
            done += len(messages)
    assert strom_broker.committed(group) == {(source, 0): 20}
    assert read_values(bootstrap, sink, 1, committed=True) == {0: [b"x%d" % i for i in range(20)]}


def test_a_new_producer_with_the_same_id_fences_the_old_one(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("fence")
    create_topic(bootstrap, topic, 1)
    txn_id = "fenced-" + uuid.uuid4().hex[:6]
    with txn_producer(bootstrap, txn_id) as old:
        old.begin_transaction()
        old.produce(topic, b"zombie")
        old.flush(TXN_TIMEOUT_S)
        with txn_producer(bootstrap, txn_id) as new:
            # init_transactions aborted the old producer's open transaction
            new.begin_transaction()
            new.produce(topic, b"alive")
            new.commit_transaction(TXN_TIMEOUT_S)
        with pytest.raises(KafkaException) as raised:
            old.commit_transaction(TXN_TIMEOUT_S)
        assert raised.value.args[0].fatal(), raised.value
    assert read_values(bootstrap, topic, 1, committed=True) == {0: [b"alive"]}


def test_the_coordinator_aborts_a_transaction_that_outlives_its_timeout(
    strom_broker: StromCluster,
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("timeout")
    create_topic(bootstrap, topic, 1)
    with txn_producer(bootstrap, **{"transaction.timeout.ms": 1500}) as stalled:
        stalled.begin_transaction()
        stalled.produce(topic, b"stalled")
        stalled.flush(TXN_TIMEOUT_S)
        # Nothing more from it: the coordinator aborts, and the LSO moves past it.
        with txn_producer(bootstrap) as other:
            other.begin_transaction()
            other.produce(topic, b"later")
            other.commit_transaction(TXN_TIMEOUT_S)
        assert read_values(bootstrap, topic, 1, committed=True, want=1) == {0: [b"later"]}
        with pytest.raises(KafkaException):
            stalled.commit_transaction(TXN_TIMEOUT_S)


def test_kafka_python_transactions_are_read_by_confluent_kafka(
    strom_broker: StromCluster,
) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("kp")
    create_topic(bootstrap, topic, 1)
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap, transactional_id="kp-" + uuid.uuid4().hex[:6]
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept", partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", partition=0)
        producer.abort_transaction()
    finally:
        producer.close(timeout=5)
    assert read_values(bootstrap, topic, 1, committed=True) == {0: [b"kept"]}
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        assert [r.value for r in consumer] == [b"kept"]
    finally:
        consumer.close()


def test_committed_transactions_survive_a_kill_9_exactly_once() -> None:
    with StromCluster(processes=True) as cluster:
        bootstrap = cluster.bootstrap_servers
        topic = unique_topic("kill")
        create_topic(bootstrap, topic, 2)
        committed: list[int] = []
        with txn_producer(bootstrap, "kill-9") as producer:
            for n in range(30):
                producer.begin_transaction()
                producer.produce(topic, b"%d" % n, partition=n % 2)
                producer.produce(topic, b"%d" % n, partition=(n + 1) % 2)
                if n % 3 == 2:
                    producer.abort_transaction(TXN_TIMEOUT_S)
                else:
                    producer.commit_transaction(TXN_TIMEOUT_S)
                    committed.append(n)
            producer.begin_transaction()
            producer.produce(topic, b"open", partition=0)
            producer.flush(TXN_TIMEOUT_S)
            cluster.crash_node(cluster.node_ids[0])
            cluster.start_node(cluster.node_ids[0])
        # The open transaction is aborted by a new producer with the same id.
        with txn_producer(bootstrap, "kill-9") as again:
            again.begin_transaction()
            again.produce(topic, b"after", partition=0)
            again.commit_transaction(TXN_TIMEOUT_S)
        got = read_values(bootstrap, topic, 2, committed=True)
        assert got[0] == [b"%d" % n for n in committed] + [b"after"]
        assert got[1] == [b"%d" % n for n in committed]
