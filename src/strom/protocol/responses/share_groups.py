"""KIP-932 share group responses: ShareGroupHeartbeat and ShareGroupDescribe (v1; see
protocol/responses/__init__.py). Their assignments have the consumer groups' shapes."""

from __future__ import annotations

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
