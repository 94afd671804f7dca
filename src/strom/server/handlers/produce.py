"""Produce and InitProducerId.

A produce appends each partition's batches on the event loop, in request order, then
waits (acks 1 and all) until the flusher has fsynced them when the topic's
`flush.messages` is 1 — the default. With a single replica, acks=1 and acks=all are the
same promise; acks=all is refused with NOT_ENOUGH_REPLICAS when the ISR is smaller than
`min.insync.replicas`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.records import RecordsError, validate_batches
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.producer_ids import ProducerIdsUnavailable

if TYPE_CHECKING:
    from strom.server.broker import Broker

log = logging.getLogger(__name__)

_PRODUCER_EPOCH_MAX = 32767


def _min_insync_replicas(broker: Broker, topic: str) -> int:
    value = broker.image.topic_configs(topic).get("min.insync.replicas")
    return int(value) if value is not None else broker.config.min_insync_replicas


async def handle_produce(broker: Broker, request: Request) -> Any | None:
    body = request.body
    acks = int(body.acks)
    current_ms = now_ms()
    waits: list[tuple[dict[str, Any], Awaitable[None]]] = []
    topics: list[dict[str, Any]] = []
    for topic_data in body.topic_data:
        partitions: list[dict[str, Any]] = []
        topics.append({"name": topic_data.name, "partition_responses": partitions})
        for data in topic_data.partition_data:
            entry: dict[str, Any] = {
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
            partition, error = broker.partitions.led(topic_data.name, data.index, broker.image)
            if partition is None:
                entry["error_code"] = error
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
            if acks == -1:
                topic_image = broker.image.topics_by_name[topic_data.name]
                isr = topic_image.partitions[data.index].isr
                required = _min_insync_replicas(broker, topic_data.name)
                if len(isr) < required:
                    entry["error_code"] = ErrorCode.not_enough_replicas
                    entry["error_message"] = (
                        f"{len(isr)} in-sync replica(s), min.insync.replicas is {required}"
                    )
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
                result = partition.log.append(
                    batches, now_ms=current_ms, leader_epoch=partition.leader_epoch
                )
            except RecordsError as exc:
                entry["error_code"] = exc.error_code
                entry["error_message"] = str(exc)
                log.debug("produce to %s-%d refused: %s", topic_data.name, data.index, exc)
                continue
            entry["base_offset"] = result.base_offset
            entry["log_append_time"] = result.log_append_time_ms
            entry["log_start_offset"] = result.log_start_offset
            if partition.fsync_before_ack:
                if acks == 0:
                    broker.flusher.request(partition)
                else:
                    waits.append((entry, broker.flusher.flushed(partition, result.last_offset + 1)))
            else:
                partition.wake_fetchers()
                if partition.log.needs_flush(current_ms):
                    broker.flusher.request(partition)
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
    return build_response(
        ApiKey.PRODUCE, request.api_version, {"responses": topics, "throttle_time": 0}
    )


async def handle_init_producer_id(broker: Broker, request: Request) -> Any:
    body = request.body
    response: dict[str, Any] = {
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
            response["producer_id"] = await broker.producer_ids.next_id()
        except ProducerIdsUnavailable as exc:
            response["error_code"] = ErrorCode.coordinator_not_available
            log.info("[node %d] InitProducerId: %s", broker.node_id, exc)
            return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)
        response["producer_epoch"] = 0
    return build_response(ApiKey.INIT_PRODUCER_ID, request.api_version, response)
