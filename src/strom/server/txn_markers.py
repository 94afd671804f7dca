"""Transaction markers: writing them here (`MarkerAppender`, which the WriteTxnMarkers
handler and the coordinator share) and sending them to the leaders of a transaction's
partitions (`TxnMarkerSender`, the coordinator's side).

When the end of a transaction is durable in `__transaction_state`, its COMMIT or ABORT
marker goes to every partition of the transaction. The sender groups the partitions by
leader (from the committed metadata image), writes those led here directly, and sends
one WriteTxnMarkers (v1) to each other leader over its client listener, as Kafka's
TransactionMarkerChannelManager does over the inter-broker listener:

    pending partitions -> grouped by leader -> written or sent -> each partition's answer:
        NONE (or UNSUPPORTED_*, a partition the producer could never have written) -> done
        UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS(_AFTER_APPEND),
        REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR, a lost connection -> again, after a pause,
            to the leader the image names then
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED -> stop: a newer producer
            or coordinator took over, this transaction's markers are no longer owed
    a partition the image no longer has (its topic was deleted) is dropped, as Kafka
    skips a partition whose leader endpoint it cannot find; one without a live leader
    waits for one.

`write` returns True once every partition is done: the coordinator then writes the
transaction's CompleteCommit or CompleteAbort record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1.request import WriteTxnMarkersRequest

from strom.client import ClientError
from strom.client.security import ClientSecurity
from strom.group.placement import OFFSETS_TOPIC
from strom.log.results import AppendResult
from strom.metadata.image import MetadataImage
from strom.protocol.records import RecordsError
from strom.server.broker_clients import BrokerClients
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.partition import LeadershipMoved
from strom.txn.coordinator import MarkerJob

log = logging.getLogger(__name__)

WRITE_TXN_MARKERS = int(WriteTxnMarkersRequest.__api_key__)
MARKERS_VERSION = 1
COMMIT_TIMEOUT_S = 30.0
"""How long a marker waits to be committed (Kafka: request.timeout.ms)."""
REQUEST_TIMEOUT_S = COMMIT_TIMEOUT_S + 5.0
RETRY_S = 0.1
"""Pause before a partition whose marker failed is tried again."""

TopicPartition = tuple[str, int]

_RETRIABLE = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)
_DONE = frozenset(
    {ErrorCode.none, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version}
)
_OBSOLETE = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """One marker entry of a WriteTxnMarkers request: end `producer_id`'s transaction on
    each of `partitions`."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


class MarkerPartition(Protocol):
    """A partition led here, as a marker is written to it (server/partition.py)."""

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        now_ms: int,
    ) -> AppendResult: ...

    async def committed(self, offset: int, timeout_s: float) -> None: ...


class MarkerPartitions(Protocol):
    """The partitions this broker holds (server/partitions.py)."""

    def get(self, topic: str, partition: int) -> object | None:
        """The replica of the partition here, led or followed; None if there is none."""
        ...

    def led(
        self, topic: str, partition: int, image: MetadataImage, current_leader_epoch: int = -1
    ) -> tuple[MarkerPartition | None, ErrorCode]: ...


class TxnOffsetsCompletion(Protocol):
    """The group coordinator (server/groups.py): a transaction's offsets in a
    `__consumer_offsets` partition become committed, or are dropped, at its marker."""

    def complete_txn(self, index: int, producer_id: int, *, commit: bool) -> None: ...


class MarkerAppender:
    """Writes markers to the partitions this broker leads and waits until each is
    committed (markers are acks=all); a `__consumer_offsets` partition's group
    coordinator learns of it then. Ports, read at each use: `image`, the committed
    metadata; `partitions`; `groups`."""

    def __init__(
        self,
        *,
        image: Callable[[], MetadataImage],
        partitions: MarkerPartitions,
        groups: Callable[[], TxnOffsetsCompletion],
        on_marker: Callable[[str, int, int], None] = lambda _topic, _index, _producer: None,
        commit_timeout_s: float = COMMIT_TIMEOUT_S,
    ) -> None:
        """`on_marker(topic, index, producer_id)` is told of each marker appended: the
        produce path's verifications of that producer there no longer hold
        (server/txn_verifier.py)."""
        self._image = image
        self._partitions = partitions
        self._groups = groups
        self._on_marker = on_marker
        self._commit_timeout_s = commit_timeout_s

    async def write(self, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer, as Kafka's WriteTxnMarkers handler gives it."""
        image = self._image()
        current = now_ms()
        answers: dict[TopicPartition, ErrorCode] = {}
        waits: list[tuple[TopicPartition, MarkerPartition, int]] = []
        for key in marker.partitions:
            partition, error = self._partitions.led(*key, image)
            if partition is None:
                # Kafka: UNKNOWN_TOPIC_OR_PARTITION where there is no replica here at all
                hosted = self._partitions.get(*key) is not None
                answers[key] = error if hosted else ErrorCode.unknown_topic_or_partition
                continue
            try:
                result = partition.append_marker(
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.coordinator_epoch,
                    commit=marker.commit,
                    now_ms=current,
                )
            except _FAILURES as exc:
                answers[key] = _error_of(exc)
                continue
            self._on_marker(key[0], key[1], marker.producer_id)
            waits.append((key, partition, result.last_offset + 1))
        outcomes = await asyncio.gather(
            *(p.committed(end, self._commit_timeout_s) for _, p, end in waits),
            return_exceptions=True,
        )
        for (key, _, _), outcome in zip(waits, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                answers[key] = _error_of(outcome)
                continue
            answers[key] = ErrorCode.none
            if key[0] == OFFSETS_TOPIC:
                self._groups().complete_txn(key[1], marker.producer_id, commit=marker.commit)
        return answers


_FAILURES = (RecordsError, LeadershipMoved, TimeoutError, PartitionGone, OSError)
"""How writing a marker can fail (anything else is a bug, raised)."""


def _error_of(exc: BaseException) -> ErrorCode:
    if not isinstance(exc, _FAILURES):
        raise exc
    if isinstance(exc, RecordsError):
        return exc.error_code
    if isinstance(exc, LeadershipMoved):
        return ErrorCode.not_leader_or_follower
    if isinstance(exc, TimeoutError):
        return ErrorCode.request_timed_out
    if isinstance(exc, PartitionGone):
        return ErrorCode.unknown_topic_or_partition
    return ErrorCode.kafka_storage_error


class TxnMarkerSender:
    """Writes the markers of a transaction to every one of its partitions (see the
    module docstring). Ports: `image`, the committed metadata (leaders and where each
    broker listens), read at each round; `here`, how markers are written on this broker."""

    def __init__(
        self,
        *,
        node_id: int,
        image: Callable[[], MetadataImage],
        here: MarkerAppender,
        retry_s: float = RETRY_S,
        security: Callable[[], ClientSecurity | None] = lambda: None,
    ) -> None:
        """`security`: how connections to other brokers are secured (inter-broker)."""
        self._node_id = node_id
        self._image = image
        self._here = here
        self._retry_s = retry_s
        self._clients = BrokerClients(f"strom-txn-markers-{node_id}", image, security)

    async def write(
        self, job: MarkerJob, coordinator_epoch: int, current: Callable[[], bool]
    ) -> bool:
        """Write the job's markers until every partition has it (True), or until
        `current()` turns false or a partition answers that the markers are obsolete
        (False: no completion is owed by this coordinator)."""
        pending = set(job.partitions)
        while pending and current():
            image = self._image()
            by_leader: dict[int, list[TopicPartition]] = {}
            for key in sorted(pending):
                leader = _leader_of(image, key)
                if leader is None:
                    log.info(
                        "[node %d] %s-%d is gone: no %s marker of %r owed there",
                        self._node_id,
                        *key,
                        _result(job.commit),
                        job.txn_id,
                    )
                    pending.discard(key)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(key)
            marker = TxnMarker(
                job.producer_id, job.producer_epoch, job.commit, coordinator_epoch, ()
            )
            answers = await asyncio.gather(
                *(
                    self._send(leader, _with(marker, keys))
                    for leader, keys in sorted(by_leader.items())
                )
            )
            for answer in answers:
                for key, error in answer.items():
                    if error in _DONE:
                        pending.discard(key)
                    elif error in _OBSOLETE:
                        log.info(
                            "[node %d] %s marker of %r refused by %s-%d (%s): markers stopped",
                            self._node_id,
                            _result(job.commit),
                            job.txn_id,
                            *key,
                            error.name,
                        )
                        return False
                    elif error not in _RETRIABLE:
                        log.error(
                            "[node %d] %s marker of %r to %s-%d: unexpected %s; retrying",
                            self._node_id,
                            _result(job.commit),
                            job.txn_id,
                            *key,
                            error.name,
                        )
            if pending:
                await asyncio.sleep(self._retry_s)
        return not pending

    async def _send(self, leader: int, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
        if leader == self._node_id:
            return await self._here.write(marker)
        client = self._clients.get(leader)
        if client is None:
            return dict.fromkeys(marker.partitions, ErrorCode.not_leader_or_follower)
        try:
            response = await client.request(
                WRITE_TXN_MARKERS,
                {"markers": [_wire(marker)]},
                api_version=MARKERS_VERSION,
                timeout_s=REQUEST_TIMEOUT_S,
            )
        except (ClientError, OSError, TimeoutError) as exc:
            log.info("[node %d] WriteTxnMarkers to broker %d: %s", self._node_id, leader, exc)
            return dict.fromkeys(marker.partitions, ErrorCode.request_timed_out)
        return _answers(response, marker)

    def close(self) -> None:
        self._clients.close()


def _leader_of(image: MetadataImage, key: TopicPartition) -> int | None:
    """The partition's leader (-1 while it has none); None when the image has no such
    partition."""
    topic = image.topics_by_name.get(key[0])
    partition = None if topic is None else topic.partitions.get(key[1])
    if partition is None:
        return None
    broker = image.brokers.get(partition.leader)
    return -1 if broker is None or broker.fenced else partition.leader


def _with(marker: TxnMarker, keys: Iterable[TopicPartition]) -> TxnMarker:
    return TxnMarker(
        marker.producer_id,
        marker.producer_epoch,
        marker.commit,
        marker.coordinator_epoch,
        tuple(keys),
    )


def _wire(marker: TxnMarker) -> dict[str, Any]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in marker.partitions:
        by_topic.setdefault(topic, []).append(index)
    return {
        "producer_id": marker.producer_id,
        "producer_epoch": marker.producer_epoch,
        "transaction_result": marker.commit,
        "topics": [{"name": t, "partition_indexes": ids} for t, ids in by_topic.items()],
        "coordinator_epoch": marker.coordinator_epoch,
    }


def _answers(response: Any, marker: TxnMarker) -> dict[TopicPartition, ErrorCode]:
    """Each partition's answer; one the response left out is tried again."""
    answers = dict.fromkeys(marker.partitions, ErrorCode.request_timed_out)
    for result in response.markers:
        if int(result.producer_id) != marker.producer_id:
            continue
        for topic in result.topics:
            for partition in topic.partitions:
                key = (str(topic.name), int(partition.partition_index))
                if key in answers:
                    answers[key] = ErrorCode(partition.error_code)
    return answers


def _result(commit: bool) -> str:
    return "COMMIT" if commit else "ABORT"
