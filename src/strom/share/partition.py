"""The state of one share-partition (KIP-932), with strom's delayed delivery.

A share-partition is the part of a topic-partition a share group is consuming: records
from the start offset (SPSO) up to the end offset (SPEO, exclusive) are in flight, each
in one of these states, with a delivery count:

    AVAILABLE    -> ACQUIRED      acquire: count + 1, locked to one member until
                                  now + share.record.lock.duration.ms
    ACQUIRED     -> ACKNOWLEDGED  ACCEPT
    ACQUIRED     -> ARCHIVING     with a dead-letter topic: REJECT; or released / lock
                                  expired / member gone when the count has reached
                                  the limit (the decision's dead letters)
    ACQUIRED     -> ARCHIVED      GAP; the same without a dead-letter topic
    ARCHIVING    -> ARCHIVED      dead_letters_copied: the shell copied them (or gave up)
    ACQUIRED     -> AVAILABLE     RELEASE, lock expiry, member gone (below the limit)
    ACQUIRED     -> ACQUIRED      RENEW: the lock starts again, nothing else changes

ACKNOWLEDGED and ARCHIVED are final. The start offset moves past every final record at
its head; an ARCHIVING record (KIP-1191's two phases: ARCHIVING written, copied,
ARCHIVED written) is neither acquirable nor final, so it holds the start offset back
until its copy is reported. A state loaded with ARCHIVING records owes their copies
again (`resume_archiving`). Records at and above SPEO are AVAILABLE and have never been
delivered.

strom's delayed delivery: a record is acquirable only once `now_ms` is at least its
timestamp + strom.share.delivery.delay.ms, and a record released or timed out after
its n-th delivery waits strom.share.redelivery.backoff.ms * 2**(n-1) (capped) first.
Neither delay counts as a delivery, and a record at the delivery count limit is
archived at once rather than backed off, so a record is delivered at most `limit`
times whatever the delays.

Every decision returns a `ShareDecision`: the `__share_group_state` records to write
(acquisition is not written: a record acquired and then lost to a crash is AVAILABLE
again with its previous count, as in Kafka), the dead letters to copy, and for a
ShareFetch the acquired ranges. Each public call first expires the locks due at
`now_ms`, so a lock ends exactly at its deadline whether or not `tick` ran.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from strom.share.config import AutoOffsetReset, SharePartitionConfig
from strom.share.records import NO_START_OFFSET, ShareSnapshotValue, ShareUpdateValue
from strom.share.replay import DurableShareState, DurableView, state_batches
from strom.share.values import (
    AckBatch,
    AcknowledgeType,
    AcquiredRecords,
    DeadLetter,
    DeadLetterReason,
    FetchedRecord,
    RecordState,
    ShareDecision,
    SharePartitionId,
)

__all__ = ["InFlightRecord", "SharePartitionState"]

log = logging.getLogger(__name__)

_FINAL = frozenset({RecordState.ACKNOWLEDGED, RecordState.ARCHIVED})


@dataclass(slots=True)
class InFlightRecord:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member_id: str | None = None
    lock_deadline_ms: int | None = None
    available_from_ms: int = 0
    """The end of its redelivery backoff (strom's)."""

    def durable(self) -> tuple[RecordState, int]:
        """What was last written for it: an acquisition is not written."""
        if self.state is RecordState.ACQUIRED:
            return RecordState.AVAILABLE, self.delivery_count - 1
        return self.state, self.delivery_count


@dataclass(slots=True)
class _Changes:
    """What one decision changed: durable states to write, dead letters to copy."""

    states: dict[int, tuple[RecordState, int]] = field(default_factory=dict)
    dead: list[DeadLetter] = field(default_factory=list)
    start_moved: bool = False
    exhausted: int = 0
    """Records archived at the delivery count limit."""


class SharePartitionState:
    """The in-flight records of one share-partition and the decisions about them."""

    def __init__(
        self,
        partition: SharePartitionId,
        config: SharePartitionConfig,
        durable: DurableShareState,
        now_ms: int,
        *,
        label: str = "",
    ) -> None:
        self.partition = partition
        self._label = label
        """Prefixed to every log line (the broker's id, as the group coordinator does)."""
        self.config = config
        self.start_offset = durable.start_offset
        self.records: dict[int, InFlightRecord] = {}
        for offset, (state, count) in durable.states.items():
            backoff = config.redelivery_backoff(count) if state is RecordState.AVAILABLE else 0
            self.records[offset] = InFlightRecord(state, count, available_from_ms=now_ms + backoff)
        self.end_offset = max([self.start_offset, *(o + 1 for o in self.records)])
        for offset in range(self.start_offset, self.end_offset):
            self.records.setdefault(offset, InFlightRecord())
        self.state_epoch = durable.state_epoch
        self.leader_epoch = durable.leader_epoch
        self.snapshot_epoch = durable.snapshot_epoch
        self.created_ms = durable.created_ms
        self.updates_since_snapshot = durable.updates_since_snapshot
        self._locks: list[tuple[int, int]] = []
        """(deadline, offset) of every lock, in a heap; an entry whose record has since
        changed is stale and skipped."""

    # ------------------------------------------------------------------ construction

    @classmethod
    def initialize(
        cls,
        partition: SharePartitionId,
        config: SharePartitionConfig,
        *,
        log_start_offset: int,
        log_end_offset: int,
        now_ms: int,
        offset_for_duration: int | None = None,
        state_epoch: int = 0,
        leader_epoch: int = 0,
        label: str = "",
    ) -> tuple[SharePartitionState, ShareDecision]:
        """A new share-partition, placed by share.auto.offset.reset, and its first
        snapshot. BY_DURATION needs the offset the shell found in the time index."""
        if config.auto_offset_reset is AutoOffsetReset.EARLIEST:
            start = log_start_offset
        elif config.auto_offset_reset is AutoOffsetReset.LATEST:
            start = log_end_offset
        else:
            if offset_for_duration is None:
                raise ValueError("share.auto.offset.reset=by_duration needs an offset")
            start = min(max(offset_for_duration, log_start_offset), log_end_offset)
        durable = DurableShareState(
            start_offset=start,
            snapshot_epoch=-1,
            state_epoch=state_epoch,
            leader_epoch=leader_epoch,
            created_ms=now_ms,
        )
        state = cls(partition, config, durable, now_ms, label=label)
        log.info("%sshare-partition %s: initialized at offset %d", label, partition, start)
        return state, ShareDecision(records=(state._snapshot(now_ms),))

    @classmethod
    def load(
        cls,
        partition: SharePartitionId,
        config: SharePartitionConfig,
        values: list[ShareSnapshotValue | ShareUpdateValue],
        now_ms: int,
        *,
        leader_epoch: int | None = None,
        label: str = "",
    ) -> SharePartitionState:
        """The state rebuilt from its records in log order (a snapshot, then updates),
        written from now on with `leader_epoch` (a new leader's) when given. Released
        records wait out their backoff again, counted from `now_ms`."""
        durable = DurableShareState.from_records(values)
        if leader_epoch is not None:
            durable.leader_epoch = leader_epoch
        state = cls(partition, config, durable, now_ms, label=label)
        log.info(
            "%sshare-partition %s: loaded, offsets %d-%d in flight",
            label,
            partition,
            state.start_offset,
            state.end_offset,
        )
        return state

    # ------------------------------------------------------------------ queries

    def durable_view(self) -> DurableView:
        """The state as its records describe it (compare with `DurableShareState.view`)."""
        entries = []
        for offset in sorted(self.records):
            state, count = self.records[offset].durable()
            if (state, count) != (RecordState.AVAILABLE, 0):
                entries.append((offset, state, count))
        return self.start_offset, tuple(entries)

    def next_fetch_offset(self, now_ms: int) -> int:
        """Where the shell reads the log for the next acquire at `now_ms`: the first
        in-flight record that is AVAILABLE or whose lock is due, or SPEO."""
        offsets = [o for o, r in self.records.items() if _acquirable_at(r, now_ms)]
        return min(offsets, default=self.end_offset)

    def next_deadline_ms(self) -> int | None:
        """The earliest acquisition lock deadline, when `tick` has work."""
        while self._locks and not self._is_live_lock(*self._locks[0]):
            heapq.heappop(self._locks)
        return self._locks[0][0] if self._locks else None

    def _is_live_lock(self, deadline_ms: int, offset: int) -> bool:
        entry = self.records.get(offset)
        return entry is not None and entry.lock_deadline_ms == deadline_ms

    def next_backoff_end_ms(self, now_ms: int) -> int | None:
        """When the next backed-off record becomes acquirable again, for a waiting
        ShareFetch (delivery delays come back from `acquire` as `retry_at_ms`)."""
        ends = [
            r.available_from_ms
            for r in self.records.values()
            if r.state is RecordState.AVAILABLE and r.available_from_ms > now_ms
        ]
        return min(ends, default=None)

    def in_flight(self) -> int:
        return self.end_offset - self.start_offset

    # ------------------------------------------------------------------ decisions

    def acquire(
        self,
        member_id: str,
        fetch_offset: int,
        fetched: Sequence[FetchedRecord],
        max_records: int,
        now_ms: int,
    ) -> tuple[ShareDecision, int | None]:
        """Acquire up to `max_records` of the records the shell read from the log at
        `fetch_offset` (every record from there on, in offset order; an offset missing
        between them has no record and is archived). Returns the decision and, when a
        fetched record was held back by the delivery delay, when it becomes due."""
        changes = self._expire(now_ms)
        acquired: list[tuple[int, int]] = []
        retry_at_ms: int | None = None
        cursor = fetch_offset
        for record in sorted(fetched, key=lambda r: r.offset):
            if len(acquired) >= max_records:
                break
            offset = record.offset
            if offset < cursor:
                continue
            if offset >= self.end_offset and not self._extend(cursor, offset, changes):
                break
            cursor = offset + 1
            entry = self.records.get(offset)
            if entry is None or entry.state is not RecordState.AVAILABLE:
                continue
            delayed_ms = record.timestamp_ms + self.config.delivery_delay_ms
            due_ms = max(delayed_ms, entry.available_from_ms)
            if now_ms < due_ms:
                retry_at_ms = due_ms if retry_at_ms is None else min(retry_at_ms, due_ms)
                continue
            last_try = self._is_last_try(entry)
            if last_try and acquired:
                break  # delivered alone, in the next fetch
            entry.state = RecordState.ACQUIRED
            entry.delivery_count += 1
            entry.member_id = member_id
            self._lock(offset, entry, now_ms)
            acquired.append((offset, entry.delivery_count))
            if last_try:
                break
        decision = self._decide(changes, now_ms)
        ranges = _ranges(acquired)
        if ranges:
            log.debug(
                "%sshare-partition %s: %s acquired %s",
                self._label,
                self.partition,
                member_id,
                ranges,
            )
        return replace(decision, acquired=ranges), retry_at_ms

    def _is_last_try(self, entry: InFlightRecord) -> bool:
        """Whether its next delivery is its last. Kafka hands such a record out alone
        (with a limit above 2), so that a record that breaks its consumer does not use up
        the deliveries of the records fetched with it."""
        limit = self.config.delivery_count_limit
        return limit > 2 and entry.delivery_count == limit - 1

    def _extend(self, cursor: int, offset: int, changes: _Changes) -> bool:
        """Take `offset` into flight, archiving the offsets with no record before it.
        False when share.partition.max.record.locks forbids it or the gap before it is
        unknown (the fetch started above SPEO)."""
        if cursor > self.end_offset:
            return False
        for gap in range(self.end_offset, offset):
            if gap + 1 - self.start_offset > self.config.max_record_locks:
                return False
            self.records[gap] = InFlightRecord(RecordState.ARCHIVED)
            changes.states[gap] = (RecordState.ARCHIVED, 0)
            self.end_offset = gap + 1
            changes.start_moved = self._advance_start() or changes.start_moved
        if offset + 1 - self.start_offset > self.config.max_record_locks:
            return False
        self.records[offset] = InFlightRecord()
        self.end_offset = offset + 1
        return True

    def acknowledge(
        self, member_id: str, batches: Sequence[AckBatch], now_ms: int
    ) -> ShareDecision:
        """A ShareAcknowledge (or a ShareFetch's acknowledgements) for this partition:
        all or nothing. The error is the partition's error code; an error changes no
        record (locks due at `now_ms` still expire and are written)."""
        changes = self._expire(now_ms)
        plan: dict[int, AcknowledgeType] = {}
        error = ErrorCode.none
        for batch in batches:
            error = self._check(member_id, batch, plan)
            if error is not ErrorCode.none:
                break
        if error is not ErrorCode.none:
            decision = self._decide(changes, now_ms)
            return ShareDecision(error, decision.records, decision.dead_letters)
        for offset, kind in sorted(plan.items()):
            entry = self.records[offset]
            if kind is AcknowledgeType.RENEW:
                self._lock(offset, entry, now_ms)
            elif kind is AcknowledgeType.ACCEPT:
                self._finish(offset, entry, RecordState.ACKNOWLEDGED, changes)
            elif kind is AcknowledgeType.RELEASE:
                self._release(offset, entry, now_ms, changes)
            elif kind is AcknowledgeType.REJECT:
                self._archive(offset, entry, DeadLetterReason.CLIENT_REJECT, changes)
            elif entry.state is RecordState.ACQUIRED:
                self._finish(offset, entry, RecordState.ARCHIVED, changes)
        return self._decide(changes, now_ms)

    def _check(
        self, member_id: str, batch: AckBatch, plan: dict[int, AcknowledgeType]
    ) -> ErrorCode:
        first, last, kinds = batch.first_offset, batch.last_offset, batch.acknowledge_types
        if first > last or len(kinds) not in (1, last - first + 1):
            return ErrorCode.invalid_request
        try:
            types = [AcknowledgeType(k) for k in kinds]
        except ValueError:
            return ErrorCode.invalid_request
        if last >= self.end_offset:
            return ErrorCode.invalid_request
        for offset in range(max(first, self.start_offset), last + 1):
            kind = types[0] if len(types) == 1 else types[offset - first]
            entry = self.records[offset]
            if kind is AcknowledgeType.GAP and entry.state is RecordState.ARCHIVED:
                continue
            if entry.state is not RecordState.ACQUIRED or entry.member_id != member_id:
                return ErrorCode.invalid_record_state
            if kind is AcknowledgeType.RENEW and not self.config.renew_acknowledge_enable:
                return ErrorCode.invalid_record_state
            earlier = plan.get(offset)
            if earlier is not None and earlier is not AcknowledgeType.RENEW:
                return ErrorCode.invalid_record_state
            plan[offset] = kind
        return ErrorCode.none

    def release_member(self, member_id: str, now_ms: int) -> ShareDecision:
        """The member left the group or its share session ended: its records go back
        (or, at the delivery count limit, are archived)."""
        changes = self._expire(now_ms)
        for offset in sorted(self.records):
            entry = self.records[offset]
            if entry.state is RecordState.ACQUIRED and entry.member_id == member_id:
                self._release(offset, entry, now_ms, changes)
        return self._decide(changes, now_ms)

    def dead_letters_copied(self, letters: Iterable[DeadLetter], now_ms: int) -> ShareDecision:
        """The shell copied these dead letters to the dead-letter topic, or gave up on
        them (KIP-1191's phase 2): their ARCHIVING records are ARCHIVED. Offsets no
        longer ARCHIVING (out of flight since, or reported before) are left alone."""
        changes = self._expire(now_ms)
        for letter in letters:
            for offset in range(letter.first_offset, letter.last_offset + 1):
                entry = self.records.get(offset)
                if entry is not None and entry.state is RecordState.ARCHIVING:
                    self._finish(offset, entry, RecordState.ARCHIVED, changes)
        return self._decide(changes, now_ms)

    def resume_archiving(self, now_ms: int) -> ShareDecision:
        """The copies a loaded state still owes: a dead letter for every ARCHIVING
        record, its reason inferred from its delivery count (Kafka resumes them so once
        the share-partition is loaded). Without a dead-letter topic now they are
        archived at once (Kafka's copy fails its topic check, and archives them)."""
        changes = self._expire(now_ms)
        limit = self.config.delivery_count_limit
        for offset in sorted(self.records):
            entry = self.records[offset]
            if entry.state is not RecordState.ARCHIVING:
                continue
            if self.config.dead_letter_topic is None:
                self._finish(offset, entry, RecordState.ARCHIVED, changes)
            else:
                reason = DeadLetterReason.inferred(entry.delivery_count, limit)
                self._dead_letter(offset, entry, reason, changes)
        if changes.dead:
            log.info(
                "%sshare-partition %s: resuming the copies of %d ARCHIVING records",
                self._label,
                self.partition,
                sum(d.last_offset - d.first_offset + 1 for d in changes.dead),
            )
        return self._decide(changes, now_ms)

    def archiving(self) -> int:
        """How many in-flight records are ARCHIVING (their copies owed)."""
        return sum(1 for r in self.records.values() if r.state is RecordState.ARCHIVING)

    def tick(self, now_ms: int) -> ShareDecision:
        """Expire every acquisition lock whose deadline is at or before `now_ms`."""
        return self._decide(self._expire(now_ms), now_ms)

    def on_log_start_offset(self, log_start_offset: int, now_ms: int) -> ShareDecision:
        """Retention or DeleteRecords removed the log below `log_start_offset`: what
        is gone is no longer in flight."""
        changes = self._expire(now_ms)
        if log_start_offset <= self.start_offset:
            return self._decide(changes, now_ms)
        for offset in [o for o in self.records if o < log_start_offset]:
            del self.records[offset]
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset)
        changes.start_moved = True
        return self._decide(changes, now_ms)

    # ------------------------------------------------------------------ transitions

    def _lock(self, offset: int, entry: InFlightRecord, now_ms: int) -> None:
        entry.lock_deadline_ms = now_ms + self.config.record_lock_duration_ms
        heapq.heappush(self._locks, (entry.lock_deadline_ms, offset))

    def _expire(self, now_ms: int) -> _Changes:
        changes = _Changes()
        due: set[int] = set()  # a set: one lock can be in the heap twice
        while self._locks and self._locks[0][0] <= now_ms:
            deadline_ms, offset = heapq.heappop(self._locks)
            if self._is_live_lock(deadline_ms, offset):
                due.add(offset)
        for offset in sorted(due):
            self._release(offset, self.records[offset], now_ms, changes)
        changes.start_moved = self._advance_start()
        return changes

    def _release(self, offset: int, entry: InFlightRecord, now_ms: int, changes: _Changes) -> None:
        if entry.delivery_count >= self.config.delivery_count_limit:
            changes.exhausted += 1
            self._archive(offset, entry, DeadLetterReason.DELIVERY_COUNT_EXCEEDED, changes)
            return
        self._finish(offset, entry, RecordState.AVAILABLE, changes)
        entry.available_from_ms = now_ms + self.config.redelivery_backoff(entry.delivery_count)

    def _finish(
        self, offset: int, entry: InFlightRecord, state: RecordState, changes: _Changes
    ) -> None:
        entry.state = state
        entry.member_id = None
        entry.lock_deadline_ms = None
        changes.states[offset] = (state, entry.delivery_count)

    def _archive(
        self, offset: int, entry: InFlightRecord, reason: DeadLetterReason, changes: _Changes
    ) -> None:
        """ARCHIVING with a dead letter to copy when the group has a dead-letter topic,
        else ARCHIVED."""
        if self.config.dead_letter_topic is None:
            self._finish(offset, entry, RecordState.ARCHIVED, changes)
            return
        self._finish(offset, entry, RecordState.ARCHIVING, changes)
        self._dead_letter(offset, entry, reason, changes)

    def _dead_letter(
        self, offset: int, entry: InFlightRecord, reason: DeadLetterReason, changes: _Changes
    ) -> None:
        topic = self.config.dead_letter_topic
        if topic is None:
            return
        p = self.partition
        count = entry.delivery_count
        last = changes.dead[-1] if changes.dead else None
        if last is not None and (last.last_offset, last.reason, last.delivery_count) == (
            offset - 1,
            reason,
            count,
        ):
            changes.dead[-1] = replace(last, last_offset=offset)
            return
        letter = DeadLetter(topic, p.group_id, p.topic, p.partition, offset, offset, count, reason)
        changes.dead.append(letter)

    def _advance_start(self) -> bool:
        moved = False
        while (
            self.start_offset < self.end_offset and self.records[self.start_offset].state in _FINAL
        ):
            del self.records[self.start_offset]
            self.start_offset += 1
            moved = True
        return moved

    # ------------------------------------------------------------------ records

    def _decide(self, changes: _Changes, now_ms: int) -> ShareDecision:
        start_moved = self._advance_start() or changes.start_moved
        if changes.exhausted:
            log.info(
                "%sshare-partition %s: %d records archived at the delivery count limit %d",
                self._label,
                self.partition,
                changes.exhausted,
                self.config.delivery_count_limit,
            )
        if not changes.states and not start_moved:
            return ShareDecision(dead_letters=tuple(changes.dead))
        if self.updates_since_snapshot >= self.config.snapshot_update_records:
            record: ShareSnapshotValue | ShareUpdateValue = self._snapshot(now_ms)
        else:
            self.updates_since_snapshot += 1
            states = {o: s for o, s in changes.states.items() if o >= self.start_offset}
            record = ShareUpdateValue(
                snapshot_epoch=self.snapshot_epoch,
                leader_epoch=self.leader_epoch,
                start_offset=self.start_offset if start_moved else NO_START_OFFSET,
                state_batches=state_batches(states),
                delivery_complete_count=self._delivery_complete_count(),
            )
        return ShareDecision(records=(record,), dead_letters=tuple(changes.dead))

    def _snapshot(self, now_ms: int) -> ShareSnapshotValue:
        self.snapshot_epoch += 1
        self.updates_since_snapshot = 0
        start, entries = self.durable_view()
        return ShareSnapshotValue(
            snapshot_epoch=self.snapshot_epoch,
            state_epoch=self.state_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=start,
            create_timestamp_ms=self.created_ms,
            write_timestamp_ms=now_ms,
            state_batches=state_batches({o: (s, c) for o, s, c in entries}),
            delivery_complete_count=self._delivery_complete_count(),
        )

    def _delivery_complete_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state in _FINAL)


def _acquirable_at(record: InFlightRecord, now_ms: int) -> bool:
    if record.state is RecordState.AVAILABLE:
        return True
    deadline = record.lock_deadline_ms
    return record.state is RecordState.ACQUIRED and deadline is not None and deadline <= now_ms


def _ranges(acquired: Iterable[tuple[int, int]]) -> tuple[AcquiredRecords, ...]:
    out: list[AcquiredRecords] = []
    for offset, count in acquired:
        last = out[-1] if out else None
        if last is not None and last.last_offset == offset - 1 and last.delivery_count == count:
            out[-1] = AcquiredRecords(last.first_offset, offset, count)
        else:
            out.append(AcquiredRecords(offset, offset, count))
    return tuple(out)
