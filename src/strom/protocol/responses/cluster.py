"""Metadata, DescribeCluster and FindCoordinator responses (see
protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import TypedDict

from kio.schema.errors import ErrorCode


class MetadataBroker(TypedDict):
    node_id: int
    host: str
    port: int
    rack: str | None


class MetadataPartition(TypedDict):
    error_code: ErrorCode
    partition_index: int
    leader_id: int
    leader_epoch: int
    replica_nodes: tuple[int, ...]
    isr_nodes: tuple[int, ...]
    offline_replicas: tuple[int, ...]


class MetadataTopic(TypedDict):
    error_code: ErrorCode
    name: str | None
    topic_id: uuid.UUID
    is_internal: bool
    partitions: list[MetadataPartition]
    topic_authorized_operations: int


class TopicPartitionsPartition(MetadataPartition):
    """One partition of DescribeTopicPartitions (KIP-966): Metadata's, and the ELRs."""

    eligible_leader_replicas: tuple[int, ...] | None
    last_known_elr: tuple[int, ...] | None


class TopicPartitionsTopic(TypedDict):
    error_code: ErrorCode
    name: str | None
    topic_id: uuid.UUID
    is_internal: bool
    partitions: list[TopicPartitionsPartition]
    topic_authorized_operations: int


class TopicPartitionsCursor(TypedDict):
    topic_name: str
    partition_index: int


class DescribeTopicPartitionsResponse(TypedDict):
    throttle_time: int
    topics: list[TopicPartitionsTopic]
    next_cursor: TopicPartitionsCursor | None


class MetadataResponse(TypedDict):
    throttle_time: int
    brokers: list[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataTopic]
    cluster_authorized_operations: int
    error_code: ErrorCode


class DescribeClusterBroker(TypedDict):
    broker_id: int
    host: str
    port: int
    rack: str | None
    is_fenced: bool


class DescribeClusterResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    endpoint_type: int
    cluster_id: str
    controller_id: int
    brokers: list[DescribeClusterBroker]
    cluster_authorized_operations: int


class Coordinator(TypedDict):
    key: str
    node_id: int
    host: str
    port: int
    error_code: ErrorCode
    error_message: str | None


class FindCoordinatorResponse(TypedDict):
    """v4+ list `coordinators`; v0-v3 answer one key in the top-level fields."""

    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    node_id: int
    host: str
    port: int
    coordinators: list[Coordinator]
