"""DescribeQuorum and the controller listener's BrokerRegistration, BrokerHeartbeat,
AllocateProducerIds and AlterPartition responses (see protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import TypedDict

from kio.schema.errors import ErrorCode

# --- DescribeQuorum -------------------------------------------------------------------


class QuorumReplica(TypedDict):
    replica_id: int
    replica_directory_id: uuid.UUID | None
    """v2+."""
    log_end_offset: int
    last_fetch_timestamp: int
    """Epoch ms, -1 when unknown (v1+)."""
    last_caught_up_timestamp: int
    """Epoch ms, -1 when unknown or behind (v1+)."""


class QuorumPartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    error_message: str | None
    """v2+."""
    leader_id: int
    leader_epoch: int
    high_watermark: int
    current_voters: list[QuorumReplica]
    observers: list[QuorumReplica]


class QuorumTopic(TypedDict):
    topic_name: str
    partitions: list[QuorumPartition]


class QuorumListener(TypedDict):
    name: str
    host: str
    port: int


class QuorumNode(TypedDict):
    """A voter's endpoints (v2+)."""

    node_id: int
    listeners: list[QuorumListener]


class DescribeQuorumResponse(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    """v2+."""
    topics: list[QuorumTopic]
    nodes: list[QuorumNode]
    """v2+."""


# --- The controller listener's APIs ---------------------------------------------------


class BrokerRegistrationResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    broker_epoch: int


class BrokerHeartbeatResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


class AllocateProducerIdsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    producer_id_start: int
    producer_id_len: int


class AlterPartitionPartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    isr: list[int]
    leader_recovery_state: int
    partition_epoch: int


class AlterPartitionTopic(TypedDict):
    topic_id: uuid.UUID
    partitions: list[AlterPartitionPartition]


class AlterPartitionResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    topics: list[AlterPartitionTopic]
