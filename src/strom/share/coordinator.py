"""The share coordinator of one `__share_group_state` partition: a pure core.

It keeps the state of every share-partition whose key lives in the partition, changed
only by replaying that partition's records, and decides InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary as Kafka's ShareCoordinatorShard does (one share-partition
per decision). Per key it keeps, as Kafka does: the state (`KeptShareState`), the
highest leader epoch and state epoch seen in its records, and how many updates were
written since its last snapshot.

    committed   what durable records say (replayed at load, and live once durable)
    pending     writes decided, not yet durable, in decision order
    tip         committed with every pending write replayed on top: what the next
                decision reads

A write's transitions:

    decided --appended(write_id, base_offset)--> in the log, its records from base_offset on
    appended --durable(write_id)--> replayed into committed (in decision order per key)
    decided, appended --failed(write_id)--> dropped with every later write of the same
                                  key; the key's tip rebuilt from what remains (an
                                  appended one may still sit in the log: the shell loads
                                  the partition again)

Every committed record is replayed with its offset, so the shard knows the offset below
which the partition's records are redundant (`redundant_offset`, the rule in
strom.share.state_offsets): the shell prunes the partition there.

A decision that writes nothing is answered once the pending writes of its key it read
are durable (`after_write_id`; 0: none). Time comes in as `now_ms`; whether the
share-partition's topic exists comes in as its partition count (None: no such topic).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from kio.schema.errors import ErrorCode

from strom.share.batches import combine_batches
from strom.share.records import (
    NO_START_OFFSET,
    ShareKey,
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
    ShareValue,
    StateBatch,
)
from strom.share.state_offsets import ShareStateOffsets
from strom.share.state_port import (
    UNINITIALIZED_START_OFFSET,
    ShareStateKey,
    ShareStateRead,
    ShareStateSummary,
    ShareStateWrite,
)

__all__ = [
    "KeptShareState",
    "ShareStateDecision",
    "ShareStateRecord",
    "ShareStateShard",
    "record_of",
    "replay_all",
]

UNINITIALIZED_EPOCH = -1
NO_TIMESTAMP = -1
DEFAULT_SNAPSHOT_UPDATE_RECORDS = 500
"""share.coordinator.snapshot.update.records.per.snapshot"""

# Kafka's messages (ShareCoordinatorShard's exceptions and its Errors texts).
NULL_TOPIC_ID = "The topic id cannot be null."
NEGATIVE_PARTITION = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."
FENCED_LEADER_EPOCH = "The leader epoch in the request is older than the epoch on the broker."
FENCED_STATE_EPOCH = "The coordinator rejected the request because the state epoch did not match."
UNKNOWN_TOPIC = "This server does not host this topic-partition."
BAD_BATCH = (
    "A state batch needs 0 <= first offset <= last offset, a delivery state of 0, 2, 3 or 4 "
    "and a delivery count of 0 or more."
)
_DURABLE_STATES = frozenset({0, 2, 3, 4})

Answer = tuple[ErrorCode, str | None]
A = TypeVar("A")


@dataclass(frozen=True, slots=True)
class ShareStateRecord:
    """One record of `__share_group_state`: a snapshot, an update, or (value None, a
    snapshot key) a tombstone."""

    key: ShareKey
    value: ShareValue | None


def record_of(state_key: ShareStateKey, value: ShareValue | None) -> ShareStateRecord:
    group, topic, partition = state_key.group_id, state_key.topic_id, state_key.partition
    if isinstance(value, ShareUpdateValue):
        return ShareStateRecord(ShareUpdateKey(group, topic, partition), value)
    return ShareStateRecord(ShareSnapshotKey(group, topic, partition), value)


@dataclass(frozen=True, slots=True)
class KeptShareState:
    """Kafka's ShareGroupOffset: a share-partition's state as its records made it."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    state_batches: tuple[StateBatch, ...]
    create_timestamp_ms: int
    write_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class _Entry:
    state: KeptShareState
    leader_epoch: int
    """The highest leader epoch in the key's records (the fence)."""
    state_epoch: int
    """The highest state epoch in the key's snapshots (the fence)."""
    updates: int | None
    """Updates since the last snapshot (None before the first update, as Kafka keeps it)."""


_Entries = dict[ShareStateKey, _Entry]


def _replay(entries: _Entries, record: ShareStateRecord, limit: int) -> None:
    """Kafka's replay of one record (ShareCoordinatorShard.replay)."""
    key = ShareStateKey(record.key.group_id, record.key.topic_id, record.key.partition)
    value = record.value
    entry = entries.get(key)
    if value is None:
        if isinstance(record.key, ShareSnapshotKey):
            entries.pop(key, None)
        return
    if isinstance(value, ShareSnapshotValue):
        state = KeptShareState(
            value.snapshot_epoch,
            value.state_epoch,
            value.leader_epoch,
            value.start_offset,
            value.delivery_complete_count,
            value.state_batches,
            value.create_timestamp_ms,
            value.write_timestamp_ms,
        )
        updates = None if entry is None else entry.updates
        if updates is not None and updates >= limit:
            updates = 0
        entries[key] = _Entry(
            state,
            value.leader_epoch if entry is None else max(entry.leader_epoch, value.leader_epoch),
            value.state_epoch if entry is None else max(entry.state_epoch, value.state_epoch),
            updates,
        )
        return
    if entry is None:  # an update with no snapshot before it: it is the state
        state = KeptShareState(
            value.snapshot_epoch,
            UNINITIALIZED_EPOCH,
            value.leader_epoch,
            value.start_offset,
            value.delivery_complete_count,
            value.state_batches,
            NO_TIMESTAMP,
            NO_TIMESTAMP,
        )
        entries[key] = _Entry(state, value.leader_epoch, UNINITIALIZED_EPOCH, 1)
        return
    old = entry.state
    start = old.start_offset if value.start_offset == NO_START_OFFSET else value.start_offset
    leader = old.leader_epoch if value.leader_epoch == -1 else value.leader_epoch
    state = dataclasses.replace(
        old,
        start_offset=start,
        leader_epoch=leader,
        delivery_complete_count=value.delivery_complete_count,
        state_batches=combine_batches(old.state_batches, value.state_batches, start),
    )
    entries[key] = _Entry(
        state,
        max(entry.leader_epoch, value.leader_epoch),
        entry.state_epoch,
        (entry.updates or 0) + 1,
    )


@dataclass(slots=True)
class ShareStateDecision(Generic[A]):
    """What the shell writes (`records`, as write `write_id`) and the answer it gives once
    they are durable; with no records the answer waits for `after_write_id` (0: none)."""

    key: ShareStateKey
    answer: A
    records: list[ShareStateRecord] = field(default_factory=list)
    write_id: int = 0
    after_write_id: int = 0


@dataclass(slots=True)
class _Pending:
    write_id: int
    key: ShareStateKey
    records: list[ShareStateRecord]
    durable: bool = False
    base_offset: int | None = None
    """Where its records sit in the log, once appended."""


class ShareStateShard:
    def __init__(self, snapshot_update_records: int = DEFAULT_SNAPSHOT_UPDATE_RECORDS) -> None:
        self.snapshot_update_records = snapshot_update_records
        self._committed: _Entries = {}
        self._tip: _Entries = {}
        self._pending: dict[ShareStateKey, list[_Pending]] = {}
        self._next_write_id = 0
        self._offsets = ShareStateOffsets()

    # --- reading ------------------------------------------------------------------

    def committed(self, key: ShareStateKey) -> KeptShareState | None:
        entry = self._committed.get(key)
        return None if entry is None else entry.state

    def committed_fences(self, key: ShareStateKey) -> tuple[int, int] | None:
        """The key's committed (leader epoch, state epoch) fences."""
        entry = self._committed.get(key)
        return None if entry is None else (entry.leader_epoch, entry.state_epoch)

    def share_keys(self) -> list[ShareStateKey]:
        return sorted(self._tip, key=lambda k: (k.group_id, str(k.topic_id), k.partition))

    def pending_write_ids(self) -> list[int]:
        return sorted(p.write_id for queue in self._pending.values() for p in queue)

    def redundant_offset(self) -> int | None:
        """Every record of the partition below this offset is redundant: loading only
        the records from it on gives the same committed states. The lowest offset the
        committed records still need, and at most the first offset of any write appended
        and not yet promoted (None: nothing is redundant)."""
        below = self._offsets.redundant_below()
        if below is None:
            return None
        appended = [
            p.base_offset
            for queue in self._pending.values()
            for p in queue
            if p.base_offset is not None
        ]
        return min([below, *appended])

    # --- loading ------------------------------------------------------------------

    def load(self, record: ShareStateRecord, offset: int) -> None:
        """Replay the record at `offset` of the partition's log at load (nothing may be
        pending)."""
        self._commit(record, offset)
        key = _state_key(record)
        entry = self._committed.get(key)
        if entry is None:
            self._tip.pop(key, None)
        else:
            self._tip[key] = entry

    # --- deciding -----------------------------------------------------------------

    def initialize(
        self,
        key: ShareStateKey,
        state_epoch: int,
        start_offset: int,
        partitions: int | None,
        now_ms: int,
    ) -> ShareStateDecision[Answer]:
        refused = _check_key(key) or (
            (ErrorCode.invalid_request, NEGATIVE_STATE_EPOCH) if state_epoch < 0 else None
        )
        entry = self._tip.get(key)
        if refused is None and entry is not None and entry.state_epoch > state_epoch:
            refused = (ErrorCode.fenced_state_epoch, FENCED_STATE_EPOCH)
        refused = refused or _check_topic(key, partitions)
        if refused is not None:
            return self._answer(key, refused)
        if (
            entry is not None
            and entry.state_epoch == state_epoch
            and entry.state.start_offset == start_offset
        ):
            return self._answer(key, (ErrorCode.none, None))  # a repeated request
        snapshot = ShareSnapshotValue(
            snapshot_epoch=0 if entry is None else entry.state.snapshot_epoch + 1,
            state_epoch=state_epoch,
            leader_epoch=UNINITIALIZED_EPOCH,
            start_offset=start_offset,
            create_timestamp_ms=now_ms,
            write_timestamp_ms=now_ms,
            state_batches=(),
            delivery_complete_count=-1 if start_offset == UNINITIALIZED_START_OFFSET else 0,
        )
        return self._write(key, (ErrorCode.none, None), [record_of(key, snapshot)])

    def read(
        self, key: ShareStateKey, leader_epoch: int, partitions: int | None, now_ms: int
    ) -> ShareStateDecision[ShareStateRead]:
        """The state; a higher leader epoch than any seen is written first (it fences
        the older leaders)."""
        refused = _check_key(key) or (
            (ErrorCode.invalid_request, NEGATIVE_LEADER_EPOCH) if leader_epoch < 0 else None
        )
        entry = self._tip.get(key)
        if refused is None and entry is None:
            refused = (ErrorCode.invalid_request, READ_UNINITIALIZED)
        if refused is None and entry is not None and entry.leader_epoch > leader_epoch:
            refused = (ErrorCode.fenced_leader_epoch, FENCED_LEADER_EPOCH)
        refused = refused or _check_topic(key, partitions)
        if refused is not None or entry is None:
            error, message = refused or (ErrorCode.unknown_server_error, None)
            return self._answer(key, ShareStateRead(error, message))
        state = entry.state
        answer = ShareStateRead(
            ErrorCode.none,
            state_epoch=state.state_epoch,
            start_offset=state.start_offset,
            state_batches=state.state_batches,
        )
        if entry.leader_epoch == leader_epoch:
            return self._answer(key, answer)
        write = ShareStateWrite(
            state_epoch=state.state_epoch,
            leader_epoch=leader_epoch,
            start_offset=state.start_offset,
            state_batches=(),
            delivery_complete_count=state.delivery_complete_count,
        )
        record = self._state_record(key, entry, write, now_ms, update_leader_epoch=True)
        return self._write(key, answer, [record])

    def write(
        self, key: ShareStateKey, write: ShareStateWrite, partitions: int | None, now_ms: int
    ) -> ShareStateDecision[Answer]:
        refused = _check_key(key)
        if refused is None and write.leader_epoch < 0:
            refused = (ErrorCode.invalid_request, NEGATIVE_LEADER_EPOCH)
        if refused is None and write.state_epoch < 0:
            refused = (ErrorCode.invalid_request, NEGATIVE_STATE_EPOCH)
        if refused is None:
            refused = _check_batches(write.state_batches)
        entry = self._tip.get(key)
        if refused is None and entry is None:
            refused = (ErrorCode.invalid_request, WRITE_UNINITIALIZED)
        if refused is None and entry is not None:
            if entry.leader_epoch > write.leader_epoch:
                refused = (ErrorCode.fenced_leader_epoch, FENCED_LEADER_EPOCH)
            elif entry.state_epoch > write.state_epoch:
                refused = (ErrorCode.fenced_state_epoch, FENCED_STATE_EPOCH)
        refused = refused or _check_topic(key, partitions)
        if refused is not None or entry is None:
            return self._answer(key, refused or (ErrorCode.unknown_server_error, None))
        record = self._state_record(key, entry, write, now_ms, update_leader_epoch=False)
        return self._write(key, (ErrorCode.none, None), [record])

    def delete(self, key: ShareStateKey, partitions: int | None) -> ShareStateDecision[Answer]:
        refused = _check_key(key) or _check_topic(key, partitions)
        if refused is not None:
            return self._answer(key, refused)
        if key not in self._tip:
            return self._answer(key, (ErrorCode.none, None))
        return self._write(key, (ErrorCode.none, None), [record_of(key, None)])

    def summary(
        self, key: ShareStateKey, partitions: int | None
    ) -> ShareStateDecision[ShareStateSummary]:
        """Kafka fences no leader epoch here, and a key never initialized is answered
        with an empty state rather than an error."""
        refused = _check_key(key) or _check_topic(key, partitions)
        if refused is not None:
            return self._answer(key, ShareStateSummary(*refused))
        entry = self._tip.get(key)
        if entry is None:
            return self._answer(key, ShareStateSummary(ErrorCode.none))
        state = entry.state
        return self._answer(
            key,
            ShareStateSummary(
                ErrorCode.none,
                state_epoch=state.state_epoch,
                leader_epoch=state.leader_epoch,
                start_offset=state.start_offset,
                delivery_complete_count=state.delivery_complete_count,
            ),
        )

    def _state_record(
        self,
        key: ShareStateKey,
        entry: _Entry,
        write: ShareStateWrite,
        now_ms: int,
        *,
        update_leader_epoch: bool,
    ) -> ShareStateRecord:
        """Kafka's generateShareStateRecord: an update, or every
        `snapshot_update_records` updates a snapshot of the merged state."""
        current = entry.state
        leader_epoch = write.leader_epoch if update_leader_epoch else current.leader_epoch
        start_offset = max(write.start_offset, current.start_offset)
        complete = write.delivery_complete_count
        if write.start_offset == current.start_offset:
            complete = max(complete, current.delivery_complete_count)
        elif write.start_offset < current.start_offset:
            complete = current.delivery_complete_count
        if (entry.updates or 0) >= self.snapshot_update_records:
            snapshot = ShareSnapshotValue(
                snapshot_epoch=current.snapshot_epoch + 1,
                state_epoch=current.state_epoch,
                leader_epoch=leader_epoch,
                start_offset=start_offset,
                create_timestamp_ms=now_ms,
                write_timestamp_ms=now_ms,
                state_batches=combine_batches(
                    current.state_batches, write.state_batches, start_offset
                ),
                delivery_complete_count=complete,
            )
            return record_of(key, snapshot)
        update = ShareUpdateValue(
            snapshot_epoch=current.snapshot_epoch,
            leader_epoch=leader_epoch,
            start_offset=start_offset,
            state_batches=combine_batches((), write.state_batches, start_offset),
            delivery_complete_count=complete,
        )
        return record_of(key, update)

    def _answer(self, key: ShareStateKey, answer: A) -> ShareStateDecision[A]:
        queue = self._pending.get(key)
        return ShareStateDecision(key, answer, after_write_id=queue[-1].write_id if queue else 0)

    def _write(
        self, key: ShareStateKey, answer: A, records: list[ShareStateRecord]
    ) -> ShareStateDecision[A]:
        self._next_write_id += 1
        write_id = self._next_write_id
        self._pending.setdefault(key, []).append(_Pending(write_id, key, records))
        for record in records:
            _replay(self._tip, record, self.snapshot_update_records)
        return ShareStateDecision(key, answer, records, write_id=write_id)

    # --- the outcome of writes ------------------------------------------------------

    def appended(self, write_id: int, base_offset: int) -> None:
        """The write's records are in the log at `base_offset` and the offsets after it
        (not durable yet)."""
        found = self._find(write_id)
        if found is not None:
            found.base_offset = base_offset

    def durable(self, write_id: int) -> list[int]:
        """The write's records (appended) are durable; returns the writes promoted into
        the committed state (this one once every earlier write of its key is)."""
        found = self._find(write_id)
        if found is None:
            return []
        if found.base_offset is None:
            raise ValueError(f"write {write_id} is durable but was never appended")
        found.durable = True
        queue = self._pending[found.key]
        promoted: list[int] = []
        while queue and queue[0].durable:
            done = queue.pop(0)
            base = done.base_offset
            assert base is not None  # checked when it was made durable
            for i, record in enumerate(done.records):
                self._commit(record, base + i)
            promoted.append(done.write_id)
        if not queue:
            del self._pending[found.key]
        return promoted

    def failed(self, write_id: int) -> list[int]:
        """The write failed: it and every later write of its key are dropped (returned)."""
        found = self._find(write_id)
        if found is None:
            return []
        queue = self._pending[found.key]
        index = queue.index(found)
        dropped = [p.write_id for p in queue[index:]]
        del queue[index:]
        if not queue:
            del self._pending[found.key]
        self._rebuild(found.key)
        return dropped

    def forget(self) -> list[int]:
        """The partition is no longer led here: every pending write is dropped."""
        dropped = self.pending_write_ids()
        self._pending.clear()
        self._tip = dict(self._committed)
        return dropped

    def _commit(self, record: ShareStateRecord, offset: int) -> None:
        key = _state_key(record)
        if record.value is None:
            if isinstance(record.key, ShareSnapshotKey):
                self._offsets.tombstone(key, offset)
        elif isinstance(record.value, ShareSnapshotValue):
            self._offsets.snapshot(key, offset)
        else:
            self._offsets.update(key, offset)
        _replay(self._committed, record, self.snapshot_update_records)

    def _find(self, write_id: int) -> _Pending | None:
        for queue in self._pending.values():
            for pending in queue:
                if pending.write_id == write_id:
                    return pending
        return None

    def _rebuild(self, key: ShareStateKey) -> None:
        tip = {key: self._committed[key]} if key in self._committed else {}
        for pending in self._pending.get(key, []):
            for record in pending.records:
                _replay(tip, record, self.snapshot_update_records)
        if key in tip:
            self._tip[key] = tip[key]
        else:
            self._tip.pop(key, None)


def _state_key(record: ShareStateRecord) -> ShareStateKey:
    return ShareStateKey(record.key.group_id, record.key.topic_id, record.key.partition)


def _check_key(key: ShareStateKey) -> Answer | None:
    if key.topic_id.int == 0:
        return ErrorCode.invalid_request, NULL_TOPIC_ID
    if key.partition < 0:
        return ErrorCode.invalid_request, NEGATIVE_PARTITION
    return None


def _check_batches(batches: Iterable[StateBatch]) -> Answer | None:
    """strom's own check (Kafka's coordinator takes any batch): a batch no share-partition
    could have written would make a state its leader cannot load."""
    for b in batches:
        if (
            not 0 <= b.first_offset <= b.last_offset
            or b.delivery_state not in _DURABLE_STATES
            or b.delivery_count < 0
        ):
            return ErrorCode.invalid_request, BAD_BATCH
    return None


def _check_topic(key: ShareStateKey, partitions: int | None) -> Answer | None:
    if partitions is None or partitions <= key.partition:
        return ErrorCode.unknown_topic_or_partition, UNKNOWN_TOPIC
    return None


def replay_all(
    records: Iterable[ShareStateRecord], limit: int, first_offset: int = 0
) -> ShareStateShard:
    """A shard loaded from `records`, at consecutive offsets from `first_offset` (tests,
    tools)."""
    shard = ShareStateShard(limit)
    for offset, record in enumerate(records, first_offset):
        shard.load(record, offset)
    return shard
