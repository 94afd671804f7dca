"""KIP-848 consumer group responses: ConsumerGroupHeartbeat and ConsumerGroupDescribe
(see protocol/responses/__init__.py)."""

from __future__ import annotations

import uuid
from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode


class HeartbeatTopicPartitions(TypedDict):
    topic_id: uuid.UUID
    partitions: list[int]


class HeartbeatAssignment(TypedDict):
    topic_partitions: list[HeartbeatTopicPartitions]


class ConsumerGroupHeartbeatResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    member_id: str | None
    member_epoch: int
    heartbeat_interval: int
    assignment: HeartbeatAssignment | None


class DescribedTopicPartitions(TypedDict):
    topic_id: uuid.UUID
    topic_name: str
    partitions: list[int]


class DescribedAssignment(TypedDict):
    topic_partitions: list[DescribedTopicPartitions]


class ConsumerGroupMemberDescription(TypedDict):
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: DescribedAssignment
    target_assignment: DescribedAssignment
    member_type: NotRequired[int]
    """v1+: 1 for a member of the consumer protocol (0 classic, -1 unknown)."""


class ConsumerGroupDescription(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    group_id: str
    group_state: str
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: list[ConsumerGroupMemberDescription]
    authorized_operations: int


class ConsumerGroupDescribeResponse(TypedDict):
    throttle_time: int
    groups: list[ConsumerGroupDescription]
