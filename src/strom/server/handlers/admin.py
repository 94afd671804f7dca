"""CreateTopics, DeleteTopics and CreatePartitions: controller decisions, then commit."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.config import ConfigError, validate_topic_configs
from strom.metadata import controller
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.server.handlers.configs import topic_config_entries

if TYPE_CHECKING:
    from strom.server.broker import Broker

log = logging.getLogger(__name__)


def _check_configs(configs: Any) -> None:
    try:
        validate_topic_configs(configs)
    except ConfigError as exc:
        raise ValueError(str(exc)) from None


async def create_topics(
    broker: Broker, topics: list[controller.NewTopic], *, validate_only: bool = False
) -> list[controller.TopicResult]:
    """Decide against the current image, commit, and log what was created; used by
    CreateTopics and by Metadata's auto-creation."""
    config = broker.config
    async with broker.metadata_lock:
        records, results = controller.create_topics(
            broker.image,
            topics,
            defaults=controller.TopicDefaults(
                config.num_partitions, config.default_replication_factor
            ),
            brokers=sorted(broker.image.brokers),
            rng=broker.rng,
            validate_only=validate_only,
            validate_configs=_check_configs,
        )
        if records:
            await broker.commit(records)
    if not validate_only:
        for result in results:
            if result.error_code == ErrorCode.none:
                log.info(
                    "[node %d] created topic %s (%d partitions, replication factor %d)",
                    broker.node_id,
                    result.name,
                    result.num_partitions,
                    result.replication_factor,
                )
    return results


async def handle_create_topics(broker: Broker, request: Request) -> Any:
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
    results = await create_topics(broker, new_topics, validate_only=validate_only)
    entries = []
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
                "configs": topic_config_entries(broker, dict(topic.configs)) if ok else [],
            }
        )
    return build_response(
        ApiKey.CREATE_TOPICS, request.api_version, {"throttle_time": 0, "topics": entries}
    )


def _zero_uuid() -> uuid.UUID:
    return uuid.UUID(int=0)


async def handle_delete_topics(broker: Broker, request: Request) -> Any:
    body = request.body
    version = request.api_version
    if version >= 6:
        names = [t.name for t in body.topics if t.name is not None]
        ids = [t.topic_id for t in body.topics if t.name is None]
    else:
        names = list(body.topic_names)
        ids = []
    if not broker.config.delete_topic_enable:
        results = [
            controller.TopicResult(
                name, ErrorCode.topic_deletion_disabled, "delete.topic.enable is false"
            )
            for name in names
        ]
    else:
        async with broker.metadata_lock:
            records, results = controller.delete_topics(broker.image, names, ids)
            if records:
                await broker.commit(records)
        for result in results:
            if result.error_code == ErrorCode.none:
                log.info("[node %d] deleted topic %s", broker.node_id, result.name)
    entries = [
        {
            "name": r.name,
            "topic_id": r.topic_id or _zero_uuid(),
            "error_code": r.error_code,
            "error_message": r.error_message,
        }
        for r in results
    ]
    return build_response(ApiKey.DELETE_TOPICS, version, {"throttle_time": 0, "responses": entries})


async def handle_create_partitions(broker: Broker, request: Request) -> Any:
    body = request.body
    increases = [
        controller.PartitionIncrease(
            t.name,
            int(t.count),
            None if t.assignments is None else [tuple(a.broker_ids) for a in t.assignments],
        )
        for t in body.topics
    ]
    async with broker.metadata_lock:
        records, results = controller.create_partitions(
            broker.image,
            increases,
            brokers=sorted(broker.image.brokers),
            rng=broker.rng,
            validate_only=bool(body.validate_only),
        )
        if records:
            await broker.commit(records)
    entries = [
        {"name": r.name, "error_code": r.error_code, "error_message": r.error_message}
        for r in results
    ]
    return build_response(
        ApiKey.CREATE_PARTITIONS, request.api_version, {"throttle_time": 0, "results": entries}
    )
