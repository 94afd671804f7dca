"""Produce and InitProducerId.

A produce appends each partition's batches on the leader's log, in request order, then
waits:

- acks=1: until the leader has fsynced them, when the topic's `flush.messages` is 1 (the
  default; otherwise it answers at once);
- acks=all: until the high watermark passes them, that is until every in-sync replica
  holds them (fsynced, with `flush.messages=1`), or the request's timeout expires
  (REQUEST_TIMED_OUT: the records may or may not be committed later). A produce to a
  partition whose ISR is smaller than `min.insync.replicas` is refused before appending
  (NOT_ENOUGH_REPLICAS); one whose ISR shrank below it while waiting gets
  NOT_ENOUGH_REPLICAS_AFTER_APPEND. Leadership lost while waiting gives
  NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata and retries at the new
  leader (an idempotent producer without duplicates).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC
from strom.metadata.image import MetadataImage
from strom.metrics.traffic import Tally
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.records import BatchHeader, RecordErrors, RecordsError, validate_batches
from strom.protocol.responses.produce import (
    InitProducerIdResponse,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.handlers.access import Access
from strom.server.handlers.ports import ProduceContext
from strom.server.partition import LeadershipMoved, Partition
from strom.server.producer_ids import ProducerIdsUnavailable
from strom.server.transactions import TxnUnavailable
from strom.server.txn_verifier import (
    RETRY_BACKOFF_S,
    RETRY_MAX_S,
    VerificationGuard,
    VerifyOperation,
    produce_error,
)
from strom.txn.placement import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

_PRODUCER_EPOCH_MAX = 32767
_BROKER_WRITTEN = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


@dataclass(slots=True, eq=False)
class _Write:
    """One partition's validated batches, not yet appended."""

    entry: PartitionProduceResponse
    topic: str
    partition: Partition
    batches: list[tuple[memoryview, BatchHeader]]
    transactional: bool
    guard: VerificationGuard | None = None


async def handle_produce(context: ProduceContext, request: Request) -> Any | None:
    body = request.body
    acks = int(body.acks)
    timeout_s = max(0, ms(body.timeout)) / 1000
    image = context.metadata.image
    led = context.partitions.led
    access = Access.of(context.authorizer(), request)
    txn_id = body.transactional_id
    txn_denied = txn_id is not None and not access.allows(
        AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, txn_id
    )
    writable: dict[str, bool] = {}
    writes: list[_Write] = []
    entries: list[PartitionProduceResponse] = []
    topics: list[TopicProduceResponse] = []
    for topic_data in body.topic_data:
        partitions: list[PartitionProduceResponse] = []
        topics.append({"name": topic_data.name, "partition_responses": partitions})
        for data in topic_data.partition_data:
            entry: PartitionProduceResponse = {
                "index": data.index,
                "error_code": ErrorCode.none,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
                "record_errors": [],
                "error_message": None,
            }
            partitions.append(entry)
            entries.append(entry)
            if acks not in (-1, 0, 1):
                entry["error_code"] = ErrorCode.invalid_required_acks
                continue
            if txn_denied:  # the whole request, as Kafka refuses it
                entry["error_code"] = ErrorCode.transactional_id_authorization_failed
                continue
            name = topic_data.name
            if name not in writable:
                writable[name] = access.allows(AclOperation.WRITE, AclResourceType.TOPIC, name)
            if not writable[name]:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                continue
            partition, error = led(topic_data.name, data.index, image)
            if partition is None:
                entry["error_code"] = error
                _refused_here(context, topic_data.name, data.index, data.records, error)
                continue
            if topic_data.name in _BROKER_WRITTEN:
                # Only the coordinators write there; a stray record would be replayed
                # into every group or transactional id at the next start.
                entry["error_code"] = ErrorCode.invalid_topic_exception
                entry["error_message"] = f"{topic_data.name} is written by the broker only"
                continue
            try:
                if data.records is None:
                    raise RecordsError(ErrorCode.corrupt_message, "records are null")
                batches = validate_batches(
                    data.records, max_batch_bytes=partition.config.max_message_bytes
                )
            except RecordsError as exc:
                _refuse(entry, topic_data.name, exc.error_code, str(exc))
                continue
            transactional = any(header.is_transactional for _, header in batches)
            writes.append(_Write(entry, topic_data.name, partition, batches, transactional))
    refused = _refused_transactional(body.transactional_id, writes)
    if refused is not None:
        # Kafka refuses the whole request: every partition gets the error.
        for entry in entries:
            entry["error_code"], entry["error_message"] = refused
        writes = []
    waits: list[tuple[PartitionProduceResponse, Awaitable[None]]] = []
    verified = [w for w in writes if w.transactional and _needs_verification(w)]
    for write in writes:
        if write not in verified and write.entry["error_code"] == ErrorCode.none:
            _append(write, acks, timeout_s, waits, context.produced)
    if verified:
        await _verify(context, body.transactional_id, verified, request.api_version)
        image = context.metadata.image
        for write in verified:
            if write.entry["error_code"] == ErrorCode.none:
                _append_verified(context, write, image, acks, timeout_s, waits)
    if acks == 0:
        return None
    if waits:
        outcomes = await asyncio.gather(*(wait for _, wait in waits), return_exceptions=True)
        for (entry, _), outcome in zip(waits, outcomes, strict=True):
            if isinstance(outcome, PartitionGone):
                entry["error_code"] = ErrorCode.unknown_topic_or_partition
                entry["error_message"] = str(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
    response: ProduceResponse = {"responses": topics, "throttle_time": 0}
    return build_response(ApiKey.PRODUCE, request.api_version, response)


def _refuse(entry: PartitionProduceResponse, topic: str, error: ErrorCode, why: str) -> None:
    entry["error_code"] = error
    entry["error_message"] = why
    log.debug("produce to %s-%d refused: %s", topic, entry["index"], why)


def _refused_transactional(
    transactional_id: str | None, writes: list[_Write]
) -> tuple[ErrorCode, str] | None:
    """Kafka's checks of a request's transactional batches as a whole: they need a
    transactional id, and may come from one producer (id and epoch) only."""
    producers = {
        (header.producer_id, header.producer_epoch)
        for write in writes
        if write.transactional
        for _, header in write.batches
        if header.is_transactional
    }
    if not producers:
        return None
    if transactional_id is None:
        return (
            ErrorCode.transactional_id_authorization_failed,
            "transactional records need a transactional id",
        )
    if len(producers) > 1:
        return (
            ErrorCode.invalid_producer_id_mapping,
            "transactional records of more than one producer id or epoch",
        )
    return None


def _producer_of(write: _Write) -> tuple[int, int]:
    header = next(header for _, header in write.batches if header.is_transactional)
    return header.producer_id, header.producer_epoch


def _needs_verification(write: _Write) -> bool:
    """A transactional batch whose producer has no transaction open on the partition
    would open one: its coordinator must say the partition is in the transaction first.
    A batch of an older epoch than the partition's is refused at once."""
    producer_id, epoch = _producer_of(write)
    known = write.partition.log.producers.get(producer_id)
    if known is not None and epoch < known.epoch:
        _refuse(
            write.entry,
            write.topic,
            ErrorCode.invalid_producer_epoch,
            f"epoch {epoch} of producer {producer_id} is older than its epoch {known.epoch}",
        )
        return False
    # Kafka's hasOngoingTransaction: one of this producer at this epoch is open here
    return not (
        known is not None and known.current_txn_first_offset is not None and known.epoch == epoch
    )


async def _verify(context: ProduceContext, txn_id: str, writes: list[_Write], version: int) -> None:
    """Ask the coordinator about every partition at once (one producer per request);
    each that fails gets its error, as Kafka tells producers of this version."""
    operation = VerifyOperation.for_produce(version)
    producer_id, epoch = _producer_of(writes[0])
    verifier = context.verifier
    for write in writes:
        write.guard = verifier.guard(write.topic, write.entry["index"], producer_id)
    partitions = [(w.topic, w.entry["index"]) for w in writes]
    try:
        errors = await verifier.verify(txn_id, producer_id, epoch, partitions, operation)
        if operation.adds:
            # The previous transaction may still be completing: Kafka's broker tries
            # again for a while rather than have the producer resend the whole request.
            deadline = asyncio.get_running_loop().time() + RETRY_MAX_S
            while ErrorCode.concurrent_transactions in errors.values():
                if asyncio.get_running_loop().time() >= deadline:
                    break
                await asyncio.sleep(RETRY_BACKOFF_S)
                errors = await verifier.verify(txn_id, producer_id, epoch, partitions, operation)
    finally:
        for write in writes:
            if write.guard is not None:
                verifier.release(write.guard)
    for write in writes:
        error = errors.get((write.topic, write.entry["index"]))
        if error is not None:
            code, why = produce_error(error, operation)
            _refuse(write.entry, write.topic, code, why or code.name)
            if code in (ErrorCode.not_enough_replicas, ErrorCode.concurrent_transactions):
                headers = [header for _, header in write.batches]
                write.partition.refused(headers, code, why or code.name)
        elif write.guard is not None and not write.guard.valid:
            _refuse(
                write.entry,
                write.topic,
                ErrorCode.invalid_txn_state,
                "the transaction ended while the partition was being verified",
            )


def _append_verified(
    context: ProduceContext,
    write: _Write,
    image: MetadataImage,
    acks: int,
    timeout_s: float,
    waits: list[tuple[PartitionProduceResponse, Awaitable[None]]],
) -> None:
    """Append after the verification: the partition may have changed hands meanwhile."""
    partition, error = context.partitions.led(write.topic, write.entry["index"], image)
    if partition is not write.partition:
        code = error or ErrorCode.not_leader_or_follower
        _refuse(write.entry, write.topic, code, "the leader changed during the verification")
        return
    _append(write, acks, timeout_s, waits, context.produced)


def _append(
    write: _Write,
    acks: int,
    timeout_s: float,
    waits: list[tuple[PartitionProduceResponse, Awaitable[None]]],
    produced: Tally,
) -> None:
    entry = write.entry
    try:
        result = write.partition.append(write.batches, now_ms=now_ms(), acks=acks)
    except RecordsError as exc:
        _refuse(entry, write.topic, exc.error_code, str(exc))
        if isinstance(exc, RecordErrors):  # KIP-467: which records, and why
            entry["record_errors"] = [
                {"batch_index": index, "batch_index_error_message": message}
                for index, message in exc.errors
            ]
        return
    produced.add(
        write.topic,
        sum(len(view) for view, _ in write.batches),
        result.last_offset + 1 - result.base_offset,
    )
    entry["base_offset"] = result.base_offset
    entry["log_append_time"] = result.log_append_time_ms
    entry["log_start_offset"] = result.log_start_offset
    if acks != 0:
        offset = result.last_offset + 1
        waits.append((entry, _acknowledged(entry, write.partition, offset, acks, timeout_s)))


def _refused_here(
    context: ProduceContext, topic: str, index: int, records: bytes | None, error: ErrorCode
) -> None:
    """A replica here that is not the leader refused a produce: it may lead before the
    producer's next batch arrives, which must then not be told it skipped this one."""
    replica = context.partitions.get(topic, index)
    if replica is None or records is None or error != ErrorCode.not_leader_or_follower:
        return
    try:
        batches = validate_batches(records, max_batch_bytes=replica.config.max_message_bytes)
    except RecordsError:
        return
    replica.refused([header for _, header in batches], error, "not the leader")


async def _acknowledged(
    entry: PartitionProduceResponse, partition: Partition, offset: int, acks: int, timeout_s: float
) -> None:
    """Wait as `acks` asks for the records below `offset`; errors go into `entry`."""
    try:
        await partition.acknowledged(offset, acks, timeout_s)
    except LeadershipMoved as exc:
        entry["error_code"] = ErrorCode.not_leader_or_follower
        entry["error_message"] = str(exc)
    except TimeoutError:
        entry["error_code"], entry["error_message"] = partition.replica.not_committed(timeout_s)


async def handle_init_producer_id(context: ProduceContext, request: Request) -> Any:
    body = request.body
    response: InitProducerIdResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    denied = _init_denied(Access.of(context.authorizer(), request), body.transactional_id)
    if denied is not None:
        response["error_code"] = denied
        return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)
    producer_id = int(getattr(body, "producer_id", -1))
    producer_epoch = int(getattr(body, "producer_epoch", -1))
    if body.transactional_id is not None:
        await _init_transactional(context, request, producer_id, producer_epoch, response)
        return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)
    if producer_id >= 0 and 0 <= producer_epoch < _PRODUCER_EPOCH_MAX - 1:
        # KIP-360: an idempotent producer bumps its epoch to reset its sequences.
        response["producer_id"] = producer_id
        response["producer_epoch"] = producer_epoch + 1
    else:
        try:
            response["producer_id"] = await context.producer_ids.next_id()
        except ProducerIdsUnavailable as exc:
            response["error_code"] = ErrorCode.coordinator_not_available
            log.info("[node %d] InitProducerId: %s", context.node_id, exc)
            return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)
        response["producer_epoch"] = 0
    return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)


def _init_denied(access: Access, txn_id: str | None) -> ErrorCode | None:
    """Kafka's checks of an InitProducerId, before anything else: a transactional
    producer needs WRITE on its transactional id; an idempotent one IDEMPOTENT_WRITE on
    the cluster, or else WRITE on some topic (KIP-679: any LITERAL or PREFIXED ALLOW no
    DENY overrides, as Kafka's authorizeByResourceType decides)."""
    if txn_id is not None:
        if access.allows(AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, txn_id):
            return None
        return ErrorCode.transactional_id_authorization_failed
    if access.allows_cluster(AclOperation.IDEMPOTENT_WRITE) or access.allows_any(
        AclOperation.WRITE, AclResourceType.TOPIC
    ):
        return None
    return ErrorCode.cluster_authorization_failed


async def _init_transactional(
    context: ProduceContext,
    request: Request,
    producer_id: int,
    producer_epoch: int,
    response: InitProducerIdResponse,
) -> None:
    """A transactional producer starting (or, v3+, recovering with the producer id and
    epoch it had): its coordinator decides. Clients before v4 do not know
    PRODUCER_FENCED and hear INVALID_PRODUCER_EPOCH."""
    body = request.body
    txn_id = str(body.transactional_id)
    if (producer_id == -1) != (producer_epoch == -1):
        response["error_code"] = ErrorCode.invalid_request
        return
    expected = None if producer_id == -1 else (producer_id, producer_epoch)
    try:
        result = await context.txns.init_producer_id(txn_id, ms(body.transaction_timeout), expected)
    except TxnUnavailable as exc:
        response["error_code"] = exc.error_code
        return
    error = result.error
    if error == ErrorCode.producer_fenced and request.api_version < 4:
        error = ErrorCode.invalid_producer_epoch
    response["error_code"] = error
    response["producer_id"] = result.producer_id
    response["producer_epoch"] = result.producer_epoch
