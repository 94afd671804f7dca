"""Produce and InitProducerId responses (see protocol/responses/__init__.py)."""

from __future__ import annotations

from typing import TypedDict

from kio.schema.errors import ErrorCode


class RecordError(TypedDict):
    batch_index: int
    batch_index_error_message: str | None


class PartitionProduceResponse(TypedDict):
    index: int
    error_code: ErrorCode
    base_offset: int
    log_append_time: int
    log_start_offset: int
    record_errors: list[RecordError]
    error_message: str | None


class TopicProduceResponse(TypedDict):
    name: str
    partition_responses: list[PartitionProduceResponse]


class ProduceResponse(TypedDict):
    responses: list[TopicProduceResponse]
    throttle_time: int


class InitProducerIdResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    producer_id: int
    producer_epoch: int
