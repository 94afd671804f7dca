"""The admin handlers without a socket (test_admin_handlers.py): a cluster on the in-memory
metadata store with live brokers to place replicas on, the requests, and readers of the
answers."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, cluster
from server_harness import request

from strom.config import ConfigSource
from strom.metadata.records import ConfigResourceType, RegisterBrokerRecord
from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.broker import Broker
from strom.server.handlers import admin

TOPIC = "orders"
SET, DELETE = 0, 1


async def with_brokers(node: Broker, *broker_ids: int) -> None:
    """Register `broker_ids` as live (unfenced) brokers, where new replicas may go."""
    assert node.controller is not None
    await node.controller.commit(
        [
            RegisterBrokerRecord(b, uuid.UUID(int=b), "localhost", 9000 + b, None, fenced=False)
            for b in broker_ids
        ]
    )


async def controller_with_brokers(
    tmp_path: Path, *node_ids: int, log: MemoryLog | None = None, config: Sequence[str] = ()
) -> list[Broker]:
    """Nodes `node_ids` on one memory log (`log`, or a new one), the first active, with
    live brokers 1, 2, 3; `config` holds more `key=value` settings of every node."""
    nodes = await cluster(log or MemoryLog(), tmp_path, *node_ids, config=config)
    await with_brokers(nodes[0], 1, 2, 3)
    return nodes


# --- requests -------------------------------------------------------------------------


def create_topics(
    *topics: tuple[str, int, int, Mapping[str, str]], validate_only: bool = False
) -> Request:
    """CreateTopics v7 for (name, partitions, replication factor, configs) each."""
    return request(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in topic_configs.items()],
                }
                for name, partitions, factor, topic_configs in topics
            ],
            "timeout": 30_000,
            "validate_only": validate_only,
        },
    )


def delete_topics(*names: str) -> Request:
    """DeleteTopics v4, which names topics only (and has no error messages)."""
    return request(ApiKey.DELETE_TOPICS, 4, {"topic_names": list(names), "timeout": 30_000})


def delete_named(*names: str) -> Request:
    """DeleteTopics v6 by name."""
    return request(
        ApiKey.DELETE_TOPICS,
        6,
        {"topics": [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names], "timeout": 30_000},
    )


def delete_topic_ids(*topic_ids: uuid.UUID) -> Request:
    return request(
        ApiKey.DELETE_TOPICS,
        6,
        {"topics": [{"name": None, "topic_id": t} for t in topic_ids], "timeout": 30_000},
    )


def create_partitions(count: int, *, validate_only: bool = False) -> Request:
    return request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": TOPIC, "count": count, "assignments": None}],
            "timeout": 30_000,
            "validate_only": validate_only,
        },
    )


def describe_configs(
    kind: ConfigResourceType, name: str, keys: Sequence[str] | None = None
) -> Request:
    return request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {
                    "resource_type": int(kind),
                    "resource_name": name,
                    "configuration_keys": None if keys is None else list(keys),
                }
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )


def incremental_alter(
    kind: ConfigResourceType, name: str, *changes: tuple[str, int, str | None]
) -> Request:
    """IncrementalAlterConfigs v1 of one resource: (key, operation, value) each."""
    return request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        {
            "resources": [
                {
                    "resource_type": int(kind),
                    "resource_name": name,
                    "configs": [
                        {"name": key, "config_operation": op, "value": value}
                        for key, op, value in changes
                    ],
                }
            ],
            "validate_only": False,
        },
    )


def alter_configs(kind: ConfigResourceType, name: str, values: Mapping[str, str]) -> Request:
    return request(
        ApiKey.ALTER_CONFIGS,
        2,
        {
            "resources": [
                {
                    "resource_type": int(kind),
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in values.items()],
                }
            ],
            "validate_only": False,
        },
    )


def reassign(partition: int, replicas: Sequence[int] | None) -> Request:
    return request(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        {
            "timeout": 30_000,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "replicas": None if replicas is None else list(replicas),
                        }
                    ],
                }
            ],
        },
    )


def list_reassignments(partitions: Sequence[int] | None = None) -> Request:
    """ListPartitionReassignments of every partition, or of TOPIC's `partitions`."""
    topics = None if partitions is None else [{"name": TOPIC, "partition_indexes": partitions}]
    return request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30_000, "topics": topics})


def entries(answer: Any) -> dict[str, tuple[str | None, ConfigSource]]:
    """DescribeConfigs' one resource's configs: name -> (value, source)."""
    (result,) = answer.results
    assert result.error_code == ErrorCode.none, result.error_message
    return {e.name: (e.value, ConfigSource(e.config_source)) for e in result.configs}


async def created(node: Broker, partitions: int = 1, factor: int = 2) -> uuid.UUID:
    """TOPIC, created through the handler at `node`; its topic id."""
    answer = await answered(
        admin.handle_create_topics,
        admin_context(node),
        create_topics((TOPIC, partitions, factor, {})),
    )
    assert answer.topics[0].error_code == ErrorCode.none
    return uuid.UUID(str(answer.topics[0].topic_id))


def codes(answer: Any) -> set[ErrorCode]:
    """Every error code in an admin answer, top-level and per topic, partition or resource."""
    codes: set[ErrorCode] = set()
    if hasattr(answer, "error_code"):
        codes.add(ErrorCode(answer.error_code))
    for name in ("topics", "responses", "results"):
        for entry in getattr(answer, name, ()):
            if hasattr(entry, "error_code"):
                codes.add(ErrorCode(entry.error_code))
            codes.update(ErrorCode(p.error_code) for p in getattr(entry, "partitions", ()))
    return codes
