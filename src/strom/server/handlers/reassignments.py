"""AlterPartitionReassignments and ListPartitionReassignments: decided by the active
controller (metadata/reassignments.py), wherever a client sent them (see forward.py).

ACLs, as Kafka's controller checks them, but on the broker the client reached, before
the request goes on (the controller's variants, for forwarded requests, check nothing):
AlterPartitionReassignments needs ALTER on the cluster, ListPartitionReassignments
DESCRIBE. Refused, each is CLUSTER_AUTHORIZATION_FAILED with "Request … is not
authorized." at the top, and on every partition asked for (Alter), or with the topics
asked for echoed with their partition indexes only (List), as Kafka's error responses.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.reassignments import PartitionTarget
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.admin import (
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsResponse,
    OngoingPartitionReassignment,
    OngoingTopicReassignment,
    ReassignablePartitionResponse,
)
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import not_authorized


def _may(context: AdminContext, request: Request, operation: AclOperation) -> bool:
    return Access.of(context.authorizer(), request).allows_cluster(operation)


# --- AlterPartitionReassignments ------------------------------------------------------


async def handle_alter_partition_reassignments(context: AdminContext, request: Request) -> Any:
    if not _may(context, request, AclOperation.ALTER):
        return _alter_error(
            request, ErrorCode.cluster_authorization_failed, not_authorized(request)
        )
    return await at_controller(context, request, _alter_here, _alter_error)


async def controller_alter_partition_reassignments(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _alter_here, _alter_error)


def _alter_response(
    request: Request,
    partitions: dict[str, list[ReassignablePartitionResponse]],
    code: ErrorCode = ErrorCode.none,
    message: str | None = None,
) -> Any:
    response: AlterPartitionReassignmentsResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "responses": [{"name": name, "partitions": p} for name, p in partitions.items()],
    }
    return build_response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, request.api_version, response)


def _alter_error(request: Request, code: ErrorCode, message: str) -> Any:
    partitions: dict[str, list[ReassignablePartitionResponse]] = {}
    for topic in request.body.topics:
        partitions.setdefault(topic.name, []).extend(
            {"partition_index": p.partition_index, "error_code": code, "error_message": message}
            for p in topic.partitions
        )
    return _alter_response(request, partitions, code, message)


async def _alter_here(context: AdminContext, request: Request) -> Any:
    targets = [
        PartitionTarget(
            topic.name,
            int(p.partition_index),
            None if p.replicas is None else tuple(int(b) for b in p.replicas),
        )
        for topic in request.body.topics
        for p in topic.partitions
    ]
    results = await context.active_controller().alter_reassignments(targets)
    partitions: dict[str, list[ReassignablePartitionResponse]] = {}
    for result in results:
        partitions.setdefault(result.topic, []).append(
            {
                "partition_index": result.partition,
                "error_code": result.error_code,
                "error_message": result.message,
            }
        )
    return _alter_response(request, partitions)


# --- ListPartitionReassignments -------------------------------------------------------


async def handle_list_partition_reassignments(context: AdminContext, request: Request) -> Any:
    if not _may(context, request, AclOperation.DESCRIBE):
        return _list_refused(request)
    return await at_controller(context, request, _list_here, _list_error)


async def controller_list_partition_reassignments(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _list_here, _list_error)


def _list_response(
    request: Request,
    topics: list[OngoingTopicReassignment],
    code: ErrorCode = ErrorCode.none,
    message: str | None = None,
) -> Any:
    response: ListPartitionReassignmentsResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "topics": topics,
    }
    return build_response(ApiKey.LIST_PARTITION_REASSIGNMENTS, request.api_version, response)


def _list_error(request: Request, code: ErrorCode, message: str) -> Any:
    return _list_response(request, [], code, message)


def _list_refused(request: Request) -> Any:
    """The refusal of a principal without DESCRIBE on the cluster, shaped as Kafka's:
    the topics asked for, each partition with its index only."""
    echoed: list[OngoingTopicReassignment] = [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": int(index),
                    "replicas": [],
                    "adding_replicas": [],
                    "removing_replicas": [],
                }
                for index in topic.partition_indexes
            ],
        }
        for topic in request.body.topics or ()
    ]
    return _list_response(
        request, echoed, ErrorCode.cluster_authorization_failed, not_authorized(request)
    )


async def _list_here(context: AdminContext, request: Request) -> Any:
    asked = request.body.topics
    wanted: dict[str, list[int]] | None = None
    if asked is not None:
        wanted = {}
        for topic in asked:
            wanted.setdefault(topic.name, []).extend(int(i) for i in topic.partition_indexes)
    ongoing = await context.active_controller().list_reassignments(wanted)
    topics: dict[str, list[OngoingPartitionReassignment]] = {}
    for found in ongoing:
        topics.setdefault(found.topic, []).append(
            {
                "partition_index": found.partition,
                "replicas": list(found.replicas),
                "adding_replicas": list(found.adding_replicas),
                "removing_replicas": list(found.removing_replicas),
            }
        )
    return _list_response(request, [{"name": name, "partitions": p} for name, p in topics.items()])
