"""Fetch, ListOffsets and OffsetForLeaderEpoch responses (see
protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode


class EpochEndOffset(TypedDict):
    """Where a fetcher's log diverged from the leader's (Fetch v12+)."""

    epoch: int
    end_offset: int


class AbortedTransaction(TypedDict):
    producer_id: int
    first_offset: int


class FetchPartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list[AbortedTransaction] | None
    preferred_read_replica: int
    records: bytes | memoryview | None
    diverging_epoch: NotRequired[EpochEndOffset]


class FetchTopic(TypedDict):
    topic: str
    """The name (Fetch v4-v12)."""
    topic_id: uuid.UUID | None
    """The id (Fetch v13+)."""
    partitions: list[FetchPartition]


class FetchResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    session_id: int
    responses: list[FetchTopic]


class ListOffsetsPartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    timestamp: int
    offset: int
    leader_epoch: int


class ListOffsetsTopic(TypedDict):
    name: str
    partitions: list[ListOffsetsPartition]


class ListOffsetsResponse(TypedDict):
    throttle_time: int
    topics: list[ListOffsetsTopic]


class LeaderEpochEndOffset(TypedDict):
    error_code: ErrorCode
    partition: int
    leader_epoch: int
    end_offset: int


class LeaderEpochTopic(TypedDict):
    topic: str
    partitions: list[LeaderEpochEndOffset]


class OffsetForLeaderEpochResponse(TypedDict):
    throttle_time: int
    topics: list[LeaderEpochTopic]
