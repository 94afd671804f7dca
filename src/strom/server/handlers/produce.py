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
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.records import RecordsError, validate_batches
from strom.protocol.responses.produce import (
    InitProducerIdResponse,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.handlers.ports import ProduceContext
from strom.server.partition import LeadershipMoved, Partition
from strom.server.producer_ids import ProducerIdsUnavailable

log = logging.getLogger(__name__)

_PRODUCER_EPOCH_MAX = 32767


async def handle_produce(context: ProduceContext, request: Request) -> Any | None:
    body = request.body
    acks = int(body.acks)
    current_ms = now_ms()
    timeout_s = max(0, ms(body.timeout)) / 1000
    image = context.metadata.image
    led = context.partitions.led
    waits: list[tuple[PartitionProduceResponse, Awaitable[None]]] = []
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
            if acks not in (-1, 0, 1):
                entry["error_code"] = ErrorCode.invalid_required_acks
                continue
            partition, error = led(topic_data.name, data.index, image)
            if partition is None:
                entry["error_code"] = error
                _refused_here(context, topic_data.name, data.index, data.records, error)
                continue
            if topic_data.name == OFFSETS_TOPIC:
                # Only the group coordinator writes there; a stray record would be
                # replayed into every group at the next start.
                entry["error_code"] = ErrorCode.invalid_topic_exception
                entry["error_message"] = f"{OFFSETS_TOPIC} is written by the broker only"
                continue
            if body.transactional_id is not None:
                entry["error_code"] = ErrorCode.transactional_id_authorization_failed
                entry["error_message"] = "strom does not support transactions yet"
                continue
            try:
                if data.records is None:
                    raise RecordsError(ErrorCode.corrupt_message, "records are null")
                batches = validate_batches(
                    data.records, max_batch_bytes=partition.config.max_message_bytes
                )
                if any(header.is_transactional for _, header in batches):
                    # Kafka refuses transactional records without an authorized
                    # transactional id; strom has no transactions to put them in.
                    raise RecordsError(
                        ErrorCode.transactional_id_authorization_failed,
                        "transactional records need a transaction; strom has none yet",
                    )
                result = partition.append(batches, now_ms=current_ms, acks=acks)
            except RecordsError as exc:
                entry["error_code"] = exc.error_code
                entry["error_message"] = str(exc)
                log.debug("produce to %s-%d refused: %s", topic_data.name, data.index, exc)
                continue
            entry["base_offset"] = result.base_offset
            entry["log_append_time"] = result.log_append_time_ms
            entry["log_start_offset"] = result.log_start_offset
            if acks != 0:
                waits.append(
                    (
                        entry,
                        _acknowledged(entry, partition, result.last_offset + 1, acks, timeout_s),
                    )
                )
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
    if body.transactional_id is not None:
        response["error_code"] = ErrorCode.transactional_id_authorization_failed
        return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)
    producer_id = int(getattr(body, "producer_id", -1))
    producer_epoch = int(getattr(body, "producer_epoch", -1))
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
