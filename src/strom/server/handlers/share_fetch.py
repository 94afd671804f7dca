"""ShareFetch (78) and ShareAcknowledge (79): a share group's members reading and
acknowledging records of the share-partitions this broker leads (KIP-932), v1 and v2.

As Kafka's KafkaApis answers them:

- top-level errors: INVALID_REQUEST (no group id, no member id; v2 `is_renew_ack` with a
  non-zero max_bytes, min_bytes, max_records or max_wait), GROUP_AUTHORIZATION_FAILED
  (READ on the group), the share session's (strom.share.sessions); a fetch refused with
  SHARE_SESSION_LIMIT_REACHED is answered after its max_wait, as Kafka's is;
- per partition: UNKNOWN_TOPIC_ID, TOPIC_AUTHORIZATION_FAILED (READ on the topic), the
  leadership errors, the share-state port's (coordinator errors as
  COORDINATOR_NOT_AVAILABLE); acknowledgements' outcome in `acknowledge_error_code`.

Acknowledgements come first (a fetch piggybacks them), then the fetch. A fetch answers
as soon as it acquired a record, or when max_wait runs out; while waiting it wakes for
new records in the log, for records released or expired, and for records held back by
strom's delivery delay or backoff coming due. `max_records` bounds the records acquired
over all partitions and `max_bytes` the log bytes read; `batch_size` and v2's
`share_acquire_mode` are read and not acted on (every fetch acquires at most
`max_records`: Kafka's record-limit mode).

A share session ends with the client connection that opened it
(`share_connection_closed`, which the broker calls when a connection ends): its member's
records here go back at once.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.responses.share import (
    AcquiredRecordsEntry,
    LeaderIdAndEpoch,
    ShareAcknowledgePartition,
    ShareAcknowledgeResponse,
    ShareAcknowledgeTopic,
    ShareFetchPartition,
    ShareFetchResponse,
    ShareFetchTopic,
)
from strom.security.authorizer import Authorizer
from strom.security.operations import AclOperation, AclResourceType
from strom.server.clock import now_ms
from strom.server.handlers.access import Access
from strom.server.partition import Partition
from strom.server.partitions import PartitionManager
from strom.server.share_partitions import ShareAcquired, SharePartitionManager
from strom.share.sessions import (
    FINAL_EPOCH,
    ShareSessionCache,
    ShareSessionKind,
    TopicIdPartition,
)
from strom.share.values import AckBatch, AcknowledgeType

__all__ = [
    "ShareContext",
    "handle_share_acknowledge",
    "handle_share_fetch",
    "share_connection_closed",
]

_RENEW_VERSION = 2


@dataclass(frozen=True, slots=True)
class ShareContext:
    """ShareFetch and ShareAcknowledge."""

    metadata: Any
    """The committed metadata (handlers/ports.MetadataView)."""
    partitions: PartitionManager
    shares: SharePartitionManager
    sessions: ShareSessionCache
    stopping: Callable[[], bool]
    authorizer: Callable[[], Authorizer | None] = field(default=lambda: None)


def share_connection_closed(context: ShareContext, connection_id: str) -> None:
    """A client connection ended: the share sessions it opened end, and their members'
    records on the share-partitions led here go back now (Kafka's
    connectionDisconnectListener and releaseSession), not when their locks run out.
    While the broker stops, the sessions only end: the records' locks do not outlive it."""
    for group_id, member_id in context.sessions.disconnected(connection_id):
        if not context.stopping():
            context.shares.member_left(group_id, member_id)


@dataclass(slots=True)
class _Target:
    """One share-partition a request names, and what the answer says of it."""

    topic_id: uuid.UUID
    index: int
    partition: Partition | None = None
    error: ErrorCode = ErrorCode.none
    ack_error: ErrorCode | None = None
    fetched: ShareAcquired = field(default_factory=ShareAcquired)


def _leader(image: MetadataImage, topic_id: uuid.UUID, index: int) -> LeaderIdAndEpoch:
    topic = image.topics_by_id.get(topic_id)
    found = topic.partitions.get(index) if topic is not None else None
    if found is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {"leader_id": found.leader, "leader_epoch": found.leader_epoch}


def _resolve(context: ShareContext, image: MetadataImage, access: Access, target: _Target) -> None:
    topic = image.topics_by_id.get(target.topic_id)
    if topic is None:
        target.error = ErrorCode.unknown_topic_id
    elif not access.allows(AclOperation.READ, AclResourceType.TOPIC, topic.name):
        target.error = ErrorCode.topic_authorization_failed
    else:
        target.partition, target.error = context.partitions.led(topic.name, target.index, image)


def _batches(entries: Any, version: int, renew: bool) -> list[AckBatch] | None:
    """The acknowledgement batches of one partition; None when a type is not one this
    version may send (RENEW only from v2 with is_renew_ack)."""
    batches = []
    for entry in entries:
        types = tuple(int(t) for t in entry.acknowledge_types)
        if AcknowledgeType.RENEW in types and (version < _RENEW_VERSION or not renew):
            return None
        batches.append(AckBatch(int(entry.first_offset), int(entry.last_offset), types))
    return batches


async def _acknowledge(
    context: ShareContext,
    image: MetadataImage,
    access: Access,
    group_id: str,
    member_id: str,
    entries: list[tuple[uuid.UUID, int, Any]],
    version: int,
    renew: bool,
) -> dict[TopicIdPartition, _Target]:
    """Each partition's acknowledgements carried out (in request order)."""
    done: dict[TopicIdPartition, _Target] = {}
    for topic_id, index, batches_in in entries:
        target = done.setdefault((topic_id, index), _Target(topic_id, index))
        _resolve(context, image, access, target)
        if target.partition is None:
            target.ack_error = target.error
            continue
        batches = _batches(batches_in, version, renew)
        if batches is None:
            target.ack_error = ErrorCode.invalid_request
            continue
        target.ack_error = await context.shares.acknowledge(
            group_id, member_id, topic_id, target.partition, batches
        )
        target.error = ErrorCode.none
    return done


def _top_level_refusal(body: Any, version: int, access: Access) -> tuple[ErrorCode, str | None]:
    if body.group_id is None:
        return ErrorCode.invalid_request, "Invalid group id in the request."
    if not access.allows(AclOperation.READ, AclResourceType.GROUP, body.group_id):
        return ErrorCode.group_authorization_failed, None
    if not body.member_id:
        return ErrorCode.invalid_request, "Invalid member id in the request."
    return ErrorCode.none, None


async def handle_share_fetch(context: ShareContext, request: Request) -> Any:
    body = request.body
    version = request.api_version
    access = Access.of(context.authorizer(), request)
    error, message = _top_level_refusal(body, version, access)
    renew = version >= _RENEW_VERSION and bool(getattr(body, "is_renew_ack", False))
    max_wait_ms = ms(body.max_wait)
    if error is ErrorCode.none and renew:
        nonzero = [
            name
            for name, value in (
                ("maxBytes", int(body.max_bytes)),
                ("minBytes", int(body.min_bytes)),
                ("maxRecords", int(body.max_records)),
                ("maxWaitMs", max_wait_ms),
            )
            if value != 0
        ]
        if nonzero:
            error = ErrorCode.invalid_request
            message = (
                ", ".join(f"{n} must be set to 0" for n in nonzero) + " if isRenewAck is true."
            )
    if error is not ErrorCode.none:
        return _fetch_refused(version, error, message)
    group_id, member_id = str(body.group_id), str(body.member_id)
    acks = [
        (t.topic_id, int(p.partition_index), p.acknowledgement_batches)
        for t in body.topics
        for p in t.partitions
        if p.acknowledgement_batches
    ]
    session = context.sessions.fetch(
        group_id,
        member_id,
        int(body.share_session_epoch),
        [(t.topic_id, int(p.partition_index)) for t in body.topics for p in t.partitions],
        [(t.topic_id, int(i)) for t in body.forgotten_topics_data for i in t.partitions],
        has_acknowledgements=bool(acks),
        connection_id=request.connection_id,
        now_ms=now_ms(),
    )
    if session.kind is ShareSessionKind.REFUSED:
        if session.error is ErrorCode.share_session_limit_reached and not context.stopping():
            await asyncio.sleep(max(max_wait_ms, 0) / 1000)
        return _fetch_refused(version, session.error, None)
    image = context.metadata.image
    targets = await _acknowledge(context, image, access, group_id, member_id, acks, version, renew)
    fetching: list[_Target] = []
    if session.kind is not ShareSessionKind.FINAL and not renew:
        for key in session.partitions:
            target = targets.setdefault(key, _Target(*key))
            if target.partition is None and target.ack_error is None:
                _resolve(context, image, access, target)
            fetching.append(target)
        await _fetch(context, body, group_id, member_id, fetching, max_wait_ms)
    if session.kind is ShareSessionKind.FINAL:
        context.sessions.close(group_id, member_id)
        await context.shares.release_member(group_id, member_id)
    else:
        context.sessions.answered(
            group_id,
            member_id,
            [(t.topic_id, t.index) for t in fetching if t.fetched.acquired],
        )
    wanted = set(targets) if session.carries_all else set()
    response: ShareFetchResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "acquisition_lock_timeout": context.shares.record_lock_duration_ms(group_id),
        "responses": _fetch_topics(image, targets, wanted),
        "node_endpoints": [],
    }
    return build_response(ApiKey.SHARE_FETCH, version, response)


async def _fetch(
    context: ShareContext,
    body: Any,
    group_id: str,
    member_id: str,
    targets: list[_Target],
    max_wait_ms: int,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(max_wait_ms, 0) / 1000
    max_records = int(body.max_records)
    max_bytes = int(body.max_bytes)
    while True:
        records_left, bytes_left = max_records, max_bytes
        retry_at: int | None = None
        for target in targets:
            if target.partition is None or target.error is not ErrorCode.none:
                continue
            fetched = await context.shares.acquire(
                group_id,
                member_id,
                target.topic_id,
                target.partition,
                max_records=records_left,
                max_bytes=bytes_left,
                first=bytes_left == max_bytes,
            )
            target.fetched = fetched
            target.error = fetched.error
            records_left -= sum(a.last_offset - a.first_offset + 1 for a in fetched.acquired)
            bytes_left -= len(fetched.records)
            due = fetched.retry_at_ms
            if due is not None:
                retry_at = due if retry_at is None else min(retry_at, due)
        remaining = deadline - loop.time()
        done = records_left < max_records or any(t.error is not ErrorCode.none for t in targets)
        if done or remaining <= 0 or context.stopping():
            return
        if retry_at is not None:
            remaining = min(remaining, max(retry_at - now_ms(), 1) / 1000)
        await _wait(context, targets, remaining)


async def _wait(context: ShareContext, targets: list[_Target], timeout_s: float) -> None:
    waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    partitions = {id(t.partition): t.partition for t in targets if t.partition is not None}
    for partition in partitions.values():
        partition.waiters.add(waiter)
    context.shares.changed.add(waiter)
    try:
        async with asyncio.timeout(timeout_s):
            await waiter
    except TimeoutError:
        pass
    finally:
        for partition in partitions.values():
            partition.waiters.discard(waiter)
        context.shares.changed.discard(waiter)


def _fetch_topics(
    image: MetadataImage, targets: dict[TopicIdPartition, _Target], wanted: set[TopicIdPartition]
) -> list[ShareFetchTopic]:
    topics: dict[uuid.UUID, ShareFetchTopic] = {}
    for key, target in targets.items():
        fetched = target.fetched
        if key not in wanted and not (
            fetched.acquired or target.error is not ErrorCode.none or target.ack_error is not None
        ):
            continue
        acquired: list[AcquiredRecordsEntry] = [
            {
                "first_offset": a.first_offset,
                "last_offset": a.last_offset,
                "delivery_count": a.delivery_count,
            }
            for a in fetched.acquired
        ]
        entry: ShareFetchPartition = {
            "partition_index": target.index,
            "error_code": target.error,
            "error_message": None,
            "acknowledge_error_code": int(target.ack_error or ErrorCode.none),
            "acknowledge_error_message": None,
            "current_leader": _leader(image, target.topic_id, target.index),
            "records": fetched.records,
            "acquired_records": acquired,
        }
        topic = topics.setdefault(target.topic_id, {"topic_id": target.topic_id, "partitions": []})
        topic["partitions"].append(entry)
    return list(topics.values())


def _fetch_refused(version: int, error: ErrorCode, message: str | None) -> Any:
    refused: ShareFetchResponse = {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "acquisition_lock_timeout": 0,
        "responses": [],
        "node_endpoints": [],
    }
    return build_response(ApiKey.SHARE_FETCH, version, refused)


async def handle_share_acknowledge(context: ShareContext, request: Request) -> Any:
    body = request.body
    version = request.api_version
    access = Access.of(context.authorizer(), request)
    error, message = _top_level_refusal(body, version, access)
    if error is ErrorCode.none:
        error = context.sessions.acknowledge(
            str(body.group_id), str(body.member_id), int(body.share_session_epoch), now_ms()
        )
    if error is not ErrorCode.none:
        return _acknowledge_answer(version, error, message, [], 0)
    group_id, member_id = str(body.group_id), str(body.member_id)
    renew = version >= _RENEW_VERSION and bool(getattr(body, "is_renew_ack", False))
    image = context.metadata.image
    entries = [
        (t.topic_id, int(p.partition_index), p.acknowledgement_batches)
        for t in body.topics
        for p in t.partitions
    ]
    targets = await _acknowledge(
        context, image, access, group_id, member_id, entries, version, renew
    )
    if int(body.share_session_epoch) == FINAL_EPOCH:
        context.sessions.close(group_id, member_id)
        await context.shares.release_member(group_id, member_id)
    topics: dict[uuid.UUID, ShareAcknowledgeTopic] = {}
    for target in targets.values():
        entry: ShareAcknowledgePartition = {
            "partition_index": target.index,
            "error_code": target.ack_error or ErrorCode.none,
            "error_message": None,
            "current_leader": _leader(image, target.topic_id, target.index),
        }
        topic = topics.setdefault(target.topic_id, {"topic_id": target.topic_id, "partitions": []})
        topic["partitions"].append(entry)
    lock_ms = context.shares.record_lock_duration_ms(group_id)
    return _acknowledge_answer(version, ErrorCode.none, None, list(topics.values()), lock_ms)


def _acknowledge_answer(
    version: int,
    error: ErrorCode,
    message: str | None,
    topics: list[ShareAcknowledgeTopic],
    lock_ms: int,
) -> Any:
    response: ShareAcknowledgeResponse = {
        "throttle_time": 0,
        "error_code": error,
        "error_message": message,
        "acquisition_lock_timeout": lock_ms,
        "responses": topics,
        "node_endpoints": [],
    }
    return build_response(ApiKey.SHARE_ACKNOWLEDGE, version, response)
