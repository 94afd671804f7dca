"""OffsetCommit, OffsetFetch and OffsetDelete: consumer progress in `__consumer_offsets`.

A commit is acknowledged once its record is durable (fsynced with the default
`flush.messages=1`) and only then visible to OffsetFetch; if the write fails, the commit
is discarded and the client gets the coordinator error. Offsets of topics or
partitions that do not exist are refused with UNKNOWN_TOPIC_OR_PARTITION.

OffsetFetch v7+ with require_stable answers UNSTABLE_OFFSET_COMMIT for a partition whose
offset a transaction has written and not yet ended (TxnOffsetCommit, handlers/
txn_offsets.py); the client retries until the marker. Without it, and before v7, the
committed offset is answered, as if no transaction were open.

With an authorizer, as Kafka's KafkaApis checks (before the coordinator is asked):

- OffsetCommit needs READ on the group (else GROUP_AUTHORIZATION_FAILED on every
  partition), then READ on each topic (else TOPIC_AUTHORIZATION_FAILED on its partitions,
  whether the topic exists or not);
- OffsetFetch needs DESCRIBE on each group (else the group's GROUP_AUTHORIZATION_FAILED,
  with no topics), then DESCRIBE on each topic: a named topic the principal may not
  describe is answered TOPIC_AUTHORIZATION_FAILED per partition after the others, and
  one of an all-topics fetch is left out;
- OffsetDelete needs DELETE on the group (else the top-level GROUP_AUTHORIZATION_FAILED)
  and READ on each topic.
"""

from __future__ import annotations

from collections.abc import Callable
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
from strom.security.operations import AclOperation, AclResourceType
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.handlers.ports import GroupContext

_READ, _DESCRIBE, _DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
_GROUP, _TOPIC = AclResourceType.GROUP, AclResourceType.TOPIC


def _exists(image: MetadataImage, topic: str, partition: int) -> bool:
    found = image.topics_by_name.get(topic)
    return found is not None and partition in found.partitions


def allowed_topics(access: Access, operation: AclOperation) -> Callable[[str], bool]:
    """Whether the principal may do `operation` on a topic, asked once per name."""
    answers: dict[str, bool] = {}

    def allowed(name: str) -> bool:
        answer = answers.get(name)
        if answer is None:
            answer = answers[name] = access.allows(operation, _TOPIC, name)
        return answer

    return allowed


def requested_offsets(
    image: MetadataImage, topics: Any, access: Access
) -> tuple[list[OffsetToCommit], dict[tuple[str, int], ErrorCode]]:
    """The offsets an OffsetCommit or TxnOffsetCommit asks to commit, and the errors of
    those it may not: TOPIC_AUTHORIZATION_FAILED for topics the principal may not READ
    (decided first: whether they exist is not told), then UNKNOWN_TOPIC_OR_PARTITION for
    partitions the metadata does not have."""
    readable = allowed_topics(access, _READ)
    wanted: list[OffsetToCommit] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic in topics:
        for p in topic.partitions:
            key = (topic.name, int(p.partition_index))
            if not readable(topic.name):
                errors[key] = ErrorCode.topic_authorization_failed
                continue
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


def partition_errors(
    topics: Any, error_of: Callable[[str, int], ErrorCode]
) -> list[TopicPartitionErrors]:
    """The answer to each asked partition of an OffsetCommit, TxnOffsetCommit or
    OffsetDelete, in request order."""
    return [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": error_of(topic.name, int(p.partition_index)),
                }
                for p in topic.partitions
            ],
        }
        for topic in topics
    ]


async def handle_offset_commit(context: GroupContext, request: Request) -> Any:
    body = request.body
    access = Access.of(context.authorizer(), request)
    if not access.allows(_READ, _GROUP, body.group_id):  # before anything, as Kafka
        topics = partition_errors(body.topics, lambda _t, _p: ErrorCode.group_authorization_failed)
        denied: OffsetCommitResponse = {"throttle_time": 0, "topics": topics}
        return build_response(ApiKey.OFFSET_COMMIT, request.api_version, denied)
    image = context.metadata.image
    retention = getattr(body, "retention_time", None)
    wanted, errors = requested_offsets(image, body.topics, access)
    commit = CommitRequest(
        group_id=body.group_id,
        generation_id=int(body.generation_id_or_member_epoch),
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        retention_ms=ms(retention) if retention is not None else -1,
        offsets=tuple(wanted),
        api_version=request.api_version,
    )
    if wanted:  # none (all refused or unknown): no group is made or renewed, as Kafka
        results = await _commit(context, commit)
        for each, error in zip(wanted, results, strict=True):
            errors[(each.topic, each.partition)] = error
    response: OffsetCommitResponse = {
        "throttle_time": 0,
        "topics": partition_errors(body.topics, lambda t, p: errors[(t, p)]),
    }
    return build_response(ApiKey.OFFSET_COMMIT, request.api_version, response)


async def _commit(context: GroupContext, commit: CommitRequest) -> list[ErrorCode]:
    """The group coordinator's answer for each offset of `commit`, in its order."""
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
        results = [exc.error_code] * len(commit.offsets)
    return list(results)


async def _fetch_group(
    context: GroupContext, access: Access, group_id: str, topics: Any, require_stable: bool
) -> tuple[ErrorCode, list[FetchedTopic]]:
    """One group's answer: (its error, its topics). `topics` None asks for every topic
    with committed offsets."""
    if not access.allows(_DESCRIBE, _GROUP, group_id):
        return ErrorCode.group_authorization_failed, []
    if context.share is not None and group_id in context.share.group_ids():
        return ErrorCode.group_id_not_found, []  # "is not a consumer group", as Kafka
    describable = allowed_topics(access, _DESCRIBE)
    if topics is None:
        error, found = await _committed(context, group_id, None, require_stable)
        # Clients may not see the offsets of topics they may not describe (Kafka).
        return error, [t for t in found if describable(t["name"])]
    allowed = [t for t in topics if describable(t.name)]
    error, found = await _committed(context, group_id, allowed, require_stable)
    if error is not ErrorCode.none:  # the coordinator's error, as Kafka passes it on
        return error, found
    denied: list[FetchedTopic] = [
        {
            "name": t.name,
            "partitions": [
                _partition(int(i), None, ErrorCode.topic_authorization_failed)
                for i in t.partition_indexes
            ],
        }
        for t in topics
        if not describable(t.name)
    ]
    return error, found + denied


async def _committed(
    context: GroupContext, group_id: str, topics: Any, require_stable: bool
) -> tuple[ErrorCode, list[FetchedTopic]]:
    """The coordinator's answer for `topics` of the group (every topic when None)."""
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
    access = Access.of(context.authorizer(), request)
    if request.api_version >= 8:
        groups: list[FetchedGroup] = []
        for group in body.groups:
            error, topics = await _fetch_group(
                context, access, group.group_id, group.topics, body.require_stable
            )
            member_id = getattr(group, "member_id", None)  # v9: a KIP-848 member's
            epoch = int(getattr(group, "member_epoch", -1))
            if error is ErrorCode.none and context.consumer is not None:
                error = context.consumer.check_offset_fetch(group.group_id, member_id, epoch)
                topics = topics if error is ErrorCode.none else []
            groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
        data["groups"] = groups
    else:
        # A denied group has no topics: v1, without a top-level error, answers an empty
        # list and no error, as Kafka's does.
        data["error_code"], data["topics"] = await _fetch_group(
            context, access, body.group_id, body.topics, getattr(body, "require_stable", False)
        )
    return build_response(ApiKey.OFFSET_FETCH, request.api_version, data)


async def handle_offset_delete(context: GroupContext, request: Request) -> Any:
    body = request.body
    access = Access.of(context.authorizer(), request)
    if not access.allows(_DELETE, _GROUP, body.group_id):
        denied: OffsetDeleteResponse = {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "topics": [],
        }
        return build_response(ApiKey.OFFSET_DELETE, request.api_version, denied)
    readable = allowed_topics(access, _READ)
    image = context.metadata.image
    errors: dict[TopicPartition, ErrorCode] = {}
    wanted: list[TopicPartition] = []
    for t in body.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, int(p.partition_index))
            if not readable(t.name):
                errors[tp] = ErrorCode.topic_authorization_failed
            elif not _exists(image, tp.topic, tp.partition):
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                wanted.append(tp)
    try:
        await context.groups.coordinate(body.group_id)
        error, results, out = context.groups.delete_offsets(body.group_id, wanted)
        errors.update(zip(wanted, results, strict=False))
        await context.groups.apply(out)
    except CoordinatorUnavailable as exc:
        error = exc.error_code
    # A group-level error answers alone, with no partitions (OffsetDeleteResponse's merge).
    response: OffsetDeleteResponse = {
        "throttle_time": 0,
        "error_code": error,
        "topics": []
        if error is not ErrorCode.none
        else partition_errors(
            body.topics, lambda t, p: errors.get(TopicPartition(t, p), ErrorCode.none)
        ),
    }
    return build_response(ApiKey.OFFSET_DELETE, request.api_version, response)
