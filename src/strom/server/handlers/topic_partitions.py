"""DescribeTopicPartitions (KIP-966): topics and their partitions a page at a time, as
Kafka 4.0's `kafka-topics.sh --describe` and admin clients ask for them on clusters with
many partitions.

The topics asked for (every topic when the request names none), sorted by name, are
answered from the cursor on (its topic, from its partition) until the page holds
`response_partition_limit` partitions (at most PARTITION_LIMIT, Kafka's default
`max.request.partition.size.limit`); `next_cursor` then names where the next page
starts, or is null when nothing is left. A topic asked for that does not exist is
answered with UNKNOWN_TOPIC_OR_PARTITION; a cursor whose topic is not among the topics
asked for makes every topic INVALID_REQUEST, as in Kafka. strom has no eligible leader
replicas (KIP-966's ELR), so those lists are empty, and no authorizer, so every topic
operation is authorized (`topic_authorized_operations`, as Kafka without an authorizer).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.image import MetadataImage, TopicImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.cluster import (
    DescribeTopicPartitionsResponse,
    TopicPartitionsCursor,
    TopicPartitionsTopic,
)
from strom.security.operations import (
    OMITTED,
    AclOperation,
    AclResourceType,
    authorized_operations,
    operations_field,
)
from strom.server.handlers.access import Access
from strom.server.handlers.cluster import fenced_brokers, partition_entry
from strom.server.handlers.ports import ClusterContext

PARTITION_LIMIT = 2000
TOPIC = AclResourceType.TOPIC
# What Kafka answers for a topic when it has no authorizer: every topic operation.
ALL_TOPIC_OPERATIONS = authorized_operations(TOPIC, asked=True)


@dataclass(frozen=True, slots=True)
class Slice:
    """Part of one topic in a page: partitions `start` up to (not including) `stop`;
    `partitions` is None for a topic that does not exist."""

    name: str
    start: int
    stop: int
    partitions: int | None


def page(
    topics: Sequence[tuple[str, int | None]],
    cursor: tuple[str, int] | None,
    limit: int,
) -> tuple[list[Slice], tuple[str, int] | None]:
    """Which partitions of `topics` ((name, partition count or None), sorted by name)
    one page holds from `cursor`, at most `limit`, and the cursor of the next page."""
    slices: list[Slice] = []
    room = limit
    for name, count in topics:
        if cursor is not None and name < cursor[0]:
            continue
        if count is None:
            slices.append(Slice(name, 0, 0, None))
            continue
        start = cursor[1] if cursor is not None and name == cursor[0] else 0
        start = min(max(start, 0), count)
        if room <= 0 and start < count:
            return slices, (name, start)
        stop = min(count, start + room)
        slices.append(Slice(name, start, stop, count))
        room -= stop - start
        if stop < count:
            return slices, (name, stop)
    return slices, None


async def handle_describe_topic_partitions(context: ClusterContext, request: Request) -> Any:
    body = request.body
    image = context.metadata.image
    asked = sorted({str(topic.name) for topic in body.topics})
    cursor = (
        None
        if body.cursor is None
        else (str(body.cursor.topic_name), int(body.cursor.partition_index))
    )
    if asked and cursor is not None and cursor[0] not in asked:
        topics = [_missing(name, ErrorCode.invalid_request, OMITTED) for name in asked]
        return _answer(request, topics, None)
    access = Access.of(context.admin.authorizer(), request)
    names = asked or sorted(image.topics_by_name)
    describable = [n for n in names if access.allows(AclOperation.DESCRIBE, TOPIC, n)]
    counts = [(name, _count(image, name)) for name in describable]
    slices, next_cursor = page(
        counts, cursor, min(int(body.response_partition_limit), PARTITION_LIMIT)
    )
    entries = [_entry(image, s, access) for s in slices]
    if asked:  # named, so told, after the page; never looked up
        shown = set(describable)
        entries += [
            _missing(name, ErrorCode.topic_authorization_failed, OMITTED)
            for name in asked
            if name not in shown and (cursor is None or name >= cursor[0])
        ]
    following: TopicPartitionsCursor | None = None
    if next_cursor is not None:
        following = {"topic_name": next_cursor[0], "partition_index": next_cursor[1]}
    return _answer(request, entries, following)


def _count(image: MetadataImage, name: str) -> int | None:
    topic = image.topics_by_name.get(name)
    return None if topic is None else len(topic.partitions)


def _entry(image: MetadataImage, part: Slice, access: Access) -> TopicPartitionsTopic:
    operations = operations_field(access.operations(TOPIC, part.name))
    topic: TopicImage | None = image.topics_by_name.get(part.name)
    if topic is None or part.partitions is None:
        return _missing(part.name, ErrorCode.unknown_topic_or_partition, operations)
    fenced = fenced_brokers(image)
    chosen = sorted(topic.partitions.values(), key=lambda p: p.partition)[part.start : part.stop]
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": topic.is_internal,
        "partitions": [
            {**partition_entry(p, fenced), "eligible_leader_replicas": (), "last_known_elr": ()}
            for p in chosen
        ],
        "topic_authorized_operations": operations,
    }


def _missing(name: str, code: ErrorCode, operations: int) -> TopicPartitionsTopic:
    return {
        "error_code": code,
        "name": name,
        "topic_id": uuid.UUID(int=0),
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": operations,
    }


def _answer(
    request: Request, topics: list[TopicPartitionsTopic], cursor: TopicPartitionsCursor | None
) -> Any:
    response: DescribeTopicPartitionsResponse = {
        "throttle_time": 0,
        "topics": topics,
        "next_cursor": cursor,
    }
    return build_response(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request.api_version, response)
