"""ConsumerGroupHeartbeat and ConsumerGroupDescribe: KIP-848 consumer groups.

The heartbeat becomes a request of the pure core (strom.group.consumer) through the
consumer group service (handlers/ports.py: ConsumerCoordination), which answers once the
decision's records are durable. ACLs as Kafka's KafkaApis checks them: the heartbeat
needs READ on the group (else GROUP_AUTHORIZATION_FAILED, nothing asked); describe needs
DESCRIBE on each group (a denied one is answered GROUP_AUTHORIZATION_FAILED), and leaves
out of the members' assignments the topics the principal may not DESCRIBE; an empty group
id is INVALID_GROUP_ID.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.consumer.heartbeat import ConsumerHeartbeatRequest, ConsumerHeartbeatResult
from strom.group.consumer.state import ConsumerGroup
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.responses.consumer_groups import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeatResponse,
    DescribedAssignment,
    HeartbeatAssignment,
)
from strom.security.operations import OMITTED, AclOperation, AclResourceType, operations_field
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.handlers.ports import GroupContext

_GROUP = AclResourceType.GROUP
CONSUMER_MEMBER_TYPE = 1
"""ConsumerGroupDescribe v1's member_type of a member using the consumer protocol."""
CLASSIC_MEMBER_TYPE = 0
"""... and of one using the classic protocol (KIP-1099)."""


ZERO_TOPIC_ID = uuid.UUID(int=0)
"""Kafka's Uuid.ZERO_UUID, which kio decodes as None: no topic has it."""


def _owned(
    topic_partitions: Iterable[Any] | None,
) -> dict[uuid.UUID, frozenset[int]] | None:
    """The owned partitions by topic id; a topic listed twice owns both lists' partitions
    (none is lost), and an entry with no partitions is kept (a join must list none)."""
    if topic_partitions is None:
        return None
    owned: dict[uuid.UUID, frozenset[int]] = {}
    for tp in topic_partitions:
        topic_id = tp.topic_id if tp.topic_id is not None else ZERO_TOPIC_ID
        owned[topic_id] = owned.get(topic_id, frozenset()) | {int(p) for p in tp.partitions}
    return owned


def _heartbeat_request(request: Request) -> ConsumerHeartbeatRequest:
    body = request.body
    return ConsumerHeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=int(body.member_epoch),
        instance_id=body.instance_id,
        rack_id=body.rack_id,
        rebalance_timeout_ms=ms(body.rebalance_timeout),
        subscribed_topic_names=(
            None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names)
        ),
        subscribed_topic_regex=getattr(body, "subscribed_topic_regex", None),
        server_assignor=body.server_assignor,
        owned=_owned(body.topic_partitions),
        client_id=request.client_id or "",
        client_host=request.client_host,
        api_version=request.api_version,
    )


async def handle_consumer_group_heartbeat(context: GroupContext, request: Request) -> Any:
    req = _heartbeat_request(request)
    access = Access.of(context.authorizer(), request)
    if not access.allows(AclOperation.READ, _GROUP, req.group_id):
        result = ConsumerHeartbeatResult(ErrorCode.group_authorization_failed)
    elif context.consumer is None:
        result = ConsumerHeartbeatResult(ErrorCode.unsupported_version)
    else:
        try:
            result = await context.consumer.heartbeat(req)
        except CoordinatorUnavailable as exc:
            result = ConsumerHeartbeatResult(exc.error_code, str(exc))
    assignment: HeartbeatAssignment | None = None
    if result.error is ErrorCode.none and result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": sorted(partitions)}
                for topic_id, partitions in sorted(result.assignment.items())
            ]
        }
    response: ConsumerGroupHeartbeatResponse = {
        "throttle_time": 0,
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }
    return build_response(ApiKey.CONSUMER_GROUP_HEARTBEAT, request.api_version, response)


def _assignment(
    partitions: Mapping[uuid.UUID, frozenset[int]],
    names: Mapping[uuid.UUID, str],
    visible: Callable[[str], bool],
) -> DescribedAssignment:
    return {
        "topic_partitions": [
            {"topic_id": topic_id, "topic_name": names[topic_id], "partitions": sorted(ps)}
            for topic_id, ps in sorted(partitions.items())
            if topic_id in names and visible(names[topic_id])
        ]
    }


def _described(
    group: ConsumerGroup,
    names: Mapping[uuid.UUID, str],
    visible: Callable[[str], bool],
    assignor: str,
) -> ConsumerGroupDescription:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.state.value,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": assignor,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": _assignment(m.assigned, names, visible),
                "target_assignment": _assignment(group.target.get(m.member_id, {}), names, visible),
                "member_type": CONSUMER_MEMBER_TYPE if m.classic is None else CLASSIC_MEMBER_TYPE,
            }
            for m in sorted(group.members.values(), key=lambda m: m.member_id)
        ],
        "authorized_operations": OMITTED,
    }


def _error_entry(group_id: str, error: ErrorCode, message: str | None) -> ConsumerGroupDescription:
    return {
        "error_code": error,
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
        "authorized_operations": OMITTED,
    }


async def handle_consumer_group_describe(context: GroupContext, request: Request) -> Any:
    body = request.body
    access = Access.of(context.authorizer(), request)
    image = context.metadata.image
    names = {topic.topic_id: name for name, topic in image.topics_by_name.items()}

    def visible(topic: str) -> bool:
        return access.allows(AclOperation.DESCRIBE, AclResourceType.TOPIC, topic)

    groups: list[ConsumerGroupDescription] = []
    for group_id in body.group_ids:
        if not access.allows(AclOperation.DESCRIBE, _GROUP, group_id):
            groups.append(_error_entry(group_id, ErrorCode.group_authorization_failed, None))
            continue
        if not group_id:  # as Kafka's GroupCoordinatorService
            groups.append(_error_entry("", ErrorCode.invalid_group_id, None))
            continue
        try:
            await context.groups.coordinate(group_id)
        except CoordinatorUnavailable as exc:
            groups.append(_error_entry(group_id, exc.error_code, str(exc)))
            continue
        consumer = context.consumer
        group = consumer.describe(group_id) if consumer is not None else None
        if consumer is None or group is None:
            message = f"Group {group_id} not found."
            groups.append(_error_entry(group_id, ErrorCode.group_id_not_found, message))
            continue
        entry = _described(group, names, visible, consumer.assignor(group_id))
        if body.include_authorized_operations:
            entry["authorized_operations"] = operations_field(access.operations(_GROUP, group_id))
        groups.append(entry)
    response: ConsumerGroupDescribeResponse = {"throttle_time": 0, "groups": groups}
    return build_response(ApiKey.CONSUMER_GROUP_DESCRIBE, request.api_version, response)
