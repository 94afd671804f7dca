"""The responses of the share-state RPCs (KIP-932's InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary; see protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import TypedDict

from kio.schema.errors import ErrorCode


class SharePartitionResult(TypedDict):
    """Initialize, Write and Delete: one share-partition's answer."""

    partition: int
    error_code: ErrorCode
    error_message: str | None


class ShareTopicResult(TypedDict):
    topic_id: uuid.UUID
    partitions: list[SharePartitionResult]


class InitializeShareGroupStateResponse(TypedDict):
    results: list[ShareTopicResult]


class WriteShareGroupStateResponse(TypedDict):
    results: list[ShareTopicResult]


class DeleteShareGroupStateResponse(TypedDict):
    results: list[ShareTopicResult]


class ShareStateBatch(TypedDict):
    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int


class ReadSharePartitionResult(TypedDict):
    partition: int
    error_code: ErrorCode
    error_message: str | None
    state_epoch: int
    start_offset: int
    state_batches: list[ShareStateBatch]


class ReadShareTopicResult(TypedDict):
    topic_id: uuid.UUID
    partitions: list[ReadSharePartitionResult]


class ReadShareGroupStateResponse(TypedDict):
    results: list[ReadShareTopicResult]


class ShareSummaryPartitionResult(TypedDict):
    partition: int
    error_code: ErrorCode
    error_message: str | None
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int


class ShareSummaryTopicResult(TypedDict):
    topic_id: uuid.UUID
    partitions: list[ShareSummaryPartitionResult]


class ReadShareGroupStateSummaryResponse(TypedDict):
    results: list[ShareSummaryTopicResult]
