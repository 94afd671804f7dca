"""PartitionLog's stored segments over time: retention, flush plans and group commit,
truncation, follower appends, reopening, closing and deleting.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from partition_log_helpers import make_batch, open_log, read_all

from strom.log import LogConfig, OffsetOutOfRange, PartitionLog
from strom.protocol.records import Compression, decode_batch, validate_batches


def test_retention_by_time_never_deletes_active(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200, retention_ms=1_000)
    for i in range(8):
        log.append(
            [make_batch(1, value_size=100, timestamp_ms=i * 1_000)], now_ms=0, leader_epoch=0
        )
    assert len(log.segments) == 8
    assert log.delete_old_segments(now_ms=3_500) == [0, 1, 2]
    assert log.log_start_offset == 3
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert log.read(3, 100).first_offset == 3
    assert log.delete_old_segments(now_ms=10**9) == [3, 4, 5, 6]
    assert [s.base_offset for s in log.segments] == [7]
    assert log.delete_old_segments(now_ms=10**9) == []
    assert not (tmp_path / "p" / "00000000000000000000.log").exists()
    log.close()
    log = open_log(tmp_path / "p")
    assert (log.log_start_offset, log.log_end_offset) == (7, 8)
    log.close()


def test_retention_forever_and_untimed_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200, retention_ms=-1)
    for _ in range(3):
        log.append([make_batch(1, value_size=100, timestamp_ms=0)], now_ms=0, leader_epoch=0)
    assert log.delete_old_segments(now_ms=10**12) == []
    log.close()
    log = open_log(tmp_path / "q", segment_bytes=200, retention_ms=1_000)
    for i in range(3):  # no record timestamps (-1): the append time counts
        log.append(
            [make_batch(1, value_size=100, timestamp_ms=-1)], now_ms=i * 10_000, leader_epoch=0
        )
    assert log.delete_old_segments(now_ms=10_500) == [0]
    log.close()


def test_retention_by_size(tmp_path: Path) -> None:
    view, header = make_batch(1, value_size=100)
    size = header.size_bytes
    log = open_log(
        tmp_path / "p", segment_bytes=size * 2, retention_bytes=size * 3, retention_ms=-1
    )
    for _ in range(9):
        log.append([(view, header)], now_ms=0, leader_epoch=0)
    assert [s.size_bytes for s in log.segments] == [size * 2] * 4 + [size]
    assert log.delete_old_segments(now_ms=0) == [0, 2, 4]
    assert log.size_bytes == size * 3
    log.close()
    log = open_log(tmp_path / "q", segment_bytes=size * 2, retention_bytes=0, retention_ms=-1)
    for _ in range(4):
        log.append([(view, header)], now_ms=0, leader_epoch=0)
    assert log.delete_old_segments(now_ms=0) == [0]
    assert len(log.segments) == 1 and log.segments[0].is_active
    log.close()


def test_flush_plan_and_group_commit(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    assert not log.needs_flush(0)
    log.append([make_batch(3)], now_ms=0, leader_epoch=0)
    assert log.needs_flush(0)
    assert (log.flushed_offset, log.unflushed_messages) == (0, 3)
    plan = log.flush_plan()
    assert plan.up_to_offset == 3 and plan.fds
    log.append([make_batch(2)], now_ms=1, leader_epoch=0)  # lands after the plan
    for fd in plan.fds:
        os.fsync(fd)
        os.close(fd)
    log.mark_flushed(plan)
    assert (log.flushed_offset, log.unflushed_messages) == (3, 2)
    log.flush()
    assert (log.flushed_offset, log.unflushed_messages) == (5, 0)
    assert not log.needs_flush(10**9)
    log.close()


def test_flush_by_count_and_age(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", flush_messages=5, flush_ms=100)
    log.append([make_batch(2)], now_ms=1_000, leader_epoch=0)
    assert not log.needs_flush(1_050)
    assert log.needs_flush(1_100)
    log.append([make_batch(3)], now_ms=1_010, leader_epoch=0)
    assert log.needs_flush(1_010)
    log.flush()
    assert not log.needs_flush(5_000)
    log.close()


def test_plan_fds_survive_roll_and_close(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200, flush_messages=10**6)
    log.append([make_batch(1, value_size=100)], now_ms=0, leader_epoch=0)
    plan = log.flush_plan()
    log.append([make_batch(1, value_size=100)], now_ms=0, leader_epoch=0)  # rolls
    assert log.needs_flush(0)  # a rolled segment's indexes await fsync
    log.close()
    for fd in plan.fds:
        os.fsync(fd)
        os.close(fd)
    log.mark_flushed(plan)  # harmless after close


def test_recovery_point_advances_after_flushing_rolled_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200)
    for _ in range(3):
        log.append([make_batch(1, value_size=100)], now_ms=0, leader_epoch=0)
    log.flush()
    assert (tmp_path / "p" / "recovery-point").read_text().strip() == "2"
    assert not log.needs_flush(0)
    log.close()


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=300)
    for _ in range(10):
        log.append([make_batch(3, value_size=20)], now_ms=0, leader_epoch=0)
    assert log.truncate_to(100) == 30
    assert log.truncate_to(17) == 15  # inside the batch 15..17: the whole batch goes
    assert log.log_end_offset == 15
    assert all(s.next_offset <= 15 for s in log.segments)
    assert [o for o, _ in read_all(log)] == list(range(15))
    assert log.append([make_batch(2)], now_ms=0, leader_epoch=0).base_offset == 15
    assert log.truncate_to(0) == 0
    assert [s.base_offset for s in log.segments] == [0]
    log.close()
    log = open_log(tmp_path / "p")
    assert log.log_end_offset == 0
    log.close()


def test_truncate_below_log_start_restarts_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200, retention_ms=0)
    for _ in range(3):
        log.append([make_batch(1, value_size=100, timestamp_ms=0)], now_ms=0, leader_epoch=0)
    log.delete_old_segments(now_ms=10)
    assert log.log_start_offset == 2
    assert log.truncate_to(1) == 1
    assert (log.log_start_offset, log.log_end_offset) == (1, 1)
    log.append([make_batch()], now_ms=0, leader_epoch=0)
    assert read_all(log) == [(1, bytes([0]) * 10)]
    log.close()


def test_follower_append_keeps_offsets(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    leader.append([make_batch(2), make_batch(3)], now_ms=0, leader_epoch=4)
    data = leader.read(0, 1 << 20).read_bytes()
    follower = open_log(tmp_path / "follower")
    batches = validate_batches(data, max_batch_bytes=1 << 20)
    result = follower.append(batches, now_ms=0, leader_epoch=0, assign_offsets=False)
    assert (result.base_offset, result.last_offset) == (0, 4)
    assert follower.read(0, 1 << 20).read_bytes() == data
    with pytest.raises(ValueError):
        follower.append(batches[:1], now_ms=0, leader_epoch=0, assign_offsets=False)
    leader.close()
    follower.close()


def test_clean_reopen(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=400, index_interval_bytes=50)
    for i in range(20):
        log.append([make_batch(1 + i % 3, value_size=30)], now_ms=i, leader_epoch=0)
    before = read_all(log)
    segments = log.segments
    log.close()
    assert (tmp_path / "p" / ".clean_shutdown").exists()
    log = open_log(tmp_path / "p", segment_bytes=400, index_interval_bytes=50)
    assert not (tmp_path / "p" / ".clean_shutdown").exists()
    report = log.recovery_report
    assert report.clean_shutdown and not report.repaired and not report.checked_segments
    assert log.segments == segments
    assert read_all(log) == before
    assert log.flushed_offset == log.log_end_offset
    log.append([make_batch()], now_ms=0, leader_epoch=0)
    assert log.log_end_offset == before[-1][0] + 2
    log.close()


def test_closed_log_refuses_calls_and_delete_removes_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch()], now_ms=0, leader_epoch=0)
    log.close()
    log.close()  # idempotent
    with pytest.raises(ValueError):
        log.append([make_batch()], now_ms=0, leader_epoch=0)
    with pytest.raises(ValueError):
        log.read(0, 10)
    log = open_log(tmp_path / "p")
    log.delete()
    assert not (tmp_path / "p").exists()
    with pytest.raises(FileNotFoundError):
        PartitionLog.open(tmp_path / "p", LogConfig(), now_ms=0, create=False)


def test_compressed_batches_are_stored_unchanged(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    view, header = make_batch(20, value_size=50, compression=Compression.ZSTD)
    log.append([(view, header)], now_ms=0, leader_epoch=0)
    data = log.read(0, 1 << 20).read_bytes()
    assert data[16:] == bytes(view)[16:]
    assert len(decode_batch(data)[1]) == 20
    log.close()


def test_copy_of_directory_opens_as_unclean(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch(2)], now_ms=0, leader_epoch=0)
    log.flush()
    shutil.copytree(tmp_path / "p", tmp_path / "copy")  # no clean shutdown marker yet
    log.close()
    copy = open_log(tmp_path / "copy")
    assert not copy.recovery_report.clean_shutdown
    assert copy.log_end_offset == 2
    copy.close()
