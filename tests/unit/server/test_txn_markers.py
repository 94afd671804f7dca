"""Transaction markers without sockets: the WriteTxnMarkers handler over partitions that
take markers (each partition's answer as Kafka's), and the coordinator's sender, which
writes markers here, sends them to other leaders (a fake client answering with the other
broker's handler, through the wire codec), retries and drops as Kafka does."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from quorum_harness import wire
from server_harness import NODE_ID, TOPIC, change_partition, image_of, run

from strom.client import ClientConnectionError
from strom.group.placement import OFFSETS_TOPIC
from strom.log.results import AppendResult
from strom.metadata.image import MetadataImage
from strom.metadata.records import PartitionRecord, RemoveTopicRecord, TopicRecord
from strom.protocol.codec import Request, build, request_class
from strom.protocol.records import RecordsError
from strom.server.handlers.txn_markers import TxnMarkersContext, handle_write_txn_markers
from strom.server.partition import LeadershipMoved
from strom.server.txn_markers import (
    WRITE_TXN_MARKERS,
    MarkerAppender,
    MarkerPartition,
    TxnMarker,
    TxnMarkerSender,
)
from strom.txn.coordinator import MarkerJob

OFFSETS_ID = uuid.UUID(int=0x0FF5E7)
FAILS = list[BaseException]


@dataclass(slots=True)
class FakePartition:
    """Takes markers; raises the queued failures first, one per append."""

    failures: FAILS = field(default_factory=list)
    markers: list[tuple[int, int, int, bool]] = field(default_factory=list)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        now_ms: int,
    ) -> AppendResult:
        if self.failures:
            raise self.failures.pop(0)
        self.markers.append((producer_id, producer_epoch, coordinator_epoch, commit))
        offset = len(self.markers)
        return AppendResult(offset, offset, -1, 0)

    async def committed(self, offset: int, timeout_s: float) -> None:
        pass


@dataclass(slots=True)
class FakePartitions:
    here: dict[tuple[str, int], FakePartition]
    followed: frozenset[tuple[str, int]] = frozenset()

    def get(self, topic: str, partition: int) -> object | None:
        key = (topic, partition)
        return self.here.get(key) or (key if key in self.followed else None)

    def led(
        self, topic: str, partition: int, image: MetadataImage, current_leader_epoch: int = -1
    ) -> tuple[MarkerPartition | None, ErrorCode]:
        found = self.here.get((topic, partition))
        if found is not None:
            return found, ErrorCode.none
        known = image.topics_by_name.get(topic)
        if known is not None and partition in known.partitions:
            return None, ErrorCode.not_leader_or_follower
        return None, ErrorCode.unknown_topic_or_partition


@dataclass(slots=True)
class FakeGroups:
    completed: list[tuple[int, int, bool]] = field(default_factory=list)

    def complete_txn(self, index: int, producer_id: int, *, commit: bool) -> None:
        self.completed.append((index, producer_id, commit))


def appender(
    image: Callable[[], MetadataImage],
    here: dict[tuple[str, int], FakePartition],
    followed: frozenset[tuple[str, int]] = frozenset(),
) -> tuple[MarkerAppender, FakeGroups]:
    groups = FakeGroups()
    partitions = FakePartitions(here, followed)
    return MarkerAppender(image=image, partitions=partitions, groups=lambda: groups), groups


def with_offsets(image: MetadataImage) -> MetadataImage:
    return image.replay(
        [
            TopicRecord(OFFSETS_TOPIC, OFFSETS_ID),
            PartitionRecord(OFFSETS_ID, 0, (NODE_ID,), (NODE_ID,), NODE_ID, 0, 0),
        ]
    )


def markers_request(*markers: TxnMarker) -> Request:
    body = {
        "markers": [
            {
                "producer_id": m.producer_id,
                "producer_epoch": m.producer_epoch,
                "transaction_result": m.commit,
                "coordinator_epoch": m.coordinator_epoch,
                "topics": [
                    {"name": t, "partition_indexes": [i for tt, i in m.partitions if tt == t]}
                    for t in dict.fromkeys(t for t, _ in m.partitions)
                ],
            }
            for m in markers
        ]
    }
    api_key: Any = WRITE_TXN_MARKERS
    return Request(api_key, 1, 1, "test", build(request_class(api_key, 1), body))


def test_the_handler_writes_each_marker_where_it_leads_and_answers_per_partition() -> None:
    image = with_offsets(image_of(partitions=4))
    orders0 = FakePartition()
    orders1 = FakePartition(failures=[RecordsError(ErrorCode.invalid_producer_epoch, "old")])
    offsets = FakePartition()
    here = {(TOPIC, 0): orders0, (TOPIC, 1): orders1, (OFFSETS_TOPIC, 0): offsets}
    markers, groups = appender(lambda: image, here, frozenset({(TOPIC, 2)}))
    asked = markers_request(
        TxnMarker(7, 2, True, 5, ((TOPIC, 0), (TOPIC, 1), (TOPIC, 2), (TOPIC, 3), ("gone", 0))),
        TxnMarker(8, 0, False, 5, ((OFFSETS_TOPIC, 0),)),
    )
    answer = wire(
        WRITE_TXN_MARKERS, 1, run(handle_write_txn_markers(TxnMarkersContext(markers), asked))
    )
    errors = {
        (int(m.producer_id), str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
        for m in answer.markers
        for t in m.topics
        for p in t.partitions
    }
    assert errors == {
        (7, TOPIC, 0): ErrorCode.none,
        (7, TOPIC, 1): ErrorCode.invalid_producer_epoch,
        (7, TOPIC, 2): ErrorCode.not_leader_or_follower,
        (7, TOPIC, 3): ErrorCode.unknown_topic_or_partition,
        (7, "gone", 0): ErrorCode.unknown_topic_or_partition,
        (8, OFFSETS_TOPIC, 0): ErrorCode.none,
    }
    assert orders0.markers == [(7, 2, 5, True)]
    assert groups.completed == [(0, 8, False)], "the group coordinator hears of its marker"


class Remote:
    """Broker 2, reached through a fake client that runs its WriteTxnMarkers handler
    and passes the answer through the wire codec."""

    def __init__(self, image: Callable[[], MetadataImage], here: dict[Any, FakePartition]):
        self.context = TxnMarkersContext(appender(image, here)[0])
        self.asked = 0
        self.down = 0
        self.host, self.port = "localhost", 9002
        self.security = None  # the sender's: plaintext

    async def request(self, api_key: int, body: Any, **_: Any) -> Any:
        self.asked += 1
        if self.down:
            self.down -= 1
            raise ClientConnectionError("connection refused")
        asked = Request(api_key, 1, 1, "t", build(request_class(api_key, 1), body))  # type: ignore[arg-type]
        return wire(api_key, 1, await handle_write_txn_markers(self.context, asked))  # type: ignore[arg-type]


def sender(
    image: Callable[[], MetadataImage], local: dict[Any, FakePartition], remote: Remote
) -> TxnMarkerSender:
    markers = TxnMarkerSender(
        node_id=NODE_ID, image=image, here=appender(image, local)[0], retry_s=0
    )
    markers._clients._clients[2] = remote  # type: ignore[assignment]
    return markers


def job(*partitions: tuple[str, int], commit: bool = True) -> MarkerJob:
    return MarkerJob("payments", 7, 3, commit, frozenset(partitions), 2)


def test_the_sender_writes_here_and_sends_to_other_leaders() -> None:
    holder = [change_partition(image_of(partitions=2), leader=2, index=1)]
    local, far = FakePartition(), FakePartition()
    remote = Remote(lambda: holder[0], {(TOPIC, 1): far})
    remote.down = 1
    markers = sender(lambda: holder[0], {(TOPIC, 0): local}, remote)
    done = run(markers.write(job((TOPIC, 0), (TOPIC, 1)), 9, lambda: True))
    assert done
    assert local.markers == [(7, 3, 9, True)]
    assert far.markers == [(7, 3, 9, True)], "sent again after the connection failed"
    assert remote.asked == 2


def test_the_sender_follows_a_moved_leader_and_drops_a_deleted_partition() -> None:
    image = image_of(partitions=2)
    holder = [image]
    moved_here = FakePartition()
    # partition 1 is led by broker 2, which says it is not the leader: meanwhile it
    # moved here
    remote = Remote(lambda: holder[0], {})
    holder[0] = change_partition(image, leader=2, index=1)
    markers = sender(lambda: holder[0], {(TOPIC, 1): moved_here}, remote)

    original = remote.request

    async def moving(api_key: int, body: Any, **kw: Any) -> Any:
        answer = await original(api_key, body, **kw)
        holder[0] = change_partition(holder[0], leader=NODE_ID, index=1)
        return answer

    remote.request = moving  # type: ignore[method-assign]
    deleted = image.replay([RemoveTopicRecord(image.topics_by_name[TOPIC].topic_id)])
    assert run(markers.write(job((TOPIC, 1)), 9, lambda: True))
    assert moved_here.markers == [(7, 3, 9, True)]
    gone = sender(lambda: deleted, {}, remote)
    assert run(gone.write(job((TOPIC, 0)), 9, lambda: True)), "nothing owed to a deleted topic"


def test_the_sender_stops_when_fenced_or_no_longer_current() -> None:
    image = image_of()
    fenced = FakePartition(failures=[RecordsError(ErrorCode.invalid_producer_epoch, "newer")])
    markers = sender(lambda: image, {(TOPIC, 0): fenced}, Remote(lambda: image, {}))
    assert not run(markers.write(job((TOPIC, 0)), 9, lambda: True))
    retried = FakePartition(failures=[LeadershipMoved("moving")] * 3)
    calls = itertools.count()
    markers = sender(lambda: image, {(TOPIC, 0): retried}, Remote(lambda: image, {}))
    assert not run(markers.write(job((TOPIC, 0)), 9, lambda: next(calls) < 2))
    assert retried.markers == []
