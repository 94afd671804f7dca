"""Log compaction: what a cleaning pass keeps, when it is due, and what it leaves alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from cleaner_helpers import (
    clean,
    keyed_batch,
    latest_by_key,
    open_log,
    put,
    read_all,
    stored_headers,
)
from kio.schema.errors import ErrorCode

from strom.log.cleaner_build import build_cleaned
from strom.log.record_filter import NULL_KEY_MESSAGE
from strom.protocol.records import (
    Compression,
    RecordErrors,
    RecordsError,
    decode_batch,
    iter_batches,
)

KEYS = [f"key-{i}".encode() for i in range(10)]


def fill(log, count: int, *, start_ms: int = 0) -> None:  # type: ignore[no-untyped-def]
    for i in range(count):
        put(log, KEYS[i % len(KEYS)], f"value-{i}".encode(), now_ms=start_ms + i)


def test_cleaning_keeps_the_last_record_of_each_key_at_its_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=1_000)
    fill(log, 200)
    before = read_all(log)
    active = log.segments[-1]
    active_bytes = (tmp_path / "p" / f"{active.base_offset:020d}.log").read_bytes()
    result = clean(log, now_ms=1_000)
    assert result is not None and result.records_removed > 0
    after = read_all(log)
    assert set(after) <= set(before)  # same offsets, keys and values: nothing rewritten wrongly
    assert latest_by_key(after) == latest_by_key(before)
    cleaned = [entry for entry in after if entry[0] < active.base_offset]
    assert len({key for _, key, _ in cleaned}) == len(cleaned)
    # the active segment is not touched, byte for byte
    assert log.segments[-1].base_offset == active.base_offset
    assert (tmp_path / "p" / f"{active.base_offset:020d}.log").read_bytes() == active_bytes
    assert [e for e in after if e[0] >= active.base_offset] == [
        e for e in before if e[0] >= active.base_offset
    ]
    assert (log.log_start_offset, log.log_end_offset) == (0, 200)
    log.close()
    reopened = open_log(tmp_path / "p")
    assert read_all(reopened) == after
    assert reopened.cleaner_checkpoint.cleaned_offset == active.base_offset
    reopened.close()


def test_cleaned_batches_keep_offsets_sequences_and_last_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    records = [(KEYS[i % 3], f"v{i}".encode()) for i in range(6)]  # keys 0,1,2,0,1,2
    log.append(
        [keyed_batch(records, producer_id=5, producer_epoch=1, base_sequence=0)],
        now_ms=0,
        leader_epoch=3,
    )
    put(log, KEYS[2], b"newer", now_ms=1)  # supersedes offsets 2 and 5
    log.roll(2)
    clean(log, now_ms=10)
    first = stored_headers(log)[0]
    assert (first.base_offset, first.last_offset_delta, first.records_count) == (0, 5, 2)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (5, 1, 0)
    assert first.partition_leader_epoch == 3
    data = (tmp_path / "p" / f"{0:020d}.log").read_bytes()
    header, kept = decode_batch(data[: first.size_bytes])  # the CRC checks out
    assert [(r.offset, r.key, r.timestamp) for r in kept] == [
        (3, KEYS[0], 1_003),
        (4, KEYS[1], 1_004),
    ]
    assert header.max_timestamp == 1_004
    assert read_all(log) == [(3, KEYS[0], b"v3"), (4, KEYS[1], b"v4"), (6, KEYS[2], b"newer")]
    log.close()


@pytest.mark.parametrize(
    "codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD]
)
def test_compressed_batches_are_recompressed_with_their_codec(
    tmp_path: Path, codec: Compression
) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    for round_ in range(3):
        records = [(KEYS[i], f"r{round_}-{i}".encode() * 5) for i in range(round_, 6)]
        log.append([keyed_batch(records, compression=codec)], now_ms=0, leader_epoch=0)
    before = read_all(log)
    log.roll(0)
    clean(log, now_ms=10)
    after = read_all(log)
    assert latest_by_key(after) == latest_by_key(before)
    assert len(after) == 6
    headers = stored_headers(log)
    assert [h.compression for h in headers[:3]] == [codec] * 3
    assert [h.records_count for h in headers[:3]] == [1, 1, 4]
    log.close()


def test_tombstones_stay_until_their_delete_horizon(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", delete_retention_ms=5_000)
    put(log, KEYS[0], b"a", now_ms=0)
    put(log, KEYS[1], b"b", now_ms=0)
    put(log, KEYS[0], None, now_ms=0)  # tombstone at 2
    log.roll(0)
    clean(log, now_ms=1_000)  # first cleaned at 1000: the older value goes, the tombstone stays
    assert read_all(log) == [(1, KEYS[1], b"b"), (2, KEYS[0], None)]
    assert log.cleaner_checkpoint.tombstones_since_ms == 1_000
    # nothing dirty, horizon not reached: not due
    state = log.cleanability(5_999)
    assert state is not None and state.dirty_bytes == 0 and state.reason is None
    clean(log, now_ms=5_999)
    assert read_all(log)[-1] == (2, KEYS[0], None)
    state = log.cleanability(6_000)
    assert state is not None and state.reason == "tombstones or markers past delete.retention.ms"
    result = clean(log, now_ms=6_000)
    assert result is not None and result.tombstones_removed == 1
    assert read_all(log) == [(1, KEYS[1], b"b")]
    assert log.cleaner_checkpoint.tombstones_since_ms == -1
    assert log.log_end_offset == 3
    log.close()


def test_delete_horizon_counts_from_the_first_cleaning_not_from_writing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", delete_retention_ms=100)
    put(log, KEYS[0], b"a", now_ms=0)
    put(log, KEYS[0], None, now_ms=0)
    log.roll(0)
    # written at 0 but first cleaned at 10_000: kept then, gone 100 ms later
    clean(log, now_ms=10_000)
    assert read_all(log) == [(1, KEYS[0], None)]
    clean(log, now_ms=10_099)
    assert read_all(log) == [(1, KEYS[0], None)]
    clean(log, now_ms=10_100)
    assert read_all(log) == []
    assert (log.log_start_offset, log.log_end_offset) == (0, 2)
    log.close()


def test_superseded_tombstone_goes_at_once(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    put(log, KEYS[0], None)
    put(log, KEYS[0], b"back")
    log.roll(0)
    clean(log, now_ms=0)
    assert read_all(log) == [(1, KEYS[0], b"back")]
    log.close()


def test_dirty_ratio_decides_when_a_pass_is_due(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=1_000, min_cleanable_dirty_ratio=0.5)
    fill(log, 100)
    state = log.cleanability(0)
    assert state is not None and state.clean_bytes == 0 and state.dirty_ratio == 1.0
    assert state.reason is not None and state.reason.startswith("dirty ratio")
    clean(log, now_ms=0)
    state = log.cleanability(0)
    assert state is not None and state.dirty_bytes == 0 and state.reason is None
    clean_bytes = state.clean_bytes
    fill(log, 20, start_ms=100)  # a little new data: below the ratio
    state = log.cleanability(0)
    assert state is not None and 0 < state.dirty_ratio < 0.5 and state.reason is None
    assert state.clean_bytes + state.dirty_bytes >= clean_bytes
    assert state.dirty_ratio == state.dirty_bytes / (state.clean_bytes + state.dirty_bytes)
    fill(log, 300, start_ms=200)
    state = log.cleanability(0)
    assert state is not None and state.dirty_ratio >= 0.5 and state.reason is not None
    log.close()


def test_min_compaction_lag_holds_back_new_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=1_000, min_compaction_lag_ms=500)
    fill(log, 100, start_ms=1_000)  # record timestamps 1000..1099
    sealed = log.segments[:-1]
    state = log.cleanability(1_100)
    assert state is not None and state.end_offset == 0 and state.reason is None
    middle = sealed[len(sealed) // 2]
    # a segment is cleanable once its newest record is older than the lag
    newest_ms = middle.max_timestamp
    state = log.cleanability(newest_ms + 500)
    assert state is not None and state.end_offset == middle.next_offset
    log.close()


def test_max_compaction_lag_makes_a_pass_due_below_the_ratio(tmp_path: Path) -> None:
    log = open_log(
        tmp_path / "p", segment_bytes=1_000, min_cleanable_dirty_ratio=0.9, max_compaction_lag_ms=50
    )
    fill(log, 100)
    log.roll(100)
    clean(log, now_ms=0)
    fill(log, 15, start_ms=10_000)
    log.roll(10_015)
    state = log.cleanability(10_030)
    assert state is not None and state.dirty_bytes > 0 and state.reason is None
    state = log.cleanability(10_051)
    assert state is not None and state.reason == "dirty data older than max.compaction.lag.ms"
    log.close()


def test_high_watermark_bounds_the_cleanable_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=1_000)
    fill(log, 100)
    second = log.segments[1]
    state = log.cleanability(0, max_offset=second.next_offset - 1)
    assert state is not None and state.end_offset == second.base_offset
    log.close()


def test_null_keys_are_refused_by_compacted_topics(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    put(log, KEYS[0], b"a")
    for codec in (Compression.NONE, Compression.LZ4):
        good = keyed_batch([(KEYS[1], b"b")])
        bad = keyed_batch([(KEYS[2], b"c"), (None, b"no key")], compression=codec)
        with pytest.raises(RecordsError) as caught:
            log.append([good, bad], now_ms=0, leader_epoch=0)
        assert caught.value.error_code == ErrorCode.invalid_record
        assert isinstance(caught.value, RecordErrors)  # KIP-467: each record named
        # The index counts the records of both batches: the good one's, then "c", then
        # the record without a key; the message names the partition, as Kafka's.
        assert caught.value.errors == [(2, f"{NULL_KEY_MESSAGE} in topic partition p")]
        assert "due to 1 record errors in total" in str(caught.value)
    assert read_all(log) == [(0, KEYS[0], b"a")]  # nothing of the refused appends
    log.close()
    plain = open_log(tmp_path / "q", cleanup_policy="delete")
    put(plain, None, b"fine")
    assert plain.log_end_offset == 1
    plain.close()


def test_retention_deletes_only_with_delete_in_the_policy(tmp_path: Path) -> None:
    for policy, deletes in (("compact", False), ("compact,delete", True), ("delete", True)):
        log = open_log(tmp_path / policy, cleanup_policy=policy, segment_bytes=300, retention_ms=0)
        fill(log, 30)
        assert bool(log.delete_old_segments(10**9)) is deletes, policy
        log.close()


def test_compacted_log_skips_compaction_without_the_policy(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", cleanup_policy="delete", segment_bytes=500)
    fill(log, 50)
    assert log.cleanability(0) is None and log.cleaning_plan(0) is None
    log.close()


def test_the_last_batch_of_each_cleaned_segment_stays_so_segments_join_up(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p", segment_bytes=400)
    for _ in range(6):
        for key in KEYS[:3]:
            put(log, key, b"x" * 40)
    put(log, KEYS[0], b"last")
    ends = [(s.base_offset, s.next_offset) for s in log.segments]
    clean(log, now_ms=0)
    for info in log.segments[:-1]:
        assert info.size_bytes > 0
    assert [s.next_offset for s in log.segments][-1] == ends[-1][1]
    emptied = [h for h in stored_headers(log) if h.records_count == 0]
    assert emptied  # some segments' last batches are kept empty
    log.close()
    reopened = open_log(tmp_path / "p")
    assert not reopened.recovery_report.deleted_segments
    assert latest_by_key(read_all(reopened))[KEYS[0]] == (ends[-1][1] - 1, KEYS[0], b"last")
    reopened.close()


def test_small_cleaned_segments_are_merged(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=600)
    for _ in range(20):
        fill(log, 10)
    count = len(log.segments)
    clean(log, now_ms=0)
    assert len(log.segments) == count  # first pass: grouped by their original sizes
    fill(log, 10)
    log.roll(0)
    before = read_all(log)
    clean(log, now_ms=0)
    assert len(log.segments) < count / 2
    assert set(read_all(log)) <= set(before)
    log.close()
    reopened = open_log(tmp_path / "p")
    assert latest_by_key(read_all(reopened)) == latest_by_key(before)
    assert not reopened.recovery_report.repaired
    reopened.close()


def test_a_small_key_map_cleans_part_of_the_dirty_range_per_pass(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=800)
    for i in range(300):
        put(log, f"k{i % 60}".encode(), f"v{i}".encode())
    before = read_all(log)
    end = log.segments[-1].base_offset
    passes = 0
    while log.cleaner_checkpoint.cleaned_offset < end:
        result = clean(log, now_ms=0, map_budget_bytes=2_000)  # about 15 keys per pass
        assert result is not None
        passes += 1
        assert latest_by_key(read_all(log)) == latest_by_key(before)
    assert passes > 3
    clean(log, now_ms=0)  # and then it is as clean as one big pass leaves it
    cleaned = [e for e in read_all(log) if e[0] < end]
    assert len(cleaned) == len({key for _, key, _ in cleaned})
    log.close()


def test_a_pass_is_dropped_when_retention_changed_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", cleanup_policy="compact,delete", segment_bytes=500)
    fill(log, 60)
    before = read_all(log)
    plan = log.cleaning_plan(0)
    assert plan is not None
    assert log.cleaning_plan(0) is None  # one pass at a time
    result = build_cleaned(plan)
    assert all(path.exists() for path in result.files())
    log.reconfigure(log.config.__class__(**{**_fields(log), "retention_ms": 0}))
    assert log.delete_old_segments(10**12)
    assert not log.swap_cleaned(result, now_ms=0)
    assert not any(path.exists() for path in result.files())
    assert read_all(log) == [e for e in before if e[0] >= log.log_start_offset]
    fill(log, 60)
    assert log.cleaning_plan(0) is not None  # a new pass may start
    log.close()


def test_a_pass_is_dropped_after_a_truncation(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=500)
    fill(log, 60)
    plan = log.cleaning_plan(0)
    assert plan is not None
    result = build_cleaned(plan)
    log.truncate_to(40)
    assert not log.swap_cleaned(result, now_ms=0)
    assert [e[0] for e in read_all(log)] == list(range(40))
    log.close()


def test_truncating_into_a_gap_ends_the_log_there(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    for i in range(10):
        put(log, KEYS[0] if i < 9 else KEYS[1], f"v{i}".encode())
    put(log, KEYS[0], b"end")
    log.roll(0)
    clean(log, now_ms=0)
    assert [e[0] for e in read_all(log)] == [9, 10]
    assert log.truncate_to(5) == 5  # offsets 0..8 are a gap now
    assert log.append([keyed_batch([(KEYS[2], b"new")])], now_ms=0, leader_epoch=0).base_offset == 5
    assert read_all(log) == [(5, KEYS[2], b"new")]
    log.close()


def test_reads_in_gaps_and_timestamp_lookups_after_cleaning(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=700)
    fill(log, 120)
    clean(log, now_ms=0)
    kept = read_all(log)
    offsets = [o for o, _, _ in kept]
    for fetch in range(0, 120, 7):
        # a consumer at ``fetch`` gets the next kept record, perhaps after empty batches
        position, first = fetch, []
        while not first and position < log.log_end_offset:
            result = log.read(position, 10_000)
            data = result.read_bytes()
            first = [
                r.offset
                for pos, h in iter_batches(data)
                for r in decode_batch(data[pos : pos + h.size_bytes])[1]
                if r.offset >= fetch
            ]
            position = result.next_offset
        assert first[:1] == [o for o in offsets if o >= fetch][:1]
    found = log.offset_for_timestamp(0)
    assert found is not None and found[0] == offsets[0]
    assert log.max_timestamp()[1] == 119
    log.close()


def test_unclean_reopen_checks_cleaned_segments_without_truncating(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=600)
    fill(log, 100)
    clean(log, now_ms=0)
    after = read_all(log)
    log.close(clean=False)
    (tmp_path / "p" / "recovery-point").unlink()  # check every segment batch by batch
    reopened = open_log(tmp_path / "p")
    report = reopened.recovery_report
    assert len(report.checked_segments) == len(reopened.segments)
    assert not report.truncations and not report.deleted_segments
    assert read_all(reopened) == after
    reopened.close()


def _fields(log) -> dict[str, object]:  # type: ignore[no-untyped-def]
    config = log.config
    return {name: getattr(config, name) for name in config.__dataclass_fields__}


def test_a_damaged_base_offset_cannot_pass_for_a_compaction_gap(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=600)
    fill(log, 80)
    clean(log, now_ms=0)
    kept = read_all(log)
    active = log.segments[-1]
    end = log.log_end_offset
    log.close(clean=False)
    # the last batch of the active segment claims a far higher base offset
    path = tmp_path / "p" / f"{active.base_offset:020d}.log"
    data = bytearray(path.read_bytes())
    last = list(iter_batches(bytes(data)))[-1][0]
    data[last + 1] ^= 0x01
    path.write_bytes(bytes(data))
    reopened = open_log(tmp_path / "p")
    assert reopened.log_end_offset == end - 1
    assert reopened.recovery_report.truncations
    assert read_all(reopened) == [e for e in kept if e[0] < end - 1]
    reopened.close()
