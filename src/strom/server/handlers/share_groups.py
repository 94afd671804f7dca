"""ShareGroupHeartbeat and ShareGroupDescribe (v1): KIP-932 share groups' membership.

The heartbeat becomes a request of the pure core (strom.group.share) through the share
group service (handlers/ports.py: ShareCoordination), which answers once the decision's
records are durable. ACLs as Kafka's KafkaApis checks them: the heartbeat needs READ on
the group (else GROUP_AUTHORIZATION_FAILED, nothing asked) and DESCRIBE on each topic it
subscribes to (else TOPIC_AUTHORIZATION_FAILED); describe needs DESCRIBE on each group
(a denied one is answered GROUP_AUTHORIZATION_FAILED) and leaves out of the members'
assignments the topics the principal may not DESCRIBE; an empty group id is
INVALID_GROUP_ID. With group.share.enable false (or no share service) both answer
UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.share.heartbeat import (
    ShareDescribedGroup,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
)
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.consumer_groups import HeartbeatAssignment
from strom.protocol.responses.share_groups import (
    ShareGroupDescribeResponse,
    ShareGroupDescription,
    ShareGroupHeartbeatResponse,
)
from strom.security.operations import OMITTED, AclOperation, AclResourceType, operations_field
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.handlers.ports import GroupContext

__all__ = ["handle_share_group_describe", "handle_share_group_heartbeat"]

_GROUP = AclResourceType.GROUP
_TOPIC = AclResourceType.TOPIC


def _heartbeat_request(request: Request) -> ShareHeartbeatRequest:
    body = request.body
    names = body.subscribed_topic_names
    return ShareHeartbeatRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        member_epoch=int(body.member_epoch),
        rack_id=body.rack_id,
        subscribed_topic_names=None if names is None else tuple(names),
        client_id=request.client_id or "",
        client_host=request.client_host,
    )


async def _heartbeat(
    context: GroupContext, access: Access, req: ShareHeartbeatRequest
) -> ShareHeartbeatResult:
    share = context.share
    if share is None or not share.enabled():
        return ShareHeartbeatResult(ErrorCode.unsupported_version)
    if not access.allows(AclOperation.READ, _GROUP, req.group_id):
        return ShareHeartbeatResult(ErrorCode.group_authorization_failed)
    denied = [
        name
        for name in req.subscribed_topic_names or ()
        if not access.allows(AclOperation.DESCRIBE, _TOPIC, name)
    ]
    if denied:
        return ShareHeartbeatResult(
            ErrorCode.topic_authorization_failed,
            f"Topic authorization failed for topics {sorted(set(denied))}",
        )
    try:
        return await share.heartbeat(req)
    except CoordinatorUnavailable as exc:
        return ShareHeartbeatResult(exc.error_code, str(exc))


async def handle_share_group_heartbeat(context: GroupContext, request: Request) -> Any:
    req = _heartbeat_request(request)
    result = await _heartbeat(context, Access.of(context.authorizer(), request), req)
    assignment: HeartbeatAssignment | None = None
    if result.error is ErrorCode.none and result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": sorted(partitions)}
                for topic_id, partitions in sorted(result.assignment.items())
            ]
        }
    response: ShareGroupHeartbeatResponse = {
        "throttle_time": 0,
        "error_code": result.error,
        "error_message": result.message,
        "member_id": result.member_id,
        "member_epoch": result.member_epoch,
        "heartbeat_interval": result.heartbeat_interval_ms,
        "assignment": assignment,
    }
    return build_response(ApiKey.SHARE_GROUP_HEARTBEAT, request.api_version, response)


def _described(group: ShareDescribedGroup, visible: Callable[[str], bool]) -> ShareGroupDescription:
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "group_id": group.group_id,
        "group_state": group.group_state,
        "group_epoch": group.group_epoch,
        "assignment_epoch": group.assignment_epoch,
        "assignor_name": group.assignor_name,
        "members": [
            {
                "member_id": m.member_id,
                "rack_id": m.rack_id,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "assignment": {
                    "topic_partitions": [
                        {"topic_id": topic_id, "topic_name": name, "partitions": list(ps)}
                        for topic_id, name, ps in m.assignment
                        if visible(name)
                    ]
                },
            }
            for m in group.members
        ],
        "authorized_operations": OMITTED,
    }


def _error_entry(group_id: str, error: ErrorCode, message: str | None) -> ShareGroupDescription:
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


async def _describe_one(
    context: GroupContext, access: Access, group_id: str, with_operations: bool
) -> ShareGroupDescription:
    share = context.share
    if share is None or not share.enabled():
        return _error_entry(group_id, ErrorCode.unsupported_version, None)
    if not access.allows(AclOperation.DESCRIBE, _GROUP, group_id):
        return _error_entry(group_id, ErrorCode.group_authorization_failed, None)
    if not group_id:  # as Kafka's GroupCoordinatorService
        return _error_entry("", ErrorCode.invalid_group_id, None)
    try:
        await context.groups.coordinate(group_id)
    except CoordinatorUnavailable as exc:
        return _error_entry(group_id, exc.error_code, str(exc))
    error, message, group = share.describe(group_id)
    if group is None:
        return _error_entry(group_id, error, message)
    entry = _described(group, lambda t: access.allows(AclOperation.DESCRIBE, _TOPIC, t))
    if with_operations:
        entry["authorized_operations"] = operations_field(access.operations(_GROUP, group_id))
    return entry


async def handle_share_group_describe(context: GroupContext, request: Request) -> Any:
    body = request.body
    access = Access.of(context.authorizer(), request)
    groups = [
        await _describe_one(context, access, group_id, bool(body.include_authorized_operations))
        for group_id in body.group_ids
    ]
    response: ShareGroupDescribeResponse = {"throttle_time": 0, "groups": groups}
    return build_response(ApiKey.SHARE_GROUP_DESCRIBE, request.api_version, response)
