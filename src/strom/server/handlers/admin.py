"""CreateTopics, DeleteTopics and CreatePartitions: decided and committed by the active
controller, wherever a client sent them (see forward.py).

ACLs, as Kafka's controller checks them, but on the broker the client reached, before
the request goes on (the controller's variants, for forwarded requests, check nothing):

- CreateTopics: CREATE on the cluster, or else on each topic; a topic without it is
  TOPIC_AUTHORIZATION_FAILED ("Authorization failed."), whether it exists or not. A
  topic named twice goes on regardless (the controller refuses both). A created topic
  is reported with its configs, partitions and replication factor only with
  DESCRIBE_CONFIGS on it; without, its `topic_config_error_code` is
  TOPIC_AUTHORIZATION_FAILED.
- DeleteTopics: DELETE on the cluster, or else on each topic. A topic the principal may
  not DESCRIBE is TOPIC_AUTHORIZATION_FAILED whether it exists or not; one it may
  describe but not delete is UNKNOWN_TOPIC_OR_PARTITION if missing, else
  TOPIC_AUTHORIZATION_FAILED. An id is no secret: an unknown one is UNKNOWN_TOPIC_ID.
  With delete.topic.enable=false every topic is TOPIC_DELETION_DISABLED first.
- CreatePartitions: ALTER on each topic (TOPIC_AUTHORIZATION_FAILED, no message).

Answers keep the request's order; a refused entry never reaches the controller.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from random import Random
from typing import Any

from kio.schema.errors import ErrorCode

from strom.config import ConfigError, validate_topic_configs
from strom.metadata import controller
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build, build_response, request_class
from strom.protocol.responses.admin import (
    CreatableTopicConfig,
    CreatableTopicResult,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsResponse,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.access import Access
from strom.server.handlers.configs import topic_config_entries
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.mutations import THROTTLED, THROTTLED_CODE, counted, paced
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import TOPIC_DENIED, answer_each
from strom.server.throttling import with_throttle_time

log = logging.getLogger(__name__)

CREATE_TOPICS_VERSION = 7
CREATE_DENIED = "Authorization failed."
"""What Kafka's controller tells of a topic the principal may not create."""
TOPIC = AclResourceType.TOPIC


def _check_configs(configs: Any) -> None:
    try:
        validate_topic_configs(configs)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


def live_brokers(image: MetadataImage) -> list[int]:
    return sorted(b.broker_id for b in image.brokers.values() if not b.fenced)


async def create_topics(
    context: AdminContext, topics: list[controller.NewTopic], *, validate_only: bool = False
) -> list[controller.TopicResult]:
    """Create topics at the active controller (here or through a forwarded CreateTopics);
    used by Metadata's auto-creation and by the group coordinator, with the broker's
    `admin_context`."""
    if context.forward.channel.local_controller_active:
        return await create_here(context, topics, validate_only=validate_only)
    request = Request(
        ApiKey.CREATE_TOPICS,
        CREATE_TOPICS_VERSION,
        0,
        "strom",
        build(
            request_class(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION),
            {
                "topics": [
                    {
                        "name": t.name,
                        "num_partitions": t.num_partitions,
                        "replication_factor": t.replication_factor,
                        "assignments": [
                            {"partition_index": p, "broker_ids": list(b)}
                            for p, b in sorted(t.assignments.items())
                        ],
                        "configs": [{"name": k, "value": v} for k, v in t.configs.items()],
                    }
                    for t in topics
                ],
                "timeout": 30_000,
                "validate_only": validate_only,
            },
        ),
    )
    body = await at_controller(context, request, _create_topics_here, _create_topics_error)
    return [
        controller.TopicResult(
            t.name,
            ErrorCode(t.error_code),
            t.error_message,
            t.topic_id,
            int(t.num_partitions),
            int(t.replication_factor),
        )
        for t in body.topics
    ]


async def create_here(
    context: AdminContext, topics: list[controller.NewTopic], *, validate_only: bool = False
) -> list[controller.TopicResult]:
    """Create topics on this node, the active controller (NotController otherwise); also
    how the controller adopts a topic written into its store by hand."""
    config = context.config()
    results = await context.active_controller().decide(
        lambda image: controller.create_topics(
            image,
            topics,
            defaults=controller.TopicDefaults(
                config.num_partitions, config.default_replication_factor
            ),
            brokers=live_brokers(image),
            rng=context.rng,
            validate_only=validate_only,
            validate_configs=_check_configs,
        )
    )
    if not validate_only:
        for result in results:
            if result.error_code == ErrorCode.none:
                log.info(
                    "[node %d] created topic %s (%d partitions, replication factor %d)",
                    context.node_id,
                    result.name,
                    result.num_partitions,
                    result.replication_factor,
                )
    return results


async def handle_create_topics(context: AdminContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    if not access.enforced:
        return await at_controller(context, request, _create_topics_here, _create_topics_error)
    topics = request.body.topics
    named = Counter(str(t.name) for t in topics)
    anywhere = access.allows_cluster(AclOperation.CREATE)
    refusals: list[CreatableTopicResult | None] = [
        None
        if named[t.name] > 1 or anywhere or access.allows(AclOperation.CREATE, TOPIC, t.name)
        else _topic_result(t.name, ErrorCode.topic_authorization_failed, CREATE_DENIED)
        for t in topics
    ]

    async def allowed(passed_on: Request) -> list[CreatableTopicResult]:
        body = await at_controller(context, passed_on, _create_topics_here, _create_topics_error)
        return [_created_result(entry) for entry in body.topics]

    entries = await answer_each(request, "topics", refusals, allowed)
    for entry in entries:
        if entry["error_code"] == ErrorCode.none and not access.allows(
            AclOperation.DESCRIBE_CONFIGS, TOPIC, entry["name"]
        ):  # created, but its configs are not the principal's to see
            entry["topic_config_error_code"] = ErrorCode.topic_authorization_failed
            entry["num_partitions"] = entry["replication_factor"] = -1
            entry["configs"] = []
    return _create_topics_response(request, entries)


def _created_result(entry: Any) -> CreatableTopicResult:
    """A topic's answer from the controller, as this module writes one."""
    return {
        "name": entry.name,
        "topic_id": getattr(entry, "topic_id", None) or _zero_uuid(),
        "error_code": ErrorCode(entry.error_code),
        "error_message": entry.error_message,
        "topic_config_error_code": int(getattr(entry, "topic_config_error_code", 0)),
        "num_partitions": int(getattr(entry, "num_partitions", -1)),
        "replication_factor": int(getattr(entry, "replication_factor", -1)),
        "configs": list(getattr(entry, "configs", None) or ()),
    }


def _topic_result(name: str, code: ErrorCode, message: str | None) -> CreatableTopicResult:
    return {
        "name": name,
        "topic_id": _zero_uuid(),
        "error_code": code,
        "error_message": message,
        "topic_config_error_code": 0,
        "num_partitions": -1,
        "replication_factor": -1,
        "configs": [],
    }


def _create_topics_response(request: Request, entries: Sequence[CreatableTopicResult]) -> Any:
    response: CreateTopicsResponse = {"throttle_time": 0, "topics": list(entries)}
    return build_response(ApiKey.CREATE_TOPICS, request.api_version, response)


async def controller_create_topics(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _create_topics_here, _create_topics_error)


def _create_topics_error(request: Request, code: ErrorCode, message: str) -> Any:
    return _create_topics_response(
        request, [_topic_result(topic.name, code, message) for topic in request.body.topics]
    )


async def _create_topics_here(context: AdminContext, request: Request) -> Any:
    body = request.body
    new_topics = []
    for topic in body.topics:
        assignments = {a.partition_index: tuple(a.broker_ids) for a in topic.assignments}
        configs = {c.name: c.value for c in topic.configs}
        new_topics.append(
            controller.NewTopic(
                topic.name,
                int(topic.num_partitions),
                int(topic.replication_factor),
                assignments,
                configs,
            )
        )
    validate_only = bool(getattr(body, "validate_only", False))
    permits: list[int | None] = [None] * len(new_topics)
    if counted(context, request) and not validate_only:
        permits = [r.num_partitions if r.error_code == ErrorCode.none else None for r in
                   _preview_creation(context, new_topics)]  # fmt: skip

    async def decide(indexes: list[int]) -> list[controller.TopicResult]:
        chosen = [new_topics[i] for i in indexes]
        return await create_here(context, chosen, validate_only=validate_only)

    def refused(index: int) -> controller.TopicResult:
        return controller.TopicResult(new_topics[index].name, THROTTLED_CODE, THROTTLED)

    results, wait_ms = await paced(context, request, permits, decide, refused)
    entries: list[CreatableTopicResult] = []
    for topic, result in zip(new_topics, results, strict=True):
        ok = result.error_code == ErrorCode.none
        entries.append(
            {
                "name": result.name,
                "topic_id": result.topic_id or _zero_uuid(),
                "error_code": result.error_code,
                "error_message": result.error_message,
                "topic_config_error_code": 0,
                "num_partitions": result.num_partitions,
                "replication_factor": result.replication_factor,
                "configs": _created_configs(context, topic) if ok else [],
            }
        )
    return with_throttle_time(_create_topics_response(request, entries), wait_ms)


def _preview_creation(
    context: AdminContext, topics: list[controller.NewTopic]
) -> list[controller.TopicResult]:
    """What creating `topics` would answer now (no placement kept, nothing written)."""
    config, image = context.config(), context.metadata.image
    _records, results = controller.create_topics(
        image,
        topics,
        defaults=controller.TopicDefaults(config.num_partitions, config.default_replication_factor),
        brokers=live_brokers(image),
        rng=Random(0),
        validate_only=True,
        validate_configs=_check_configs,
    )
    return results


def _created_configs(
    context: AdminContext, topic: controller.NewTopic
) -> list[CreatableTopicConfig]:
    """A created topic's every config, as CreateTopics v5+ reports them."""
    return [
        {
            "name": entry["name"],
            "value": entry["value"],
            "read_only": entry["read_only"],
            "config_source": entry["config_source"],
            "is_sensitive": entry["is_sensitive"],
        }
        for entry in topic_config_entries(context.config(), dict(topic.configs))
    ]


def _zero_uuid() -> uuid.UUID:
    return uuid.UUID(int=0)


DeleteTarget = str | uuid.UUID
"""A topic a DeleteTopics names: by its name, or (v6+, without a name) by its id."""
DELETION_DISABLED = "delete.topic.enable is false"


async def handle_delete_topics(context: AdminContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    if not access.enforced or access.allows_cluster(AclOperation.DELETE):
        return await at_controller(context, request, _delete_topics_here, _delete_topics_error)
    targets = _delete_targets(request)
    if not context.config().delete_topic_enable:  # before any ACL, as in Kafka
        return _delete_response(request, [_deletion_disabled(t) for t in targets])
    image = context.metadata.image
    refusals = [_delete_refusal(access, image, target) for target in targets]

    async def allowed(passed_on: Request) -> list[controller.TopicResult]:
        body = await at_controller(context, passed_on, _delete_topics_here, _delete_topics_error)
        return [
            controller.TopicResult(
                r.name or "",
                ErrorCode(r.error_code),
                getattr(r, "error_message", None),  # v5+
                getattr(r, "topic_id", None),  # v6+
            )
            for r in body.responses
        ]

    field = "topics" if request.api_version >= 6 else "topic_names"
    return _delete_response(request, await answer_each(request, field, refusals, allowed))


def _delete_refusal(
    access: Access, image: MetadataImage, target: DeleteTarget
) -> controller.TopicResult | None:
    """Why the principal may not delete `target` (None: it may), telling of its
    existence only what DESCRIBE on it allows."""
    if isinstance(target, uuid.UUID):
        by_id = image.topics_by_id.get(target)
        if by_id is None:  # ids are no secret
            return _target_result(target, ErrorCode.unknown_topic_id, f"no topic has id {target}")
        if access.allows(AclOperation.DELETE, TOPIC, by_id.name):
            return None
        shown = by_id.name if access.allows(AclOperation.DESCRIBE, TOPIC, by_id.name) else ""
        return controller.TopicResult(
            shown, ErrorCode.topic_authorization_failed, TOPIC_DENIED, target
        )
    if not access.allows(AclOperation.DESCRIBE, TOPIC, target):
        return _target_result(target, ErrorCode.topic_authorization_failed, TOPIC_DENIED)
    if access.allows(AclOperation.DELETE, TOPIC, target):
        return None
    if target not in image.topics_by_name:
        return _target_result(
            target, ErrorCode.unknown_topic_or_partition, f"topic {target!r} does not exist"
        )
    return _target_result(target, ErrorCode.topic_authorization_failed, TOPIC_DENIED)


async def controller_delete_topics(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _delete_topics_here, _delete_topics_error)


def _delete_topics_error(request: Request, code: ErrorCode, message: str) -> Any:
    return _delete_response(
        request, [_target_result(t, code, message) for t in _delete_targets(request)]
    )


def _delete_targets(request: Request) -> list[DeleteTarget]:
    """The topics the request names, in its order."""
    body = request.body
    if request.api_version >= 6:
        return [t.topic_id if t.name is None else str(t.name) for t in body.topics]
    return [str(name) for name in body.topic_names]


def _target_result(target: DeleteTarget, code: ErrorCode, message: str) -> controller.TopicResult:
    if isinstance(target, uuid.UUID):
        return controller.TopicResult("", code, message, topic_id=target)
    return controller.TopicResult(target, code, message)


def _deletion_disabled(target: DeleteTarget) -> controller.TopicResult:
    return _target_result(target, ErrorCode.topic_deletion_disabled, DELETION_DISABLED)


def _delete_response(request: Request, results: Sequence[controller.TopicResult]) -> Any:
    nullable = request.api_version >= 6  # a result by id without a name shown: null
    entries: list[DeletableTopicResult] = [
        {
            "name": r.name if r.name or not nullable else None,
            "topic_id": r.topic_id or _zero_uuid(),
            "error_code": r.error_code,
            "error_message": r.error_message,
        }
        for r in results
    ]
    response: DeleteTopicsResponse = {"throttle_time": 0, "responses": entries}
    return build_response(ApiKey.DELETE_TOPICS, request.api_version, response)


async def _delete_topics_here(context: AdminContext, request: Request) -> Any:
    """The controller's answer, one result per topic in the request's order."""
    targets = _delete_targets(request)
    if not context.config().delete_topic_enable:
        return _delete_response(request, [_deletion_disabled(t) for t in targets])
    image = context.metadata.image
    found = [
        image.topics_by_name.get(t) if isinstance(t, str) else image.topics_by_id.get(t)
        for t in targets
    ]
    permits = [None if topic is None else len(topic.partitions) for topic in found]

    async def decide(indexes: list[int]) -> list[controller.TopicResult]:
        chosen = [targets[i] for i in indexes]
        names = [t for t in chosen if isinstance(t, str)]
        ids = [t for t in chosen if isinstance(t, uuid.UUID)]
        decided = await context.active_controller().decide(
            lambda image: controller.delete_topics(image, names, ids)
        )
        by_name, by_id = iter(decided[: len(names)]), iter(decided[len(names) :])
        return [next(by_name) if isinstance(t, str) else next(by_id) for t in chosen]

    def refused(index: int) -> controller.TopicResult:
        target = targets[index]
        if isinstance(target, str):
            return controller.TopicResult(target, THROTTLED_CODE, THROTTLED)
        return controller.TopicResult("", THROTTLED_CODE, THROTTLED, topic_id=target)

    results, wait_ms = await paced(context, request, permits, decide, refused)
    for result in results:
        if result.error_code == ErrorCode.none:
            log.info("[node %d] deleted topic %s", context.node_id, result.name)
    return with_throttle_time(_delete_response(request, results), wait_ms)


async def handle_create_partitions(context: AdminContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    names = Counter(t.name for t in request.body.topics)

    def refusal(name: str) -> CreatePartitionsTopicResult | None:
        """A name asked twice first (as Kafka's controller), then ALTER on the topic."""
        if names[name] > 1:
            code, message = ErrorCode.invalid_request, "Duplicate topic name."
        elif not access.allows(AclOperation.ALTER, TOPIC, name):
            code, message = ErrorCode.topic_authorization_failed, None
        else:
            return None
        return {"name": name, "error_code": code, "error_message": message}

    refusals = [refusal(t.name) for t in request.body.topics]
    if not any(refusals):
        return await at_controller(
            context, request, _create_partitions_here, _create_partitions_error
        )

    async def allowed(passed_on: Request) -> list[CreatePartitionsTopicResult]:
        body = await at_controller(
            context, passed_on, _create_partitions_here, _create_partitions_error
        )
        return [
            {
                "name": r.name,
                "error_code": ErrorCode(r.error_code),
                "error_message": r.error_message,
            }
            for r in body.results
        ]

    entries = await answer_each(request, "topics", refusals, allowed)
    return _create_partitions_response(request, entries)


async def controller_create_partitions(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(
        context, request, _create_partitions_here, _create_partitions_error
    )


def _create_partitions_error(request: Request, code: ErrorCode, message: str) -> Any:
    entries: list[CreatePartitionsTopicResult] = [
        {"name": t.name, "error_code": code, "error_message": message} for t in request.body.topics
    ]
    return _create_partitions_response(request, entries)


def _create_partitions_response(
    request: Request, entries: list[CreatePartitionsTopicResult]
) -> Any:
    response: CreatePartitionsResponse = {"throttle_time": 0, "results": entries}
    return build_response(ApiKey.CREATE_PARTITIONS, request.api_version, response)


async def _create_partitions_here(context: AdminContext, request: Request) -> Any:
    body = request.body
    increases = [
        controller.PartitionIncrease(
            t.name,
            int(t.count),
            None if t.assignments is None else [tuple(a.broker_ids) for a in t.assignments],
        )
        for t in body.topics
    ]
    image = context.metadata.image
    now = [image.topics_by_name.get(t.name) for t in increases]
    permits = [
        None if topic is None or body.validate_only or t.total <= len(topic.partitions)
        else t.total - len(topic.partitions)
        for t, topic in zip(increases, now, strict=True)
    ]  # fmt: skip

    async def decide(indexes: list[int]) -> list[controller.TopicResult]:
        chosen = [increases[i] for i in indexes]
        return await context.active_controller().decide(
            lambda image: controller.create_partitions(
                image,
                chosen,
                brokers=live_brokers(image),
                rng=context.rng,
                validate_only=bool(body.validate_only),
            )
        )

    def refused(index: int) -> controller.TopicResult:
        return controller.TopicResult(increases[index].name, THROTTLED_CODE, THROTTLED)

    results, wait_ms = await paced(context, request, permits, decide, refused)
    entries: list[CreatePartitionsTopicResult] = [
        {"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
        for r in results
    ]
    return with_throttle_time(_create_partitions_response(request, entries), wait_ms)
