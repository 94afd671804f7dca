"""A share-partition against a model: consumers acquire, accept, release, reject and
renew records, members leave, the shell reports dead letters copied (KIP-1191's two
phases), the broker restarts from its records, time moves on a manual clock. After every
step: no record is acknowledged twice or lost, no record is held by two members, a lock
ends exactly at its deadline, no delivery count passes the limit, nothing is delivered
before its timestamp + delay or inside its backoff, every ARCHIVING record has its copy
owed (so it becomes ARCHIVED once the copy is reported) and holds the start offset back,
and the emitted records (through their bytes) rebuild the live state."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from kio.schema.errors import ErrorCode

from strom.share.config import AutoOffsetReset, SharePartitionConfig
from strom.share.partition import SharePartitionState
from strom.share.records import (
    ShareSnapshotValue,
    ShareUpdateValue,
    decode_share_record,
    encode_share_record,
)
from strom.share.replay import DurableShareState
from strom.share.values import (
    AckBatch,
    AcknowledgeType,
    DeadLetter,
    DeadLetterReason,
    FetchedRecord,
    RecordState,
    ShareDecision,
    SharePartitionId,
)

PARTITION = SharePartitionId("g", uuid.UUID(int=1), "t", 0)
MEMBERS = ("a", "b", "c")
LOCK_MS = 100
FINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass
class Expected:
    """The model's word on one offset of the log."""

    timestamp_ms: int
    count: int = 0
    holder: str | None = None
    deadline_ms: int = 0
    ready_ms: int = 0
    final: RecordState | None = None


def ack_batches(kinds: dict[int, AcknowledgeType], as_ranges: bool) -> list[AckBatch]:
    """One batch per offset; or one per run of consecutive offsets, with one type when
    the run has one and a type per offset otherwise."""
    if not as_ranges:
        return [AckBatch(o, o, (int(k),)) for o, k in kinds.items()]
    runs: list[list[int]] = []
    for offset in sorted(kinds):
        if runs and runs[-1][-1] == offset - 1:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    batches = []
    for run in runs:
        types = tuple(int(kinds[o]) for o in run)
        batches.append(AckBatch(run[0], run[-1], types[:1] if len(set(types)) == 1 else types))
    return batches


class SharePartitionMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now_ms = 0
        self.log: dict[int, Expected] = {}
        self.next_offset = 0
        self.values: list[ShareSnapshotValue | ShareUpdateValue] = []
        self.replayed = DurableShareState()
        self.dead: list[tuple[int, DeadLetterReason]] = []
        """Dead letters the next decision must ask for."""
        self.owed: list[DeadLetter] = []
        """Dead letters asked for and not yet reported copied: the shell's copies."""

    @initialize(
        limit=st.integers(1, 4),
        delay=st.sampled_from([0, 0, 50]),
        backoff=st.sampled_from([0, 10, 40]),
        locks=st.integers(3, 12),
        every=st.integers(1, 4),
        dlq=st.sampled_from(["dlq", "dlq", None]),
    )
    def start(
        self, limit: int, delay: int, backoff: int, locks: int, every: int, dlq: str | None
    ) -> None:
        self.config = SharePartitionConfig(
            record_lock_duration_ms=LOCK_MS,
            delivery_count_limit=limit,
            max_record_locks=locks,
            auto_offset_reset=AutoOffsetReset.EARLIEST,
            dead_letter_topic=dlq,
            delivery_delay_ms=delay,
            redelivery_backoff_ms=backoff,
            redelivery_backoff_max_ms=backoff * 3,
            snapshot_update_records=every,
        )
        self.state, decision = SharePartitionState.initialize(
            PARTITION, self.config, log_start_offset=0, log_end_offset=0, now_ms=0
        )
        self.take(decision)

    # ------------------------------------------------------------------ the model

    def take(self, decision: ShareDecision) -> None:
        """Carry a decision's records through their bytes into the replayed state."""
        for value in decision.records:
            key_bytes, value_bytes = encode_share_record("g", PARTITION.topic_id, 0, value)
            _, decoded = decode_share_record(key_bytes, value_bytes)
            assert decoded == value and decoded is not None
            self.values.append(decoded)
            self.replayed.apply(decoded)
        got = [
            (o, d.reason)
            for d in decision.dead_letters
            for o in range(d.first_offset, d.last_offset + 1)
        ]
        assert sorted(got) == sorted(self.dead), "dead letters"
        self.dead = []
        self.owed.extend(decision.dead_letters)

    def archive(self, offset: int, record: Expected, reason: DeadLetterReason) -> None:
        """ARCHIVING with its copy owed when there is a dead-letter topic."""
        record.holder = None
        if self.config.dead_letter_topic is None:
            record.final = RecordState.ARCHIVED
        else:
            record.final = RecordState.ARCHIVING
            self.dead.append((offset, reason))

    def release(self, offset: int, record: Expected) -> None:
        record.holder = None
        if record.count >= self.config.delivery_count_limit:
            self.archive(offset, record, DeadLetterReason.DELIVERY_COUNT_EXCEEDED)
        else:
            record.ready_ms = self.now_ms + self.config.redelivery_backoff(record.count)

    def expire(self) -> None:
        for offset, record in sorted(self.log.items()):
            if record.holder is not None and record.deadline_ms <= self.now_ms:
                self.release(offset, record)

    def held_by(self, member: str) -> list[int]:
        return sorted(o for o, r in self.log.items() if r.holder == member)

    # ------------------------------------------------------------------ rules

    @rule(
        records=st.integers(1, 4), skip=st.sampled_from([0, 0, 0, 1, 2]), age=st.integers(-20, 80)
    )
    def produce(self, records: int, skip: int, age: int) -> None:
        self.next_offset += skip  # offsets with no record: compacted, or markers
        for _ in range(records):
            self.log[self.next_offset] = Expected(timestamp_ms=self.now_ms - age)
            self.next_offset += 1

    @rule(ms=st.integers(0, 30) | st.integers(0, 150))
    def advance(self, ms: int) -> None:
        self.now_ms += ms

    @rule(early=st.sampled_from([0, 1]))
    def advance_to_a_deadline(self, early: int) -> None:
        """To the next lock deadline, or just before it."""
        deadline = self.state.next_deadline_ms()
        if deadline is not None and deadline - early > self.now_ms:
            self.now_ms = deadline - early

    @rule()
    def tick(self) -> None:
        self.expire()
        self.take(self.state.tick(self.now_ms))

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 6) | st.just(1000))
    def acquire(self, member: str, max_records: int) -> None:
        self.expire()
        start = self.state.next_fetch_offset(self.now_ms)
        fetched = [
            FetchedRecord(o, r.timestamp_ms) for o, r in sorted(self.log.items()) if o >= start
        ]
        decision, _ = self.state.acquire(member, start, fetched, max_records, self.now_ms)
        got = [
            (o, a.delivery_count)
            for a in decision.acquired
            for o in range(a.first_offset, a.last_offset + 1)
        ]
        assert len(got) <= max_records
        for offset, count in got:
            record = self.log[offset]
            assert record.holder is None, f"{offset} held by {record.holder} and {member}"
            assert record.final is None
            assert self.now_ms >= record.timestamp_ms + self.config.delivery_delay_ms
            assert self.now_ms >= record.ready_ms, "inside its redelivery backoff"
            assert count == record.count + 1 <= self.config.delivery_count_limit
            record.count, record.holder = count, member
            record.deadline_ms = self.now_ms + LOCK_MS
        limit = self.config.delivery_count_limit
        if limit > 2 and any(count == limit for _, count in got):
            assert len(got) == 1, f"{got}: a last delivery goes alone"
        if max_records == 1000:
            self.check_nothing_left_behind([o for o, _ in got])
        self.take(decision)

    def check_nothing_left_behind(self, got: list[int]) -> None:
        """An unbounded acquire takes every deliverable record the lock limit allows, in
        offset order, but a record on its last delivery (limit above 2) goes alone."""
        limit = self.config.delivery_count_limit
        window_end = self.state.start_offset + self.config.max_record_locks
        missed = [
            offset
            for offset, record in sorted(self.log.items())
            if offset not in got
            and record.final is None
            and record.holder is None
            and self.now_ms >= record.timestamp_ms + self.config.delivery_delay_ms
            and self.now_ms >= record.ready_ms
            and offset < window_end
        ]
        if missed:
            first = missed[0]
            stopped = bool(got) and (
                self.log[got[-1]].count == limit or self.log[first].count == limit - 1
            )
            assert limit > 2 and stopped and first > got[-1], f"{first} was deliverable"

    def holders(self) -> list[str]:
        return sorted({r.holder for r in self.log.values() if r.holder is not None})

    @precondition(lambda self: self.holders())
    @rule(data=st.data())
    def acknowledge(self, data: st.DataObject) -> None:
        member = data.draw(st.sampled_from(self.holders()))
        self.expire()
        held = self.held_by(member)
        chosen = data.draw(st.lists(st.sampled_from(held), unique=True)) if held else []
        kinds = [data.draw(st.sampled_from(list(AcknowledgeType)[1:])) for _ in chosen]
        batches = ack_batches(dict(zip(chosen, kinds, strict=True)), data.draw(st.booleans()))
        for offset, kind in sorted(zip(chosen, kinds, strict=True)):
            record = self.log[offset]
            if kind is AcknowledgeType.RENEW:
                record.deadline_ms = self.now_ms + LOCK_MS
            elif kind is AcknowledgeType.ACCEPT:
                record.holder, record.final = None, RecordState.ACKNOWLEDGED
            elif kind is AcknowledgeType.REJECT:
                self.archive(offset, record, DeadLetterReason.CLIENT_REJECT)
            else:
                self.release(offset, record)
        decision = self.state.acknowledge(member, batches, self.now_ms)
        assert decision.error is ErrorCode.none
        self.take(decision)

    @rule(member=st.sampled_from(MEMBERS), data=st.data(), kind=st.sampled_from([1, 2, 3]))
    def acknowledge_unheld(self, member: str, data: st.DataObject, kind: int) -> None:
        """Another member's record, an expired lock, an acknowledged record again."""
        self.tick()
        candidates = [
            o
            for o, r in self.log.items()
            if self.state.start_offset <= o < self.state.end_offset and r.holder != member
        ]
        if not candidates:
            return
        offset = data.draw(st.sampled_from(sorted(candidates)))
        before = self.state.durable_view()
        decision = self.state.acknowledge(member, [AckBatch(offset, offset, (kind,))], self.now_ms)
        assert (decision.error, decision.records) == (ErrorCode.invalid_record_state, ())
        assert self.state.durable_view() == before
        self.take(decision)

    @precondition(lambda self: self.owed)
    @rule(data=st.data())
    def copied(self, data: st.DataObject) -> None:
        """The shell reports some of its copies made (in any order; one maybe twice):
        their records still ARCHIVING are ARCHIVED."""
        letters = data.draw(st.lists(st.sampled_from(self.owed), min_size=1, unique=True))
        self.expire()
        for letter in letters:
            for offset in range(letter.first_offset, letter.last_offset + 1):
                record = self.log.get(offset)
                if record is not None and record.final is RecordState.ARCHIVING:
                    assert letter.delivery_count == record.count
                    record.final = RecordState.ARCHIVED
        again = data.draw(st.booleans())
        self.owed = [d for d in self.owed if d not in letters or again]
        self.take(self.state.dead_letters_copied(letters, self.now_ms))

    @rule()
    def copied_all(self) -> None:
        """Every copy owed is reported: nothing is left ARCHIVING."""
        self.expire()
        letters, self.owed = self.owed, []
        for record in self.log.values():
            if record.final is RecordState.ARCHIVING:
                record.final = RecordState.ARCHIVED
        self.take(self.state.dead_letters_copied(letters, self.now_ms))
        assert self.state.archiving() == 0

    @rule(data=st.data())
    def retention(self, data: st.DataObject) -> None:
        """The log start moves (retention, DeleteRecords): what is gone leaves flight."""
        self.expire()
        log_start = data.draw(st.integers(0, self.next_offset))
        if log_start > self.state.start_offset:
            self.log = {o: r for o, r in self.log.items() if o >= log_start}
        self.take(self.state.on_log_start_offset(log_start, self.now_ms))
        assert self.state.start_offset >= log_start

    @rule(member=st.sampled_from(MEMBERS))
    def leave(self, member: str) -> None:
        self.expire()
        for offset in self.held_by(member):
            self.release(offset, self.log[offset])
        self.take(self.state.release_member(member, self.now_ms))

    @rule()
    def restart(self) -> None:
        """A new leader loads the records: acquisitions are lost, and the backoff of a
        released record starts again."""
        self.expire()
        self.take(self.state.tick(self.now_ms))
        self.state = SharePartitionState.load(PARTITION, self.config, self.values, self.now_ms)
        for record in self.log.values():
            if record.holder is not None:
                record.holder = None
                record.count -= 1
            if record.final is None:
                record.ready_ms = self.now_ms + self.config.redelivery_backoff(record.count)
        # The copies under way died with the broker; the new one owes every ARCHIVING
        # record's copy again, with the reason its delivery count says.
        self.owed = []
        limit = self.config.delivery_count_limit
        for offset, record in sorted(self.log.items()):
            if record.final is RecordState.ARCHIVING and offset >= self.state.start_offset:
                self.dead.append((offset, DeadLetterReason.inferred(record.count, limit)))
        self.take(self.state.resume_archiving(self.now_ms))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def replay_matches(self) -> None:
        if hasattr(self, "state"):
            assert self.replayed.view() == self.state.durable_view()

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "state"):
            return
        start, end = self.state.start_offset, self.state.end_offset
        assert end - start <= self.config.max_record_locks
        for offset in range(end):
            record = self.log.get(offset)
            entry = self.state.records.get(offset)
            if offset < start:
                assert record is None or record.final in FINAL, f"{offset} lost"
                continue
            assert entry is not None
            if record is None:
                assert (entry.state, entry.delivery_count) == (RecordState.ARCHIVED, 0)
                continue
            assert entry.delivery_count == record.count <= self.config.delivery_count_limit
            if record.final is not None:
                assert entry.state is record.final
            elif record.holder is not None and record.deadline_ms > self.now_ms:
                assert (entry.state, entry.member_id) == (RecordState.ACQUIRED, record.holder)
                assert entry.lock_deadline_ms == record.deadline_ms
            elif record.holder is None:
                assert entry.state is RecordState.AVAILABLE
        owed = {o for d in self.owed for o in range(d.first_offset, d.last_offset + 1)}
        for offset, entry in self.state.records.items():
            if entry.state is RecordState.ARCHIVING:
                assert offset in owed, f"{offset} ARCHIVING with no copy owed"
                assert self.config.dead_letter_topic is not None
                assert offset >= start and offset != self.state.next_fetch_offset(self.now_ms)
        deadlines = [r.lock_deadline_ms for r in self.state.records.values() if r.lock_deadline_ms]
        assert self.state.next_deadline_ms() == min(deadlines, default=None)
        for offset, record in self.log.items():
            if offset >= end:
                assert (record.count, record.holder, record.final) == (0, None, None)


SharePartitionMachine.TestCase.settings = settings(
    max_examples=250, stateful_step_count=50, deadline=None
)
TestSharePartition = SharePartitionMachine.TestCase
