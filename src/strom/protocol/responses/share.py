"""Share group (KIP-932) responses: ShareFetch and ShareAcknowledge (see
protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode


class LeaderIdAndEpoch(TypedDict):
    leader_id: int
    leader_epoch: int


class AcquiredRecordsEntry(TypedDict):
    first_offset: int
    last_offset: int
    delivery_count: int


class ShareFetchPartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    error_message: str | None
    acknowledge_error_code: int
    acknowledge_error_message: str | None
    current_leader: LeaderIdAndEpoch
    records: bytes | None
    acquired_records: list[AcquiredRecordsEntry]


class ShareFetchTopic(TypedDict):
    topic_id: uuid.UUID
    partitions: list[ShareFetchPartition]


class ShareNodeEndpoint(TypedDict):
    node_id: int
    host: str
    port: int
    rack: str | None


class ShareFetchResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    acquisition_lock_timeout: int
    responses: list[ShareFetchTopic]
    node_endpoints: list[ShareNodeEndpoint]


class ShareAcknowledgePartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    error_message: str | None
    current_leader: LeaderIdAndEpoch


class ShareAcknowledgeTopic(TypedDict):
    topic_id: uuid.UUID
    partitions: list[ShareAcknowledgePartition]


class ShareAcknowledgeResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    acquisition_lock_timeout: NotRequired[int]
    """v2 (KIP-1222)."""
    responses: list[ShareAcknowledgeTopic]
    node_endpoints: list[ShareNodeEndpoint]
