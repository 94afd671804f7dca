"""ApiVersions, Metadata (with topic auto-creation) and DescribeCluster."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata import controller
from strom.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.cluster import (
    DescribeClusterBroker,
    DescribeClusterResponse,
    MetadataBroker,
    MetadataPartition,
    MetadataResponse,
    MetadataTopic,
)
from strom.protocol.responses.groups import ApiVersionsResponse
from strom.security.acls import CLUSTER_NAME
from strom.security.operations import OMITTED, AclOperation, AclResourceType, operations_field
from strom.server.handlers import admin
from strom.server.handlers.access import Access
from strom.server.handlers.ports import ClusterContext
from strom.server.handlers.refusals import not_authorized
from strom.server.transactions import TRANSACTION_VERSION

log = logging.getLogger(__name__)

TOPIC, CLUSTER = AclResourceType.TOPIC, AclResourceType.CLUSTER


TRANSACTION_VERSION_FEATURE = "transaction.version"
SUPPORTED_TRANSACTION_VERSIONS = (0, 2)


async def handle_api_versions(context: ClusterContext, request: Request) -> Any:
    """The APIs, and (v3+) the features: `transaction.version`, supported 0-2 and
    finalized at TRANSACTION_VERSION (docs/transactions.md, "Which transaction
    version"), which Kafka 4.0's Java client reads to choose its transaction protocol.
    Before v4, supported features whose minimum is 0 are left out, as Kafka does
    (older clients fail to read them); the finalized level is always listed."""
    version = request.api_version
    response: ApiVersionsResponse = {
        "error_code": ErrorCode.none,
        "api_keys": [
            {"api_key": int(key), "min_version": r.min_version, "max_version": r.max_version}
            for key, r in sorted(SUPPORTED_APIS.items())
        ],
        "throttle_time": 0,
    }
    low, high = SUPPORTED_TRANSACTION_VERSIONS
    if version >= 4 or low > 0:
        response["supported_features"] = [
            {"name": TRANSACTION_VERSION_FEATURE, "min_version": low, "max_version": high}
        ]
    # Kafka's epoch is the metadata offset its features were read at; the level here
    # never changes, so any epoch of 0 or more tells the same.
    response["finalized_features_epoch"] = max(context.metadata.image.offset, 0)
    response["finalized_features"] = (
        [
            {
                "name": TRANSACTION_VERSION_FEATURE,
                "max_version_level": TRANSACTION_VERSION,
                "min_version_level": TRANSACTION_VERSION,
            }
        ]
        if TRANSACTION_VERSION > 0
        else []
    )
    return build_response(ApiKey.API_VERSIONS, version, response)


def _live(image: MetadataImage, *, include_fenced: bool = False) -> list[Any]:
    """Registered brokers by id; clients are told only of the unfenced ones, as Kafka
    does."""
    return [
        b
        for b in sorted(image.brokers.values(), key=lambda b: b.broker_id)
        if include_fenced or not b.fenced
    ]


def _addresses(
    image: MetadataImage, listener: str, *, include_fenced: bool = False
) -> list[tuple[BrokerImage, str, int]]:
    """Each broker with its address on `listener` (the one the request came in on), as
    Kafka answers: a broker without that listener is left out. "" (not on a listener):
    the inter-broker addresses."""
    result = []
    for broker in _live(image, include_fenced=include_fenced):
        address = broker.address(listener or None)
        if address is not None:
            result.append((broker, *address))
    return result


def _metadata_brokers(
    image: MetadataImage, listener: str, node_id: int, *, stopping: bool
) -> list[MetadataBroker]:
    """The unfenced brokers; with none while this broker stops (the only broker, fenced by
    its controlled shutdown before its connections close), this broker. librdkafka
    forgets every broker a Metadata answer leaves out, the bootstrap ones included, and
    waits minutes before it bootstraps again: an empty list from a lone broker stopping
    left its clients with no broker to go back to once it restarted. strom's choice;
    Kafka lists only unfenced brokers."""
    brokers = _addresses(image, listener)
    if not brokers and stopping:
        itself = image.brokers.get(node_id)
        address = itself.address(listener or None) if itself is not None else None
        if itself is not None and address is not None:
            brokers = [(itself, *address)]
    return [
        {"node_id": b.broker_id, "host": host, "port": port, "rack": b.rack}
        for b, host, port in brokers
    ]


def _cluster_brokers(
    image: MetadataImage, listener: str, *, include_fenced: bool
) -> list[DescribeClusterBroker]:
    return [
        {
            "broker_id": b.broker_id,
            "host": host,
            "port": port,
            "rack": b.rack,
            "is_fenced": b.fenced,
        }
        for b, host, port in _addresses(image, listener, include_fenced=include_fenced)
    ]


def controller_id(context: ClusterContext, image: MetadataImage) -> int:
    """The id clients are given as the controller: the active controller when it is also
    a live broker (combined nodes), so users see who decides. A controller-only node is
    not reachable on a client listener, so then this broker is named instead, as Kafka
    does in KRaft mode: it forwards admin requests to the active controller. -1 while
    there is no active controller."""
    leader = context.channel.leader_id
    if leader is None:
        return -1
    registered = image.brokers.get(leader)
    if registered is None or registered.fenced:
        return context.node_id
    return leader


def metadata_controller_id(context: ClusterContext, image: MetadataImage) -> int:
    """The controller id of a Metadata answer: controller_id's, but this broker while no
    active controller is known, as Kafka's KRaft brokers never answer -1. Admin clients
    send their requests to it, and it forwards them once a controller is elected
    (handlers/forward.py). librdkafka's admin client that is told -1 twice in a row waits
    for a controller until its request times out, even after one is elected."""
    found = controller_id(context, image)
    return context.node_id if found < 0 else found


def _topic_entry(topic: TopicImage, image: MetadataImage) -> MetadataTopic:
    fenced = fenced_brokers(image)
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": [
            partition_entry(p, fenced)
            for p in sorted(topic.partitions.values(), key=lambda p: p.partition)
        ],
        "topic_authorized_operations": OMITTED,
    }


def fenced_brokers(image: MetadataImage) -> set[int]:
    return {b.broker_id for b in image.brokers.values() if b.fenced}


def partition_entry(partition: PartitionImage, fenced: set[int]) -> MetadataPartition:
    """A partition as Metadata (and DescribeTopicPartitions) describe it: a replica on a
    fenced broker is offline."""
    return {
        "error_code": ErrorCode.leader_not_available if partition.leader < 0 else ErrorCode.none,
        "partition_index": partition.partition,
        "leader_id": partition.leader,
        "leader_epoch": partition.leader_epoch,
        "replica_nodes": partition.replicas,
        "isr_nodes": partition.isr,
        "offline_replicas": tuple(r for r in partition.replicas if r in fenced),
    }


def _error_entry(
    name: str | None, code: ErrorCode, topic_id: uuid.UUID | None = None
) -> MetadataTopic:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": OMITTED,
    }


async def handle_metadata(context: ClusterContext, request: Request) -> Any:
    body = request.body
    version = request.api_version
    requested = body.topics
    if version == 0 and not requested:
        requested = None  # v0 asks for every topic with an empty list
    allow_auto_create = bool(getattr(body, "allow_auto_topic_creation", True))
    access = Access.of(context.admin.authorizer(), request)
    describable = _Describable(access)
    topics: list[MetadataTopic] = []
    served: set[int] = set()  # entries whose authorized operations are told
    if requested is None:  # topics the principal may not describe are left out
        image = context.metadata.image
        for name, topic in sorted(image.topics_by_name.items()):
            if describable(name):
                served.add(len(topics))
                topics.append(_topic_entry(topic, image))
    else:
        image = context.metadata.image
        auto_create = allow_auto_create and context.admin.config().auto_create_topics_enable
        missing = [
            t.name
            for t in requested
            if t.name is not None and t.name not in image.topics_by_name and describable(t.name)
        ]
        creatable = [n for n in missing if auto_create and describable.may_create(n)]
        if creatable:
            await admin.create_topics(
                context.admin, [controller.NewTopic(n, -1, -1) for n in creatable]
            )
        image = context.metadata.image
        for wanted in requested:
            topic_id = getattr(wanted, "topic_id", None)
            if wanted.name is None and topic_id is not None and topic_id.int != 0:
                by_id = image.topics_by_id.get(topic_id)
                if by_id is None:
                    topics.append(_error_entry(None, ErrorCode.unknown_topic_id, topic_id))
                elif not describable(by_id.name):  # the id is no secret, the name is
                    topics.append(
                        _error_entry(None, ErrorCode.topic_authorization_failed, topic_id)
                    )
                else:
                    served.add(len(topics))
                    topics.append(_topic_entry(by_id, image))
                continue
            name = wanted.name or ""
            if not describable(name):  # whether it exists or not, as Kafka answers
                topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
                continue
            named = image.topics_by_name.get(name)
            if named is not None:
                served.add(len(topics))
                topics.append(_topic_entry(named, image))
            elif name in missing and auto_create and name not in creatable:
                topics.append(_error_entry(name, ErrorCode.topic_authorization_failed))
            else:
                reason = controller.validate_topic_name(name)
                code = (
                    ErrorCode.invalid_topic_exception
                    if reason
                    else ErrorCode.unknown_topic_or_partition
                )
                served.add(len(topics))
                topics.append(_error_entry(name, code))
    if getattr(body, "include_topic_authorized_operations", False):
        for index in served:
            entry = topics[index]
            entry["topic_authorized_operations"] = operations_field(
                access.operations(TOPIC, entry["name"] or "")
            )
    asked = bool(getattr(body, "include_cluster_authorized_operations", False))
    response: MetadataResponse = {
        "throttle_time": 0,
        "brokers": _metadata_brokers(
            image, request.listener, context.node_id, stopping=context.stopping()
        ),
        "cluster_id": context.cluster_id(),
        "controller_id": metadata_controller_id(context, image),
        "topics": topics,
        "cluster_authorized_operations": _cluster_operations(access, asked=asked),
        "error_code": ErrorCode.none,
    }
    return build_response(ApiKey.METADATA, version, response)


class _Describable:
    """Which topics the principal may describe (DESCRIBE) and create (CREATE on the
    cluster, or on the topic), each asked once per request."""

    def __init__(self, access: Access) -> None:
        self._access = access
        self._answers: dict[str, bool] = {}
        self._create_cluster: bool | None = None

    def __call__(self, name: str) -> bool:
        answer = self._answers.get(name)
        if answer is None:
            answer = self._answers[name] = self._access.allows(AclOperation.DESCRIBE, TOPIC, name)
        return answer

    def may_create(self, name: str) -> bool:
        if self._create_cluster is None:
            self._create_cluster = self._access.allows_cluster(AclOperation.CREATE)
        return self._create_cluster or self._access.allows(AclOperation.CREATE, TOPIC, name)


def _cluster_operations(access: Access, *, asked: bool) -> int:
    """The cluster's authorized_operations: none without DESCRIBE on it, as Kafka says."""
    if not asked:
        return OMITTED
    if not access.allows_cluster(AclOperation.DESCRIBE):
        return 0
    return operations_field(access.operations(CLUSTER, CLUSTER_NAME))


async def handle_describe_cluster(context: ClusterContext, request: Request) -> Any:
    image = context.metadata.image
    include_fenced = bool(getattr(request.body, "include_fenced_brokers", False))
    access = Access.of(context.admin.authorizer(), request)
    error, message = ErrorCode.none, None
    on_controller = request.listener in context.admin.forward.controller_listeners
    if on_controller and not access.allows_cluster(AclOperation.ALTER):
        # Kafka's controllers ask ALTER on the cluster: their addresses are for operators.
        error, message = ErrorCode.cluster_authorization_failed, not_authorized(request)
    response: DescribeClusterResponse = {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "endpoint_type": int(getattr(request.body, "endpoint_type", 1)),
        "cluster_id": context.cluster_id(),
        "controller_id": controller_id(context, image),
        "brokers": []
        if error is not ErrorCode.none
        else _cluster_brokers(image, request.listener, include_fenced=include_fenced),
        "cluster_authorized_operations": _cluster_operations(
            access,
            asked=bool(getattr(request.body, "include_cluster_authorized_operations", False)),
        ),
    }
    return build_response(ApiKey.DESCRIBE_CLUSTER, request.api_version, response)
