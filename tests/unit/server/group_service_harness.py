"""The group, offset and FindCoordinator handlers without a broker or a socket: a real
GroupService (and its real GroupCoordinator core) built from its ports, the partitions
opened in tmp_path from a replayed metadata image, a broker's flusher running on the
test's event loop, and the GroupContext the broker builds for them
(server/handlers/ports.py).

Nothing here sleeps: a group write is appended to `__consumer_offsets`, fsynced by the
flusher (in a worker thread) and committed, as on a started broker."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from quorum_harness import wire
from server_harness import NODE_ID, TOPIC, image_of, request

from strom.config import load_config
from strom.group.consumer_protocol import encode_subscription
from strom.group.placement import OFFSETS_TOPIC
from strom.metadata.controller import NewTopic, TopicResult
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.flusher import Flusher
from strom.server.groups import GroupService
from strom.server.handlers.ports import GroupContext
from strom.server.metadata_state import MetadataState
from strom.server.partition import Partition, ReplicaPorts
from strom.server.partitions import PartitionManager

OFFSETS_TOPIC_ID = uuid.UUID(int=0x0FF5E7)
SESSION_MS = 10_000
"""Within the default group.min/max.session.timeout.ms."""
SUBSCRIPTION = encode_subscription([TOPIC])
"""A consumer's "range" protocol metadata: subscribed to TOPIC."""


def offsets_image(*, leader: int = NODE_ID, fenced: Sequence[int] = ()) -> MetadataImage:
    """server_harness's cluster (brokers 1..3 at localhost:900N, TOPIC led by NODE_ID) with a
    one-partition `__consumer_offsets` on `leader` alone, and the brokers `fenced` fenced."""
    records: list[MetadataRecord] = [
        TopicRecord(OFFSETS_TOPIC, OFFSETS_TOPIC_ID),
        PartitionRecord(OFFSETS_TOPIC_ID, 0, (leader,), (leader,), leader, 0, 0),
    ]
    base = image_of()
    records += [FenceBrokerRecord(b, base.brokers[b].epoch) for b in fenced]
    image = base.replay(records)
    assert all(image.brokers[b].fenced for b in fenced)
    return image


def leader_moved(image: MetadataImage, leader: int) -> MetadataImage:
    """`image` with `__consumer_offsets-0` led by `leader` (one leader epoch later)."""
    state = image.topics_by_name[OFFSETS_TOPIC].partitions[0]
    return image.replay(
        [
            PartitionChangeRecord(
                OFFSETS_TOPIC_ID,
                0,
                leader,
                (leader,),
                state.leader_epoch + 1,
                state.partition_epoch + 1,
            )
        ]
    )


@dataclass(frozen=True, slots=True)
class GroupNode:
    """Node NODE_ID's group coordinator and what it is built on."""

    metadata: MetadataState
    partitions: PartitionManager
    flusher: Flusher
    groups: GroupService


async def _no_topic_creation(topics: list[NewTopic]) -> list[TopicResult]:
    raise AssertionError(f"the tests' images hold {OFFSETS_TOPIC}; asked to create {topics}")


def group_node(tmp_path: Path, image: MetadataImage, *, loaded: bool = True) -> GroupNode:
    """Node NODE_ID on `image`: its partitions opened in tmp_path and (when `loaded`) its
    group service coordinating the `__consumer_offsets` partitions it leads. No initial
    rebalance delay, so a lone member's JoinGroup completes at once."""
    config = load_config(
        overrides=[
            f"node.id={NODE_ID}",
            f"log.dirs={tmp_path}",
            "group.initial.rebalance.delay.ms=0",
        ]
    )
    metadata = MetadataState(NODE_ID)
    flusher = Flusher(on_flushed=Partition.on_flushed)
    partitions = PartitionManager(
        config,
        ports=ReplicaPorts(
            propose_isr=lambda _partition, _change: None,
            on_role=lambda _partition: None,
            durability=flusher,
        ),
    )
    groups = GroupService(
        node_id=NODE_ID,
        config=lambda: config,
        image=lambda: metadata.image,
        partitions=partitions,
        create_topics=_no_topic_creation,
    )
    node = GroupNode(metadata, partitions, flusher, groups)
    follow(node, image, loaded=loaded)
    return node


def follow(node: GroupNode, image: MetadataImage, *, loaded: bool = True) -> None:
    """Apply `image` as the broker does with committed metadata (never following a leader
    here: the tests' images give NODE_ID no partition another broker leads)."""
    node.metadata.reset(image, index=node.metadata.applied_index + 1, term=1)
    node.partitions.sync(image, now_ms=0)
    if loaded:
        node.groups.follow(image)


@dataclass(slots=True)
class Verified:
    """A transaction verifier (TxnVerification) that finds every partition in its
    transaction, or answers `errors` for those it has; it notes what it was asked."""

    errors: dict[tuple[str, int], ErrorCode] = field(default_factory=dict)
    asked: list[tuple[str, int, int, list[tuple[str, int]], Any]] = field(default_factory=list)

    async def verify(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        operation: Any,
    ) -> dict[tuple[str, int], ErrorCode]:
        self.asked.append((txn_id, producer_id, producer_epoch, partitions, operation))
        return {p: self.errors[p] for p in partitions if p in self.errors}


@contextlib.asynccontextmanager
async def serving(node: GroupNode, verifier: Any = None) -> AsyncIterator[GroupContext]:
    """The node's GroupContext, as Broker._contexts builds it, with its flusher running
    (and a `Verified` verifier unless given one); the group service closed and the
    partitions closed afterwards."""
    flushing = asyncio.create_task(node.flusher.run())
    try:
        yield GroupContext(node.metadata, node.groups, verifier or Verified())
    finally:
        node.groups.close()
        flushing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await flushing
        node.partitions.close()


async def answered(
    handler: Callable[[GroupContext, Request], Awaitable[Any]],
    context: GroupContext,
    asked: Request,
) -> Any:
    """The handler's answer to `asked`, encoded and decoded as a client reads it."""
    return wire(asked.api_key, asked.api_version, await handler(context, asked))


# --- requests -------------------------------------------------------------------------


def find_coordinator(*keys: str, key_type: int = 0, version: int = 4) -> Request:
    if version >= 4:
        return request(
            ApiKey.FIND_COORDINATOR, version, {"key_type": key_type, "coordinator_keys": keys}
        )
    (key,) = keys
    return request(ApiKey.FIND_COORDINATOR, version, {"key": key, "key_type": key_type})


def join_group(
    group_id: str,
    member_id: str = "",
    *,
    protocol_type: str = "consumer",
    protocols: Sequence[tuple[str, bytes]] = (("range", SUBSCRIPTION),),
    session_timeout_ms: int = SESSION_MS,
) -> Request:
    return request(
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": group_id,
            "session_timeout": session_timeout_ms,
            "rebalance_timeout": session_timeout_ms,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": protocol_type,
            "protocols": [{"name": name, "metadata": data} for name, data in protocols],
        },
    )


def sync_group(
    group_id: str, member_id: str, generation_id: int, assignments: dict[str, bytes]
) -> Request:
    return request(
        ApiKey.SYNC_GROUP,
        3,
        {
            "group_id": group_id,
            "generation_id": generation_id,
            "member_id": member_id,
            "group_instance_id": None,
            "assignments": [
                {"member_id": member, "assignment": data} for member, data in assignments.items()
            ],
        },
    )


def heartbeat(group_id: str, member_id: str, generation_id: int) -> Request:
    return request(
        ApiKey.HEARTBEAT,
        3,
        {
            "group_id": group_id,
            "generation_id": generation_id,
            "member_id": member_id,
            "group_instance_id": None,
        },
    )


def leave_group(group_id: str, *member_ids: str) -> Request:
    return request(
        ApiKey.LEAVE_GROUP,
        3,
        {
            "group_id": group_id,
            "members": [{"member_id": m, "group_instance_id": None} for m in member_ids],
        },
    )


def list_groups(*states: str) -> Request:
    return request(ApiKey.LIST_GROUPS, 4, {"states_filter": states})


def describe_groups(*group_ids: str) -> Request:
    return request(
        ApiKey.DESCRIBE_GROUPS,
        5,
        {"groups": group_ids, "include_authorized_operations": False},
    )


def delete_groups(*group_ids: str) -> Request:
    return request(ApiKey.DELETE_GROUPS, 2, {"groups_names": group_ids})


def offset_commit(
    group_id: str,
    offsets: dict[tuple[str, int], int],
    *,
    member_id: str = "",
    generation_id: int = -1,
) -> Request:
    """OffsetCommit v8; by default as a consumer outside any group (assign()) commits."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            {
                "partition_index": index,
                "committed_offset": offset,
                "committed_leader_epoch": -1,
                "committed_metadata": f"at {offset}",
            }
        )
    return request(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": generation_id,
            "member_id": member_id,
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        },
    )


def offset_fetch(
    group_id: str, partitions: Sequence[tuple[str, int]] | None, *, version: int = 7
) -> Request:
    """OffsetFetch of `partitions` (every committed one when None); v8+ asks in its
    `groups` array."""
    topics: list[dict[str, Any]] | None = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    if version >= 8:
        return request(
            ApiKey.OFFSET_FETCH,
            version,
            {"groups": [{"group_id": group_id, "topics": topics}], "require_stable": False},
        )
    return request(
        ApiKey.OFFSET_FETCH,
        version,
        {"group_id": group_id, "topics": topics, "require_stable": False},
    )


def offset_delete(group_id: str, *partitions: tuple[str, int]) -> Request:
    return request(
        ApiKey.OFFSET_DELETE,
        0,
        {
            "group_id": group_id,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": index}]}
                for topic, index in partitions
            ],
        },
    )
