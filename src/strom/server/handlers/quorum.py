"""BrokerRegistration, BrokerHeartbeat, AllocateProducerIds and AlterPartition (controller
listener) and DescribeQuorum.

The controller's APIs are answered only by the active controller; any other node (one
that is no controller, or one that lost or has not yet taken over the leadership)
answers NOT_CONTROLLER, and the broker asking looks for the one that is. DescribeQuorum
runs at the active controller (forward.py); a store with no quorum refuses it.

ACLs, as Kafka's controller checks them, before anything else: the controller's APIs
need CLUSTER_ACTION on the cluster of the node sending them (refused:
CLUSTER_AUTHORIZATION_FAILED at the top), except a request this node made itself and
answers in process (its ISR manager's AlterPartition); DescribeQuorum needs DESCRIBE on
the cluster, checked on the broker the client reached before it goes on (refused:
CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.").
"""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.isr import IsrChange, IsrMember
from strom.metadata.records import BrokerEndpoint, SecurityProtocol
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.quorum import (
    AllocateProducerIdsResponse,
    AlterPartitionPartition,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    DescribeQuorumResponse,
    QuorumNode,
    QuorumPartition,
    QuorumReplica,
)
from strom.security.operations import AclOperation
from strom.server.controller import NotController
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import QuorumContext, QuorumController
from strom.server.handlers.refusals import CLUSTER_DENIED, in_process

METADATA_TOPIC = "__cluster_metadata"


def _active(context: QuorumContext) -> QuorumController | None:
    """This node's controller if it is the active one now."""
    controller = context.controller()
    return controller if controller is not None and controller.active else None


def _node_refused(context: QuorumContext, request: Request) -> bool:
    """Whether the sender of a controller API lacks CLUSTER_ACTION on the cluster."""
    if in_process(request):
        return False
    return not Access.of(context.authorizer(), request).allows_cluster(AclOperation.CLUSTER_ACTION)


async def handle_broker_registration(context: QuorumContext, request: Request) -> Any:
    body = request.body
    controller = _active(context)
    error, epoch = ErrorCode.not_controller, -1
    endpoints = _endpoints(body.listeners)
    if _node_refused(context, request):
        error = ErrorCode.cluster_authorization_failed
    elif controller is not None and endpoints:
        # The first listener is the one other brokers use (lifecycle.py sends it first).
        first = endpoints[0]
        try:
            error, _message, epoch = await controller.register_broker(
                broker_id=int(body.broker_id),
                cluster_id=body.cluster_id,
                incarnation_id=body.incarnation_id,
                host=first.host,
                port=first.port,
                rack=body.rack,
                endpoints=endpoints,
            )
        except NotController:
            error, epoch = ErrorCode.not_controller, -1
    elif controller is not None:
        error = ErrorCode.invalid_request
    response: BrokerRegistrationResponse = {
        "throttle_time": 0,
        "error_code": error,
        "broker_epoch": epoch,
    }
    return build_response(ApiKey.BROKER_REGISTRATION, request.api_version, response)


def _endpoints(listeners: Any) -> tuple[BrokerEndpoint, ...]:
    """The registration's listeners; () if any names an unknown security protocol."""
    result = []
    for listener in listeners:
        try:
            protocol = SecurityProtocol(int(listener.security_protocol))
        except ValueError:
            return ()
        result.append(BrokerEndpoint(listener.name, listener.host, int(listener.port), protocol))
    return tuple(result)


async def handle_broker_heartbeat(context: QuorumContext, request: Request) -> Any:
    body = request.body
    controller = _active(context)
    data: BrokerHeartbeatResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.not_controller,
        "is_caught_up": False,
        "is_fenced": True,
        "should_shut_down": False,
    }
    if _node_refused(context, request):
        data["error_code"] = ErrorCode.cluster_authorization_failed
    elif controller is not None:
        try:
            result = await controller.broker_heartbeat(
                broker_id=int(body.broker_id),
                broker_epoch=int(body.broker_epoch),
                current_metadata_offset=int(body.current_metadata_offset),
                want_fence=bool(body.want_fence),
                want_shutdown=bool(body.want_shut_down),
            )
        except NotController:
            pass
        else:
            data["error_code"] = result.error_code
            data["is_caught_up"] = result.is_caught_up
            data["is_fenced"] = result.is_fenced
            data["should_shut_down"] = result.should_shutdown
    return build_response(ApiKey.BROKER_HEARTBEAT, request.api_version, data)


# --- DescribeQuorum -------------------------------------------------------------------


async def handle_describe_quorum(context: QuorumContext, request: Request) -> Any:
    if not Access.of(context.authorizer(), request).allows_cluster(AclOperation.DESCRIBE):
        return _describe_error(request, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    store = context.store()
    refusal = store.capabilities.quorum_refusal if store is not None else None
    if refusal is not None:  # no quorum to describe (e.g. ZooKeeper)
        return _describe_error(request, ErrorCode.invalid_request, refusal)
    return await at_controller(context, request, _describe_here, _describe_error)


async def controller_describe_quorum(context: QuorumContext, request: Request) -> Any:
    return await on_this_controller(context, request, _describe_here, _describe_error)


def _describe_error(request: Request, code: ErrorCode, message: str) -> Any:
    response: DescribeQuorumResponse = {
        "error_code": code,
        "error_message": message,
        "topics": [],
        "nodes": [],
    }
    return build_response(ApiKey.DESCRIBE_QUORUM, request.api_version, response)


async def _describe_here(context: QuorumContext, request: Request) -> Any:
    store = context.store()
    quorum = store.describe_quorum() if store is not None else None
    if quorum is None:
        raise NotController(context.forward.channel.leader_id)
    voters: list[QuorumReplica] = [
        {
            "replica_id": voter.node_id,
            "replica_directory_id": None,
            "log_end_offset": voter.log_end_offset,
            "last_fetch_timestamp": voter.last_fetch_timestamp,
            "last_caught_up_timestamp": voter.last_caught_up_timestamp,
        }
        for voter in quorum.voters
    ]
    partition: QuorumPartition = {
        "partition_index": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "leader_id": context.node_id,
        "leader_epoch": quorum.leader_epoch,
        "high_watermark": quorum.high_watermark,
        "current_voters": voters,
        "observers": [],
    }
    nodes: list[QuorumNode] = [
        {
            "node_id": node_id,
            "listeners": [{"name": context.listener_name, "host": host, "port": port}],
        }
        for node_id, host, port in quorum.endpoints
    ]
    response: DescribeQuorumResponse = {
        "error_code": ErrorCode.none,
        "error_message": None,
        "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
        "nodes": nodes,
    }
    return build_response(ApiKey.DESCRIBE_QUORUM, request.api_version, response)


async def handle_allocate_producer_ids(context: QuorumContext, request: Request) -> Any:
    body = request.body
    controller = _active(context)
    data: AllocateProducerIdsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.not_controller,
        "producer_id_start": -1,
        "producer_id_len": 0,
    }
    if _node_refused(context, request):
        data["error_code"] = ErrorCode.cluster_authorization_failed
    elif controller is not None:
        try:
            result = await controller.allocate_producer_ids(
                int(body.broker_id), int(body.broker_epoch)
            )
        except NotController:
            pass
        else:
            data["error_code"] = result.error_code
            data["producer_id_start"] = result.first_id
            data["producer_id_len"] = result.count
    return build_response(ApiKey.ALLOCATE_PRODUCER_IDS, request.api_version, data)


async def handle_alter_partition(context: QuorumContext, request: Request) -> Any:
    """A partition leader's ISR change (metadata/isr.py); NOT_CONTROLLER unless this node
    is the active controller, so the leader looks for the one that is."""
    body = request.body
    controller = _active(context)
    data: AlterPartitionResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.not_controller,
        "topics": [],
    }
    if _node_refused(context, request):
        data["error_code"] = ErrorCode.cluster_authorization_failed
        return build_response(ApiKey.ALTER_PARTITION, request.api_version, data)
    if controller is None:
        return build_response(ApiKey.ALTER_PARTITION, request.api_version, data)
    changes = [
        IsrChange(
            topic.topic_id or uuid.UUID(int=0),  # null: an unknown topic id
            int(p.partition_index),
            int(p.leader_epoch),
            int(p.partition_epoch),
            _isr_members(request.api_version, p),
        )
        for topic in body.topics
        for p in topic.partitions
    ]
    try:
        result = await controller.alter_partition(
            broker_id=int(body.broker_id), broker_epoch=int(body.broker_epoch), changes=changes
        )
    except NotController:
        return build_response(ApiKey.ALTER_PARTITION, request.api_version, data)
    topics: dict[uuid.UUID, list[AlterPartitionPartition]] = {}
    for done in result.partitions:
        topics.setdefault(done.topic_id, []).append(
            {
                "partition_index": done.partition,
                "error_code": done.error_code,
                "leader_id": done.leader,
                "leader_epoch": done.leader_epoch,
                "isr": list(done.isr),
                "leader_recovery_state": 0,
                "partition_epoch": done.partition_epoch,
            }
        )
    data["error_code"] = result.error_code
    data["topics"] = [{"topic_id": t, "partitions": parts} for t, parts in topics.items()]
    return build_response(ApiKey.ALTER_PARTITION, request.api_version, data)


def _isr_members(api_version: int, partition: Any) -> tuple[IsrMember, ...]:
    if api_version >= 3:
        return tuple(
            IsrMember(int(m.broker_id), int(m.broker_epoch)) for m in partition.new_isr_with_epochs
        )
    return tuple(IsrMember(int(b)) for b in partition.new_isr)
