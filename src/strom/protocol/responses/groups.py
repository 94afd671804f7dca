"""Classic group and offset responses, and ApiVersions (see
protocol/responses/__init__.py)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode


class ApiVersion(TypedDict):
    api_key: int
    min_version: int
    max_version: int


class SupportedFeatureKey(TypedDict):
    name: str
    min_version: int
    max_version: int


class FinalizedFeatureKey(TypedDict):
    name: str
    max_version_level: int
    min_version_level: int


class ApiVersionsResponse(TypedDict):
    error_code: ErrorCode
    api_keys: list[ApiVersion]
    throttle_time: int
    supported_features: NotRequired[list[SupportedFeatureKey]]
    """v3+ (tagged): the features this broker supports, and their ranges."""
    finalized_features_epoch: NotRequired[int]
    finalized_features: NotRequired[list[FinalizedFeatureKey]]
    """v3+ (tagged): the cluster's finalized feature levels, valid when the epoch is
    0 or more."""


class JoinGroupMember(TypedDict):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


class JoinGroupResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    leader: str
    skip_assignment: bool
    member_id: str
    members: list[JoinGroupMember]


class SyncGroupResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    protocol_type: str | None
    protocol_name: str | None
    assignment: bytes


class HeartbeatResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode


class LeftMember(TypedDict):
    member_id: str
    group_instance_id: str | None
    error_code: ErrorCode


class LeaveGroupResponse(TypedDict):
    """v3+ answer each member in `members`; v0-v2 only in `error_code`."""

    throttle_time: int
    error_code: ErrorCode
    members: list[LeftMember]


class ListedGroup(TypedDict):
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


class ListGroupsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    groups: list[ListedGroup]


class DescribedMember(TypedDict):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


class DescribedGroup(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedMember]
    authorized_operations: int


class DescribeGroupsResponse(TypedDict):
    throttle_time: int
    groups: list[DescribedGroup]


class DeletedGroup(TypedDict):
    group_id: str
    error_code: ErrorCode


class DeleteGroupsResponse(TypedDict):
    throttle_time: int
    results: list[DeletedGroup]


class PartitionError(TypedDict):
    partition_index: int
    error_code: ErrorCode


class TopicPartitionErrors(TypedDict):
    name: str
    partitions: list[PartitionError]


class OffsetCommitResponse(TypedDict):
    throttle_time: int
    topics: list[TopicPartitionErrors]


class OffsetDeleteResponse(TypedDict):
    error_code: ErrorCode
    throttle_time: int
    topics: list[TopicPartitionErrors]


class FetchedOffset(TypedDict):
    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str | None
    error_code: ErrorCode


class FetchedTopic(TypedDict):
    name: str
    partitions: list[FetchedOffset]


class FetchedGroup(TypedDict):
    group_id: str
    topics: list[FetchedTopic]
    error_code: ErrorCode


class OffsetFetchResponse(TypedDict):
    """v8+ answer per group in `groups`; v1-v7 one group in `topics` and `error_code`."""

    throttle_time: int
    topics: list[FetchedTopic]
    error_code: ErrorCode
    groups: list[FetchedGroup]
