"""The share coordinator's core (strom.share.coordinator): Kafka's decisions on the five
share-state RPCs, epochs, snapshots every N updates, pending writes, and replay.

The central property: whatever sequence of requests (and failed writes) a shard sees,
replaying its durable records, encoded and decoded as they sit in the log, into a fresh
shard gives exactly the shard's committed state; and the state is the per-offset
maximum (delivery count, then state) of every batch written since the last snapshot
that started it, above the start offset.
"""

from __future__ import annotations

import itertools
import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.share.batches import combine_batches
from strom.share.coordinator import (
    ShareStateDecision,
    ShareStateRecord,
    ShareStateShard,
    replay_all,
)
from strom.share.placement import parse_share_coordinator_key, share_coordinator_key
from strom.share.records import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    StateBatch,
    decode_share_record,
    encode_share_key,
    encode_share_value,
)
from strom.share.state_port import ShareStateKey, ShareStateWrite

TOPIC = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")
KEY = ShareStateKey("g", TOPIC, 0)
PARTITIONS = 3


def _committed(shard: ShareStateShard, write_id: int) -> list[int]:
    """Appended and committed; one record per write, so its id serves as its offset."""
    shard.appended(write_id, write_id)
    return shard.durable(write_id)


def _durable(shard: ShareStateShard, decision: ShareStateDecision[object]) -> object:
    if decision.records:
        assert _committed(shard, decision.write_id) == [decision.write_id]
    return decision.answer


def _write(
    shard: ShareStateShard,
    batches: list[StateBatch],
    *,
    leader_epoch: int = 1,
    state_epoch: int = 0,
    start_offset: int = -1,
    key: ShareStateKey = KEY,
) -> ShareStateDecision[tuple[ErrorCode, str | None]]:
    write = ShareStateWrite(state_epoch, leader_epoch, start_offset, tuple(batches))
    return shard.write(key, write, PARTITIONS, now_ms=1000)


def _initialized(limit: int = 500, start_offset: int = 0) -> ShareStateShard:
    shard = ShareStateShard(limit)
    assert _durable(shard, shard.initialize(KEY, 0, start_offset, PARTITIONS, 10)) == (
        ErrorCode.none,
        None,
    )
    return shard


# --- merging batches --------------------------------------------------------------


def _per_offset(batches: list[StateBatch], start: int) -> dict[int, tuple[int, int]]:
    best: dict[int, tuple[int, int]] = {}
    for b in batches:
        for offset in range(max(b.first_offset, start), b.last_offset + 1):
            priority = (b.delivery_count, b.delivery_state)
            best[offset] = max(best.get(offset, priority), priority)
    return best


small_batches = st.builds(
    lambda first, length, state, count: StateBatch(first, first + length, state, count),
    st.integers(0, 40),
    st.integers(0, 8),
    st.sampled_from([0, 2, 4]),
    st.integers(0, 4),
)


@given(
    kept=st.lists(small_batches, max_size=6),
    new=st.lists(small_batches, max_size=6),
    start=st.integers(-1, 30),
)
def test_combining_keeps_the_highest_delivery_count_then_state(
    kept: list[StateBatch], new: list[StateBatch], start: int
) -> None:
    merged = combine_batches(kept, new, start)
    assert _per_offset(list(merged), max(start, 0)) == _per_offset(kept + new, max(start, 0))
    for a, b in itertools.pairwise(merged):  # sorted, disjoint, joined
        assert a.last_offset < b.first_offset
        if a.last_offset + 1 == b.first_offset:
            assert (a.delivery_state, a.delivery_count) != (b.delivery_state, b.delivery_count)


def test_a_batch_over_every_offset_is_cheap() -> None:
    huge = StateBatch(0, 2**62, 0, 1)
    merged = combine_batches([huge], [StateBatch(5, 5, 2, 1)], 3)
    assert merged == (StateBatch(3, 4, 0, 1), StateBatch(5, 5, 2, 1), StateBatch(6, 2**62, 0, 1))


# --- the five decisions -----------------------------------------------------------


def test_initialize_writes_a_snapshot_and_a_repeat_writes_nothing() -> None:
    shard = ShareStateShard()
    decision = shard.initialize(KEY, 0, -1, PARTITIONS, 10)
    assert len(decision.records) == 1
    value = decision.records[0].value
    assert isinstance(value, ShareSnapshotValue)
    assert (value.snapshot_epoch, value.state_epoch, value.leader_epoch) == (0, 0, -1)
    assert (value.start_offset, value.delivery_complete_count) == (-1, -1)
    _durable(shard, decision)
    again = shard.initialize(KEY, 0, -1, PARTITIONS, 20)
    assert again.records == [] and again.answer == (ErrorCode.none, None)


def test_a_new_initialize_with_a_higher_state_epoch_restarts_the_state() -> None:
    shard = _initialized()
    _durable(shard, _write(shard, [StateBatch(0, 4, 2, 1)]))
    _durable(shard, shard.initialize(KEY, 1, 100, PARTITIONS, 30))
    state = shard.committed(KEY)
    assert state is not None
    assert (state.state_epoch, state.start_offset, state.state_batches) == (1, 100, ())
    assert state.snapshot_epoch == 1
    assert shard.initialize(KEY, 0, 5, PARTITIONS, 40).answer[0] is ErrorCode.fenced_state_epoch
    assert _write(shard, [], state_epoch=0).answer[0] is ErrorCode.fenced_state_epoch


def test_reading_an_uninitialized_key_is_kafkas_invalid_request() -> None:
    shard = ShareStateShard()
    read = shard.read(KEY, 0, PARTITIONS, 10).answer
    assert read.error is ErrorCode.invalid_request
    assert read.message == "Read operation on uninitialized share partition not allowed."
    assert _write(shard, []).answer == (
        ErrorCode.invalid_request,
        "Write operation on uninitialized share partition not allowed.",
    )
    summary = shard.summary(KEY, PARTITIONS).answer
    assert (summary.error, summary.start_offset, summary.delivery_complete_count) == (
        ErrorCode.none,
        -1,
        -1,
    )
    assert shard.delete(KEY, PARTITIONS).records == []


def test_a_read_with_a_new_leader_epoch_is_written_and_fences_older_leaders() -> None:
    shard = _initialized()
    first = shard.read(KEY, 3, PARTITIONS, 20)
    assert len(first.records) == 1  # the leader epoch goes into the log
    _durable(shard, first)
    assert shard.read(KEY, 3, PARTITIONS, 30).records == []  # same epoch: nothing written
    assert shard.read(KEY, 2, PARTITIONS, 30).answer.error is ErrorCode.fenced_leader_epoch
    assert _write(shard, [], leader_epoch=2).answer[0] is ErrorCode.fenced_leader_epoch
    assert _write(shard, [], leader_epoch=3).answer[0] is ErrorCode.none


def test_bad_fields_are_invalid_requests_and_unknown_topics_are_refused() -> None:
    shard = _initialized()
    zero = ShareStateKey("g", uuid.UUID(int=0), 0)
    assert shard.read(zero, 0, PARTITIONS, 1).answer.error is ErrorCode.invalid_request
    negative = ShareStateKey("g", TOPIC, -1)
    assert shard.delete(negative, PARTITIONS).answer[0] is ErrorCode.invalid_request
    assert shard.read(KEY, -1, PARTITIONS, 1).answer.error is ErrorCode.invalid_request
    assert _write(shard, [], state_epoch=-1).answer[0] is ErrorCode.invalid_request
    assert shard.initialize(KEY, -1, 0, PARTITIONS, 1).answer[0] is ErrorCode.invalid_request
    assert shard.read(KEY, 0, None, 1).answer.error is ErrorCode.unknown_topic_or_partition
    beyond = ShareStateKey("g", TOPIC, PARTITIONS)
    assert shard.summary(beyond, PARTITIONS).answer.error is ErrorCode.unknown_topic_or_partition
    acquired = _write(shard, [StateBatch(0, 0, 1, 1)]).answer[0]  # ACQUIRED is never durable
    archiving = _write(shard, [StateBatch(0, 0, 3, 1)]).answer[0]  # KIP-1191's ARCHIVING is
    assert (acquired, archiving) == (ErrorCode.invalid_request, ErrorCode.none)


def test_every_nth_write_is_a_snapshot_of_the_merged_state() -> None:
    shard = _initialized(limit=3)
    kinds = []
    for i in range(9):
        decision = _write(shard, [StateBatch(i, i, 2, 1)])
        kinds.append(type(decision.records[0].value).__name__)
        _durable(shard, decision)
    update, snapshot = "ShareUpdateValue", "ShareSnapshotValue"
    assert kinds == [update] * 3 + [snapshot] + [update] * 3 + [snapshot, update]
    state = shard.committed(KEY)
    assert state is not None and state.state_batches == (StateBatch(0, 8, 2, 1),)
    assert state.snapshot_epoch == 2


def test_the_start_offset_never_goes_back_and_drops_what_is_below() -> None:
    shard = _initialized()
    _durable(shard, _write(shard, [StateBatch(0, 9, 0, 1)]))
    _durable(shard, _write(shard, [], start_offset=5))
    _durable(shard, _write(shard, [StateBatch(0, 2, 2, 2)], start_offset=2))
    state = shard.committed(KEY)
    assert state is not None
    assert state.start_offset == 5
    assert state.state_batches == (StateBatch(5, 9, 0, 1),)


def test_delete_writes_a_tombstone() -> None:
    shard = _initialized()
    decision = shard.delete(KEY, PARTITIONS)
    assert decision.records == [ShareStateRecord(ShareSnapshotKey("g", TOPIC, 0), None)]
    _durable(shard, decision)
    assert shard.committed(KEY) is None
    assert shard.read(KEY, 0, PARTITIONS, 1).answer.error is ErrorCode.invalid_request


# --- pending writes -----------------------------------------------------------------


def test_a_failed_write_drops_the_later_writes_of_its_key() -> None:
    shard = _initialized()
    other = ShareStateKey("g", TOPIC, 1)
    _durable(shard, shard.initialize(other, 0, 0, PARTITIONS, 10))
    _durable(shard, shard.read(KEY, 1, PARTITIONS, 10))  # leader epoch 1 is written
    first = _write(shard, [StateBatch(0, 0, 2, 1)])
    second = _write(shard, [StateBatch(1, 1, 2, 1)])
    elsewhere = _write(shard, [StateBatch(0, 0, 4, 1)], key=other)
    read = shard.read(KEY, 1, PARTITIONS, 10)
    assert read.records == [] and read.after_write_id == second.write_id
    assert read.answer.state_batches == (StateBatch(0, 1, 2, 1),)  # decided on the tip
    assert shard.failed(first.write_id) == [first.write_id, second.write_id]
    assert shard.durable(second.write_id) == []
    assert _committed(shard, elsewhere.write_id) == [elsewhere.write_id]
    state = shard.committed(KEY)
    assert state is not None and state.state_batches == ()
    assert shard.read(KEY, 1, PARTITIONS, 10).answer.state_batches == ()


def test_writes_are_promoted_in_order() -> None:
    shard = _initialized()
    first = _write(shard, [StateBatch(0, 0, 2, 1)])
    second = _write(shard, [StateBatch(1, 1, 2, 1)])
    assert _committed(shard, second.write_id) == []
    assert _committed(shard, first.write_id) == [first.write_id, second.write_id]


# --- live and replayed ------------------------------------------------------------

_keys = st.sampled_from([KEY, ShareStateKey("g", TOPIC, 1), ShareStateKey("h", TOPIC, 0)])
_ops = st.one_of(
    st.tuples(st.just("init"), _keys, st.integers(0, 2), st.integers(-1, 20)),
    st.tuples(st.just("read"), _keys, st.integers(0, 4), st.just(0)),
    st.tuples(
        st.just("write"),
        _keys,
        st.integers(0, 4),
        st.integers(-1, 20),
        st.integers(0, 2),
        st.lists(small_batches, max_size=4),
        st.integers(-1, 30),
    ),
    st.tuples(st.just("delete"), _keys),
    st.tuples(st.just("fail"), st.integers(0, 5)),
)


def _roundtrip(record: ShareStateRecord) -> ShareStateRecord:
    """The record as the log holds it and a loader reads it back."""
    value = None if record.value is None else encode_share_value(record.value)
    key, decoded = decode_share_record(encode_share_key(record.key), value)
    return ShareStateRecord(key, decoded)


@settings(max_examples=300)
@given(ops=st.lists(_ops, max_size=60), limit=st.integers(0, 4))
def test_replaying_the_log_gives_the_live_state(ops: list[tuple[object, ...]], limit: int) -> None:
    shard = ShareStateShard(limit)
    log: list[ShareStateRecord] = []
    unsettled: list[ShareStateDecision[object]] = []
    now = 0
    for op in ops:
        now += 1
        decision: ShareStateDecision[object]
        if op[0] == "init":
            _, key, epoch, start = op
            decision = shard.initialize(key, epoch, start, PARTITIONS, now)  # type: ignore[arg-type]
        elif op[0] == "read":
            _, key, leader, _ = op
            decision = shard.read(key, leader, PARTITIONS, now)  # type: ignore[arg-type]
        elif op[0] == "write":
            _, key, leader, start, state_epoch, batches, _ = op
            write = ShareStateWrite(state_epoch, leader, start, tuple(batches))  # type: ignore[arg-type]
            decision = shard.write(key, write, PARTITIONS, now)  # type: ignore[arg-type]
        elif op[0] == "delete":
            decision = shard.delete(op[1], PARTITIONS)  # type: ignore[arg-type]
        else:
            pending = [d for d in unsettled if d.records]
            if pending:
                victim = pending[int(op[1]) % len(pending)]  # type: ignore[call-overload]
                dropped = set(shard.failed(victim.write_id))
                unsettled = [d for d in unsettled if d.write_id not in dropped]
            continue
        if decision.records:
            unsettled.append(decision)
        if len(unsettled) > 2:  # the oldest becomes durable, as the log appends in order
            oldest = unsettled.pop(0)
            shard.appended(oldest.write_id, len(log))
            log.extend(oldest.records)
            shard.durable(oldest.write_id)
    for decision in unsettled:
        shard.appended(decision.write_id, len(log))
        log.extend(decision.records)
        shard.durable(decision.write_id)
    assert shard.pending_write_ids() == []
    replayed = replay_all([_roundtrip(r) for r in log], limit)
    assert replayed.share_keys() == shard.share_keys()
    for key in shard.share_keys():
        assert replayed.committed(key) == shard.committed(key)
        assert replayed.committed_fences(key) == shard.committed_fences(key)
        # and the next decision is the same on both
        left = shard.write(key, ShareStateWrite(9, 9, -1, ()), PARTITIONS, 999)
        right = replayed.write(key, ShareStateWrite(9, 9, -1, ()), PARTITIONS, 999)
        assert left.records == right.records


@settings(max_examples=200)
@given(writes=st.lists(st.lists(small_batches, max_size=4), max_size=30), limit=st.integers(0, 5))
def test_the_state_is_the_best_of_every_batch_written(
    writes: list[list[StateBatch]], limit: int
) -> None:
    shard = _initialized(limit=limit)
    written: list[StateBatch] = []
    for batches in writes:
        _durable(shard, _write(shard, batches))
        written.extend(batches)
        state = shard.committed(KEY)
        assert state is not None
        assert _per_offset(list(state.state_batches), 0) == _per_offset(written, 0)


# --- FindCoordinator's share key ------------------------------------------------------


def test_a_share_key_is_read_from_the_right_as_kafka_reads_it() -> None:
    text = share_coordinator_key("a:b", TOPIC, 7)
    assert parse_share_coordinator_key(text) == ("a:b", TOPIC, 7)
    assert parse_share_coordinator_key(text.replace(":7", ":+7")) == ("a:b", TOPIC, 7)
    padded = text.replace(":7", "==:7")
    assert parse_share_coordinator_key(padded) == ("a:b", TOPIC, 7)
    topic_text = text.split(":")[2]
    for bad in (
        "no-colons",
        f":{topic_text}:1",
        f" :{topic_text}:1",
        f"g:{topic_text}:",
        f"g:{topic_text}:x",
        f"g:{topic_text}:2147483648",
        "g:AAAA:1",
        f"g:{topic_text}=:1",
        f"g:{topic_text}!:1",
    ):
        assert parse_share_coordinator_key(bad) is None, bad
