"""CreateTopics, DeleteTopics and CreatePartitions: decided and committed by the active
controller, wherever a client sent them (see forward.py)."""

from __future__ import annotations

import logging
import uuid
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
from strom.server.handlers.configs import topic_config_entries
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext

log = logging.getLogger(__name__)

CREATE_TOPICS_VERSION = 7


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
    return await at_controller(context, request, _create_topics_here, _create_topics_error)


async def controller_create_topics(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _create_topics_here, _create_topics_error)


def _create_topics_error(request: Request, code: ErrorCode, message: str) -> Any:
    entries: list[CreatableTopicResult] = [
        {
            "name": topic.name,
            "topic_id": _zero_uuid(),
            "error_code": code,
            "error_message": message,
            "topic_config_error_code": 0,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        for topic in request.body.topics
    ]
    response: CreateTopicsResponse = {"throttle_time": 0, "topics": entries}
    return build_response(ApiKey.CREATE_TOPICS, request.api_version, response)


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
    results = await create_here(context, new_topics, validate_only=validate_only)
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
    response: CreateTopicsResponse = {"throttle_time": 0, "topics": entries}
    return build_response(ApiKey.CREATE_TOPICS, request.api_version, response)


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


async def handle_delete_topics(context: AdminContext, request: Request) -> Any:
    return await at_controller(context, request, _delete_topics_here, _delete_topics_error)


async def controller_delete_topics(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _delete_topics_here, _delete_topics_error)


def _delete_topics_error(request: Request, code: ErrorCode, message: str) -> Any:
    names, ids = _delete_targets(request)
    results = [controller.TopicResult(name, code, message) for name in names]
    results += [controller.TopicResult("", code, message, topic_id) for topic_id in ids]
    return _delete_response(request, results)


def _delete_targets(request: Request) -> tuple[list[str], list[uuid.UUID]]:
    body = request.body
    if request.api_version >= 6:
        return (
            [t.name for t in body.topics if t.name is not None],
            [t.topic_id for t in body.topics if t.name is None],
        )
    return list(body.topic_names), []


def _delete_response(request: Request, results: list[controller.TopicResult]) -> Any:
    entries: list[DeletableTopicResult] = [
        {
            "name": r.name,
            "topic_id": r.topic_id or _zero_uuid(),
            "error_code": r.error_code,
            "error_message": r.error_message,
        }
        for r in results
    ]
    response: DeleteTopicsResponse = {"throttle_time": 0, "responses": entries}
    return build_response(ApiKey.DELETE_TOPICS, request.api_version, response)


async def _delete_topics_here(context: AdminContext, request: Request) -> Any:
    names, ids = _delete_targets(request)
    if not context.config().delete_topic_enable:
        results = [
            controller.TopicResult(
                name, ErrorCode.topic_deletion_disabled, "delete.topic.enable is false"
            )
            for name in names
        ]
    else:
        results = await context.active_controller().decide(
            lambda image: controller.delete_topics(image, names, ids)
        )
        for result in results:
            if result.error_code == ErrorCode.none:
                log.info("[node %d] deleted topic %s", context.node_id, result.name)
    return _delete_response(request, results)


async def handle_create_partitions(context: AdminContext, request: Request) -> Any:
    return await at_controller(context, request, _create_partitions_here, _create_partitions_error)


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
    results = await context.active_controller().decide(
        lambda image: controller.create_partitions(
            image,
            increases,
            brokers=live_brokers(image),
            rng=context.rng,
            validate_only=bool(body.validate_only),
        )
    )
    entries: list[CreatePartitionsTopicResult] = [
        {"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
        for r in results
    ]
    return _create_partitions_response(request, entries)
