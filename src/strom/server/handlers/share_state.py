"""The share-state RPCs (KIP-932), which share-partition leaders and group coordinators
send to the share coordinator of a share-partition: InitializeShareGroupState (83),
ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState (86) and
ReadShareGroupStateSummary (87).

Each share-partition of a request is answered by this broker's coordinator
(server/share_coordinator.py) on its own, as Kafka's ShareCoordinatorService splits a
request by key; one whose `__share_group_state` partition is not led here is
NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while it loads, COORDINATOR_NOT_AVAILABLE
before the topic exists). As in Kafka, a request with no group id, no topics or a topic
with no partitions is answered with no results.

ACLs, as Kafka's KafkaApis checks them: CLUSTER_ACTION on the cluster (a broker's own
principal), else every share-partition is CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.share_state import (
    ReadSharePartitionResult,
    ReadShareTopicResult,
    SharePartitionResult,
    ShareSummaryPartitionResult,
    ShareSummaryTopicResult,
    ShareTopicResult,
)
from strom.security.authorizer import Authorizer
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.share_coordinator import ShareCoordinatorUnavailable
from strom.share.records import StateBatch
from strom.share.state_port import (
    ShareStateKey,
    ShareStateRead,
    ShareStateSummary,
    ShareStateWrite,
)

__all__ = [
    "ShareStateContext",
    "handle_delete_share_group_state",
    "handle_initialize_share_group_state",
    "handle_read_share_group_state",
    "handle_read_share_group_state_summary",
    "handle_write_share_group_state",
]

Answer = tuple[ErrorCode, str | None]
T = TypeVar("T")
_DENIED = "Cluster authorization failed."


class LocalShareCoordinator(Protocol):
    """This broker's share coordinator (server/share_coordinator.py); every call raises
    ShareCoordinatorUnavailable when the key is not coordinated here now."""

    async def initialize(
        self, key: ShareStateKey, state_epoch: int, start_offset: int
    ) -> Answer: ...
    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareStateRead: ...
    async def write(self, key: ShareStateKey, write: ShareStateWrite) -> Answer: ...
    async def delete(self, key: ShareStateKey) -> Answer: ...
    async def summary(self, key: ShareStateKey) -> ShareStateSummary: ...


@dataclass(frozen=True, slots=True)
class ShareStateContext:
    coordinator: LocalShareCoordinator
    authorizer: Callable[[], Authorizer | None] = lambda: None


def _keys(body: Any) -> list[tuple[uuid.UUID, list[Any]]] | None:
    """Each topic with its partitions; None when Kafka answers with no results."""
    if not body.group_id or not body.topics:
        return None
    topics = [(t.topic_id or uuid.UUID(int=0), list(t.partitions)) for t in body.topics]
    if any(not partitions for _, partitions in topics):
        return None
    return topics


async def _each(
    context: ShareStateContext,
    request: Request,
    call: Callable[[ShareStateKey, Any], Awaitable[T]],
    failure: Callable[[ErrorCode, str | None], T],
) -> list[tuple[uuid.UUID, list[tuple[int, T]]]]:
    """Every share-partition's answer, by topic in the request's order."""
    topics = _keys(request.body)
    if topics is None:
        return []
    group_id = str(request.body.group_id)
    allowed = Access.of(context.authorizer(), request).allows_cluster(AclOperation.CLUSTER_ACTION)

    async def one(topic_id: uuid.UUID, partition: Any) -> T:
        if not allowed:
            return failure(ErrorCode.cluster_authorization_failed, _DENIED)
        key = ShareStateKey(group_id, topic_id, int(partition.partition))
        try:
            return await call(key, partition)
        except ShareCoordinatorUnavailable as exc:
            return failure(exc.error_code, str(exc))

    answers = await asyncio.gather(*(one(t, p) for t, ps in topics for p in ps))
    out: list[tuple[uuid.UUID, list[tuple[int, T]]]] = []
    position = 0
    for topic_id, partitions in topics:
        taken = answers[position : position + len(partitions)]
        position += len(partitions)
        out.append(
            (topic_id, [(int(p.partition), a) for p, a in zip(partitions, taken, strict=True)])
        )
    return out


def _plain(results: list[tuple[uuid.UUID, list[tuple[int, Answer]]]]) -> list[ShareTopicResult]:
    return [
        {
            "topic_id": topic_id,
            "partitions": [
                SharePartitionResult(partition=p, error_code=a[0], error_message=a[1])
                for p, a in partitions
            ],
        }
        for topic_id, partitions in results
    ]


def _answer(error: ErrorCode, message: str | None) -> Answer:
    return error, message


async def handle_initialize_share_group_state(context: ShareStateContext, request: Request) -> Any:
    results = await _each(
        context,
        request,
        lambda key, p: context.coordinator.initialize(key, int(p.state_epoch), int(p.start_offset)),
        _answer,
    )
    response = {"results": _plain(results)}
    return build_response(ApiKey.INITIALIZE_SHARE_GROUP_STATE, request.api_version, response)


async def handle_write_share_group_state(context: ShareStateContext, request: Request) -> Any:
    def write_of(p: Any) -> ShareStateWrite:
        return ShareStateWrite(
            state_epoch=int(p.state_epoch),
            leader_epoch=int(p.leader_epoch),
            start_offset=int(p.start_offset),
            state_batches=tuple(
                StateBatch(
                    int(b.first_offset),
                    int(b.last_offset),
                    int(b.delivery_state),
                    int(b.delivery_count),
                )
                for b in p.state_batches
            ),
            delivery_complete_count=int(getattr(p, "delivery_complete_count", -1)),
        )

    results = await _each(
        context,
        request,
        lambda key, p: context.coordinator.write(key, write_of(p)),
        _answer,
    )
    response = {"results": _plain(results)}
    return build_response(ApiKey.WRITE_SHARE_GROUP_STATE, request.api_version, response)


async def handle_delete_share_group_state(context: ShareStateContext, request: Request) -> Any:
    results = await _each(
        context, request, lambda key, _p: context.coordinator.delete(key), _answer
    )
    response = {"results": _plain(results)}
    return build_response(ApiKey.DELETE_SHARE_GROUP_STATE, request.api_version, response)


async def handle_read_share_group_state(context: ShareStateContext, request: Request) -> Any:
    results = await _each(
        context,
        request,
        lambda key, p: context.coordinator.read(key, int(p.leader_epoch)),
        ShareStateRead,
    )
    topics: list[ReadShareTopicResult] = [
        {
            "topic_id": topic_id,
            "partitions": [
                ReadSharePartitionResult(
                    partition=p,
                    error_code=read.error,
                    error_message=read.message,
                    state_epoch=read.state_epoch,
                    start_offset=read.start_offset,
                    state_batches=[
                        {
                            "first_offset": b.first_offset,
                            "last_offset": b.last_offset,
                            "delivery_state": b.delivery_state,
                            "delivery_count": b.delivery_count,
                        }
                        for b in read.state_batches
                    ],
                )
                for p, read in partitions
            ],
        }
        for topic_id, partitions in results
    ]
    response = {"results": topics}
    return build_response(ApiKey.READ_SHARE_GROUP_STATE, request.api_version, response)


async def handle_read_share_group_state_summary(
    context: ShareStateContext, request: Request
) -> Any:
    results = await _each(
        context, request, lambda key, _p: context.coordinator.summary(key), ShareStateSummary
    )
    topics: list[ShareSummaryTopicResult] = [
        {
            "topic_id": topic_id,
            "partitions": [
                ShareSummaryPartitionResult(
                    partition=p,
                    error_code=s.error,
                    error_message=s.message,
                    state_epoch=s.state_epoch,
                    leader_epoch=s.leader_epoch,
                    start_offset=s.start_offset,
                    delivery_complete_count=s.delivery_complete_count,
                )
                for p, s in partitions
            ],
        }
        for topic_id, partitions in results
    ]
    response = {"results": topics}
    return build_response(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, request.api_version, response)
