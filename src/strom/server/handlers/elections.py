"""ElectLeaders and UnregisterBroker: decided by the active controller
(metadata/elect_leaders.py, metadata/brokers.py), wherever a client sent them (see
forward.py). The answer comes once the decision is committed, as Kafka's controller
answers; ElectLeaders' timeout is not otherwise used.

ACLs, as Kafka's controller checks them, but on the broker the client reached, before
the request goes on (the controller's variants, for forwarded requests, check nothing):
each needs ALTER on the cluster. A refused ElectLeaders is CLUSTER_AUTHORIZATION_FAILED
at the top and on every partition asked for ("Request … is not authorized."); a refused
UnregisterBroker is CLUSTER_AUTHORIZATION_FAILED with no message.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.elect_leaders import ElectionType, TopicPartitions
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.admin import (
    ElectLeadersResponse,
    ReplicaElectionResult,
    UnregisterBrokerResponse,
)
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import not_authorized


def _may_alter_cluster(context: AdminContext, request: Request) -> bool:
    return Access.of(context.authorizer(), request).allows_cluster(AclOperation.ALTER)


async def handle_elect_leaders(context: AdminContext, request: Request) -> Any:
    if not _may_alter_cluster(context, request):
        return _elect_error(
            request, ErrorCode.cluster_authorization_failed, not_authorized(request)
        )
    return await at_controller(context, request, _elect_here, _elect_error)


async def controller_elect_leaders(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _elect_here, _elect_error)


def _response(
    request: Request, results: list[ReplicaElectionResult], code: ErrorCode = ErrorCode.none
) -> Any:
    response: ElectLeadersResponse = {
        "throttle_time": 0,
        "error_code": code,
        "replica_election_results": results,
    }
    return build_response(ApiKey.ELECT_LEADERS, request.api_version, response)


def _elect_error(request: Request, code: ErrorCode, message: str) -> Any:
    """The whole request refused, as Kafka's getErrorResponse: the code at the top (v1+)
    and on every partition asked for (none when all were asked for)."""
    asked = request.body.topic_partitions
    results: list[ReplicaElectionResult] = [
        {
            "topic": topic.topic,
            "partition_result": [
                {"partition_id": int(p), "error_code": code, "error_message": message}
                for p in topic.partitions
            ],
        }
        for topic in asked or ()
    ]
    return _response(request, results, code)


async def _elect_here(context: AdminContext, request: Request) -> Any:
    body = request.body
    asked_type = int(getattr(body, "election_type", ElectionType.PREFERRED))  # v0: preferred
    try:
        election_type = ElectionType(asked_type)
    except ValueError:
        return _elect_error(
            request, ErrorCode.invalid_request, f"unknown election type {asked_type}"
        )
    requested = (
        None
        if body.topic_partitions is None
        else [
            TopicPartitions(t.topic, tuple(int(p) for p in t.partitions))
            for t in body.topic_partitions
        ]
    )
    answers = await context.active_controller().elect_leaders(election_type, requested)
    results: list[ReplicaElectionResult] = [
        {
            "topic": answer.topic,
            "partition_result": [
                {
                    "partition_id": done.partition,
                    "error_code": done.error_code,
                    "error_message": done.message,
                }
                for done in answer.partitions
            ],
        }
        for answer in answers
    ]
    return _response(request, results)


async def handle_unregister_broker(context: AdminContext, request: Request) -> Any:
    if not _may_alter_cluster(context, request):
        return _unregister_response(request, ErrorCode.cluster_authorization_failed, None)
    return await at_controller(context, request, _unregister_here, _unregister_response)


async def controller_unregister_broker(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _unregister_here, _unregister_response)


def _unregister_response(request: Request, code: ErrorCode, message: str | None) -> Any:
    response: UnregisterBrokerResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
    }
    return build_response(ApiKey.UNREGISTER_BROKER, request.api_version, response)


async def _unregister_here(context: AdminContext, request: Request) -> Any:
    broker_id = int(request.body.broker_id)
    result = await context.active_controller().unregister_broker(broker_id)
    return _unregister_response(request, result.error_code, result.message)
