"""KIP-932 share group responses: ShareGroupHeartbeat and ShareGroupDescribe (v1; see
protocol/responses/__init__.py), whose assignments have the consumer groups' shapes, and
the offset admin APIs Describe (v0-1), Alter and DeleteShareGroupOffsets (v0)."""

from __future__ import annotations

import uuid
from typing import TypedDict

from kio.schema.errors import ErrorCode

from strom.protocol.responses.consumer_groups import DescribedAssignment, HeartbeatAssignment


class ShareGroupHeartbeatResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval: int
    assignment: HeartbeatAssignment | None


class ShareGroupMemberDescription(TypedDict):
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    assignment: DescribedAssignment


class ShareGroupDescription(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    group_id: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[ShareGroupMemberDescription]
    authorized_operations: int


class ShareGroupDescribeResponse(TypedDict):
    throttle_time: int
    groups: list[ShareGroupDescription]


class DescribedShareOffset(TypedDict):
    partition_index: int
    start_offset: int
    leader_epoch: int
    lag: int
    """v1 (KIP-1226); -1 where unknown."""
    error_code: ErrorCode
    error_message: str | None


class DescribedShareOffsetTopic(TypedDict):
    topic_name: str
    topic_id: uuid.UUID | None
    partitions: list[DescribedShareOffset]


class DescribedShareOffsetGroup(TypedDict):
    group_id: str
    topics: list[DescribedShareOffsetTopic]
    error_code: ErrorCode
    error_message: str | None


class DescribeShareGroupOffsetsResponse(TypedDict):
    throttle_time: int
    groups: list[DescribedShareOffsetGroup]


class AlteredShareOffset(TypedDict):
    partition_index: int
    error_code: ErrorCode
    error_message: str | None


class AlteredShareOffsetTopic(TypedDict):
    topic_name: str
    topic_id: uuid.UUID | None
    partitions: list[AlteredShareOffset]


class AlterShareGroupOffsetsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    responses: list[AlteredShareOffsetTopic]


class DeletedShareOffsetTopic(TypedDict):
    topic_name: str
    topic_id: uuid.UUID | None
    error_code: ErrorCode
    error_message: str | None


class DeleteShareGroupOffsetsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    responses: list[DeletedShareOffsetTopic]
