"""OffsetCommit, OffsetFetch and OffsetDelete: consumer progress in `__consumer_offsets`.

A commit is acknowledged once its record is durable (fsynced with the default
`flush.messages=1`) and only then visible to OffsetFetch; if the write fails, the commit
is discarded and the client gets the coordinator error. Offsets of topics or
partitions that do not exist are refused with UNKNOWN_TOPIC_OR_PARTITION.

OffsetFetch v7+ with require_stable answers UNSTABLE_OFFSET_COMMIT for a partition whose
offset a transaction has written and not yet ended (TxnOffsetCommit, handlers/
txn_offsets.py); the client retries until the marker. Without it, and before v7, the
committed offset is answered, as if no transaction were open.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.state import TopicPartition
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.responses.groups import (
    FetchedGroup,
    FetchedOffset,
    FetchedTopic,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    TopicPartitionErrors,
)
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.ports import GroupContext


def _exists(image: MetadataImage, topic: str, partition: int) -> bool:
    found = image.topics_by_name.get(topic)
    return found is not None and partition in found.partitions


def requested_offsets(
    image: MetadataImage, topics: Any
) -> tuple[list[OffsetToCommit], dict[tuple[str, int], ErrorCode]]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to commit, and
    UNKNOWN_TOPIC_OR_PARTITION for those of partitions the metadata does not have."""
    wanted: list[OffsetToCommit] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic in topics:
        for p in topic.partitions:
            key = (topic.name, int(p.partition_index))
            if not _exists(image, *key):
                errors[key] = ErrorCode.unknown_topic_or_partition
                continue
            wanted.append(
                OffsetToCommit(
                    topic.name,
                    key[1],
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
            )
    return wanted, errors


async def handle_offset_commit(context: GroupContext, request: Request) -> Any:
    body = request.body
    image = context.metadata.image
    retention = getattr(body, "retention_time", None)
    wanted, errors = requested_offsets(image, body.topics)
    commit = CommitRequest(
        group_id=body.group_id,
        generation_id=int(body.generation_id_or_member_epoch),
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        retention_ms=ms(retention) if retention is not None else -1,
        offsets=tuple(wanted),
    )
    try:
        await context.groups.coordinate(commit.group_id)
        results, out = context.groups.commit_offsets(commit)
        try:
            await context.groups.apply(out)
        except CoordinatorUnavailable as exc:
            # GroupMetadataManager.storeOffsets: a record too large is an invalid commit size.
            failed = exc.error_code
            if failed is ErrorCode.unknown_server_error:
                failed = ErrorCode.invalid_commit_offset_size
            results = [failed if r is ErrorCode.none else r for r in results]
    except CoordinatorUnavailable as exc:
        results = [exc.error_code] * len(wanted)
    for each, error in zip(wanted, results, strict=True):
        errors[(each.topic, each.partition)] = error
    topics: list[TopicPartitionErrors] = [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": errors[(topic.name, int(p.partition_index))],
                }
                for p in topic.partitions
            ],
        }
        for topic in body.topics
    ]
    response: OffsetCommitResponse = {"throttle_time": 0, "topics": topics}
    return build_response(ApiKey.OFFSET_COMMIT, request.api_version, response)


async def _fetch_group(
    context: GroupContext, group_id: str, topics: Any, require_stable: bool
) -> tuple[ErrorCode, list[FetchedTopic]]:
    partitions = (
        None
        if topics is None
        else [TopicPartition(t.name, int(i)) for t in topics for i in t.partition_indexes]
    )
    unstable: frozenset[TopicPartition] = frozenset()
    try:
        await context.groups.coordinate(group_id)
        if require_stable:
            stable, out = context.groups.stable_offsets(group_id, partitions)
            await context.groups.apply(out)
            found, unstable = stable.offsets, stable.unstable
        else:
            found = context.groups.committed_offsets(group_id, partitions)
    except CoordinatorUnavailable as exc:
        wanted = [] if topics is None else topics
        return exc.error_code, [
            {
                "name": t.name,
                "partitions": [
                    _partition(int(i), None, exc.error_code) for i in t.partition_indexes
                ],
            }
            for t in wanted
        ]
    by_topic: dict[str, list[FetchedOffset]] = {}
    for tp, value in found:
        error = ErrorCode.unstable_offset_commit if tp in unstable else ErrorCode.none
        by_topic.setdefault(tp.topic, []).append(_partition(tp.partition, value, error))
    return ErrorCode.none, [{"name": name, "partitions": ps} for name, ps in by_topic.items()]


def _partition(index: int, value: Any, error: ErrorCode) -> FetchedOffset:
    return {
        "partition_index": index,
        "committed_offset": value.offset if value is not None else -1,
        "committed_leader_epoch": value.leader_epoch if value is not None else -1,
        "metadata": value.metadata if value is not None else "",
        "error_code": error,
    }


async def handle_offset_fetch(context: GroupContext, request: Request) -> Any:
    body = request.body
    # v8+ answer per group in `groups`, v1-v7 one group at the top level; the codec keeps
    # what the asked version has.
    data: OffsetFetchResponse = {
        "throttle_time": 0,
        "topics": [],
        "error_code": ErrorCode.none,
        "groups": [],
    }
    if request.api_version >= 8:
        groups: list[FetchedGroup] = []
        for group in body.groups:
            error, topics = await _fetch_group(
                context, group.group_id, group.topics, body.require_stable
            )
            groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
        data["groups"] = groups
    else:
        data["error_code"], data["topics"] = await _fetch_group(
            context, body.group_id, body.topics, getattr(body, "require_stable", False)
        )
    return build_response(ApiKey.OFFSET_FETCH, request.api_version, data)


async def handle_offset_delete(context: GroupContext, request: Request) -> Any:
    body = request.body
    wanted = [
        TopicPartition(t.name, int(p.partition_index)) for t in body.topics for p in t.partitions
    ]
    errors: dict[TopicPartition, ErrorCode] = {}
    try:
        await context.groups.coordinate(body.group_id)
        error, results, out = context.groups.delete_offsets(body.group_id, wanted)
        errors.update(zip(wanted, results, strict=False))
        await context.groups.apply(out)
    except CoordinatorUnavailable as exc:
        error = exc.error_code
    topics: list[TopicPartitionErrors] = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": errors.get(
                        TopicPartition(t.name, int(p.partition_index)), ErrorCode.none
                    ),
                }
                for p in t.partitions
            ],
        }
        for t in body.topics
    ]
    response: OffsetDeleteResponse = {"throttle_time": 0, "error_code": error, "topics": topics}
    return build_response(ApiKey.OFFSET_DELETE, request.api_version, response)
