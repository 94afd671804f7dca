"""Transactional requests that must be refused, over a real socket: markers written by a
client, transactional batches without their transaction or from the wrong producer,
EndTxn for an unknown id or a stale epoch. Each gets its error code, nothing is
appended, and the broker goes on serving the producer that does things right.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

import kafka_wire as wire
from client_helpers import create_topic, unique_topic
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from node_files import port

from strom.protocol.markers import encode_marker_batch
from strom.protocol.records import encode_batch
from strom.testing import StromCluster

_RETRIABLE = {
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.concurrent_transactions,
}


def _retrying(call: Any, what: str, timeout_s: float = 30.0) -> Any:
    """`call()` until its error is not a coordinator's passing one."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = call()
        if response.error_code not in _RETRIABLE or time.monotonic() > deadline:
            return response
        time.sleep(0.05)  # the coordinator is being created or loaded: ask again


@dataclass
class Txn:
    txn_id: str
    producer_id: int
    epoch: int


def _init(broker_port: int, txn_id: str) -> Txn:
    def ask() -> Any:
        with wire.connect(broker_port) as sock:
            return wire.call(
                sock,
                InitProducerIdRequest(
                    transactional_id=txn_id,
                    transaction_timeout=datetime.timedelta(minutes=1),
                    producer_id=-1,
                    producer_epoch=-1,
                ),
            )

    response = _retrying(ask, "InitProducerId")
    assert response.error_code == ErrorCode.none, response
    return Txn(txn_id, int(response.producer_id), int(response.producer_epoch))


def _add_partition(broker_port: int, txn: Txn, topic: str) -> None:
    request = AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=txn.txn_id,
        v3_and_below_producer_id=txn.producer_id,
        v3_and_below_producer_epoch=txn.epoch,
        v3_and_below_topics=(AddPartitionsToTxnTopic(name=topic, partitions=(0,)),),
    )
    with wire.connect(broker_port) as sock:
        response = wire.call(sock, request)
    errors = [
        p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert errors == [ErrorCode.none], errors


def _end(broker_port: int, txn_id: str, producer_id: int, epoch: int, commit: bool) -> ErrorCode:
    def ask() -> Any:
        with wire.connect(broker_port) as sock:
            return wire.call(
                sock,
                EndTxnRequest(
                    transactional_id=txn_id,
                    producer_id=producer_id,
                    producer_epoch=epoch,
                    committed=commit,
                ),
            )

    return ErrorCode(_retrying(ask, "EndTxn").error_code)


def _produce(broker_port: int, txn_id: str | None, topic: str, batch: bytes) -> Any:
    request = ProduceRequest(
        transactional_id=txn_id,
        acks=-1,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic, partition_data=(PartitionProduceData(index=0, records=batch),)
            ),
        ),
    )
    with wire.connect(broker_port) as sock:
        return wire.call(sock, request).responses[0].partition_responses[0]


def _end_offset(broker_port: int, topic: str) -> int:
    return wire.list_offset(broker_port, topic, 0, wire.LATEST_TIMESTAMP)


def test_end_txn_for_an_unknown_id_or_a_stale_epoch_is_refused(
    strom_broker: StromCluster,
) -> None:
    broker_port = port(strom_broker)
    topic = unique_topic("txn-end")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    txn = _init(broker_port, "end-" + topic)
    _add_partition(broker_port, txn, topic)

    unknown = _end(broker_port, "never-initialised", 4242, 0, commit=True)
    assert unknown == ErrorCode.invalid_producer_id_mapping
    stale = _end(broker_port, txn.txn_id, txn.producer_id, txn.epoch - 1, commit=True)
    assert stale == ErrorCode.producer_fenced
    other = _end(broker_port, txn.txn_id, txn.producer_id + 1, txn.epoch, commit=True)
    assert other == ErrorCode.invalid_producer_id_mapping
    # none of that touched the real transaction, which still commits
    assert _end(broker_port, txn.txn_id, txn.producer_id, txn.epoch, commit=True) == 0


# --- random refusals ------------------------------------------------------------------

batch_kinds = st.fixed_dictionaries(
    {
        "txn_id": st.sampled_from(["real", "none", "other"]),
        "transactional": st.booleans(),
        "control": st.booleans(),
        "producer": st.sampled_from(["real", "other"]),
        "epoch": st.sampled_from([0, -1, 1]),
        "records": st.integers(1, 3),
    }
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(kinds=st.lists(batch_kinds, min_size=1, max_size=6))
def test_only_the_transactions_own_batches_are_appended(
    strom_broker: StromCluster, kinds: list[dict[str, Any]]
) -> None:
    broker_port = port(strom_broker)
    topic = unique_topic("txn-bad")
    create_topic(strom_broker.bootstrap_servers, topic, 1)
    txn = _init(broker_port, "bad-" + topic)
    _add_partition(broker_port, txn, topic)
    now = int(time.time() * 1000)
    # The transaction is open on the partition before any hostile batch arrives.
    first = encode_batch(
        [(None, b"first", ())],
        base_timestamp_ms=now,
        producer_id=txn.producer_id,
        producer_epoch=txn.epoch,
        base_sequence=0,
        is_transactional=True,
    )
    assert _produce(broker_port, txn.txn_id, topic, first).error_code == 0
    sequence = 1
    end = _end_offset(broker_port, topic)
    written = [b"first"]

    for n, kind in enumerate(kinds):
        producer_id = txn.producer_id if kind["producer"] == "real" else txn.producer_id + 77
        epoch = txn.epoch + kind["epoch"]
        values = [b"%d-%d" % (n, i) for i in range(kind["records"])]
        if kind["control"]:
            batch = encode_marker_batch(
                producer_id=producer_id,
                producer_epoch=epoch,
                commit=True,
                coordinator_epoch=0,
                timestamp_ms=now,
            )
        else:
            batch = encode_batch(
                [(None, v, ()) for v in values],
                base_timestamp_ms=now,
                producer_id=txn.producer_id if not kind["transactional"] else producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
                is_transactional=kind["transactional"],
            )
        txn_id = {"real": txn.txn_id, "none": None, "other": txn.txn_id + "-x"}[kind["txn_id"]]
        # As in Kafka, a batch of the producer whose transaction is open on the partition
        # at that epoch is not verified again, whatever transactional id the request
        # names: "other" with the real producer is that producer's batch.
        valid = (
            kind["txn_id"] != "none"
            and kind["transactional"]
            and not kind["control"]
            and kind["producer"] == "real"
            and kind["epoch"] == 0
        )
        answer = _produce(broker_port, txn_id, topic, batch)
        now_end = _end_offset(broker_port, topic)
        if valid:
            assert answer.error_code == 0, (kind, answer)
            assert now_end == end + len(values)
            sequence += len(values)
            written += values
        else:
            assert answer.error_code != 0, (kind, answer)
            assert now_end == end, f"{kind} was refused ({answer.error_code}) yet appended"
        end = now_end

    # The broker still serves the producer that does things right.
    assert _end(broker_port, txn.txn_id, txn.producer_id, txn.epoch, commit=True) == 0
    assert _committed_values(strom_broker, topic, written) == written


def _committed_values(cluster: StromCluster, topic: str, expected: list[bytes]) -> list[bytes]:
    """What a read_committed consumer reads of `topic` once it reads `expected` (the
    markers follow EndTxn's answer), or what it read last after 30 s."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "bad-input-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 30
        while len(values) < len(expected) and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
        for _ in range(3):  # and nothing more
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value())
    finally:
        consumer.close()
    return values
