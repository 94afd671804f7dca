"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, AlterPartitionReassignments, ListPartitionReassignments and
ElectLeaders responses (see protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import TypedDict

from kio.schema.errors import ErrorCode

# --- DescribeLogDirs -------------------------------------------------------------------


class DescribeLogDirsPartition(TypedDict):
    partition_index: int
    partition_size: int
    offset_lag: int
    is_future_key: bool


class DescribeLogDirsTopic(TypedDict):
    name: str
    partitions: list[DescribeLogDirsPartition]


class DescribeLogDirsResult(TypedDict):
    error_code: ErrorCode
    log_dir: str
    topics: list[DescribeLogDirsTopic]
    total_bytes: int
    """v4+: the size of the volume the directory is on; -1 when unknown."""
    usable_bytes: int


class DescribeLogDirsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    """v3+."""
    results: list[DescribeLogDirsResult]


# --- UnregisterBroker ------------------------------------------------------------------


class UnregisterBrokerResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None


# --- DeleteRecords ---------------------------------------------------------------------


class DeleteRecordsPartitionResult(TypedDict):
    partition_index: int
    low_watermark: int
    """The smallest log start among the partition's in-sync replicas; -1 on an error."""
    error_code: ErrorCode


class DeleteRecordsTopicResult(TypedDict):
    name: str
    partitions: list[DeleteRecordsPartitionResult]


class DeleteRecordsResponse(TypedDict):
    throttle_time: int
    topics: list[DeleteRecordsTopicResult]


# --- CreateTopics, DeleteTopics, CreatePartitions -------------------------------------


class CreatableTopicConfig(TypedDict):
    """One config of a created topic (CreateTopics v5+)."""

    name: str
    value: str | None
    read_only: bool
    config_source: int
    """A ConfigSource, as an int."""
    is_sensitive: bool


class CreatableTopicResult(TypedDict):
    name: str
    topic_id: uuid.UUID
    """The created topic's id (v7+); the zero UUID when none was created."""
    error_code: ErrorCode
    error_message: str | None
    topic_config_error_code: int
    num_partitions: int
    replication_factor: int
    configs: list[CreatableTopicConfig]


class CreateTopicsResponse(TypedDict):
    throttle_time: int
    topics: list[CreatableTopicResult]


class DeletableTopicResult(TypedDict):
    name: str | None
    """The name; null (v6+) for a topic asked for by id whose name is not shown (unknown,
    or one the principal may not describe)."""
    topic_id: uuid.UUID
    """The id (v6+); the zero UUID when unknown."""
    error_code: ErrorCode
    error_message: str | None


class DeleteTopicsResponse(TypedDict):
    throttle_time: int
    responses: list[DeletableTopicResult]


class CreatePartitionsTopicResult(TypedDict):
    name: str
    error_code: ErrorCode
    error_message: str | None


class CreatePartitionsResponse(TypedDict):
    throttle_time: int
    results: list[CreatePartitionsTopicResult]


# --- DescribeConfigs, AlterConfigs, IncrementalAlterConfigs ---------------------------


class DescribeConfigsSynonym(TypedDict):
    name: str
    value: str | None
    source: int


class DescribeConfigsEntry(TypedDict):
    """One config of a resource (Kafka's DescribeConfigsResourceResult)."""

    name: str
    value: str | None
    read_only: bool
    config_source: int
    """A ConfigSource, as an int."""
    is_sensitive: bool
    synonyms: list[DescribeConfigsSynonym]
    config_type: int
    """v3+; 0 for unknown."""
    documentation: str | None
    """v3+."""


class DescribeConfigsResult(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    resource_type: int
    """A ConfigResourceType, as an int."""
    resource_name: str
    configs: list[DescribeConfigsEntry]


class DescribeConfigsResponse(TypedDict):
    throttle_time: int
    results: list[DescribeConfigsResult]


class AlterConfigsResourceResponse(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    resource_type: int
    """A ConfigResourceType, as an int."""
    resource_name: str


class AlterConfigsResponse(TypedDict):
    """AlterConfigs' response, and IncrementalAlterConfigs' too: they are the same."""

    throttle_time: int
    responses: list[AlterConfigsResourceResponse]


IncrementalAlterConfigsResponse = AlterConfigsResponse


# --- AlterPartitionReassignments, ListPartitionReassignments --------------------------


class ReassignablePartitionResponse(TypedDict):
    partition_index: int
    error_code: ErrorCode
    error_message: str | None


class ReassignableTopicResponse(TypedDict):
    name: str
    partitions: list[ReassignablePartitionResponse]


class AlterPartitionReassignmentsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    responses: list[ReassignableTopicResponse]


class OngoingPartitionReassignment(TypedDict):
    partition_index: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class OngoingTopicReassignment(TypedDict):
    name: str
    partitions: list[OngoingPartitionReassignment]


class ListPartitionReassignmentsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    topics: list[OngoingTopicReassignment]


# --- ElectLeaders ---------------------------------------------------------------------


class ElectionPartitionResult(TypedDict):
    """Kafka's ElectLeadersResponse PartitionResult."""

    partition_id: int
    error_code: ErrorCode
    error_message: str | None


class ReplicaElectionResult(TypedDict):
    topic: str
    partition_result: list[ElectionPartitionResult]


class ElectLeadersResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    """v1+."""
    replica_election_results: list[ReplicaElectionResult]
