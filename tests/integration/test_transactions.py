"""Transactions with a real client: confluent-kafka's transactional producer (librdkafka,
transaction version 0: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
TxnOffsetCommit, EndTxn) and read_committed consumers, on one node and on three (where
the coordinator of the transactional id is usually not the leader of the partitions, so
produces are verified over the wire).

Waiting is done by polling with deadlines, never by sleeping; every client a test
starts is closed in a `finally`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from client_helpers import CLIENT_TIMEOUT_S, create_topic, unique_topic, wait_until
from confluent_kafka import Consumer, Producer, TopicPartition

from strom.testing import StromCluster

TXN_CONFIG = {
    "transaction.state.log.num.partitions": 3,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.min.isr": 1,
    "offsets.topic.num.partitions": 3,
    "offsets.topic.replication.factor": 1,
}


def transactional_producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    return producer


def read_all(
    bootstrap: str, topic: str, partitions: int, isolation: str, expected: int
) -> list[bytes]:
    """The values readable in `topic` at this isolation level: `expected` of them, and
    none more within a further second of polling."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4()}",
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []

    def poll() -> None:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            values.append(message.value())

    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        wait_until(
            lambda: poll() or len(values) >= expected,
            CLIENT_TIMEOUT_S,
            f"{expected} records ({isolation})",
        )
        for _ in range(10):
            poll()
    finally:
        consumer.close()
    return values


def _run(cluster: StromCluster, partitions: int) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = unique_topic("txn")
    create_topic(bootstrap, topic, partitions)
    producer = transactional_producer(bootstrap, f"tx-{topic}")
    try:
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, f"commit-{i}".encode(), partition=i % partitions)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"abort-{i}".encode(), partition=i % partitions)
        producer.flush(CLIENT_TIMEOUT_S)
        producer.abort_transaction(CLIENT_TIMEOUT_S)
        producer.begin_transaction()
        producer.produce(topic, b"last", partition=0)
        producer.commit_transaction(CLIENT_TIMEOUT_S)
    finally:
        producer.flush(CLIENT_TIMEOUT_S)
    committed = read_all(bootstrap, topic, partitions, "read_committed", 31)
    assert sorted(committed) == sorted([f"commit-{i}".encode() for i in range(30)] + [b"last"])
    everything = read_all(bootstrap, topic, partitions, "read_uncommitted", 41)
    assert len(everything) == 41


@pytest.mark.strom(nodes=3, config=TXN_CONFIG)
def test_committed_and_aborted_transactions_on_three_nodes(strom_cluster: StromCluster) -> None:
    _run(strom_cluster, 6)


@pytest.mark.strom(config=TXN_CONFIG)
def test_offsets_sent_to_a_transaction_commit_with_it(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    topic = unique_topic("txn-offsets")
    create_topic(bootstrap, topic, 1)
    group = f"g-{topic}"
    producer = transactional_producer(bootstrap, f"tx-{topic}")
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        metadata: Any = consumer.consumer_group_metadata()
        for offset, commit in ((5, False), (7, True)):
            producer.begin_transaction()
            producer.produce(topic, b"x", partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], metadata, CLIENT_TIMEOUT_S
            )
            if commit:
                producer.commit_transaction(CLIENT_TIMEOUT_S)
            else:
                producer.abort_transaction(CLIENT_TIMEOUT_S)

        def committed() -> bool:
            (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=CLIENT_TIMEOUT_S)
            return tp.offset == 7

        wait_until(committed, CLIENT_TIMEOUT_S, "the transaction's offset to be committed")
    finally:
        consumer.close()
        producer.flush(CLIENT_TIMEOUT_S)
