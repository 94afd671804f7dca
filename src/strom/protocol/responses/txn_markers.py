"""The WriteTxnMarkers response (see protocol/responses/__init__.py)."""

from __future__ import annotations

from typing import TypedDict

from kio.schema.errors import ErrorCode


class WritableTxnMarkerPartitionResult(TypedDict):
    partition_index: int
    error_code: ErrorCode


class WritableTxnMarkerTopicResult(TypedDict):
    name: str
    partitions: list[WritableTxnMarkerPartitionResult]


class WritableTxnMarkerResult(TypedDict):
    producer_id: int
    topics: list[WritableTxnMarkerTopicResult]


class WriteTxnMarkersResponse(TypedDict):
    markers: list[WritableTxnMarkerResult]
