"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups, DeleteGroups.

Each handler turns the request into a command for the pure coordinator
(strom.group.coordinator), lets the group service (handlers/ports.py: GroupCoordination)
write what it returns, and waits for its reply when the coordinator parks the request
(JoinGroup until the rebalance ends, SyncGroup until the leader's assignment is durable).
Every decision is carried out by `apply`, so a reply goes out only once the state it
reports is committed; when the write fails the client gets the coordinator error (the
group is as before).

With an authorizer, as Kafka's KafkaApis checks before the coordinator is asked:
JoinGroup, SyncGroup, Heartbeat and LeaveGroup need READ on the group (else the whole
answer is GROUP_AUTHORIZATION_FAILED); DescribeGroups needs DESCRIBE on each group (a
denied one is answered first, GROUP_AUTHORIZATION_FAILED) and reports the principal's
`authorized_operations` on each group described without error; DeleteGroups needs DELETE
on each group (the denied ones are answered after the others); ListGroups lists every
group to a principal with DESCRIBE on the cluster, and otherwise only the groups it may
DESCRIBE, never refusing.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.coordinator import JoinRequest, LeavingMember, SyncRequest
from strom.group.state import GroupState, JoinResult, SyncResult
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.responses.groups import (
    DeleteGroupsResponse,
    DescribedGroup,
    DescribeGroupsResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsResponse,
    SyncGroupResponse,
)
from strom.security.operations import OMITTED, AclOperation, AclResourceType, operations_field
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.handlers.ports import GroupContext

_GROUP = AclResourceType.GROUP


def _readable(context: GroupContext, request: Request, group_id: str) -> bool:
    """Whether the principal may READ the group: what a member's requests need."""
    return Access.of(context.authorizer(), request).allows(AclOperation.READ, _GROUP, group_id)


async def handle_join_group(context: GroupContext, request: Request) -> Any:
    body = request.body
    session_ms = ms(body.session_timeout)
    rebalance_ms = ms(getattr(body, "rebalance_timeout", session_ms))
    join = JoinRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        protocol_type=body.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in body.protocols),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms if rebalance_ms >= 0 else session_ms,
        client_id=request.client_id or "",
        client_host=request.client_host,
        require_known_member_id=request.api_version >= 4,
        reason=getattr(body, "reason", None),
    )
    if not _readable(context, request, join.group_id):
        result = JoinResult(ErrorCode.group_authorization_failed)
    else:
        try:
            result = await context.groups.join(join)
        except CoordinatorUnavailable as exc:
            result = JoinResult(exc.error_code, member_id=join.member_id)
    if result.error is ErrorCode.member_id_required and request.api_version < 4:
        result = JoinResult(ErrorCode.unknown_member_id)
    response: JoinGroupResponse = {
        "throttle_time": 0,
        "error_code": result.error,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in result.members
        ],
    }
    return build_response(ApiKey.JOIN_GROUP, request.api_version, response)


async def handle_sync_group(context: GroupContext, request: Request) -> Any:
    body = request.body
    sync = SyncRequest(
        group_id=body.group_id,
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        generation_id=int(body.generation_id),
        protocol_type=getattr(body, "protocol_type", None),
        protocol_name=getattr(body, "protocol_name", None),
        assignments=tuple((a.member_id, a.assignment) for a in body.assignments),
    )
    if request.api_version >= 5 and (sync.protocol_type is None or sync.protocol_name is None):
        # Mandatory from v5 on, checked before the ACLs, as Kafka does.
        result = SyncResult(ErrorCode.inconsistent_group_protocol)
    elif not _readable(context, request, sync.group_id):
        result = SyncResult(ErrorCode.group_authorization_failed)
    else:
        try:
            result = await context.groups.sync(sync)
        except CoordinatorUnavailable as exc:
            result = SyncResult(exc.error_code)
    response: SyncGroupResponse = {
        "throttle_time": 0,
        "error_code": result.error,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }
    return build_response(ApiKey.SYNC_GROUP, request.api_version, response)


async def handle_heartbeat(context: GroupContext, request: Request) -> Any:
    body = request.body
    if not _readable(context, request, body.group_id):
        denied: HeartbeatResponse = {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
        }
        return build_response(ApiKey.HEARTBEAT, request.api_version, denied)
    try:
        error = await context.groups.heartbeat(
            body.group_id,
            body.member_id,
            getattr(body, "group_instance_id", None),
            int(body.generation_id),
        )
    except CoordinatorUnavailable as exc:
        error = exc.error_code
    response: HeartbeatResponse = {"throttle_time": 0, "error_code": error}
    return build_response(ApiKey.HEARTBEAT, request.api_version, response)


async def handle_leave_group(context: GroupContext, request: Request) -> Any:
    body = request.body
    if not _readable(context, request, body.group_id):
        denied: LeaveGroupResponse = {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "members": [],
        }
        return build_response(ApiKey.LEAVE_GROUP, request.api_version, denied)
    if request.api_version >= 3:
        leaving = [
            LeavingMember(m.member_id, getattr(m, "group_instance_id", None)) for m in body.members
        ]
    else:
        leaving = [LeavingMember(body.member_id)]
    try:
        error, member_errors = await context.groups.leave(body.group_id, leaving)
    except CoordinatorUnavailable as exc:
        error, member_errors = exc.error_code, []
    data: LeaveGroupResponse = {"throttle_time": 0, "error_code": error, "members": []}
    if request.api_version >= 3:
        data["members"] = [
            {
                "member_id": member.member_id,
                "group_instance_id": member.group_instance_id,
                "error_code": member_error,
            }
            for member, member_error in zip(leaving, member_errors, strict=False)
        ]
    elif error is ErrorCode.none and member_errors:
        data["error_code"] = member_errors[0]
    return build_response(ApiKey.LEAVE_GROUP, request.api_version, data)


async def handle_list_groups(context: GroupContext, request: Request) -> Any:
    body = request.body
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    access = Access.of(context.authorizer(), request)
    every = access.allows_cluster(AclOperation.DESCRIBE)
    groups: list[ListedGroup] = []
    for group in context.groups.describe_all():
        if states and group.state.value.lower() not in states:
            continue
        if types and "classic" not in types:
            continue
        if not (every or access.allows(AclOperation.DESCRIBE, _GROUP, group.group_id)):
            continue  # left out, never refused
        groups.append(
            {
                "group_id": group.group_id,
                "protocol_type": group.protocol_type,
                "group_state": group.state.value,
                "group_type": "classic",
            }
        )
    consumer = context.consumer
    for group_id in consumer.group_ids() if consumer is not None else []:
        described = consumer.describe(group_id) if consumer is not None else None
        if described is None or (states and described.state.value.lower() not in states):
            continue
        if (types and "consumer" not in types) or not (
            every or access.allows(AclOperation.DESCRIBE, _GROUP, group_id)
        ):
            continue
        state = described.state.value
        groups.append(
            {
                "group_id": group_id,
                "protocol_type": "consumer",
                "group_state": state,
                "group_type": "consumer",
            }
        )
    share = context.share
    for group_id in share.group_ids() if share is not None else []:
        _, _, found = share.describe(group_id) if share is not None else (None, None, None)
        if found is None or (states and found.group_state.lower() not in states):
            continue
        if (types and "share" not in types) or not (
            every or access.allows(AclOperation.DESCRIBE, _GROUP, group_id)
        ):
            continue
        groups.append(
            {
                "group_id": group_id,
                "protocol_type": "share",
                "group_state": found.group_state,
                "group_type": "share",
            }
        )
    response: ListGroupsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "groups": groups,
    }
    return build_response(ApiKey.LIST_GROUPS, request.api_version, response)


async def handle_describe_groups(context: GroupContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    tell_operations = request.api_version >= 3 and bool(
        getattr(request.body, "include_authorized_operations", False)
    )
    denied: list[DescribedGroup] = []
    entries: list[DescribedGroup] = []
    for group_id in request.body.groups:
        if not access.allows(AclOperation.DESCRIBE, _GROUP, group_id):
            denied.append(_group_entry(group_id, ErrorCode.group_authorization_failed, ""))
            continue
        entry = _group_entry(group_id, ErrorCode.none, GroupState.DEAD.value)
        entries.append(entry)
        try:
            await context.groups.coordinate(group_id)
        except CoordinatorUnavailable as exc:
            entry["error_code"] = exc.error_code
            continue
        description = context.groups.describe(group_id)
        if description is None:
            if request.api_version >= 6:
                entry["error_code"] = ErrorCode.group_id_not_found
                entry["error_message"] = f"group {group_id} does not exist"
            continue
        entry["group_state"] = description.state.value
        entry["protocol_type"] = description.protocol_type
        entry["protocol_data"] = description.protocol_name
        entry["members"] = [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "member_metadata": m.metadata,
                "member_assignment": m.assignment,
            }
            for m in description.members
        ]
    if tell_operations:  # only of the groups described without error, as Kafka
        for entry in entries:
            if entry["error_code"] is ErrorCode.none:
                entry["authorized_operations"] = operations_field(
                    access.operations(_GROUP, entry["group_id"])
                )
    # The refused groups first, then the described ones, as Kafka answers.
    response: DescribeGroupsResponse = {"throttle_time": 0, "groups": denied + entries}
    return build_response(ApiKey.DESCRIBE_GROUPS, request.api_version, response)


def _group_entry(group_id: str, error: ErrorCode, state: str) -> DescribedGroup:
    return {
        "error_code": error,
        "error_message": None,
        "group_id": group_id,
        "group_state": state,
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": OMITTED,
    }


async def handle_delete_groups(context: GroupContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    group_ids: list[str] = []
    denied: list[str] = []
    for group_id in dict.fromkeys(request.body.groups_names):  # each once, as Kafka
        allowed = access.allows(AclOperation.DELETE, _GROUP, group_id)
        (group_ids if allowed else denied).append(group_id)
    results: dict[str, ErrorCode] = {}
    local: list[str] = []
    for group_id in group_ids:
        try:
            await context.groups.coordinate(group_id)
            local.append(group_id)
        except CoordinatorUnavailable as exc:
            results[group_id] = exc.error_code
    consumer_deleted: set[str] = set()
    if context.consumer is not None:  # a KIP-848 group: its records first, then offsets
        for group_id in list(local):
            if context.consumer.describe(group_id) is None:
                continue
            error = await context.consumer.delete(group_id)
            if error is ErrorCode.none:
                consumer_deleted.add(group_id)
            else:
                results[group_id] = error
                local.remove(group_id)
    if context.share is not None:  # a share group: its share state and records
        for group_id in [g for g in local if g in context.share.group_ids()]:
            results[group_id] = await context.share.delete(group_id)
            local.remove(group_id)
    errors, out = context.groups.delete_groups(local)
    errors = [
        ErrorCode.none if g in consumer_deleted and e is ErrorCode.group_id_not_found else e
        for g, e in zip(local, errors, strict=True)
    ]
    results.update(zip(local, errors, strict=True))
    try:
        await context.groups.apply(out)
    except CoordinatorUnavailable as exc:
        deleted = [g for g, error in zip(local, errors, strict=True) if error is ErrorCode.none]
        results.update(dict.fromkeys(deleted, exc.error_code))
    results.update(dict.fromkeys(denied, ErrorCode.group_authorization_failed))
    response: DeleteGroupsResponse = {
        "throttle_time": 0,
        # The refused groups after the others, as Kafka answers.
        "results": [{"group_id": g, "error_code": results[g]} for g in group_ids + denied],
    }
    return build_response(ApiKey.DELETE_GROUPS, request.api_version, response)
