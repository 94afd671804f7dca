"""Compaction of a log written by transactions: aborted records go and never shadow older
values, committed ones are compacted as any, markers go only once their transaction is
empty and their delete horizon has passed, and what readers and a reopen see agrees."""

from __future__ import annotations

from pathlib import Path

import pytest
from cleaner_helpers import clean, keyed_batch, open_log, put
from cleaner_txn_helpers import (
    end_marker,
    read_committed,
    read_uncommitted,
    stored_batches,
    txn_index_files,
    txn_records,
)

from strom.log import PartitionLog
from strom.log.cleaner_build import build_cleaned
from strom.log.record_filter import (
    DELETE_HORIZON_BIT,
    batch_records,
    delete_horizon_ms,
    rewrite_batch,
    with_delete_horizon,
)
from strom.log.transactions import AbortedTxn
from strom.protocol.records import Compression, NewRecord, decode_batch, encode_batch
from strom.protocol.records import validate_batches as validate

RETENTION_MS = 1_000


def append(log: PartitionLog, *batches: tuple[memoryview, object]) -> int:
    return log.append(list(batches), now_ms=0, leader_epoch=0).base_offset  # type: ignore[arg-type]


def fill(log: PartitionLog, count: int) -> None:
    for i in range(count):
        put(log, b"filler-%d" % i, b"x")


def markers(log: PartitionLog) -> dict[int, int | None]:
    """Offset of each control batch -> its delete horizon (None: none yet)."""
    return {h.base_offset: delete_horizon_ms(h) for h, _ in stored_batches(log) if h.is_control}


def reopen(log: PartitionLog, *, lose_state: bool) -> PartitionLog:
    """Reopen; ``lose_state``: after a crash that lost the snapshots, `.txnindex` files
    and recovery point, so every segment is checked and the state rebuilt from the log."""
    path = log.directory
    log.close(clean=not lose_state)
    if lose_state:
        for pattern in ("*.snapshot", "*.txnindex", "recovery-point"):
            for file in path.glob(pattern):
                file.unlink()
    return open_log(path, delete_retention_ms=RETENTION_MS, segment_bytes=400)


def producer(log: PartitionLog, producer_id: int) -> tuple[int, int] | None:
    entry = log.producer_state_for(producer_id)
    return None if entry is None else (entry.epoch, entry.last_seq)


def test_aborted_records_go_committed_ones_compact_and_empty_markers_wait(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p", delete_retention_ms=RETENTION_MS, segment_bytes=400)
    put(log, b"a", b"a1")  # 0: shadowed by the committed a at 3
    put(log, b"b", b"b1")  # 1: stays: only an aborted record of b follows
    append(log, txn_records(7, [(b"b", b"b-aborted")], sequence=0))  # 2
    append(log, txn_records(8, [(b"a", b"a-committed")], sequence=0))  # 3: shadowed by 8
    append(log, end_marker(7, commit=False), end_marker(8, commit=True))  # 4, 5
    append(log, txn_records(7, [(b"c", b"c-committed")], sequence=1))  # 6
    append(log, end_marker(7, commit=True))  # 7
    put(log, b"a", b"a2")  # 8
    fill(log, 12)
    log.roll(0)
    assert log.aborted_transactions(0, 8) == [AbortedTxn(7, 2, 4, 3)]
    committed = read_committed(log)
    assert [e[0] for e in committed][:5] == [0, 1, 3, 6, 8]

    result = clean(log, now_ms=0)
    assert result is not None and result.records_removed == 3
    expected = [e for e in committed if e[0] not in (0, 3)]
    assert read_committed(log) == read_uncommitted(log) == expected
    # producer 8's last batch stays, empty, and with it its marker; 7's aborted
    # transaction is empty: its marker waits for its horizon, its index entry is gone
    assert [(h.base_offset, h.records_count) for h, _ in stored_batches(log)][:5] == [
        (1, 1),
        (3, 0),
        (4, 1),
        (5, 1),
        (6, 1),
    ]
    assert markers(log) == {4: RETENTION_MS, 5: None, 7: None}
    assert log.aborted_transactions(0, 8) == [] and txn_index_files(log.directory) == []
    stamped = next(records for h, records in stored_batches(log) if h.base_offset == 4)
    assert stamped[0].timestamp == 1_000  # the marker's own timestamp is unchanged
    state = log.cleanability(RETENTION_MS - 1)
    assert state is not None and state.reason is None
    state = log.cleanability(RETENTION_MS)
    assert state is not None and state.reason == "tombstones or markers past delete.retention.ms"

    clean(log, now_ms=RETENTION_MS - 1)
    assert 4 in markers(log)
    result = clean(log, now_ms=RETENTION_MS)
    assert result is not None and result.markers_removed == 1
    assert markers(log) == {5: None, 7: None}
    assert read_committed(log) == read_uncommitted(log) == expected
    assert log.cleaner_checkpoint.tombstones_since_ms == -1

    for lose_state in (False, True):
        log = reopen(log, lose_state=lose_state)
        assert read_committed(log) == read_uncommitted(log) == expected
        assert (producer(log, 7), producer(log, 8)) == ((0, 1), (0, 0))
        assert log.open_transactions() == {} and log.aborted_transactions(0, 30) == []
    log.close()


def test_an_aborted_transaction_keeping_a_batch_keeps_its_marker_and_entry(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p", delete_retention_ms=RETENTION_MS, segment_bytes=400)
    put(log, b"a", b"a1")  # 0
    append(log, txn_records(9, [(b"a", b"no"), (b"b", b"no")], sequence=0))  # 1, 2
    append(log, end_marker(9, commit=False))  # 3
    fill(log, 12)
    log.roll(0)
    for now_ms in (0, 10 * RETENTION_MS):
        clean(log, now_ms=now_ms)
        # the producer's last batch stays (empty), so its transaction is not empty
        assert read_uncommitted(log)[0] == (0, b"a", b"a1")
        assert [(h.base_offset, h.records_count) for h, _ in stored_batches(log)][:3] == [
            (0, 1),
            (1, 0),
            (3, 1),
        ]
        assert markers(log) == {3: None}
        assert log.aborted_transactions(0, 4) == [AbortedTxn(9, 1, 3, 4)]
    for lose_state in (False, True):
        log = reopen(log, lose_state=lose_state)
        assert read_committed(log) == read_uncommitted(log)
        assert [t.producer_id for t in log.aborted_transactions(0, 4)] == [9]
        assert producer(log, 9) == (0, 1)
    log.close()


def test_an_open_transaction_bounds_the_cleaned_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", delete_retention_ms=RETENTION_MS, segment_bytes=400)
    put(log, b"a", b"a1")
    put(log, b"a", b"a2")
    log.roll(0)
    first = append(log, txn_records(4, [(b"a", b"open")], sequence=0))
    put(log, b"a", b"a3")
    log.roll(0)
    put(log, b"a", b"a4")
    log.roll(0)
    result = clean(log, now_ms=0)
    assert result is not None and result.plan.end_offset == first
    assert [e[0] for e in read_uncommitted(log)] == [1, 2, 3, 4]  # nothing from the txn on
    assert read_committed(log) == [(1, b"a", b"a2")]
    append(log, end_marker(4, commit=True))
    log.roll(0)
    clean(log, now_ms=0)
    assert read_committed(log) == read_uncommitted(log) == [(4, b"a", b"a4")]
    log.close()


def test_a_producers_last_marker_stays_with_its_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", delete_retention_ms=RETENTION_MS, segment_bytes=400)
    append(log, txn_records(5, [(b"a", b"fenced")], sequence=0))  # 0
    append(log, end_marker(5, commit=False, epoch=1))  # 1: the coordinator fenced epoch 0
    fill(log, 12)
    log.roll(0)
    clean(log, now_ms=0)
    log = reopen(log, lose_state=False)  # its snapshot knows the marker is the last
    clean(log, now_ms=10 * RETENTION_MS)
    assert markers(log) == {1: RETENTION_MS}  # empty transaction, but its producer's last
    assert log.cleanability(10 * RETENTION_MS).reason is None  # type: ignore[union-attr]
    log = reopen(log, lose_state=True)
    assert producer(log, 5) == (1, -1)
    append(log, txn_records(5, [(b"b", b"new")], epoch=1, sequence=0))
    append(log, end_marker(5, commit=True, epoch=1))
    log.roll(0)
    clean(log, now_ms=10 * RETENTION_MS)
    assert 1 not in markers(log)
    log.close()


def test_removing_a_marker_drops_the_snapshots_holding_its_transaction_open(
    tmp_path: Path,
) -> None:
    path = tmp_path / "p"
    log = open_log(path, delete_retention_ms=RETENTION_MS, segment_bytes=400)
    append(log, txn_records(3, [(b"a", b"aborted")], sequence=0))  # 0
    held_open = log.roll(0)  # its snapshot holds producer 3's transaction open
    abort = append(log, end_marker(3, commit=False))
    # then a plain (idempotent) batch: no later marker of producer 3 ends anything
    append(log, keyed_batch([(b"b", b"kept")], producer_id=3, producer_epoch=0, base_sequence=1))
    fill(log, 2)
    log.roll(0)
    assert (path / f"{held_open:020d}.snapshot").exists()
    clean(log, now_ms=0)
    assert markers(log)[abort] == RETENTION_MS
    clean(log, now_ms=RETENTION_MS)
    assert abort not in markers(log)
    assert all(int(p.name[:20]) > abort for p in path.glob("*.snapshot"))
    # a crash that loses the newest snapshot: the state comes from the log, not from a
    # snapshot claiming a transaction the log no longer ends
    log.close(clean=False)
    newest = max(path.glob("*.snapshot"))
    newest.unlink()
    log = open_log(path, delete_retention_ms=RETENTION_MS, segment_bytes=400)
    assert log.open_transactions() == {}
    assert log.last_stable_offset(log.log_end_offset) == log.log_end_offset
    log.close()


def test_a_delete_horizon_keeps_every_record_timestamp() -> None:
    for codec in Compression:
        data = encode_batch(
            [NewRecord(b"k%d" % i, b"v", timestamp_ms=5_000 + 7 * i) for i in range(3)],
            base_timestamp_ms=5_000,
            compression=codec,
            producer_id=2,
            producer_epoch=1,
            base_sequence=0,
            is_transactional=True,
        )
        view, header = validate(data, max_batch_bytes=1 << 20)[0]
        assert delete_horizon_ms(header) is None
        section, records = batch_records(view, header)
        stamped = with_delete_horizon(header, section, records, 99_000_000)
        new_header, decoded = decode_batch(stamped)  # the CRC checks out
        assert new_header.attributes == header.attributes | DELETE_HORIZON_BIT
        assert delete_horizon_ms(new_header) == new_header.base_timestamp == 99_000_000
        assert new_header.max_timestamp == header.max_timestamp == 5_014
        assert [(r.offset, r.timestamp) for r in decoded] == [(0, 5_000), (1, 5_007), (2, 5_014)]
        # a later rewrite keeps the horizon and the timestamps
        section, records = batch_records(memoryview(stamped), new_header)
        _, kept = decode_batch(rewrite_batch(new_header, section, records[1:]))
        assert [r.timestamp for r in kept] == [5_007, 5_014]


class Crash(Exception):
    pass


def aborted_then_committed(path: Path) -> PartitionLog:
    """Producer 6 aborts a transaction, then commits one; plain records after: a pass
    removes the aborted record and the `.txnindex` entry of segment 0."""
    log = open_log(path, delete_retention_ms=0, segment_bytes=400)
    append(log, txn_records(6, [(b"a", b"aborted")], sequence=0))
    append(log, end_marker(6, commit=False))
    append(log, txn_records(6, [(b"b", b"committed")], sequence=1))
    append(log, end_marker(6, commit=True))
    fill(log, 8)
    log.roll(0)
    log.flush()  # past the recovery point: a reopen trusts the segment's `.txnindex`
    return log


def test_a_crash_at_any_step_of_a_swap_leaves_the_index_and_readers_whole(
    tmp_path: Path,
) -> None:
    dry = aborted_then_committed(tmp_path / "dry")
    before = (read_uncommitted(dry), dry.aborted_transactions(0, 4))
    steps: list[str] = []
    plan = dry.cleaning_plan(0)
    assert plan is not None and dry.swap_cleaned(build_cleaned(plan), now_ms=0, step=steps.append)
    after = (read_uncommitted(dry), dry.aborted_transactions(0, 4))
    assert after == (before[0][1:], []) and "deleted 00000000000000000000.txnindex" in steps
    dry.close()
    committed = steps.index("manifest written")
    for k, name in enumerate(steps):
        log = aborted_then_committed(tmp_path / f"crash-{k}")
        plan = log.cleaning_plan(0)
        assert plan is not None
        result = build_cleaned(plan)

        def stop(step: str, name: str = name) -> None:
            if step == name:
                raise Crash(step)

        with pytest.raises(Crash):
            log.swap_cleaned(result, now_ms=0, step=stop)
        log.close(clean=False)
        log = open_log(tmp_path / f"crash-{k}", delete_retention_ms=0, segment_bytes=400)
        assert (read_uncommitted(log), log.aborted_transactions(0, 4)) == (
            after if k >= committed else before
        ), name
        assert read_committed(log) == after[0], name
        clean(log, now_ms=0)
        clean(log, now_ms=0)  # past the horizon: the aborted transaction's marker goes
        assert 1 not in markers(log) and read_committed(log) == after[0], name
        log.close()
