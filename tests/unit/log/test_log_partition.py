"""PartitionLog: append, read, roll, indexes and timestamps; read bounds against a model."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from partition_log_helpers import make_batch, open_log, read_all

from strom.log import LogConfig, OffsetOutOfRange, PartitionLog
from strom.protocol.records import (
    RecordsError,
    TimestampType,
    decode_batch,
    iter_batches,
    validate_batches,
)


def test_empty_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (0, 0, 0)
    result = log.read(0, 1000)
    assert result.size_bytes == 0 and result.read_bytes() == b""
    assert log.max_timestamp() == (-1, -1)
    assert log.offset_for_timestamp(0) is None
    assert (tmp_path / "t-0" / "00000000000000000000.log").exists()
    log.close()


def test_append_and_read_across_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", segment_bytes=1_000, index_interval_bytes=100)
    expected: list[tuple[int, bytes | None]] = []
    for i in range(60):
        count = 1 + i % 4
        view, header = make_batch(count, value_size=5 + (i * 13) % 60)
        result = log.append([(view, header)], now_ms=i, leader_epoch=3)
        assert result.base_offset == len(expected)
        assert result.last_offset == len(expected) + count - 1
        assert result.log_append_time_ms == -1 and not result.duplicate
        expected += [
            (result.base_offset + j, bytes([j]) * (5 + (i * 13) % 60)) for j in range(count)
        ]
    assert log.log_end_offset == len(expected)
    segments = log.segments
    assert len(segments) > 5
    assert all(s.size_bytes <= 1_000 for s in segments)
    assert [s.base_offset for s in segments[1:]] == [s.next_offset for s in segments[:-1]]
    assert segments[-1].is_active and not segments[0].is_active
    assert log.size_bytes == sum(s.size_bytes for s in segments)
    assert read_all(log) == expected
    for offset in range(0, len(expected), 7):
        assert read_all(log, offset) == expected[offset:]
    log.close()
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert "00000000000000000000.index" in names and "00000000000000000000.timeindex" in names


def test_stamped_batches_carry_offsets_and_leader_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch(3), make_batch(2)], now_ms=0, leader_epoch=9)
    data = log.read(0, 1 << 20).read_bytes()
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers] == [(0, 9), (3, 9)]
    validate_batches(data, max_batch_bytes=1 << 20)  # CRCs still valid
    log.close()


def test_read_from_middle_of_batch_returns_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch(5)], now_ms=0, leader_epoch=0)
    log.append([make_batch(5)], now_ms=0, leader_epoch=0)
    result = log.read(7, 1 << 20)
    assert (result.first_offset, result.next_offset) == (5, 10)
    header = next(iter_batches(result.read_bytes()))[1]
    assert header.base_offset == 5 and header.records_count == 5
    log.close()


def test_max_bytes_and_min_one_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    sizes = []
    for _ in range(4):
        view, header = make_batch(2, value_size=100)
        log.append([(view, header)], now_ms=0, leader_epoch=0)
        sizes.append(header.size_bytes)
    one = log.read(0, 1)
    assert (one.size_bytes, one.first_offset, one.next_offset) == (sizes[0], 0, 2)
    none = log.read(0, 1, min_one_batch=False)
    assert none.size_bytes == 0 and none.read_bytes() == b""
    two = log.read(0, sizes[0] + sizes[1] + sizes[2] // 2)
    assert (two.size_bytes, two.next_offset) == (sizes[0] + sizes[1], 4)
    exact = log.read(2, sizes[1] + sizes[2])
    assert (exact.size_bytes, exact.first_offset, exact.next_offset) == (sizes[1] + sizes[2], 2, 6)
    log.close()


def test_max_offset_bounds_reads(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    for _ in range(3):
        log.append([make_batch(2)], now_ms=0, leader_epoch=0)
    assert log.read(0, 1 << 20, max_offset=4).next_offset == 4
    assert log.read(0, 1 << 20, max_offset=3).next_offset == 4  # batch 2..3 starts below 3
    assert log.read(4, 1 << 20, max_offset=4).size_bytes == 0
    assert log.read(2, 1 << 20, max_offset=2).size_bytes == 0
    assert log.read(0, 1 << 20, max_offset=0).size_bytes == 0
    log.close()


def test_offset_out_of_range(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch(2)], now_ms=0, leader_epoch=0)
    assert log.read(2, 100).size_bytes == 0  # the log end itself is fine
    with pytest.raises(OffsetOutOfRange) as excinfo:
        log.read(3, 100)
    assert excinfo.value.error_code.name == "offset_out_of_range"
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    log.close()


def test_reads_do_not_cross_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=300)
    for _ in range(6):
        log.append([make_batch(1, value_size=100)], now_ms=0, leader_epoch=0)
    first, second = log.segments[0], log.segments[1]
    result = log.read(0, 1 << 20)
    assert result.next_offset == first.next_offset == second.base_offset
    assert result.size_bytes == first.size_bytes
    log.close()


def test_roll_by_size(tmp_path: Path) -> None:
    view, header = make_batch(1, value_size=50)
    log = open_log(tmp_path / "p", segment_bytes=header.size_bytes * 3)
    for _ in range(7):
        log.append([(view, header)], now_ms=0, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    big, big_header = make_batch(1, value_size=header.size_bytes * 2)
    log.append([(big, big_header)], now_ms=0, leader_epoch=0)  # alone in a new segment
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 7]
    huge = make_batch(1, value_size=header.size_bytes * 3)
    with pytest.raises(RecordsError) as excinfo:
        log.append([huge], now_ms=0, leader_epoch=0)
    assert excinfo.value.error_code == ErrorCode.record_list_too_large
    assert log.log_end_offset == 8
    log.close()


def test_roll_by_age(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_ms=1_000)
    log.append([make_batch()], now_ms=5_000, leader_epoch=0)
    log.append([make_batch()], now_ms=6_000, leader_epoch=0)
    assert len(log.segments) == 1
    log.append([make_batch()], now_ms=6_001, leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.append([make_batch()], now_ms=7_001, leader_epoch=0)
    assert len(log.segments) == 2
    log.close()


def test_age_after_restart_uses_first_batch_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_ms=1_000)
    log.append([make_batch(timestamp_ms=10_000)], now_ms=10_000, leader_epoch=0)
    log.close()
    log = open_log(tmp_path / "p", now_ms=10_500, segment_ms=1_000)
    log.append([make_batch(timestamp_ms=10_900)], now_ms=10_900, leader_epoch=0)
    assert len(log.segments) == 1
    log.append([make_batch(timestamp_ms=11_001)], now_ms=11_001, leader_epoch=0)
    assert len(log.segments) == 2
    log.close()


def test_explicit_roll(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    assert log.roll(now_ms=0) == 0  # an empty active segment is kept
    log.append([make_batch(3)], now_ms=0, leader_epoch=0)
    assert log.roll(now_ms=0) == 3
    assert [s.base_offset for s in log.segments] == [0, 3]
    log.close()


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=60),
    value_sizes=st.lists(st.integers(min_value=0, max_value=300), min_size=60, max_size=60),
    segment_bytes=st.sampled_from([2_000, 5_000, 1 << 20]),
    interval=st.sampled_from([0, 50, 500, 4096]),
    probes=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=20),
)
def test_index_lookups_match_linear_scan(
    counts: list[int],
    value_sizes: list[int],
    segment_bytes: int,
    interval: int,
    probes: list[int],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
        log = PartitionLog.open(Path(tmp) / "p", config, now_ms=0)
        ranges = []
        for count, size in zip(counts, value_sizes, strict=False):
            appended = log.append([make_batch(count, value_size=size)], now_ms=0, leader_epoch=0)
            ranges.append((appended.base_offset, appended.last_offset))
        for reopen in (False, True):
            if reopen:
                log.close()
                log = PartitionLog.open(Path(tmp) / "p", config, now_ms=0)
            for probe in probes:
                offset = probe % (log.log_end_offset + 1)
                result = log.read(offset, 1)
                if offset == log.log_end_offset:
                    assert result.size_bytes == 0
                    continue
                base, last = next(r for r in ranges if r[0] <= offset <= r[1])
                assert (result.first_offset, result.next_offset) == (base, last + 1)
                header = next(iter_batches(result.read_bytes()))[1]
                assert header.base_offset == base
        log.close()


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=500, index_interval_bytes=60)
    assert log.max_timestamp() == (-1, -1)
    stamps = [[100, 90, 120], [110, 130], [125], [300, 200, 300], [250], [400, 50]]
    for group in stamps:
        log.append([make_batch(len(group), timestamps=group)], now_ms=0, leader_epoch=0)
    flat = [ts for group in stamps for ts in group]

    def expected(target: int) -> tuple[int, int] | None:
        for offset, ts in enumerate(flat):
            if ts >= target:
                return offset, ts
        return None

    for reopen in (False, True):
        if reopen:
            log.close()
            log = open_log(tmp_path / "p", segment_bytes=500, index_interval_bytes=60)
        for target in [0, 50, 90, 100, 101, 111, 121, 126, 130, 131, 200, 299, 300, 301, 400, 401]:
            assert log.offset_for_timestamp(target) == expected(target), target
        assert log.max_timestamp() == (400, 10)
    log.close()


@settings(max_examples=30, deadline=None)
@given(
    groups=st.lists(
        st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=4),
        min_size=1,
        max_size=40,
    ),
    targets=st.lists(st.integers(min_value=-5, max_value=1_005), min_size=1, max_size=10),
)
def test_offset_for_timestamp_matches_brute_force(
    groups: list[list[int]], targets: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(segment_bytes=600, index_interval_bytes=80)
        log = PartitionLog.open(Path(tmp) / "p", config, now_ms=0)
        for group in groups:
            log.append([make_batch(len(group), timestamps=group)], now_ms=0, leader_epoch=0)
        flat = [ts for group in groups for ts in group]
        for target in targets:
            want = next(((o, ts) for o, ts in enumerate(flat) if ts >= target), None)
            assert log.offset_for_timestamp(target) == want
        top = max(flat)
        assert log.max_timestamp() == (top, flat.index(top))
        log.close()


def test_log_append_time(tmp_path: Path) -> None:
    config = LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    result = log.append([make_batch(3, timestamp_ms=5)], now_ms=77_000, leader_epoch=0)
    assert result.log_append_time_ms == 77_000
    header, records = decode_batch(log.read(0, 1 << 20).read_bytes())
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in records} == {77_000}
    assert log.max_timestamp() == (77_000, 0)
    assert log.offset_for_timestamp(76_000) == (0, 77_000)
    log.close()


@settings(max_examples=40, deadline=None)
@given(
    counts=st.lists(st.integers(min_value=1, max_value=4), min_size=1, max_size=50),
    segment_bytes=st.sampled_from([500, 1_500, 1 << 20]),
    interval=st.sampled_from([0, 60, 400]),
    probes=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=10_000),
            st.integers(min_value=0, max_value=3_000),
            st.none() | st.integers(min_value=0, max_value=10_000),
            st.booleans(),
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_read_bounds_match_a_model(
    counts: list[int],
    segment_bytes: int,
    interval: int,
    probes: list[tuple[int, int, int | None, bool]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
        log = PartitionLog.open(Path(tmp) / "p", config, now_ms=0)
        batches = []  # (base, next, size)
        for i, count in enumerate(counts):
            view, header = make_batch(count, value_size=(i * 37) % 90)
            appended = log.append([(view, header)], now_ms=0, leader_epoch=0)
            batches.append((appended.base_offset, appended.last_offset + 1, header.size_bytes))
        end = log.log_end_offset
        segment_ends = [s.next_offset for s in log.segments]
        for offset_seed, max_bytes, max_offset_seed, min_one in probes:
            offset = offset_seed % (end + 1)
            max_offset = None if max_offset_seed is None else max_offset_seed % (end + 2)
            limit = end if max_offset is None else min(max_offset, end)
            want_size, want_first, want_next = 0, offset, offset
            if offset < limit:
                i = next(i for i, b in enumerate(batches) if b[0] <= offset < b[1])
                segment_end = next(e for e in segment_ends if e > offset)
                if batches[i][0] < limit:
                    for base, nxt, size in batches[i:]:
                        if base >= limit or base >= segment_end:
                            break
                        if want_size + size > max_bytes and (want_size or not min_one):
                            break
                        want_size += size
                        want_next = nxt
                    if want_size:
                        want_first = batches[i][0]
            result = log.read(offset, max_bytes, max_offset=max_offset, min_one_batch=min_one)
            got = (result.size_bytes, result.first_offset, result.next_offset)
            assert got == (want_size, want_first, want_next)
            if want_size:
                data = result.read_bytes()
                assert sum(h.size_bytes for _, h in iter_batches(data)) == len(data)
        log.close()
