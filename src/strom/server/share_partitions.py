"""The share-partition leader's shell (KIP-932): one `SharePartitionState` per
(share group, topic-partition) this broker leads, carried out against the log, the
share-state port and the group's dead-letter topic.

    unknown  -- first ShareFetch/ShareAcknowledge -> loaded through the port (read at the
                partition's leader epoch; a state never placed is placed by
                share.auto.offset.reset and its first snapshot written)
    held     -- a decision -> its records written through the port, then the answer;
                a failed write drops the state (it is read again at the next use) and
                answers the error
    held     -- a durable decision with dead letters (their records ARCHIVING) -> the
                copies made in the background, in decision order, then reported to the
                core, whose ARCHIVED records are written (KIP-1191's phase 2)
    loaded   -- with ARCHIVING records (a crash, a new leader between the two phases)
                -> their copies made again, as above
    held     -- this broker stops leading the partition, or its leader epoch changes ->
                dropped (a fetch answers NOT_LEADER_OR_FOLLOWER)

Each share-partition's decisions are serialized by its own lock, held through the write
that makes them durable, so writes reach the port in decision order. A timer task ticks
every state at its next lock deadline and follows the log start (retention,
DeleteRecords). Fetches waiting for records wait on `changed`, set by every decision that
makes records acquirable.

A copy that fails for good (after the copier's retries) is logged and its records are
archived anyway, as Kafka does. A copy resumed after a crash may repeat one made just
before it: dead letters are copied at least once. A copy finishing after the state was
dropped here is not reported: whoever loads the state next copies those records again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.config.group_configs import duration_ms
from strom.log.results import OffsetOutOfRange
from strom.metadata.image import MetadataImage
from strom.server.clock import now_ms
from strom.server.partition import Partition
from strom.server.partitions import PartitionManager
from strom.server.share_dead_letters import DeadLetterCopier
from strom.share.config import AutoOffsetReset, SharePartitionConfig
from strom.share.log_batches import fetched_records, slice_batches
from strom.share.partition import SharePartitionState
from strom.share.state_port import (
    UNINITIALIZED_START_OFFSET,
    ShareStateKey,
    ShareStatePort,
)
from strom.share.state_writes import consumer_error, snapshot_of_read, state_write
from strom.share.values import (
    AckBatch,
    AcquiredRecords,
    DeadLetter,
    ShareDecision,
    SharePartitionId,
)

__all__ = ["ShareAcquired", "SharePartitionManager", "share_partition_config"]

log = logging.getLogger(__name__)

_IDLE_TICK_S = 1.0
"""How often the timer task looks at the log starts and leaderships with no lock due."""
_BY_DURATION = "by_duration:"


@dataclass(frozen=True, slots=True)
class ShareAcquired:
    """A ShareFetch's answer for one share-partition."""

    error: ErrorCode = ErrorCode.none
    records: bytes = b""
    acquired: tuple[AcquiredRecords, ...] = ()
    retry_at_ms: int | None = None
    """When a record held back by a delivery delay or backoff becomes acquirable."""


@dataclass(slots=True)
class _Held:
    core: SharePartitionState
    partition: Partition
    leader_epoch: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    copying: asyncio.Lock = field(default_factory=asyncio.Lock)
    """Taken by each copy of dead letters in turn (first come, first served), so they
    reach the dead-letter topic in decision order."""


def _group_value(own: Mapping[str, str], broker: Mapping[str, str], name: str, default: str) -> str:
    if name in own:
        return own[name]
    return broker.get(f"group.{name}", default)


def share_partition_config(
    group: Mapping[str, str], topic: Mapping[str, str], broker: Mapping[str, str]
) -> SharePartitionConfig:
    """A share-partition's settings: the group's configs over the `group.share.*` broker
    keys, the topic's strom.share.* configs over the broker keys of those names."""

    def topic_value(name: str, default: str) -> int:
        return int(topic.get(name, broker.get(name, default)))

    reset = _group_value(group, {}, "share.auto.offset.reset", "latest")
    dead_letter = group.get("errors.deadletterqueue.topic.name", "").strip()
    return SharePartitionConfig(
        record_lock_duration_ms=int(
            _group_value(group, broker, "share.record.lock.duration.ms", "30000")
        ),
        delivery_count_limit=int(_group_value(group, broker, "share.delivery.count.limit", "5")),
        max_record_locks=int(
            _group_value(group, broker, "share.partition.max.record.locks", "2000")
        ),
        auto_offset_reset=(
            AutoOffsetReset.BY_DURATION
            if reset.startswith(_BY_DURATION)
            else AutoOffsetReset(reset)
        ),
        renew_acknowledge_enable=group.get("share.renew.acknowledge.enable", "true") == "true",
        dead_letter_topic=dead_letter or None,
        delivery_delay_ms=topic_value("strom.share.delivery.delay.ms", "0"),
        redelivery_backoff_ms=topic_value("strom.share.redelivery.backoff.ms", "0"),
        redelivery_backoff_max_ms=topic_value("strom.share.redelivery.backoff.max.ms", "60000"),
    )


class ShareUnavailable(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


class SharePartitionManager:
    def __init__(
        self,
        node_id: int,
        state: ShareStatePort,
        partitions: PartitionManager,
        image: Callable[[], MetadataImage],
        config: Callable[[], BrokerConfig],
        dead_letters: DeadLetterCopier,
    ) -> None:
        self._label = f"[node {node_id}] "
        self._state = state
        self._partitions = partitions
        self._image = image
        self._config = config
        self._dead_letters = dead_letters
        self._held: dict[ShareStateKey, _Held] = {}
        self._loading: dict[ShareStateKey, asyncio.Lock] = {}
        self._timer_changed = asyncio.Event()
        self.changed: set[asyncio.Future[None]] = set()
        """Futures of waiting ShareFetches: set when records may have become acquirable."""
        self._releasing: set[asyncio.Task[None]] = set()
        self._copies: set[asyncio.Task[None]] = set()

    def close(self) -> None:
        """The broker stops: copies under way stop (their records stay ARCHIVING in
        `__share_group_state`, copied by the next leader) and the dead-letter copier
        closes its clients of other brokers."""
        for task in list(self._copies):
            task.cancel()
        self._dead_letters.close()

    # ------------------------------------------------------------------ configs

    def config_of(self, group_id: str, topic: str) -> SharePartitionConfig:
        image = self._image()
        return share_partition_config(
            image.group_configs(group_id), image.topic_configs(topic), self._config().raw
        )

    def record_lock_duration_ms(self, group_id: str) -> int:
        own = self._image().group_configs(group_id)
        return int(_group_value(own, self._config().raw, "share.record.lock.duration.ms", "30000"))

    # ------------------------------------------------------------------ decisions

    async def acquire(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        partition: Partition,
        *,
        max_records: int,
        max_bytes: int,
        first: bool,
    ) -> ShareAcquired:
        """Acquire up to `max_records` records (reading at most `max_bytes` of the log,
        one batch at least when `first`) for `member_id`."""
        key = ShareStateKey(group_id, topic_id, partition.index)
        try:
            held = await self._hold(key, partition)
        except ShareUnavailable as exc:
            return ShareAcquired(exc.error)
        async with held.lock:
            if self._held.get(key) is not held:
                return ShareAcquired(ErrorCode.not_leader_or_follower)
            current = now_ms()
            self._refresh(held, group_id, partition.topic)
            await self._carry_out(key, held, self._follow_log_start(held, current))
            core = held.core
            fetch_offset = core.next_fetch_offset(current)
            visible = partition.high_watermark
            if fetch_offset >= visible or max_records <= 0:
                return ShareAcquired(retry_at_ms=core.next_backoff_end_ms(current))
            try:
                read = partition.log.read(
                    fetch_offset, max(max_bytes, 0), max_offset=visible, min_one_batch=first
                )
            except OffsetOutOfRange:
                return ShareAcquired(ErrorCode.offset_out_of_range)
            data = read.read_bytes() if read.size_bytes else b""
            delay = core.config.delivery_delay_ms > 0
            # Without a delay every record from the end offset on is acquirable, so
            # no more than this many are looked at (a 1 MB read holds thousands).
            limit = None if delay else max_records + max(core.end_offset - fetch_offset, 0)
            fetched = [
                r
                for r in fetched_records(
                    data, timestamps=delay, limit=limit, from_offset=fetch_offset
                )
                if r.offset < visible
            ]
            decision, retry_at_ms = core.acquire(
                member_id, fetch_offset, fetched, max_records, current
            )
            error = await self._carry_out(key, held, decision)
            if error is not ErrorCode.none:
                return ShareAcquired(error)
            backoff = core.next_backoff_end_ms(current)
            if backoff is not None:
                retry_at_ms = backoff if retry_at_ms is None else min(retry_at_ms, backoff)
            if decision.acquired:
                self._timer_changed.set()
            return ShareAcquired(
                records=slice_batches(data, decision.acquired),
                acquired=decision.acquired,
                retry_at_ms=retry_at_ms,
            )

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        topic_id: uuid.UUID,
        partition: Partition,
        batches: Sequence[AckBatch],
    ) -> ErrorCode:
        """A member's acknowledgements of one share-partition: NONE once durable."""
        key = ShareStateKey(group_id, topic_id, partition.index)
        held = self._held.get(key)
        if held is None or held.partition is not partition:
            # Nothing was acquired here since this broker leads it: no record can be
            # acquired by this member (Kafka answers so for an unknown share-partition).
            return ErrorCode.invalid_record_state
        async with held.lock:
            if self._held.get(key) is not held:
                return ErrorCode.not_leader_or_follower
            self._refresh(held, group_id, partition.topic)
            decision = held.core.acknowledge(member_id, batches, now_ms())
            written = await self._carry_out(key, held, decision)
            return written if written is not ErrorCode.none else decision.error

    def member_left(self, group_id: str, member_id: str) -> None:
        """The group coordinator here removed a member (it left, or its session ran
        out): its records on the share-partitions led here go back now, not when their
        locks run out. Those on other brokers go back when its share sessions there
        close or their locks run out."""
        task = asyncio.get_running_loop().create_task(self.release_member(group_id, member_id))
        self._releasing.add(task)
        task.add_done_callback(self._released)

    def _released(self, task: asyncio.Task[None]) -> None:
        self._releasing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%sreleasing a member's records failed: %r", self._label, task.exception())

    async def release_member(self, group_id: str, member_id: str) -> None:
        """A member left its share group (or closed its share session): every record it
        holds here goes back (or is archived at the delivery count limit)."""
        for key, held in list(self._held.items()):
            if key.group_id != group_id:
                continue
            async with held.lock:
                if self._held.get(key) is held:
                    await self._carry_out(key, held, held.core.release_member(member_id, now_ms()))

    # ------------------------------------------------------------------ loading

    async def _hold(self, key: ShareStateKey, partition: Partition) -> _Held:
        held = self._held.get(key)
        if held is not None and held.partition is partition:
            if held.leader_epoch == partition.leader_epoch and partition.is_leader:
                return held
            self._drop(key)
        loading = self._loading.setdefault(key, asyncio.Lock())
        async with loading:
            held = self._held.get(key)
            if held is not None and held.partition is partition:
                return held
            held = await self._load(key, partition)
            self._held[key] = held
            async with held.lock:
                await self._carry_out(key, held, held.core.resume_archiving(now_ms()))
            return held

    async def _load(self, key: ShareStateKey, partition: Partition) -> _Held:
        leader_epoch = partition.leader_epoch
        read = await self._state.read(key, leader_epoch)
        if read.error is not ErrorCode.none:
            log.warning("%sshare-partition %s: read refused: %s", self._label, key, read.error)
            raise ShareUnavailable(consumer_error(read.error))
        if not partition.is_leader or partition.leader_epoch != leader_epoch:
            raise ShareUnavailable(ErrorCode.not_leader_or_follower)
        pid = SharePartitionId(key.group_id, key.topic_id, partition.topic, partition.index)
        config = self.config_of(key.group_id, partition.topic)
        current = now_ms()
        label = self._label
        if read.start_offset != UNINITIALIZED_START_OFFSET:
            snapshot = snapshot_of_read(read, leader_epoch, current)
            core = SharePartitionState.load(
                pid, config, [snapshot], current, leader_epoch=leader_epoch, label=label
            )
            return _Held(core, partition, leader_epoch)
        log_ = partition.log
        by_duration = None
        if config.auto_offset_reset is AutoOffsetReset.BY_DURATION:
            by_duration = self._offset_for_duration(key.group_id, partition, current)
        core, decision = SharePartitionState.initialize(
            pid,
            config,
            log_start_offset=log_.log_start_offset,
            log_end_offset=partition.high_watermark,
            now_ms=current,
            offset_for_duration=by_duration,
            state_epoch=read.state_epoch,
            leader_epoch=leader_epoch,
            label=label,
        )
        held = _Held(core, partition, leader_epoch)
        for record in decision.records:
            error, message = await self._state.write(key, state_write(record, core.state_epoch))
            if error is not ErrorCode.none:
                log.warning("%sshare-partition %s: first write refused: %s", label, key, message)
                raise ShareUnavailable(consumer_error(error))
        return held

    def _offset_for_duration(self, group_id: str, partition: Partition, current: int) -> int:
        reset = self._image().group_configs(group_id).get("share.auto.offset.reset", "")
        since = current - duration_ms(reset[len(_BY_DURATION) :])
        found = partition.log.offset_for_timestamp(since)
        return partition.high_watermark if found is None else found[0]

    def _refresh(self, held: _Held, group_id: str, topic: str) -> None:
        """Configs changed at run time apply to the next decision, as in Kafka."""
        config = self.config_of(group_id, topic)
        if config != held.core.config:
            held.core.config = dataclasses.replace(
                config, snapshot_update_records=held.core.config.snapshot_update_records
            )

    def state_reset(self, key: ShareStateKey) -> None:
        """The group coordinator started this share-partition's state again (altered or
        deleted offsets): the next use reads it anew."""
        self._drop(key)
        self._wake()

    def _drop(self, key: ShareStateKey) -> None:
        if self._held.pop(key, None) is not None:
            log.info("%sshare-partition %s: no longer held here", self._label, key)

    # ------------------------------------------------------------------ effects

    async def _carry_out(
        self, key: ShareStateKey, held: _Held, decision: ShareDecision
    ) -> ErrorCode:
        """Write the decision's records, then start copying its dead letters; NONE once
        durable. A refused write drops the state: the next use reads the durable one."""
        for record in decision.records:
            write = state_write(record, held.core.state_epoch)
            error, message = await self._state.write(key, write)
            if error is not ErrorCode.none:
                log.warning(
                    "%sshare-partition %s: write refused (%s: %s); reloading",
                    self._label,
                    key,
                    error.name,
                    message,
                )
                self._drop(key)
                self._wake()
                return consumer_error(error)
        if decision.dead_letters:
            task = asyncio.get_running_loop().create_task(
                self._copy_then_archive(key, held, decision.dead_letters)
            )
            self._copies.add(task)
            task.add_done_callback(self._copied)
        if decision.records:
            self._wake()
        return ErrorCode.none

    async def _copy_then_archive(
        self, key: ShareStateKey, held: _Held, letters: Sequence[DeadLetter]
    ) -> None:
        """KIP-1191's phase 2: copy the dead letters (their ARCHIVING state is durable),
        then archive them. A copy that failed for good was logged by the copier and is
        archived anyway, as Kafka does."""
        async with held.copying:
            if self._held.get(key) is not held:
                return  # dropped: whoever loads the state copies its ARCHIVING records
            try:
                await self._dead_letters.copy(held.partition, letters)
            except Exception:  # a bug: logged, and archived anyway rather than stuck
                log.exception("%sshare-partition %s: copying %s failed", self._label, key, letters)
        async with held.lock:
            if self._held.get(key) is not held:
                log.info(
                    "%sshare-partition %s: dead letters copied after the state was dropped; "
                    "the next load copies them again",
                    self._label,
                    key,
                )
                return
            await self._carry_out(key, held, held.core.dead_letters_copied(letters, now_ms()))

    def _copied(self, task: asyncio.Task[None]) -> None:
        self._copies.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("%scopying dead letters failed: %r", self._label, task.exception())

    def _follow_log_start(self, held: _Held, current: int) -> ShareDecision:
        log_start = held.partition.log.log_start_offset
        if log_start > held.core.start_offset:
            return held.core.on_log_start_offset(log_start, current)
        return ShareDecision()

    def _wake(self) -> None:
        for waiter in self.changed:
            if not waiter.done():
                waiter.set_result(None)
        self.changed.clear()

    # ------------------------------------------------------------------ timers

    async def run_timers(self) -> None:
        """Expire locks at their deadlines; follow log starts and leaderships."""
        while True:
            deadlines = [
                d for h in list(self._held.values()) if (d := h.core.next_deadline_ms()) is not None
            ]
            wait_s = _IDLE_TICK_S
            if deadlines:
                wait_s = min(wait_s, max(0.0, (min(deadlines) - now_ms()) / 1000))
            self._timer_changed.clear()
            try:
                async with asyncio.timeout(wait_s):
                    await self._timer_changed.wait()
            except TimeoutError:
                pass
            await self._tick_all()

    async def _tick_all(self) -> None:
        for key, held in list(self._held.items()):
            partition = held.partition
            led = self._partitions.get(partition.topic, partition.index)
            if led is not partition or not partition.is_leader:
                self._drop(key)
                continue
            if partition.leader_epoch != held.leader_epoch:
                self._drop(key)
                continue
            current = now_ms()
            due = held.core.next_deadline_ms()
            moved = partition.log.log_start_offset > held.core.start_offset
            if (due is None or due > current) and not moved:
                continue
            async with held.lock:
                if self._held.get(key) is not held:
                    continue
                await self._carry_out(key, held, self._follow_log_start(held, current))
                if self._held.get(key) is held:
                    await self._carry_out(key, held, held.core.tick(current))
            self._wake()
