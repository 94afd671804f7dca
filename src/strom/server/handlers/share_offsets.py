"""DescribeShareGroupOffsets (90, v0-1), AlterShareGroupOffsets (91, v0) and
DeleteShareGroupOffsets (92, v0): KIP-932's share-group offset admin APIs, carried out by
`server/share_group_offsets.py` (ShareOffsetAdmin).

ACLs as Kafka's KafkaApis checks them: describe needs DESCRIBE on the group
(GROUP_AUTHORIZATION_FAILED for that group) and DESCRIBE on each topic (a named one
denied answers TOPIC_AUTHORIZATION_FAILED per partition, one found by "all topics" is
left out); alter needs READ on the group and READ on each topic
(TOPIC_AUTHORIZATION_FAILED per partition; a topic the metadata lacks
UNKNOWN_TOPIC_OR_PARTITION); delete needs DELETE on the group and READ on each topic.
An empty group id is INVALID_GROUP_ID; with group.share.enable false, UNSUPPORTED_VERSION.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.share.offsets import UNKNOWN_TOPIC_MESSAGE, OffsetResult
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.share_groups import (
    AlteredShareOffsetTopic,
    AlterShareGroupOffsetsResponse,
    DeletedShareOffsetTopic,
    DeleteShareGroupOffsetsResponse,
    DescribedShareOffsetGroup,
    DescribedShareOffsetTopic,
    DescribeShareGroupOffsetsResponse,
)
from strom.security.authorizer import Authorizer
from strom.security.operations import AclOperation, AclResourceType
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.share_group_offsets import ShareOffset, ShareOffsetAdmin

__all__ = [
    "ShareOffsetsContext",
    "handle_alter_share_group_offsets",
    "handle_delete_share_group_offsets",
    "handle_describe_share_group_offsets",
]

_GROUP = AclResourceType.GROUP
_TOPIC = AclResourceType.TOPIC
_TOPIC_DENIED = "Topic authorization failed."


@dataclass(frozen=True, slots=True)
class ShareOffsetsContext:
    offsets: ShareOffsetAdmin
    enabled: Callable[[], bool]
    """group.share.enable: when False these APIs answer UNSUPPORTED_VERSION."""
    topic_ids: Callable[[], Mapping[str, uuid.UUID]]
    """The topics of the metadata image now, by name."""
    authorizer: Callable[[], Authorizer | None] = lambda: None


def _refusal(
    context: ShareOffsetsContext, access: Access, group_id: str, op: AclOperation
) -> ErrorCode | None:
    if not context.enabled():
        return ErrorCode.unsupported_version
    if not access.allows(op, _GROUP, group_id):
        return ErrorCode.group_authorization_failed
    if not group_id:
        return ErrorCode.invalid_group_id
    return None


def _offset_topics(offsets: list[ShareOffset]) -> list[DescribedShareOffsetTopic]:
    topics: dict[str, DescribedShareOffsetTopic] = {}
    for o in offsets:
        entry = topics.setdefault(
            o.topic, {"topic_name": o.topic, "topic_id": o.topic_id, "partitions": []}
        )
        entry["partitions"].append(
            {
                "partition_index": o.partition,
                "start_offset": o.start_offset,
                "leader_epoch": o.leader_epoch,
                "lag": o.lag,
                "error_code": o.error,
                "error_message": o.message,
            }
        )
    return list(topics.values())


async def _describe_group(
    context: ShareOffsetsContext, access: Access, group: Any
) -> DescribedShareOffsetGroup:
    group_id = str(group.group_id)

    def fail(error: ErrorCode, message: str | None = None) -> DescribedShareOffsetGroup:
        return {"group_id": group_id, "topics": [], "error_code": error, "error_message": message}

    refused = _refusal(context, access, group_id, AclOperation.DESCRIBE)
    if refused is not None:
        return fail(refused)
    visible: Callable[[str], bool] = lambda t: access.allows(AclOperation.DESCRIBE, _TOPIC, t)  # noqa: E731
    denied: list[ShareOffset] = []
    asked: list[tuple[str, list[int]]] | None = None
    if group.topics is not None:
        asked = []
        for topic in group.topics:
            partitions = [int(p) for p in topic.partitions]
            if visible(str(topic.topic_name)):
                asked.append((str(topic.topic_name), partitions))
            else:
                denied.extend(
                    ShareOffset(
                        str(topic.topic_name),
                        None,
                        p,
                        error=ErrorCode.topic_authorization_failed,
                        message=_TOPIC_DENIED,
                    )
                    for p in partitions
                )
    try:
        offsets = await context.offsets.describe(group_id, asked)
    except CoordinatorUnavailable as exc:
        return fail(exc.error_code, str(exc))
    if asked is None:
        offsets = [o for o in offsets if visible(o.topic)]
    return {
        "group_id": group_id,
        "topics": _offset_topics(offsets + denied),
        "error_code": ErrorCode.none,
        "error_message": None,
    }


async def handle_describe_share_group_offsets(
    context: ShareOffsetsContext, request: Request
) -> Any:
    access = Access.of(context.authorizer(), request)
    groups = [await _describe_group(context, access, g) for g in request.body.groups]
    response: DescribeShareGroupOffsetsResponse = {"throttle_time": 0, "groups": groups}
    return build_response(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, request.api_version, response)


def _altered(results: list[OffsetResult]) -> list[AlteredShareOffsetTopic]:
    topics: dict[str, AlteredShareOffsetTopic] = {}
    for r in results:
        entry = topics.setdefault(
            r.topic, {"topic_name": r.topic, "topic_id": r.topic_id, "partitions": []}
        )
        if entry["topic_id"] is None:
            entry["topic_id"] = r.topic_id
        entry["partitions"].append(
            {"partition_index": r.partition or 0, "error_code": r.error, "error_message": r.message}
        )
    return list(topics.values())


async def _alter(
    context: ShareOffsetsContext, access: Access, body: Any
) -> tuple[ErrorCode, str | None, list[OffsetResult]]:
    group_id = str(body.group_id)
    refused = _refusal(context, access, group_id, AclOperation.READ)
    if refused is not None:
        return refused, None, []
    names = context.topic_ids()
    early: list[OffsetResult] = []
    asked: list[tuple[str, list[tuple[int, int]]]] = []
    for topic in body.topics:
        name = str(topic.topic_name)
        partitions = [(int(p.partition_index), int(p.start_offset)) for p in topic.partitions]
        if not access.allows(AclOperation.READ, _TOPIC, name):
            error, message = ErrorCode.topic_authorization_failed, _TOPIC_DENIED
        elif name not in names:
            error, message = ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC_MESSAGE
        else:
            asked.append((name, partitions))
            continue
        early.extend(OffsetResult(name, names.get(name), p, error, message) for p, _ in partitions)
    try:
        top, top_message, results = await context.offsets.alter(group_id, asked)
    except CoordinatorUnavailable as exc:
        return exc.error_code, str(exc), []
    if top is not ErrorCode.none:
        return top, top_message, []
    return ErrorCode.none, None, early + results


async def handle_alter_share_group_offsets(context: ShareOffsetsContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    error, message, results = await _alter(context, access, request.body)
    response: AlterShareGroupOffsetsResponse = {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "responses": _altered(results),
    }
    return build_response(ApiKey.ALTER_SHARE_GROUP_OFFSETS, request.api_version, response)


async def _delete(
    context: ShareOffsetsContext, access: Access, body: Any
) -> tuple[ErrorCode, str | None, list[OffsetResult]]:
    group_id = str(body.group_id)
    refused = _refusal(context, access, group_id, AclOperation.DELETE)
    if refused is not None:
        return refused, None, []
    denied: list[OffsetResult] = []
    asked: list[str] = []
    for topic in body.topics:
        name = str(topic.topic_name)
        if access.allows(AclOperation.READ, _TOPIC, name):
            asked.append(name)
        else:
            denied.append(
                OffsetResult(name, None, None, ErrorCode.topic_authorization_failed, _TOPIC_DENIED)
            )
    try:
        error, message, results = await context.offsets.delete(group_id, asked)
    except CoordinatorUnavailable as exc:
        return exc.error_code, str(exc), []
    if error is not ErrorCode.none:
        return error, message, []
    return ErrorCode.none, None, denied + results


async def handle_delete_share_group_offsets(context: ShareOffsetsContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    error, message, results = await _delete(context, access, request.body)
    topics: list[DeletedShareOffsetTopic] = [
        {
            "topic_name": r.topic,
            "topic_id": r.topic_id,
            "error_code": r.error,
            "error_message": r.message,
        }
        for r in results
    ]
    response: DeleteShareGroupOffsetsResponse = {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "responses": topics,
    }
    return build_response(ApiKey.DELETE_SHARE_GROUP_OFFSETS, request.api_version, response)
