"""One partition replica on this broker: the shell around its replication core.

`Partition` holds the partition's log and the futures waiting on it (acks=all writes,
long polls), feeds the core (replication.replica.Replica) what happens to the log and on
the wire, and carries out the core's effects: the one owner of both, on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kio.schema.errors import ErrorCode

from strom.log.append_layout import BATCH_OVERHEAD_BYTES
from strom.log.config import LogConfig
from strom.log.partition_log import PartitionLog
from strom.log.results import AppendResult
from strom.log.transactions import AbortedTxn
from strom.protocol.batch_header import parse_batch_header
from strom.protocol.markers import encode_marker_batch
from strom.protocol.records import BatchHeader, RecordsError
from strom.replication.leader import LeaderState
from strom.replication.replica import (
    Assignment,
    Commit,
    Effect,
    FailWaiters,
    Follow,
    ProposeIsr,
    Replica,
    StartEpoch,
    Truncate,
)

log = logging.getLogger(__name__)


class LeadershipMoved(Exception):
    """The partition's leadership moved while a write waited for its records."""


class Durability(Protocol):
    """Group commit (server/flusher.py): fsyncs rounds of logs in a worker thread."""

    def request(self, partition: Partition) -> None:
        """Flush `partition` in the next round; do not wait."""

    async def flushed(self, partition: Partition, offset: int) -> None:
        """Return once every record of `partition` below `offset` is on disk."""


class _NoDurability:
    """For partitions outside a broker (tests): nothing is fsynced, nothing waits."""

    def request(self, partition: Partition) -> None:
        pass

    async def flushed(self, partition: Partition, offset: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ReplicaPorts:
    """What a partition's effects reach outside it."""

    propose_isr: Callable[[Partition, ProposeIsr], None]
    """Send an ISR change to the controller (server/isr.py)."""
    on_role: Callable[[Partition], None]
    """Its leader (or leader epoch) changed: follow the new one, or stop following."""
    durability: Durability = field(default_factory=_NoDurability)
    """Where appended records go to be fsynced."""
    isr_changed: Callable[[bool, bool], None] = lambda _shrank, _grew: None
    """The ISR of a partition led here lost members, gained members, or both (metrics)."""


def _no_isr_change(_partition: Partition, _change: ProposeIsr) -> None:
    pass


def _no_role_change(_partition: Partition) -> None:
    pass


NO_PORTS = ReplicaPorts(_no_isr_change, _no_role_change)


@dataclass(slots=True, eq=False)
class Partition:
    """One partition replica on this broker: the shell around its replication core.

    The decisions (role, high watermark, ISR, admission, truncation) are the core's
    (replication.replica.Replica); this object holds the log and the futures that wait on
    it, and carries out the core's effects. The high watermark is the offset below which
    every in-sync replica holds the records; consumers read below it only. With
    `flush.messages=1` (the default) a replica counts its records only once they are
    fsynced, so nothing a consumer read or acks=all acknowledged is lost by a crash of
    fewer than all in-sync replicas, machine crashes included.

    Transactions: the log keeps each producer's open transaction (from its first
    transactional batch to its COMMIT or ABORT marker, `append_marker`); read_committed
    consumers read below the last stable offset only, the high watermark or the first
    offset of a transaction that is open or whose marker is not yet below it.
    """

    topic: str
    topic_id: uuid.UUID
    index: int
    log: PartitionLog
    config: LogConfig
    replica: Replica
    ports: ReplicaPorts = NO_PORTS
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    """Long polls (consumers' and followers' fetches) waiting for data."""
    hw_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    """Writes waiting for the high watermark to pass an offset."""
    start_waiters: list[tuple[int, asyncio.Future[None]]] = field(default_factory=list)
    """DeleteRecords waiting for every in-sync replica's log to start at an offset."""

    # --- the core's view, read by handlers ----------------------------------------------------

    @property
    def node_id(self) -> int:
        return self.replica.node_id

    @property
    def leader_id(self) -> int:
        return self.replica.leader_id

    @property
    def leader_epoch(self) -> int:
        return self.replica.leader_epoch

    @property
    def partition_epoch(self) -> int:
        return self.replica.partition_epoch

    @property
    def replicas(self) -> tuple[int, ...]:
        return self.replica.replicas

    @property
    def isr(self) -> tuple[int, ...]:
        return self.replica.isr

    @property
    def min_insync_replicas(self) -> int:
        return self.replica.min_insync_replicas

    @property
    def high_watermark(self) -> int:
        return self.replica.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Where read_committed reads stop (PartitionTxns.last_stable_offset); it moves
        only with the high watermark (a marker below it ends a transaction for readers)
        or an append, and both wake the long polls. Never below the log start: records
        of an open transaction that DeleteRecords removed are nobody's to wait for."""
        high_watermark = self.high_watermark
        stable = self.log.last_stable_offset(high_watermark)
        if stable >= high_watermark:
            return high_watermark
        return min(high_watermark, max(stable, self.log.log_start_offset))

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [fetch_offset, upper_bound) (read_committed)."""
        return self.log.aborted_transactions(fetch_offset, upper_bound)

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction on this partition."""
        return self.log.open_transactions()

    @property
    def leader(self) -> LeaderState | None:
        """The followers' progress, while this broker leads the partition."""
        return self.replica.leader

    @property
    def is_leader(self) -> bool:
        return self.replica.leader is not None

    @property
    def fsync_before_ack(self) -> bool:
        return self.config.flush_messages <= 1

    @property
    def durable_end(self) -> int:
        """The end of what this replica may count as held: fsynced, where that is asked."""
        if self.fsync_before_ack:
            return min(self.log.flushed_offset, self.log.log_end_offset)
        return self.log.log_end_offset

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.index)

    def wake_fetchers(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()

    # --- the one write path ---------------------------------------------------------------------

    def append(
        self,
        batches: Sequence[tuple[memoryview, BatchHeader]],
        *,
        now_ms: int,
        acks: int | None = None,
        producer_check: bool = True,
    ) -> AppendResult:
        """As leader: append validated batches (a produce, or a coordinator's records) at
        this leader epoch, and start making them durable as the topic asks: an fsync in
        the next group-commit round with flush.messages=1, else when the interval or
        message count is due. Wait with `acknowledged`. RecordsError leaves the log
        as it was; LeadershipMoved when this broker does not lead.

        A produce passes its `acks`: acks=all below min.insync.replicas is refused with
        NOT_ENOUGH_REPLICAS ("not written"), except a retry of a batch already written,
        which is answered as that batch (its offsets; committed or not as it is). Telling
        a client such a batch was not written makes it renumber its sequences under a new
        producer epoch and write the batch again. For the same reason a batch whose
        sequence gap starts at a batch refused here gets that refusal's error, not
        OUT_OF_ORDER_SEQUENCE_NUMBER (replication/admission.py)."""
        if not self.is_leader:
            raise LeadershipMoved(f"{self.topic}-{self.index} is not led here")
        refusals = self.replica.refusals
        if acks is not None:
            refused, why = self.replica.admit(acks)
            if refused != ErrorCode.none:
                headers = [header for _, header in batches]
                if not self.log.producers.repeats(headers):
                    self.refused(headers, refused, why or refused.name)
                    raise RecordsError(refused, why or refused.name)
        try:
            result = self.log.append(
                batches,
                now_ms=now_ms,
                leader_epoch=self.leader_epoch,
                producer_check=producer_check,
            )
        except RecordsError as exc:
            explained = (
                refusals.explain([h for _, h in batches], exc.error_code, self._expects)
                if acks is not None and refusals
                else None
            )
            if explained is not None:
                raise RecordsError(*explained) from exc
            raise
        if refusals:  # usually empty: no work on the hot path
            refusals.admitted(header for _, header in batches)
        self._after_append(now_ms)
        if not self.fsync_before_ack:
            self.carry_out(self.replica.on_durable(self.durable_end))
        return result

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        now_ms: int,
    ) -> AppendResult:
        """As leader: append a COMMIT or ABORT marker (control batch) of `producer_id`.
        RecordsError(ErrorCode.invalid_producer_epoch) when `producer_epoch` is older than
        the producer's epoch on this partition (TRANSACTION_COORDINATOR_FENCED for an
        older `coordinator_epoch`, NOT_ENOUGH_REPLICAS below min.insync.replicas, as
        Kafka's markers are written with acks=all); LeadershipMoved when not the leader.
        The caller waits `committed(result.last_offset + 1, timeout)`."""
        if not self.is_leader:
            raise LeadershipMoved(f"{self.topic}-{self.index} is not led here")
        refused, why = self.replica.admit(-1)
        if refused != ErrorCode.none:
            raise RecordsError(refused, why or refused.name)
        batch = memoryview(
            encode_marker_batch(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                timestamp_ms=now_ms,
                partition_leader_epoch=self.leader_epoch,
            )
        )
        result = self.append([(batch, parse_batch_header(batch))], now_ms=now_ms)
        log.debug(
            "[node %d] %s-%d: %s marker of producer %d (epoch %d) at offset %d",
            self.node_id,
            self.topic,
            self.index,
            "COMMIT" if commit else "ABORT",
            producer_id,
            producer_epoch,
            result.base_offset,
        )
        return result

    def refused(self, headers: Sequence[BatchHeader], error: ErrorCode, why: str) -> None:
        """A produce of these batches was refused here with `error`, nothing written
        (below min.insync.replicas, or not the leader): should the producer's next batch
        arrive with a gap where they belong, it is told the same (replication/admission.py)."""
        if self.log.producers.continues(headers):
            self.replica.refusals.refused(headers, error, why)

    def _expects(self, header: BatchHeader) -> bool:
        return self.log.producers.continues([header])

    def append_copy(self, batches: Sequence[tuple[memoryview, BatchHeader]], now_ms: int) -> None:
        """As follower: append what the leader sent, as it is (offsets, epochs and
        timestamps the leader's), in chunks no larger than a segment. The fetcher
        awaits `durable` before its next fetch says it holds them."""
        limit = self.config.segment_bytes
        chunk: list[tuple[memoryview, BatchHeader]] = []
        size = 0
        for view, header in batches:
            batch_size = header.batch_length + BATCH_OVERHEAD_BYTES
            if chunk and size + batch_size > limit:
                self._append_chunk(chunk, now_ms)
                chunk, size = [], 0
            chunk.append((view, header))
            size += batch_size
        if chunk:
            self._append_chunk(chunk, now_ms)
        self._after_append(now_ms)

    def _append_chunk(self, chunk: list[tuple[memoryview, BatchHeader]], now_ms: int) -> None:
        self.log.append(
            chunk,
            now_ms=now_ms,
            leader_epoch=self.leader_epoch,
            producer_check=False,
            assign_offsets=False,
        )

    def _after_append(self, now_ms: int) -> None:
        if self.fsync_before_ack or self.log.needs_flush(now_ms):
            self.ports.durability.request(self)
        self.wake_fetchers()

    def flush_if_due(self, now_ms: int) -> None:
        """Interval flushing (flush.ms, flush.messages above 1): flush now if due."""
        if not self.fsync_before_ack and self.log.needs_flush(now_ms):
            self.ports.durability.request(self)

    async def durable(self, offset: int) -> None:
        """Return once this log holds every record below `offset` as the topic asks:
        fsynced with flush.messages=1, at once otherwise. PartitionGone if deleted."""
        if self.fsync_before_ack:
            await self.ports.durability.flushed(self, offset)

    async def acknowledged(self, offset: int, acks: int, timeout_s: float) -> None:
        """Wait as `acks` asks for the records below `offset`: 1, until this log holds
        them durably; -1 (all), until the high watermark passes them. LeadershipMoved,
        TimeoutError after `timeout_s` (acks=all), PartitionGone if deleted."""
        if acks == 1:
            await self.durable(offset)
        elif acks == -1:
            await self.committed(offset, timeout_s)

    # --- inputs to the core --------------------------------------------------------------------

    def apply(self, assignment: Assignment, now_ms: int) -> None:
        """The metadata's view of the partition."""
        log_end = self.log.log_end_offset
        before = self._isr_led()
        self.carry_out(
            self.replica.apply(
                assignment, log_end=log_end, durable_end=self.durable_end, now_ms=now_ms
            )
        )
        self._count_isr_change(before)
        self._release_start_waiters()  # a smaller ISR may leave nobody to wait for

    def set_ineligible(self, brokers: frozenset[int], now_ms: int) -> None:
        self.carry_out(self.replica.set_ineligible(brokers, now_ms=now_ms))

    def stop_leading(self) -> None:
        """Deleted or closed here: produces still waiting fail; they were not committed
        here and the client will retry at the new leader."""
        self.carry_out(self.replica.go_offline())
        self.wake_fetchers()

    def on_flushed(self) -> None:
        self.carry_out(self.replica.on_durable(self.durable_end))
        self.wake_fetchers()

    def follower_fetch(
        self, broker_id: int, fetch_offset: int, now_ms: int, follower_start: int = -1
    ) -> ErrorCode:
        """Record a follower's progress (its fetch offset: what it holds; where its log
        starts) at the leader."""
        error, effects = self.replica.on_follower_fetch(
            broker_id,
            fetch_offset,
            log_start=self.log.log_start_offset,
            log_end=self.log.log_end_offset,
            durable_end=self.durable_end,
            now_ms=now_ms,
            follower_start=follower_start,
        )
        self.carry_out(effects)
        self._release_start_waiters()
        return error

    # --- DeleteRecords ------------------------------------------------------------------------

    @property
    def low_watermark(self) -> int:
        """The smallest log start among this leader and its in-sync followers; the own
        log start where this replica does not lead."""
        leader = self.replica.leader
        own = self.log.log_start_offset
        return own if leader is None else leader.low_watermark(own)

    async def delete_records(self, offset: int, timeout_s: float) -> int:
        """Start the log at `offset` (at most the high watermark; the caller checks) and
        return the low watermark once every in-sync replica starts there too;
        TimeoutError after `timeout_s`, LeadershipMoved if leadership moves first."""
        if not self.is_leader:
            raise LeadershipMoved(f"{self.topic}-{self.index} is not led here")
        self.log.delete_records_before(offset)
        if self.low_watermark < offset:
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.start_waiters.append((offset, future))
            # On timeout the cancel reaches the awaited future too, as wait_for's did, and a
            # cancelled future is dropped at release (wait_for can eat a cancel).
            async with asyncio.timeout(timeout_s):
                await future
        return self.low_watermark

    def _release_start_waiters(self) -> None:
        if not self.start_waiters:
            return
        low, leading = self.low_watermark, self.is_leader
        waiting = []
        for offset, future in self.start_waiters:
            if future.done():
                continue
            if not leading:
                future.set_exception(LeadershipMoved(f"{self.topic}-{self.index} moved"))
            elif offset <= low:
                future.set_result(None)
            else:
                waiting.append((offset, future))
        self.start_waiters = waiting

    def diverging(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        return self.replica.diverging(
            fetch_offset, last_fetched_epoch, self.log.end_offset_for_epoch
        )

    def isr_tick(self, now_ms: int) -> None:
        self.carry_out(self.replica.tick(now_ms=now_ms))

    def isr_answered(self, isr: tuple[int, ...], partition_epoch: int, now_ms: int) -> None:
        before = self._isr_led()
        self.carry_out(
            self.replica.isr_answered(
                isr, partition_epoch, durable_end=self.durable_end, now_ms=now_ms
            )
        )
        self._count_isr_change(before)
        self._release_start_waiters()  # a smaller ISR may leave nobody to wait for

    def _isr_led(self) -> frozenset[int] | None:
        return frozenset(self.isr) if self.is_leader else None

    def _count_isr_change(self, before: frozenset[int] | None) -> None:
        """Tell the metrics if the ISR of a partition led here before and now changed,
        whether the leader asked (AlterPartition) or the controller did (a fenced broker)."""
        if before is None or not self.is_leader:
            return
        after = frozenset(self.isr)
        if after != before:
            self.ports.isr_changed(bool(before - after), bool(after - before))

    def isr_refused(self, error: ErrorCode, now_ms: int) -> None:
        self.replica.isr_refused(error, now_ms=now_ms)

    def isr_unanswered(self, now_ms: int) -> None:
        self.replica.isr_unanswered(now_ms=now_ms)

    def follow_high_watermark(self, leader_high_watermark: int) -> None:
        """As follower: the leader's high watermark, capped by what this log holds."""
        self.replica.on_leader_high_watermark(
            leader_high_watermark, log_end=self.log.log_end_offset
        )
        self.log.on_high_watermark(self.high_watermark)

    def truncate_to_leader(self, leader_epoch: int, leader_end_offset: int) -> tuple[int, int]:
        """As follower: cut the log where it left the leader's; (old end, new end)."""
        end = self.log.log_end_offset
        self.carry_out(
            [
                self.replica.truncation(
                    leader_epoch,
                    leader_end_offset,
                    end_offset_for=self.log.end_offset_for_epoch,
                    log_end=end,
                )
            ]
        )
        return end, self.log.log_end_offset

    # --- the core's effects ----------------------------------------------------------------------

    def carry_out(self, effects: list[Effect]) -> None:
        for effect in effects:
            match effect:
                case StartEpoch(leader_epoch=epoch, start_offset=start):
                    log.info(
                        "[node %d] leader of %s-%d (leader epoch %d, ISR %s)",
                        self.node_id,
                        self.topic,
                        self.index,
                        epoch,
                        list(self.isr),
                    )
                    self.log.assign_epoch_start(epoch, start)
                    self.ports.on_role(self)
                    self.wake_fetchers()
                case Follow():
                    self.ports.on_role(self)
                    self.wake_fetchers()
                case Commit(high_watermark=high_watermark):
                    self.log.on_high_watermark(high_watermark)
                    self._release_hw_waiters(high_watermark)
                    self.wake_fetchers()
                case FailWaiters(reason=reason):
                    waiting, self.hw_waiters = self.hw_waiters, []
                    for _, future in waiting:
                        if not future.done():
                            future.set_exception(
                                LeadershipMoved(f"{self.topic}-{self.index}: {reason}")
                            )
                    self._release_start_waiters()
                    self.wake_fetchers()
                case ProposeIsr():
                    self.ports.propose_isr(self, effect)
                case Truncate(offset=offset):
                    self.log.truncate_to(offset)
                    self.replica.truncated(log_end=self.log.log_end_offset)

    async def committed(self, offset: int, timeout_s: float) -> None:
        """Return once the high watermark reaches `offset`; LeadershipMoved if leadership
        moves, TimeoutError after `timeout_s`."""
        if self.high_watermark >= offset:
            return
        if not self.is_leader:
            raise LeadershipMoved(f"{self.topic}-{self.index} is not led here")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.hw_waiters.append((offset, future))
        # On timeout the cancel reaches the awaited future too, as wait_for's did, and a
        # cancelled future is dropped at release (wait_for can eat a cancel).
        async with asyncio.timeout(timeout_s):
            await future

    def _release_hw_waiters(self, high_watermark: int) -> None:
        if not self.hw_waiters:
            return
        waiting = []
        for offset, future in self.hw_waiters:
            if future.done():
                continue
            if offset <= high_watermark:
                future.set_result(None)
            else:
                waiting.append((offset, future))
        self.hw_waiters = waiting
