"""The share coordinator's shell: one pure `ShareStateShard` (strom.share.coordinator) per
`__share_group_state` partition this broker leads, on the event loop, and their storage.

    created -> follow(image) (load each partition of __share_group_state led here by
            replaying its log; drop one no longer led here, or led at a new epoch)
            -> serving -> close() (pending writes answered NOT_COORDINATOR) -> closed

A share-partition's coordinator is the leader of partition
`share_state_partition(group, topic id, partition)` of `__share_group_state`. The topic
is created on first need (an InitializeShareGroupState, or FindCoordinator with a share
key), with Kafka's topic configs: `cleanup.policy=delete` and `retention.ms=-1`, not
compaction: an update's key is the same for every update of a share-partition, so
compaction would keep only the last update after a snapshot and lose the ones between.

Every decision of a shard that writes records is carried out by `_carry_out`: the records
are appended to the partition and committed (held by every in-sync replica, as acks=all)
within `share.coordinator.write.timeout.ms`; then the shard is told `durable(write_id)`
and the answer goes out. If the write fails, the shard is dropped (every pending answer
gets the coordinator error Kafka gives: COORDINATOR_NOT_AVAILABLE for a timeout or too
few replicas, NOT_COORDINATOR for lost leadership) and the partition is loaded again
from its log at the next request: the log, not memory, says what a failed write left.
A decision that writes nothing is answered once the earlier writes of its key are durable.

Pruning (Kafka's record pruning job): every `share.coordinator.state.topic.prune.interval.ms`
each partition loaded here starts its log at its shard's `redundant_offset()` (the
lowest offset its share-partition states still need), when that is above the log start
and at most the high watermark, the way DeleteRecords moves a leader's log start
(`Partition.delete_records`): durably, and followed by the followers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.metadata import controller
from strom.metadata.image import MetadataImage
from strom.protocol.records import encode_batch, parse_batch_header
from strom.server.clock import now_ms
from strom.server.group_storage import COORDINATOR_ERRORS, StorageError, storage_errors
from strom.server.log_replay import replay_batches
from strom.server.partition import LeadershipMoved
from strom.share.coordinator import ShareStateDecision, ShareStateRecord, ShareStateShard
from strom.share.placement import SHARE_STATE_TOPIC, share_state_partition
from strom.share.records import (
    ShareStateFormatError,
    decode_share_record,
    encode_share_key,
    encode_share_value,
)
from strom.share.state_port import (
    ShareStateKey,
    ShareStateRead,
    ShareStateSummary,
    ShareStateWrite,
)

if TYPE_CHECKING:
    from strom.server.partition import Partition

__all__ = ["ShareCoordinatorService", "ShareCoordinatorUnavailable", "share_state_configs"]

log = logging.getLogger(__name__)

Answer = tuple[ErrorCode, str | None]
A = TypeVar("A")

PRUNE_FOLLOWERS_TIMEOUT_S = 30.0
"""How long a pruning waits for the in-sync followers to start where the leader does
(Kafka's writer gives its DeleteRecords 30 s); they catch up later if they do not."""


class ShareCoordinatorUnavailable(Exception):
    """This broker cannot answer for the key now: NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS or COORDINATOR_NOT_AVAILABLE."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class StatePartitions(Protocol):
    def get(self, topic: str, index: int) -> Partition | None: ...


CreateTopics = Callable[[list[controller.NewTopic]], Awaitable[list[controller.TopicResult]]]


def share_state_configs(config: BrokerConfig, replication_factor: int) -> dict[str, str]:
    """The topic configs Kafka gives `__share_group_state` (ShareCoordinatorService's)."""
    settings = config.share_coordinator
    return {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
        "compression.type": "producer",
        "segment.bytes": str(settings.state_topic_segment_bytes),
        "min.insync.replicas": str(max(1, min(settings.state_topic_min_isr, replication_factor))),
    }


@dataclass(slots=True)
class _Loaded:
    leader_epoch: int
    shard: ShareStateShard
    waiting: dict[int, asyncio.Future[None]] = field(default_factory=dict)
    """Write id -> what its answer (and later answers on its key) await."""


class ShareCoordinatorService:
    """Ports, each read when used: `config` (share.coordinator.*), `image` (the
    topic's leaders, the share-partitions' topics), `partitions` (the partitions held
    here), `create_topics` (how `__share_group_state` is created)."""

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        image: Callable[[], MetadataImage],
        partitions: StatePartitions,
        create_topics: CreateTopics,
    ) -> None:
        self._node_id = node_id
        self._config = config
        self._image = image
        self._partitions = partitions
        self._create_topics = create_topics
        self._loaded: dict[int, _Loaded] = {}
        self._creating: asyncio.Task[None] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self._closed = False

    # --- where keys live ----------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        topic = self._image().topics_by_name.get(SHARE_STATE_TOPIC)
        if topic is not None:
            return len(topic.partitions)
        return self._config().share_coordinator.state_topic_num_partitions

    def partition_of(self, key: ShareStateKey) -> int:
        return share_state_partition(key.group_id, key.topic_id, key.partition, self.num_partitions)

    def leader_of(self, index: int) -> int:
        """The leader of partition `index` (-1 while it has none or there is no topic)."""
        topic = self._image().topics_by_name.get(SHARE_STATE_TOPIC)
        partition = topic.partitions.get(index) if topic is not None else None
        return -1 if partition is None else partition.leader

    def topic_exists(self) -> bool:
        return SHARE_STATE_TOPIC in self._image().topics_by_name

    async def ensure_topic(self) -> None:
        """Create `__share_group_state` unless it exists (once, whoever asks);
        ShareCoordinatorUnavailable(COORDINATOR_NOT_AVAILABLE) when it cannot be now."""
        if self.topic_exists():
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create_topic())
            self._creating.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self._config()
        settings = config.share_coordinator
        live = sum(1 for b in self._image().brokers.values() if not b.fenced)
        replication = max(1, min(settings.state_topic_replication_factor, live))
        topic = controller.NewTopic(
            SHARE_STATE_TOPIC,
            settings.state_topic_num_partitions,
            replication,
            configs=share_state_configs(config, replication),
        )
        results = await self._create_topics([topic])
        if results[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.error(
                "[node %d] cannot create %s: %s",
                self._node_id,
                SHARE_STATE_TOPIC,
                results[0].error_message,
            )
            raise ShareCoordinatorUnavailable(
                ErrorCode.coordinator_not_available,
                f"cannot create {SHARE_STATE_TOPIC}: {results[0].error_message}",
            )

    # --- loading ------------------------------------------------------------------

    def follow(self, image: MetadataImage) -> None:
        """Load each partition led here (again at a new leader epoch); drop the others."""
        topic = image.topics_by_name.get(SHARE_STATE_TOPIC)
        leading: dict[int, int] = {}
        if topic is not None and not self._closed:
            leading = {
                index: partition.leader_epoch
                for index, partition in topic.partitions.items()
                if partition.leader == self._node_id
            }
        for index, loaded in sorted(self._loaded.items()):
            if leading.get(index) != loaded.leader_epoch:
                self._unload(index, ErrorCode.not_coordinator)
        for index, epoch in sorted(leading.items()):
            if index not in self._loaded:
                self._load(index, epoch)

    def _load(self, index: int, leader_epoch: int) -> _Loaded | None:
        partition = self._partitions.get(SHARE_STATE_TOPIC, index)
        if partition is None:
            return None
        shard = ShareStateShard(
            self._config().share_coordinator.snapshot_update_records_per_snapshot
        )
        count = 0
        log_start = partition.log.log_start_offset
        for header, records in replay_batches(partition):
            if header.is_control:
                continue
            for record in records:
                if record.key is None or record.offset < log_start:
                    continue
                try:
                    key, value = decode_share_record(record.key, record.value)
                except ShareStateFormatError as exc:
                    log.warning(
                        "[node %d] skipping a record of %s: %s",
                        self._node_id,
                        SHARE_STATE_TOPIC,
                        exc,
                    )
                    continue
                shard.load(ShareStateRecord(key, value), record.offset)
                count += 1
        loaded = self._loaded[index] = _Loaded(leader_epoch, shard)
        log.info(
            "[node %d] coordinating the share-partition states of %s-%d at leader epoch %d "
            "(%d record(s) loaded from offset %d)",
            self._node_id,
            SHARE_STATE_TOPIC,
            index,
            leader_epoch,
            count,
            log_start,
        )
        return loaded

    def _unload(self, index: int, error: ErrorCode) -> None:
        loaded = self._loaded.pop(index, None)
        if loaded is None:
            return
        loaded.shard.forget()
        for future in loaded.waiting.values():
            if not future.done():
                future.set_exception(ShareCoordinatorUnavailable(error, "state not written"))
        log.info(
            "[node %d] no longer coordinating the share-partition states of %s-%d",
            self._node_id,
            SHARE_STATE_TOPIC,
            index,
        )

    def _coordinating(self, key: ShareStateKey) -> tuple[int, _Loaded]:
        if self._closed:
            raise ShareCoordinatorUnavailable(ErrorCode.not_coordinator, "broker is stopping")
        topic = self._image().topics_by_name.get(SHARE_STATE_TOPIC)
        if topic is None:
            raise ShareCoordinatorUnavailable(
                ErrorCode.coordinator_not_available, f"no {SHARE_STATE_TOPIC} yet"
            )
        index = self.partition_of(key)
        partition = topic.partitions.get(index)
        if partition is None or partition.leader != self._node_id:
            raise ShareCoordinatorUnavailable(
                ErrorCode.not_coordinator, f"this broker does not lead {SHARE_STATE_TOPIC}-{index}"
            )
        loaded = self._loaded.get(index)
        if loaded is not None and loaded.leader_epoch != partition.leader_epoch:
            self._unload(index, ErrorCode.not_coordinator)
            loaded = None
        if loaded is None:
            loaded = self._load(index, partition.leader_epoch)
        if loaded is None:
            raise ShareCoordinatorUnavailable(
                ErrorCode.coordinator_load_in_progress, f"{SHARE_STATE_TOPIC}-{index} is loading"
            )
        return index, loaded

    def _partition_count(self, key: ShareStateKey) -> int | None:
        topic = self._image().topics_by_id.get(key.topic_id)
        return None if topic is None else len(topic.partitions)

    # --- the five requests (raise ShareCoordinatorUnavailable) ----------------------

    async def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int) -> Answer:
        index, loaded = self._coordinating(key)
        count = self._partition_count(key)
        decision = loaded.shard.initialize(key, state_epoch, start_offset, count, now_ms())
        return await self._carry_out(index, loaded, decision)

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareStateRead:
        index, loaded = self._coordinating(key)
        count = self._partition_count(key)
        decision = loaded.shard.read(key, leader_epoch, count, now_ms())
        return await self._carry_out(index, loaded, decision)

    async def write(self, key: ShareStateKey, write: ShareStateWrite) -> Answer:
        index, loaded = self._coordinating(key)
        count = self._partition_count(key)
        decision = loaded.shard.write(key, write, count, now_ms())
        return await self._carry_out(index, loaded, decision)

    async def delete(self, key: ShareStateKey) -> Answer:
        index, loaded = self._coordinating(key)
        decision = loaded.shard.delete(key, self._partition_count(key))
        return await self._carry_out(index, loaded, decision)

    async def summary(self, key: ShareStateKey) -> ShareStateSummary:
        index, loaded = self._coordinating(key)
        decision = loaded.shard.summary(key, self._partition_count(key))
        return await self._carry_out(index, loaded, decision)

    # --- writes ---------------------------------------------------------------------

    async def _carry_out(self, index: int, loaded: _Loaded, decision: ShareStateDecision[A]) -> A:
        if not decision.records:
            waiting = loaded.waiting.get(decision.after_write_id)
            if waiting is not None:
                await asyncio.shield(waiting)
            return decision.answer
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.add_done_callback(lambda f: f.cancelled() or f.exception())
        loaded.waiting[decision.write_id] = done
        task = asyncio.create_task(self._write(index, loaded, decision))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        await asyncio.shield(done)
        return decision.answer

    async def _write(self, index: int, loaded: _Loaded, decision: ShareStateDecision[A]) -> None:
        """Append, wait, and tell the shard, whatever happens to the caller."""
        error = ErrorCode.not_coordinator  # if cancelled: the broker is stopping
        try:
            if self._loaded.get(index) is not loaded:  # dropped before its turn: not written
                return
            await self._append(index, loaded.shard, decision)
            error = ErrorCode.none
        except StorageError as exc:
            log.error("[node %d] cannot write share-partition state: %s", self._node_id, exc)
            error = COORDINATOR_ERRORS.get(exc.error_code, exc.error_code)
        finally:
            if error is ErrorCode.none:
                for write_id in loaded.shard.durable(decision.write_id):
                    future = loaded.waiting.pop(write_id, None)
                    if future is not None and not future.done():
                        future.set_result(None)
            elif self._loaded.get(index) is loaded:
                self._unload(index, error)  # loaded again from the log at the next request
            else:
                future = loaded.waiting.get(decision.write_id)
                if future is not None and not future.done():
                    future.set_exception(ShareCoordinatorUnavailable(error, "state not written"))

    async def _append(
        self, index: int, shard: ShareStateShard, decision: ShareStateDecision[A]
    ) -> None:
        """The one place this coordinator writes through `Partition`: the shard learns
        where the records sit as soon as they are appended (a pruning must not pass
        them); raises StorageError."""
        records = decision.records
        partition = self._partitions.get(SHARE_STATE_TOPIC, index)
        if partition is None:
            raise StorageError(ErrorCode.unknown_topic_or_partition, f"no {index} here")
        current = now_ms()
        timeout_s = self._config().share_coordinator.write_timeout_ms / 1000
        with storage_errors():
            batch = encode_batch(
                [
                    (
                        encode_share_key(r.key),
                        None if r.value is None else encode_share_value(r.value),
                        (),
                    )
                    for r in records
                ],
                base_timestamp_ms=current,
            )
            view = memoryview(batch)
            result = partition.append(
                [(view, parse_batch_header(view))], now_ms=current, producer_check=False
            )
            shard.appended(decision.write_id, result.base_offset)
            await partition.committed(result.last_offset + 1, timeout_s)

    # --- pruning --------------------------------------------------------------------

    async def run_pruning(self) -> None:
        """Prune every `share.coordinator.state.topic.prune.interval.ms`, until cancelled."""
        while True:
            interval_ms = self._config().share_coordinator.state_topic_prune_interval_ms
            await asyncio.sleep(interval_ms / 1000)
            await self.prune()

    async def prune(self) -> None:
        """Start each partition loaded here at the offset its states still need."""
        await asyncio.gather(
            *(self._prune(index, loaded) for index, loaded in sorted(self._loaded.items()))
        )

    async def _prune(self, index: int, loaded: _Loaded) -> None:
        offset = loaded.shard.redundant_offset()
        partition = self._partitions.get(SHARE_STATE_TOPIC, index)
        if (
            offset is None
            or partition is None
            or not partition.is_leader
            or partition.leader_epoch != loaded.leader_epoch  # not loaded at this epoch yet
        ):
            return
        before = partition.log.log_start_offset
        if not before < offset <= partition.high_watermark:
            return
        try:
            await partition.delete_records(offset, PRUNE_FOLLOWERS_TIMEOUT_S)
        except (TimeoutError, LeadershipMoved):
            pass  # the start moved here (or not, if leadership moved first)
        except (OSError, ValueError) as exc:
            log.warning(
                "[node %d] cannot prune %s-%d: %s", self._node_id, SHARE_STATE_TOPIC, index, exc
            )
            return
        if partition.log.log_start_offset > before:
            log.info(
                "[node %d] pruned %s-%d: its log starts at %d (was %d), the lowest offset "
                "its share-partition states still need",
                self._node_id,
                SHARE_STATE_TOPIC,
                index,
                partition.log.log_start_offset,
                before,
            )

    def close(self) -> None:
        """Pending answers get NOT_COORDINATOR; the caller finds the coordinator again."""
        self._closed = True
        for task in list(self._writes):
            task.cancel()
        for index in list(self._loaded):
            self._unload(index, ErrorCode.not_coordinator)

    async def wait_writes(self) -> None:
        """Wait for the writes under way (tests)."""
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._writes, return_exceptions=True)
