"""Pruning `__share_group_state`: the offset below which a partition's records are
redundant (`ShareStateShard.redundant_offset`, the rule in strom.share.state_offsets).

The central property: at every step of a run of share-state requests, with writes
appended in decision order, committed as the high watermark passes them and made durable
in any order, loading only the records at or above the redundant offset gives the same
share-partition states as loading the whole log; and that offset never goes back and
never passes the high watermark. Beside it: Kafka's own running computation
(ShareCoordinatorOffsetsManager), written out here as an oracle, gives the same offset.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.share.coordinator import (
    ShareStateDecision,
    ShareStateRecord,
    ShareStateShard,
    record_of,
    replay_all,
)
from strom.share.records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateValue,
    StateBatch,
)
from strom.share.state_port import ShareStateKey, ShareStateWrite

TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
KEYS = [ShareStateKey("g", TOPIC, 0), ShareStateKey("g", TOPIC, 1), ShareStateKey("h", TOPIC, 0)]
PARTITIONS = 3
NEVER = 2**63 - 1
"""Kafka's Long.MAX_VALUE: no offset known yet."""


def _snapshot(start: int, state_epoch: int = 0) -> ShareSnapshotValue:
    return ShareSnapshotValue(0, state_epoch, 0, start, 0, 0, (StateBatch(start, start, 2, 1),))


def _update(offset: int) -> ShareUpdateValue:
    return ShareUpdateValue(0, 0, -1, (StateBatch(offset, offset, 2, 1),))


def _states(shard: ShareStateShard) -> dict[ShareStateKey, object]:
    return {key: shard.committed(key) for key in shard.share_keys()}


# --- the rule, by example -------------------------------------------------------------


def test_the_lowest_latest_snapshot_is_needed() -> None:
    """Kafka's example: key 1 written at 1, key 2 at 2, 4 and 6, key 3 at 3, 5 and 7 (all
    snapshots): 2 to 5 are redundant, but key 1 still needs 1, so only what is below 1
    may go."""
    one, two, three = KEYS
    writes = [(one, 1), (two, 2), (three, 3), (two, 4), (three, 5), (two, 6), (three, 7)]
    shard = ShareStateShard()
    assert shard.redundant_offset() is None
    for key, offset in writes:
        shard.load(record_of(key, _snapshot(offset)), offset)
    assert shard.redundant_offset() == 1
    shard.load(record_of(one, _snapshot(8)), 8)
    assert shard.redundant_offset() == 6


def test_updates_are_needed_from_their_snapshot() -> None:
    key = KEYS[0]
    records = [
        record_of(key, _snapshot(0)),
        record_of(key, _update(1)),
        record_of(key, _snapshot(2)),
        record_of(key, _update(3)),
        record_of(key, _update(4)),
    ]
    shard = replay_all(records, 500)
    assert shard.redundant_offset() == 2
    assert _states(replay_all(records[2:], 500, 2)) == _states(shard)


def test_a_deleted_share_partition_needs_nothing() -> None:
    one, two = KEYS[:2]
    shard = ShareStateShard()
    shard.load(record_of(one, _snapshot(0)), 0)
    shard.load(record_of(two, _snapshot(1)), 1)
    shard.load(record_of(one, None), 2)  # a tombstone
    assert shard.redundant_offset() == 1
    shard.load(record_of(two, None), 3)
    assert shard.redundant_offset() == 3  # no state left: only the last tombstone stays
    shard.load(record_of(one, _snapshot(4)), 4)
    assert shard.redundant_offset() == 4


def test_an_update_with_no_snapshot_before_it_is_needed() -> None:
    """strom's addition to Kafka's rule: such an update is the state (replay takes it as
    one), so it is kept; Kafka tracks snapshots only."""
    one, two = KEYS[:2]
    records = [
        record_of(one, _snapshot(0)),
        record_of(two, _update(1)),
        record_of(one, _snapshot(2)),
    ]
    shard = replay_all(records, 500)
    assert shard.redundant_offset() == 1
    assert _states(replay_all(records[1:], 500, 1)) == _states(shard)


def test_a_write_appended_and_not_yet_durable_holds_pruning_back() -> None:
    """A new key's snapshot appended at 1 is committed after a later write of another key
    (at 2) is made durable: until it is, nothing from 1 on is redundant."""
    one, two = KEYS[:2]
    shard = ShareStateShard()
    shard.load(record_of(one, _snapshot(0)), 0)
    new = shard.initialize(two, 0, 0, PARTITIONS, 10)
    moved = shard.initialize(one, 1, 5, PARTITIONS, 10)
    shard.appended(new.write_id, 1)
    shard.appended(moved.write_id, 2)
    assert shard.durable(moved.write_id) == [moved.write_id]
    assert shard.redundant_offset() == 1
    assert shard.durable(new.write_id) == [new.write_id]
    assert shard.redundant_offset() == 1
    assert shard.committed(two) is not None


def test_a_write_made_durable_must_have_been_appended() -> None:
    shard = ShareStateShard()
    decision = shard.initialize(KEYS[0], 0, 0, PARTITIONS, 10)
    with pytest.raises(ValueError, match="never appended"):
        shard.durable(decision.write_id)


# --- any log ---------------------------------------------------------------------------

_batches = st.lists(
    st.builds(
        lambda first, length, state, count: StateBatch(first, first + length, state, count),
        st.integers(0, 30),
        st.integers(0, 5),
        st.sampled_from([0, 2, 4]),
        st.integers(0, 3),
    ),
    max_size=3,
)
_values = st.one_of(
    st.none(),
    st.builds(
        ShareSnapshotValue,
        st.integers(0, 3),
        st.integers(0, 3),
        st.integers(-1, 3),
        st.integers(-1, 20),
        st.just(0),
        st.just(0),
        _batches.map(tuple),
    ),
    st.builds(
        ShareUpdateValue,
        st.integers(0, 3),
        st.integers(-1, 3),
        st.integers(-1, 20),
        _batches.map(tuple),
    ),
)


@settings(max_examples=300)
@given(
    log=st.lists(st.tuples(st.sampled_from(KEYS), _values), max_size=40),
    limit=st.integers(0, 3),
)
def test_any_log_loads_the_same_from_its_redundant_offset(
    log: list[tuple[ShareStateKey, ShareSnapshotValue | ShareUpdateValue | None]], limit: int
) -> None:
    records = [record_of(key, value) for key, value in log]
    whole = replay_all(records, limit)
    below = whole.redundant_offset()
    if below is None:
        return
    assert 0 <= below < len(records)
    tail = replay_all(records[below:], limit, below)
    assert tail.share_keys() == whole.share_keys()
    assert _states(tail) == _states(whole)
    assert tail.redundant_offset() == below


# --- Kafka's computation as an oracle ------------------------------------------------


def _kafka_redundant(records: list[ShareStateRecord]) -> int:
    """ShareCoordinatorOffsetsManager's running minimum, step by step: each snapshot-key
    record (a snapshot or a tombstone) updates it; updates do not."""
    offsets: dict[ShareStateKey, int] = {}
    last = NEVER
    for offset, record in enumerate(records):
        if not isinstance(record.key, ShareSnapshotKey):
            continue
        key = ShareStateKey(record.key.group_id, record.key.topic_id, record.key.partition)
        last = min(last, offset)
        offsets[key] = offset
        so_far = NEVER
        for value in offsets.values():
            so_far = min(so_far, value)
            if so_far == last:
                break
        last = so_far
        if record.value is None:
            del offsets[key]
    return last


# --- live runs -------------------------------------------------------------------------

_LIVE_KEYS = KEYS[:2]
_ops = st.one_of(
    st.tuples(st.just("init"), st.sampled_from(_LIVE_KEYS), st.integers(0, 2), st.integers(-1, 9)),
    st.tuples(st.just("read"), st.sampled_from(_LIVE_KEYS), st.integers(0, 3)),
    st.tuples(
        st.just("write"),
        st.sampled_from(_LIVE_KEYS),
        st.integers(0, 3),
        st.integers(0, 2),
        st.integers(-1, 9),
        _batches,
    ),
    st.tuples(st.just("delete"), st.sampled_from(_LIVE_KEYS)),
    st.tuples(st.just("commit"), st.integers(1, 4)),
    st.tuples(st.just("durable"), st.integers(0, 3)),
)


@dataclass
class _Run:
    """A shard and its partition's log: each write appended when decided (the shell's
    write task appends before anything else runs), committed as the high watermark
    passes it, and made durable in any order (the tasks waiting on the high watermark
    wake in any order)."""

    shard: ShareStateShard
    log: list[ShareStateRecord] = field(default_factory=list)
    high_watermark: int = 0
    appended: list[tuple[int, int, int]] = field(default_factory=list)
    """(base offset, record count, write id) appended and not yet durable."""

    def decide(self, decision: ShareStateDecision[object]) -> None:
        if decision.records:
            self.shard.appended(decision.write_id, len(self.log))
            self.appended.append((len(self.log), len(decision.records), decision.write_id))
            self.log.extend(decision.records)

    def durable(self, pick: int) -> None:
        committed = [a for a in self.appended if a[0] + a[1] <= self.high_watermark]
        if committed:
            chosen = committed[pick % len(committed)]
            self.appended.remove(chosen)
            self.shard.durable(chosen[2])

    def settle(self) -> None:
        self.high_watermark = len(self.log)
        while self.appended:
            self.durable(0)


def _step(run: _Run, op: tuple[object, ...], now: int) -> None:
    shard = run.shard
    kind = op[0]
    if kind == "init":
        _, key, epoch, start = op
        run.decide(shard.initialize(key, epoch, start, PARTITIONS, now))  # type: ignore[arg-type]
    elif kind == "read":
        _, key, leader = op
        run.decide(shard.read(key, leader, PARTITIONS, now))  # type: ignore[arg-type]
    elif kind == "write":
        _, key, leader, state_epoch, start, batches = op
        write = ShareStateWrite(state_epoch, leader, start, tuple(batches))  # type: ignore[arg-type]
        run.decide(shard.write(key, write, PARTITIONS, now))  # type: ignore[arg-type]
    elif kind == "delete":
        run.decide(shard.delete(op[1], PARTITIONS))  # type: ignore[arg-type]
    elif kind == "commit":
        run.high_watermark = min(len(run.log), run.high_watermark + int(op[1]))  # type: ignore[call-overload]
    else:
        run.durable(int(op[1]))  # type: ignore[call-overload]


def _same_when_pruned(log: list[ShareStateRecord], below: int, limit: int) -> None:
    whole, tail = replay_all(log, limit), replay_all(log[below:], limit, below)
    assert tail.share_keys() == whole.share_keys()
    assert _states(tail) == _states(whole)
    for key in whole.share_keys():  # the state epoch fence too (see the note below)
        whole_fences, tail_fences = whole.committed_fences(key), tail.committed_fences(key)
        assert whole_fences is not None and tail_fences is not None
        assert tail_fences[1] == whole_fences[1]
        assert tail_fences[0] <= whole_fences[0]


@settings(max_examples=500, deadline=None)
@given(ops=st.lists(_ops, max_size=60), limit=st.integers(0, 3))
def test_a_live_shard_never_prunes_what_its_log_still_needs(
    ops: list[tuple[object, ...]], limit: int
) -> None:
    """The leader epoch fence may be lower after pruning, as in Kafka: a new initialize
    writes a snapshot at leader epoch -1, and the higher epochs seen before it are in
    the records it made redundant."""
    run = _Run(ShareStateShard(limit))
    previous: int | None = None
    for now, op in enumerate(ops):
        _step(run, op, now)
        below = run.shard.redundant_offset()
        if previous is not None:
            assert below is not None and below >= previous, "the redundant offset went back"
        if below is not None:
            assert below <= run.high_watermark
            _same_when_pruned(run.log, below, limit)
        previous = below
    run.settle()
    below = run.shard.redundant_offset()
    whole = replay_all(run.log, limit)
    assert whole.redundant_offset() == below  # loading and living agree
    assert _states(whole) == _states(run.shard)
    kafka = _kafka_redundant(run.log)
    assert (NEVER if below is None else below) == kafka
    if below is not None:
        _same_when_pruned(run.log, below, limit)
        assert replay_all(run.log[below:], limit, below).redundant_offset() == below
