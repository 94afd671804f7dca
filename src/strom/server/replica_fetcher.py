"""Followers: copy each followed partition's log from its leader.

One fetcher task per leader broker serves every partition this broker follows from it,
so a slow or unreachable leader holds up only its own partitions. A partition starts
(after every change of leader or leader epoch) by asking the leader, with
OffsetForLeaderEpoch, where its own latest epoch ends there, and truncates its log to
the last offset both logs agree on (replication.follower). Then it fetches as a replica
(Fetch with replica_id = this broker) from its log end:

    truncating --OffsetForLeaderEpoch--> fetching --Fetch--> append, fsync --> fetching ...
        ^                                    |
        +---- diverging_epoch, offset out of range, a refused append ----+

A fetch asks for records from the follower's log end, which tells the leader that the
follower holds everything below it: so where the topic asks for fsync before acks
(flush.messages=1), the appended records are fsynced before the next fetch goes out.
The leader's high watermark comes back with every answer and caps the follower's own.

Each fetcher keeps one fetch session (KIP-227, strom.fetch.fetcher_session) with its
leader: a fetch sends only the partitions whose fetch changed (their log end, epochs or
log start) and forgets those waiting or truncating; the leader still reads all of them and
answers those with news. A lost answer or a session error makes the next fetch full.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.client import ClientError, KafkaConnection
from strom.client.security import ClientSecurity
from strom.config import BrokerConfig
from strom.fetch.fetcher_session import FetcherSession
from strom.fetch.sessions import PartitionFetch, PartitionKey
from strom.metadata.image import MetadataImage
from strom.metrics.traffic import Tally
from strom.protocol.apis import ApiKey
from strom.protocol.records import RecordsError, replica_batches
from strom.server.clock import now_ms
from strom.server.partition import Partition
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)
T = TypeVar("T")

FETCH_VERSION = 12  # topic names, replica_id in the body, last_fetched_epoch
EPOCH_VERSION = 4
CONNECT_TIMEOUT_S = 3.0
REQUEST_TIMEOUT_S = 30.0  # Kafka's replica.socket.timeout.ms
FLUSH_TIMEOUT_S = 10.0
WAIT_FOR_METADATA_S = 0.2
_SESSION_ERRORS = (
    ErrorCode.fetch_session_id_not_found,
    ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
)
_EPOCH_ERRORS = (
    ErrorCode.fenced_leader_epoch,
    ErrorCode.unknown_leader_epoch,
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
)


@dataclass(frozen=True, slots=True)
class FetcherPorts:
    """What the fetchers reach, each read when it is used."""

    node_id: int
    config: Callable[[], BrokerConfig]
    """The broker's config now (the replica.fetch.* sizes, waits and backoff)."""
    image: Callable[[], MetadataImage]
    """The committed metadata image: where each leader listens."""
    replicated_in: Tally = field(default_factory=Tally)
    """Where the bytes and records copied from leaders are counted (metrics)."""
    security: Callable[[], ClientSecurity | None] = lambda: None
    """How connections to the leaders are secured (the inter-broker listener's)."""


@dataclass(slots=True, eq=False)
class _Followed:
    partition: Partition
    leader_epoch: int
    truncating: bool = True
    retry_at: float = 0.0

    @property
    def current(self) -> bool:
        """Still the same role: not deleted, same leader epoch."""
        partition = self.partition
        return not partition.log.closed and partition.leader_epoch == self.leader_epoch


class ReplicaFetchers:
    """Routes followed partitions to one fetcher per leader (see the module docstring)."""

    def __init__(self, ports: FetcherPorts) -> None:
        self._ports = ports
        self._fetchers: dict[int, _LeaderFetcher] = {}
        self._leader_of: dict[tuple[str, int], int] = {}
        self._tasks = TaskSet(f"[node {ports.node_id}] replica fetchers")

    def on_role(self, partition: Partition) -> None:
        """A partition's leader changed: follow the new one, or stop following."""
        key = partition.key
        old = self._leader_of.pop(key, None)
        if old is not None:
            fetcher = self._fetchers.get(old)
            if fetcher is not None:
                fetcher.remove(key)
        leader = partition.leader_id
        if leader < 0 or leader == self._ports.node_id or partition.log.closed:
            return
        fetcher = self._fetchers.get(leader)
        if fetcher is None or fetcher.done:
            fetcher = self._fetchers[leader] = _LeaderFetcher(self._ports, leader)
            self._tasks.spawn(fetcher.run(), f"replica-fetcher-{leader}")
        fetcher.add(_Followed(partition, partition.leader_epoch))
        self._leader_of[key] = leader

    def followed(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the leader this broker fetches it from."""
        return dict(self._leader_of)

    async def stop(self) -> None:
        for fetcher in self._fetchers.values():
            fetcher.close()
        await self._tasks.stop()


class _LeaderFetcher:
    def __init__(self, ports: FetcherPorts, leader_id: int) -> None:
        self._ports = ports
        self._node_id = ports.node_id
        self.leader_id = leader_id
        self._partitions: dict[tuple[str, int], _Followed] = {}
        self._wake = asyncio.Event()
        self._connection: KafkaConnection | None = None
        self._session = FetcherSession()
        """The fetch session (KIP-227) with the leader: each fetch sends only what
        changed, and the answer carries only partitions with something new."""
        self.done = False

    def add(self, followed: _Followed) -> None:
        self._partitions[followed.partition.key] = followed
        self._wake.set()

    def remove(self, key: tuple[str, int]) -> None:
        self._partitions.pop(key, None)

    def close(self) -> None:
        self.done = True
        self._wake.set()
        if self._connection is not None:
            self._connection.close()

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        backoff_s = self._ports.config().replica_fetch_backoff_ms / 1000
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        try:
            # A cancel some inner wait swallowed still ends the loop (the node is stopping).
            while not self.done and not (task is not None and task.cancelling()):
                now = loop.time()
                ready = [f for f in self._partitions.values() if f.retry_at <= now and f.current]
                if not ready:
                    self._wake.clear()
                    waits = [f.retry_at - now for f in self._partitions.values()]
                    timeout = max(0.01, min(waits)) if waits else None
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(timeout):  # wait_for can eat a cancel
                            await self._wake.wait()
                    continue
                try:
                    connection = await self._connect()
                    truncating = [f for f in ready if f.truncating]
                    if truncating:
                        await self._truncate(connection, truncating)
                    fetching = [f for f in ready if not f.truncating and f.current]
                    if fetching:
                        await self._fetch(connection, fetching)
                except (ClientError, OSError, TimeoutError) as exc:
                    log.info(
                        "[node %d] fetching from leader %d: %s; retrying in %.1f s",
                        self._node_id,
                        self.leader_id,
                        exc,
                        backoff_s,
                    )
                    self._drop_connection()
                    await asyncio.sleep(backoff_s)
                except Exception:
                    # A bug must not stop replication from this leader for good.
                    log.exception(
                        "[node %d] fetching from leader %d failed; retrying in %.1f s",
                        self._node_id,
                        self.leader_id,
                        backoff_s,
                    )
                    self._drop_connection()
                    await asyncio.sleep(backoff_s)
        finally:
            self.done = True
            self._drop_connection()

    async def _connect(self) -> KafkaConnection:
        if self._connection is not None and not self._connection.is_closed:
            return self._connection
        broker_image = self._ports.image().brokers.get(self.leader_id)
        if broker_image is None:
            raise ClientError(f"leader {self.leader_id} is not registered")
        self._connection = await KafkaConnection.connect(
            broker_image.host,
            broker_image.port,
            client_id=f"strom-replica-{self._node_id}",
            timeout_s=CONNECT_TIMEOUT_S,
            max_frame_bytes=self._ports.config().replica_fetch_response_max_bytes + (1 << 20),
            security=self._ports.security(),
        )
        return self._connection

    def _drop_connection(self) -> None:
        self._session.failed()  # what the last fetch did is unknown: start over in full
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def _delay(self, followed: _Followed, seconds: float) -> None:
        followed.retry_at = asyncio.get_running_loop().time() + seconds

    # --- truncation ---------------------------------------------------------------------

    async def _truncate(self, connection: KafkaConnection, items: list[_Followed]) -> None:
        asking: list[_Followed] = []
        for followed in items:
            if followed.partition.log.leader_epochs.latest_epoch < 0:
                followed.truncating = False  # nothing of its own to compare: fetch
            else:
                asking.append(followed)
        if not asking:
            return
        topics: dict[str, list[dict[str, Any]]] = {}
        for followed in asking:
            partition = followed.partition
            topics.setdefault(partition.topic, []).append(
                {
                    "partition": partition.index,
                    "current_leader_epoch": followed.leader_epoch,
                    "leader_epoch": partition.log.leader_epochs.latest_epoch,
                }
            )
        response = await connection.request(
            ApiKey.OFFSET_FOR_LEADER_EPOCH,
            EPOCH_VERSION,
            {
                "replica_id": self._node_id,
                "topics": [
                    {"topic": name, "partitions": partitions} for name, partitions in topics.items()
                ],
            },
            timeout_s=REQUEST_TIMEOUT_S,
        )
        by_key = {f.partition.key: f for f in asking}
        for topic in response.topics:
            for result in topic.partitions:
                answered = by_key.get((topic.topic, int(result.partition)))
                if answered is None or not answered.current:
                    continue
                error = ErrorCode(result.error_code)
                if error != ErrorCode.none:
                    self._refused(answered, error, "OffsetForLeaderEpoch")
                    continue
                self._truncate_to_leader(answered, int(result.leader_epoch), int(result.end_offset))
                answered.truncating = False

    def _truncate_to_leader(self, followed: _Followed, epoch: int, end_offset: int) -> None:
        partition = followed.partition
        end, new_end = partition.truncate_to_leader(epoch, end_offset)
        if new_end < end:
            log.info(
                "[node %d] %s-%d: truncated from %d to %d to match leader %d "
                "(its epoch %d ends at %d)",
                self._node_id,
                partition.topic,
                partition.index,
                end,
                new_end,
                self.leader_id,
                epoch,
                end_offset,
            )

    def _refused(self, followed: _Followed, error: ErrorCode, what: str) -> None:
        """The leader does not agree it leads at our epoch: wait for newer metadata."""
        partition = followed.partition
        log.debug(
            "[node %d] %s-%d: %s from leader %d: %s",
            self._node_id,
            partition.topic,
            partition.index,
            what,
            self.leader_id,
            error.name,
        )
        self._delay(followed, WAIT_FOR_METADATA_S)

    # --- fetching -----------------------------------------------------------------------

    async def _fetch(self, connection: KafkaConnection, items: list[_Followed]) -> None:
        config = self._ports.config()
        wanted: dict[PartitionKey, PartitionFetch] = {}
        followed_by_key: dict[PartitionKey, _Followed] = {}
        for followed in items:
            partition = followed.partition
            followed_by_key[partition.key] = followed
            wanted[partition.key] = PartitionFetch(
                partition.topic,
                partition.index,
                partition.log.log_end_offset,
                config.replica_fetch_max_bytes,
                current_leader_epoch=followed.leader_epoch,
                last_fetched_epoch=partition.log.leader_epochs.latest_epoch,
                log_start_offset=partition.log.log_start_offset,
            )
        plan = self._session.plan(wanted)
        wait_ms = config.replica_fetch_wait_max_ms
        response = await connection.request(
            ApiKey.FETCH,
            FETCH_VERSION,
            {
                "replica_id": self._node_id,
                "max_wait": wait_ms,
                "min_bytes": 1,
                "max_bytes": config.replica_fetch_response_max_bytes,
                "isolation_level": 0,
                "session_id": plan.session_id,
                "session_epoch": plan.epoch,
                "topics": [
                    {"topic": topic, "partitions": partitions}
                    for topic, partitions in _by_topic(
                        (str(f.topic), _wire_partition(f)) for f in plan.to_send
                    ).items()
                ],
                "forgotten_topics_data": [
                    {"topic": topic, "partitions": indexes}
                    for topic, indexes in _by_topic(
                        (str(topic), index) for topic, index in plan.to_forget
                    ).items()
                ],
                "rack_id": "",
            },
            timeout_s=wait_ms / 1000 + REQUEST_TIMEOUT_S,
        )
        error = ErrorCode(response.error_code)
        keys = [
            (topic.topic, int(data.partition_index))
            for topic in response.responses
            for data in topic.partitions
        ]
        if not self._session.answered(error, int(response.session_id), keys):
            if error in _SESSION_ERRORS or error == ErrorCode.none:
                log.debug(
                    "[node %d] fetch session with leader %d restarts: %s",
                    self._node_id,
                    self.leader_id,
                    error.name if error != ErrorCode.none else "unexpected partitions",
                )
                return  # the next fetch goes in full
            raise ClientError(f"fetch refused: {error.name}")
        flushing: list[Partition] = []
        for topic in response.responses:
            for data in topic.partitions:
                key = (topic.topic, int(data.partition_index))
                answered = followed_by_key.get(key)
                if answered is None:
                    continue
                fetch_offset = wanted[key].fetch_offset
                if not answered.current or answered.partition.log.log_end_offset != fetch_offset:
                    continue
                if self._apply(answered, fetch_offset, data):
                    flushing.append(answered.partition)
        waits = [p.durable(p.log.log_end_offset) for p in flushing if p.fsync_before_ack]
        if waits:
            try:
                async with asyncio.timeout(FLUSH_TIMEOUT_S):  # wait_for can eat a cancel
                    await asyncio.gather(*waits, return_exceptions=True)
            except TimeoutError:
                log.warning(
                    "[node %d] fsync of records from leader %d took over %.0f s",
                    self._node_id,
                    self.leader_id,
                    FLUSH_TIMEOUT_S,
                )

    def _apply(self, followed: _Followed, fetch_offset: int, data: Any) -> bool:
        """One partition's answer; True when records were appended."""
        partition = followed.partition
        error = ErrorCode(data.error_code)
        if error == ErrorCode.offset_out_of_range:
            leader_start = int(data.log_start_offset)
            if 0 <= fetch_offset < leader_start:
                partition.log.truncate_fully_and_start_at(leader_start)
                log.info(
                    "[node %d] %s-%d: behind leader %d's log start %d; starting there",
                    self._node_id,
                    partition.topic,
                    partition.index,
                    self.leader_id,
                    leader_start,
                )
            else:
                followed.truncating = True
            return False
        if error != ErrorCode.none:
            self._refused(followed, error, "Fetch")
            return False
        diverging = data.diverging_epoch
        if int(diverging.epoch) >= 0 or int(diverging.end_offset) >= 0:
            self._truncate_to_leader(followed, int(diverging.epoch), int(diverging.end_offset))
            return False
        appended = False
        records = data.records
        if records:
            try:
                appended = self._append(partition, fetch_offset, records)
            except (RecordsError, ValueError) as exc:
                log.warning(
                    "[node %d] %s-%d: cannot append what leader %d sent at %d: %s",
                    self._node_id,
                    partition.topic,
                    partition.index,
                    self.leader_id,
                    fetch_offset,
                    exc,
                )
                followed.truncating = True
                self._delay(followed, self._ports.config().replica_fetch_backoff_ms / 1000)
                return False
        partition.follow_high_watermark(int(data.high_watermark))
        self._follow_log_start(partition, int(data.log_start_offset))
        return appended

    def _follow_log_start(self, partition: Partition, leader_start: int) -> None:
        """DeleteRecords at the leader: start where it starts (never past what is here
        or committed); the next fetch tells the leader, whose answer waits for it."""
        log_ = partition.log
        start = min(leader_start, log_.log_end_offset, partition.high_watermark)
        if start > log_.log_start_offset:
            deleted = log_.delete_records_before(start)
            log.info(
                "[node %d] %s-%d: log starts at %d as on leader %d (%d segment(s) deleted)",
                self._node_id,
                partition.topic,
                partition.index,
                start,
                self.leader_id,
                len(deleted),
            )

    def _append(self, partition: Partition, fetch_offset: int, records: bytes) -> bool:
        batches = [
            (view, header)
            for view, header in replica_batches(records)
            if header.base_offset + header.last_offset_delta >= fetch_offset
        ]
        if not batches:
            return False
        if batches[0][1].base_offset < fetch_offset:
            raise ValueError(
                f"a batch starts at {batches[0][1].base_offset}, inside this log's end"
            )
        partition.append_copy(batches, now_ms())
        last = batches[-1][1]
        self._ports.replicated_in.add(
            partition.topic,
            sum(len(view) for view, _ in batches),
            last.base_offset + last.last_offset_delta + 1 - batches[0][1].base_offset,
        )
        return True


def _wire_partition(fetch: PartitionFetch) -> dict[str, int]:
    return {
        "partition": fetch.partition,
        "current_leader_epoch": fetch.current_leader_epoch,
        "fetch_offset": fetch.fetch_offset,
        "last_fetched_epoch": fetch.last_fetched_epoch,
        "log_start_offset": fetch.log_start_offset,
        "partition_max_bytes": fetch.max_bytes,
    }


def _by_topic(items: Iterable[tuple[str, T]]) -> dict[str, list[T]]:
    """Items grouped by topic name, in the order each topic first comes."""
    grouped: dict[str, list[T]] = {}
    for topic, item in items:
        grouped.setdefault(topic, []).append(item)
    return grouped
