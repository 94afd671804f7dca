"""One exactly-once write task: its rows in a Kafka transaction of its own, left open for
the driver to commit, with a marker offset that lets a replay of the same task see it is
done (strom.spark.exactly_once).

    no rows at all -> write nothing, and take no transactional id (see below)
    -> abort what the task's earlier attempts left open (take their ids over)
    -> init_transactions (the attempt's own id)
    -> read the slot's committed offset (read_committed)
    -> covers this batch: write nothing
    -> else begin_transaction -> produce every row -> flush (all acknowledged)
       -> ask the coordinator for the producer id and epoch (DescribeTransactions)
       -> send_offsets_to_transaction(slot, batch id + 1)
    -> return the open transaction (id, producer id, epoch); the driver commits it.

Why the task does not commit: a Python data source task cannot tell the end of its input
from a failure upstream of it (Spark closes the stream to the worker either way, and the
worker sees a clean end), so a task that committed itself could commit part of its rows
and then be retried. Spark hands the driver the messages of tasks that succeeded only.

Every attempt of a task has an id of its own (strom.spark.exactly_once), so no attempt
fences another; the driver aborts what the attempts it does not commit left open. The
first rows are awaited before the id is taken: the Python worker of a failed attempt
may start only after Spark has closed its input, and such a worker sees no rows and
leaves no transaction. The epoch is asked for before the offsets are sent, so that the
epoch returned is the one the transaction has; librdkafka leaves the transaction open
when the producer is destroyed.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

import pyarrow as pa
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from strom.spark.arrow import WritePlan
from strom.spark.errors import BrokerError
from strom.spark.exactly_once import SLOT_PARTITION, SLOT_TOPIC, TaskSlot
from strom.spark.kafka import REQUEST_TIMEOUT_S, RecordWriter, WriteSummary
from strom.spark.options import WriteOptions
from strom.spark.txn_coordinator import PendingTransaction, describe, security_of

log = logging.getLogger(__name__)
T = TypeVar("T")
# InitProducerId waits while the id's previous transaction is still being ended (its
# markers written); a predecessor killed mid-transaction is aborted within this.
INIT_TIMEOUT_S = 60.0


def write_in_transaction(
    options: WriteOptions, plan: WritePlan, slot: TaskSlot, batches: Iterator[pa.RecordBatch]
) -> tuple[WriteSummary, PendingTransaction | None] | None:
    """Write the task's rows in a transaction left open; None if a committed transaction
    of this slot already wrote them, and no transaction if the task has no rows."""
    rows = _with_rows(batches)
    if rows is None:
        return WriteSummary(), None
    batches = rows
    writer = RecordWriter(options.bootstrap_servers, options.client_config, slot.transactional_id)
    producer = writer.producer
    marker = Consumer(
        {"bootstrap.servers": options.bootstrap_servers}
        | dict(_consumer_settings(options))
        | {
            "group.id": slot.group_id,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        for earlier in slot.earlier_ids:  # their pending marker would hold up the read
            fence(options, earlier)
        _call(
            "initialise the transactions of",
            slot,
            lambda: producer.init_transactions(INIT_TIMEOUT_S),
        )
        committed = _committed_offset(marker, slot)
        if slot.already_written(committed):
            log.info(
                "strom: %s already committed batch %d; writing nothing",
                slot.transactional_id,
                slot.batch_id,
            )
            for _ in batches:  # Spark expects the input read
                pass
            return None
        producer.begin_transaction()
        try:
            summary = writer.write(batches, plan)
            pending = describe(
                options.bootstrap_servers,
                slot.transactional_id,
                security_of(options.client_config),
            )
            offsets = [
                KafkaTopicPartition(
                    SLOT_TOPIC,
                    SLOT_PARTITION,
                    slot.marker_offset,
                    metadata=json.dumps({"batch": slot.batch_id, "records": summary.records}),
                )
            ]
            metadata = marker.consumer_group_metadata()
            _call(
                "add the marker offset to the transaction of",
                slot,
                lambda: producer.send_offsets_to_transaction(offsets, metadata, REQUEST_TIMEOUT_S),
            )
        except BaseException:
            _abort(producer, slot)
            raise
        return summary, pending
    finally:
        marker.close()


def _with_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch] | None:
    """`batches` from the first one with rows on; None if none has any."""
    for batch in batches:
        if batch.num_rows:
            return itertools.chain((batch,), batches)
    return None


def _committed_offset(marker: Consumer, slot: TaskSlot) -> int | None:
    def ask() -> int:
        tp = KafkaTopicPartition(SLOT_TOPIC, SLOT_PARTITION)
        return int(marker.committed([tp], timeout=REQUEST_TIMEOUT_S)[0].offset)

    offset = _call("read the committed marker of", slot, ask)
    return offset if offset >= 0 else None


def _call(what: str, slot: TaskSlot, call: Callable[[], T]) -> T:
    try:
        return call()
    except KafkaException as exc:
        raise BrokerError(f"strom: could not {what} {slot.transactional_id}: {exc}") from None


def _abort(producer: Producer, slot: TaskSlot) -> None:
    try:
        producer.abort_transaction(REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        # Fenced or the broker gone: the next attempt's init_transactions aborts it, or
        # the broker does when the transaction times out.
        log.warning("strom: could not abort the transaction of %s: %s", slot.transactional_id, exc)


def _consumer_settings(options: WriteOptions) -> dict[str, str]:
    """The kafka.* settings a consumer also understands (security, client id, ...)."""
    shared = (
        "security.",
        "sasl.",
        "ssl.",
        "enable.sasl.",  # enable.sasl.oauthbearer.unsecure.jwt
        "enable.ssl.",  # enable.ssl.certificate.verification
        "https.",  # the OAUTHBEARER token endpoint's CA
        "client.id",
        "socket.",
        "broker.",
    )
    return {k: v for k, v in options.client_config.items() if k.startswith(shared)}


def fence(options: WriteOptions, transactional_id: str) -> None:
    """Abort whatever transaction `transactional_id` has open, by taking the id over: for
    the tasks of a failed write that sent no message, so read_committed consumers do not
    wait for the broker's timeout. Any attempt of that task still running is fenced."""
    producer = RecordWriter(
        options.bootstrap_servers, options.client_config, transactional_id
    ).producer
    try:
        producer.init_transactions(REQUEST_TIMEOUT_S)
    except KafkaException as exc:
        log.warning("strom: could not fence %s: %s", transactional_id, exc)
