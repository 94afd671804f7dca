"""Fetch (with long polling), ListOffsets and OffsetForLeaderEpoch.

Consumers see records only below the high watermark (see Partition.high_watermark),
read_committed ones (isolation_level 1) only below the last stable offset, and are told
the aborted transactions whose records the returned batches may hold (Kafka's
`aborted_transactions`: producer id and first offset), so they drop those; every
fetch answers the last stable offset. Followers (a Fetch with a replica id) read up
to the log end, and their fetch offset tells the leader how far they are
(replication.leader), which may move the high watermark and the ISR. A fetch that
finds fewer than `min_bytes` waits, up to `max_wait_ms`, until any of its partitions
gets new records it may read.

Leader epochs fence stale clients and replicas (KIP-320): `PartitionManager.led` checks a
request's `current_leader_epoch`; a `last_fetched_epoch` that does not end where the
fetch starts gets a `diverging_epoch` back, so the fetcher truncates.

Fetch sessions (KIP-227, strom.fetch.sessions) decide what a fetch reads and what its
answer carries: every partition a full fetch names, or every partition of an incremental
fetch's session, of which the answer carries only those with something new.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.fetch.sessions import (
    FINAL_EPOCH,
    INVALID_SESSION_ID,
    PartitionAnswer,
    PartitionFetch,
    SessionContext,
    SessionKind,
    SessionRequest,
    TopicRef,
)
from strom.log.results import OffsetOutOfRange
from strom.metadata.image import MetadataImage
from strom.metrics.traffic import TopicTraffic
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.responses.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchPartition,
    FetchResponse,
    FetchTopic,
    LeaderEpochEndOffset,
    LeaderEpochTopic,
    ListOffsetsPartition,
    ListOffsetsResponse,
    ListOffsetsTopic,
    OffsetForLeaderEpochResponse,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.clock import now_ms
from strom.server.handlers.access import Access
from strom.server.handlers.ports import FetchContext
from strom.server.partition import Partition

_LATEST = -1
_EARLIEST = -2
_MAX_TIMESTAMP = -3
_EARLIEST_LOCAL = -4
_LATEST_TIERED = -5
_READ_COMMITTED = 1


class _Wanted:
    """One partition a fetch reads, and what its answer says of it (made into a response
    entry only if the answer carries it)."""

    __slots__ = (
        "aborted",
        "diverging",
        "error",
        "fetch",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "name",
        "partition",
        "read_committed",
        "records",
        "replica",
        "served_to",
    )

    def __init__(
        self,
        fetch: PartitionFetch,
        name: str | None,
        partition: Partition | None,
        replica: bool,
        read_committed: bool = False,
    ) -> None:
        self.fetch = fetch
        self.name = name
        self.partition = partition
        self.replica = replica
        self.read_committed = read_committed and not replica
        self.error = ErrorCode.none
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.records = b""
        self.aborted: list[AbortedTransaction] | None = None
        self.diverging: EpochEndOffset | None = None
        self.served_to = fetch.fetch_offset
        """The offset after what the answer carries (metrics)."""

    def answer(self) -> PartitionAnswer:
        """What the answer says of this partition, as its fetch session compares it."""
        return PartitionAnswer(
            self.error,
            self.high_watermark,
            self.last_stable_offset,
            self.log_start_offset,
            has_records=bool(self.records),
            diverging=self.diverging is not None,
        )

    def entry(self) -> FetchPartition:
        entry: FetchPartition = {
            "partition_index": self.fetch.partition,
            "error_code": self.error,
            "high_watermark": self.high_watermark,
            "last_stable_offset": self.last_stable_offset,
            "log_start_offset": self.log_start_offset,
            "aborted_transactions": self.aborted,
            "preferred_read_replica": -1,
            "records": self.records,
        }
        if self.diverging is not None:
            entry["diverging_epoch"] = self.diverging
        return entry


def replica_id_of(body: Any, version: int) -> int:
    """The fetching follower's broker id; -1 for a consumer."""
    if version >= 15:
        return int(body.replica_state.replica_id)
    return int(getattr(body, "replica_id", -1))


def session_request_of(body: Any, version: int, follower: bool) -> SessionRequest:
    """A fetch request as its session sees it: partitions named by topic id from v13 on,
    by topic name before."""
    by_id = version >= 13

    def topic_of(entry: Any) -> TopicRef:
        return entry.topic_id if by_id else entry.topic  # type: ignore[no-any-return]

    partitions = tuple(
        PartitionFetch(
            topic_of(fetch_topic),
            int(p.partition),
            int(p.fetch_offset),
            int(p.partition_max_bytes),
            int(getattr(p, "current_leader_epoch", -1)),
            int(getattr(p, "last_fetched_epoch", -1)),
            int(getattr(p, "log_start_offset", -1)),
        )
        for fetch_topic in body.topics
        for p in fetch_topic.partitions
    )
    forgotten = tuple(
        (topic_of(topic), int(index))
        for topic in getattr(body, "forgotten_topics_data", ())
        for index in topic.partitions
    )
    return SessionRequest(
        int(getattr(body, "session_id", INVALID_SESSION_ID)),
        int(getattr(body, "session_epoch", FINAL_EPOCH)),
        by_id,
        follower,
        partitions,
        forgotten,
    )


def _diverging(
    partition: Partition, fetch_offset: int, last_fetched_epoch: int
) -> EpochEndOffset | None:
    """(epoch, end offset) where the fetcher's log left this one, or None."""
    found = partition.diverging(fetch_offset, last_fetched_epoch)
    if found is None:
        return None
    return {"epoch": found[0], "end_offset": found[1]}


async def handle_fetch(context: FetchContext, request: Request) -> Any:
    body = request.body
    version = request.api_version
    replica_id = replica_id_of(body, version)
    current_ms = now_ms()
    served = context.sessions.open(session_request_of(body, version, replica_id >= 0), current_ms)
    if served.kind is SessionKind.REFUSED:
        refused: FetchResponse = {
            "throttle_time": 0,
            "error_code": served.error,
            "session_id": INVALID_SESSION_ID,
            "responses": [],
        }
        return build_response(ApiKey.FETCH, version, refused)
    read_committed = int(getattr(body, "isolation_level", 0)) == _READ_COMMITTED
    image = context.metadata.image
    allowed = _allowed(Access.of(context.authorizer(), request), replica_id >= 0)
    wanted = [
        _wanted(context, image, fetch, version, replica_id, current_ms, read_committed, allowed)
        for fetch in served.fetches
    ]
    max_bytes = int(getattr(body, "max_bytes", 0x7FFFFFFF))
    min_bytes = int(body.min_bytes)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ms(body.max_wait) / 1000
    while True:
        total, errors = _collect(wanted, max_bytes)
        remaining = deadline - loop.time()
        if total >= min_bytes or errors or remaining <= 0 or context.stopping():
            break
        await _wait_for_data(wanted, remaining)
    _count(context.traffic, wanted)
    response: FetchResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": served.session_id,
        "responses": _by_topic(served, wanted),
    }
    return build_response(ApiKey.FETCH, version, response)


def _allowed(access: Access, follower: bool) -> Callable[[str], bool]:
    """Whether a topic may be read: a follower needs CLUSTER_ACTION on the cluster (every
    partition refused without it, as Kafka answers), a consumer READ on the topic."""
    if not access.enforced:
        return lambda _name: True
    if follower:
        may = access.allows_cluster(AclOperation.CLUSTER_ACTION)
        return lambda _name: may
    readable: dict[str, bool] = {}

    def allowed(name: str) -> bool:
        if name not in readable:
            readable[name] = access.allows(AclOperation.READ, AclResourceType.TOPIC, name)
        return readable[name]

    return allowed


def _wanted(
    context: FetchContext,
    image: MetadataImage,
    fetch: PartitionFetch,
    version: int,
    replica_id: int,
    current_ms: int,
    read_committed: bool,
    allowed: Callable[[str], bool],
) -> _Wanted:
    """One partition to read: the partition led here, or None with the entry's error."""
    if isinstance(fetch.topic, uuid.UUID):
        topic_image = image.topics_by_id.get(fetch.topic)
        name = topic_image.name if topic_image is not None else None
    else:
        name = fetch.topic
    if name is None:
        partition, error = None, ErrorCode.unknown_topic_id
    elif not allowed(name):
        partition, error = None, ErrorCode.topic_authorization_failed
    else:
        partition, error = context.partitions.led(
            name, fetch.partition, image, fetch.current_leader_epoch
        )
    item = _Wanted(fetch, name, partition, replica_id >= 0, read_committed)
    if partition is not None and version >= 12 and fetch.last_fetched_epoch >= 0:
        diverging = _diverging(partition, fetch.fetch_offset, fetch.last_fetched_epoch)
        if diverging is not None:  # no error: the fetcher truncates and asks again
            item.diverging = diverging
            item.high_watermark = partition.high_watermark
            item.log_start_offset = partition.log.log_start_offset
            item.partition = partition = None
    if partition is not None and replica_id >= 0:
        error = partition.follower_fetch(
            replica_id, fetch.fetch_offset, current_ms, fetch.log_start_offset
        )
        if error != ErrorCode.none:
            item.partition = partition = None
    if partition is None and item.diverging is None:
        item.error = error
    return item


def _by_topic(served: SessionContext, wanted: list[_Wanted]) -> list[FetchTopic]:
    """The partitions the answer carries, a topic entry for each run of one topic (as
    an incremental session may order a topic's partitions apart)."""
    responses: list[FetchTopic] = []
    last: TopicRef | None = None
    for item in wanted:
        if not served.carries(item.fetch, item.answer()):
            continue
        topic = item.fetch.topic
        if topic != last or not responses:
            topic_id = topic if isinstance(topic, uuid.UUID) else None
            responses.append({"topic": item.name or "", "topic_id": topic_id, "partitions": []})
            last = topic
        responses[-1]["partitions"].append(item.entry())
    return responses


def _count(traffic: TopicTraffic, wanted: list[_Wanted]) -> None:
    """What the answer sends, per topic: to consumers, or to followers."""
    for item in wanted:
        partition = item.partition
        fetch_offset = item.fetch.fetch_offset
        if partition is None or item.served_to <= fetch_offset:
            continue
        tally = traffic.replicated_out if item.replica else traffic.consumed
        size = len(item.records)
        tally.add(partition.topic, size, item.served_to - fetch_offset)


def _collect(wanted: list[_Wanted], max_bytes: int) -> tuple[int, bool]:
    total = 0
    errors = False
    for item in wanted:
        partition = item.partition
        if partition is None:
            errors = True
            continue
        high_watermark = partition.high_watermark
        last_stable = partition.last_stable_offset
        log_ = partition.log
        fetch_offset = item.fetch.fetch_offset
        log_end = log_.log_end_offset
        if item.replica:
            visible = log_end
        else:
            visible = last_stable if item.read_committed else high_watermark
        item.high_watermark = high_watermark
        item.last_stable_offset = last_stable
        item.log_start_offset = log_.log_start_offset
        item.aborted = [] if item.read_committed else None
        item.records = b""
        item.served_to = fetch_offset
        if fetch_offset == visible:
            continue
        budget = min(item.fetch.max_bytes, max_bytes - total)
        if budget <= 0 and total > 0:
            continue
        try:
            if fetch_offset > visible and fetch_offset <= log_end:
                continue  # written but not yet visible
            result = log_.read(
                fetch_offset,
                max(budget, 0),
                max_offset=visible,
                min_one_batch=total == 0,
            )
        except OffsetOutOfRange:
            item.error = ErrorCode.offset_out_of_range
            errors = True
            continue
        if result.size_bytes:
            item.records = result.read_bytes()
            item.served_to = result.next_offset
            total += result.size_bytes
            if item.read_committed:
                item.aborted = _aborted(partition, fetch_offset, result.next_offset)
    return total, errors


def _aborted(partition: Partition, fetch_offset: int, upper_bound: int) -> list[AbortedTransaction]:
    """The aborted transactions a read_committed consumer must know for the records in
    [fetch_offset, upper_bound) (Kafka's LocalLog.addAbortedTransactions)."""
    return [
        {"producer_id": txn.producer_id, "first_offset": txn.first_offset}
        for txn in partition.aborted_transactions(fetch_offset, upper_bound)
    ]


async def _wait_for_data(wanted: list[_Wanted], timeout_s: float) -> None:
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()
    partitions = {id(w.partition): w.partition for w in wanted if w.partition is not None}
    for partition in partitions.values():
        partition.waiters.add(waiter)
    try:
        async with asyncio.timeout(timeout_s):  # wait_for can eat a cancel
            await waiter
    except TimeoutError:
        pass
    finally:
        for partition in partitions.values():
            partition.waiters.discard(waiter)


async def handle_list_offsets(context: FetchContext, request: Request) -> Any:
    """Offsets by timestamp; "latest" is the high watermark, or the last stable offset
    for isolation_level 1 (read_committed), which also bounds the timestamp lookups.

    ACLs, as Kafka checks them, before anything else: DESCRIBE on each topic (whatever
    the replica id says); the partitions of a topic without it are
    TOPIC_AUTHORIZATION_FAILED, answered after the others."""
    image = context.metadata.image
    read_committed = int(getattr(request.body, "isolation_level", 0)) == _READ_COMMITTED
    access = Access.of(context.authorizer(), request)
    topics: list[ListOffsetsTopic] = []
    refused: list[ListOffsetsTopic] = []
    for list_topic in request.body.topics:
        entries: list[ListOffsetsPartition] = []
        allowed = access.allows(AclOperation.DESCRIBE, AclResourceType.TOPIC, list_topic.name)
        (topics if allowed else refused).append({"name": list_topic.name, "partitions": entries})
        for list_partition in list_topic.partitions:
            entry: ListOffsetsPartition = {
                "partition_index": list_partition.partition_index,
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            entries.append(entry)
            if not allowed:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                continue
            partition, error = context.partitions.led(
                list_topic.name,
                list_partition.partition_index,
                image,
                int(getattr(list_partition, "current_leader_epoch", -1)),
            )
            if partition is None:
                entry["error_code"] = error
                continue
            timestamp = int(list_partition.timestamp)
            visible = partition.last_stable_offset if read_committed else partition.high_watermark
            entry["leader_epoch"] = partition.leader_epoch
            if timestamp == _LATEST:
                entry["offset"] = visible
            elif timestamp in (_EARLIEST, _EARLIEST_LOCAL):
                entry["offset"] = partition.log.log_start_offset
            elif timestamp == _MAX_TIMESTAMP:
                found_ts, found_offset = partition.log.max_timestamp()
                if 0 <= found_offset < visible:
                    entry["timestamp"], entry["offset"] = found_ts, found_offset
            elif timestamp == _LATEST_TIERED:
                entry["offset"] = -1
            elif timestamp >= 0:
                found = partition.log.offset_for_timestamp(timestamp)
                if found is not None and found[0] < visible:
                    entry["offset"], entry["timestamp"] = found
            else:
                entry["error_code"] = ErrorCode.invalid_request
    response: ListOffsetsResponse = {"throttle_time": 0, "topics": topics + refused}
    return build_response(ApiKey.LIST_OFFSETS, request.api_version, response)


async def handle_offset_for_leader_epoch(context: FetchContext, request: Request) -> Any:
    """Where each asked-about leader epoch ends in the leader's log (KIP-101, KIP-279):
    followers truncate to it, consumers (KIP-320) check their position against it.

    ACLs, as Kafka checks them, before anything else: CLUSTER_ACTION on the cluster (a
    follower's) allows every topic, else DESCRIBE on each (a consumer's); the
    partitions of a topic without it are TOPIC_AUTHORIZATION_FAILED, answered after the
    others."""
    image = context.metadata.image
    access = Access.of(context.authorizer(), request)
    every_topic = access.allows_cluster(AclOperation.CLUSTER_ACTION)
    topics: list[LeaderEpochTopic] = []
    refused: list[LeaderEpochTopic] = []
    for asked_topic in request.body.topics:
        results: list[LeaderEpochEndOffset] = []
        allowed = every_topic or access.allows(
            AclOperation.DESCRIBE, AclResourceType.TOPIC, asked_topic.topic
        )
        (topics if allowed else refused).append({"topic": asked_topic.topic, "partitions": results})
        for asked in asked_topic.partitions:
            result: LeaderEpochEndOffset = {
                "error_code": ErrorCode.none,
                "partition": asked.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            results.append(result)
            if not allowed:
                result["error_code"] = ErrorCode.topic_authorization_failed
                continue
            partition, error = context.partitions.led(
                asked_topic.topic, asked.partition, image, int(asked.current_leader_epoch)
            )
            if partition is None:
                result["error_code"] = error
                continue
            epoch, end_offset = partition.log.end_offset_for_epoch(int(asked.leader_epoch))
            result["leader_epoch"], result["end_offset"] = epoch, end_offset
    response: OffsetForLeaderEpochResponse = {"throttle_time": 0, "topics": topics + refused}
    return build_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, request.api_version, response)
