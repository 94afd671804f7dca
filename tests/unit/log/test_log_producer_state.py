"""Idempotent producer checks of the partition log, and their persistence."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest
from kio.schema.errors import ErrorCode

from strom.log import LogConfig, PartitionLog
from strom.log.producer_state import ProducerStateManager, SnapshotError
from strom.protocol.records import (
    BatchHeader,
    NewRecord,
    RecordsError,
    encode_batch,
    validate_batches,
)

Batch = tuple[memoryview, BatchHeader]


def idempotent(pid: int, epoch: int, seq: int, count: int = 5, value_size: int = 10) -> Batch:
    records = [NewRecord(None, bytes([i]) * value_size) for i in range(count)]
    data = encode_batch(
        records,
        base_timestamp_ms=1_000,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def plain(count: int = 1) -> Batch:
    data = encode_batch([NewRecord(None, b"x")] * count, base_timestamp_ms=1_000)
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def append(log: PartitionLog, *batches: Batch) -> tuple[int, int, bool]:
    result = log.append(list(batches), now_ms=0, leader_epoch=0)
    return result.base_offset, result.last_offset, result.duplicate


def refused(log: PartitionLog, *batches: Batch) -> ErrorCode:
    end, size = log.log_end_offset, log.size_bytes
    with pytest.raises(RecordsError) as excinfo:
        log.append(list(batches), now_ms=0, leader_epoch=0)
    assert (log.log_end_offset, log.size_bytes) == (end, size)  # nothing written
    return excinfo.value.error_code


@pytest.fixture
def log(tmp_path: Path) -> PartitionLog:
    return PartitionLog.open(tmp_path / "p", LogConfig(segment_bytes=600), now_ms=0)


def test_duplicates_return_original_offsets(log: PartitionLog) -> None:
    append(log, plain(3))
    assert append(log, idempotent(7, 0, 0)) == (3, 7, False)
    assert append(log, idempotent(7, 0, 5)) == (8, 12, False)
    end = log.log_end_offset
    assert append(log, idempotent(7, 0, 0)) == (3, 7, True)
    assert append(log, idempotent(7, 0, 5)) == (8, 12, True)
    assert log.log_end_offset == end
    entry = log.producer_state_for(7)
    assert entry is not None and entry.epoch == 0 and entry.last_seq == 9
    log.close()


def test_only_last_five_batches_are_remembered(log: PartitionLog) -> None:
    for i in range(6):
        append(log, idempotent(1, 0, i * 5))
    assert append(log, idempotent(1, 0, 5))[2]  # the second batch is still cached
    assert refused(log, idempotent(1, 0, 0)) == ErrorCode.out_of_order_sequence_number
    log.close()


def test_out_of_order_sequence(log: PartitionLog) -> None:
    append(log, idempotent(1, 0, 0))
    assert refused(log, idempotent(1, 0, 6)) == ErrorCode.out_of_order_sequence_number
    assert refused(log, idempotent(1, 0, 3)) == ErrorCode.out_of_order_sequence_number
    assert append(log, idempotent(1, 0, 5))[2] is False
    log.close()


def test_fenced_and_bumped_epochs(log: PartitionLog) -> None:
    append(log, idempotent(1, 3, 0))
    assert refused(log, idempotent(1, 2, 5)) == ErrorCode.invalid_producer_epoch
    assert refused(log, idempotent(1, 4, 5)) == ErrorCode.out_of_order_sequence_number
    assert append(log, idempotent(1, 4, 0))[2] is False
    assert refused(log, idempotent(1, 3, 5)) == ErrorCode.invalid_producer_epoch
    entry = log.producer_state_for(1)
    assert entry is not None and entry.epoch == 4 and len(entry.batches) == 1
    log.close()


def test_unknown_producer_must_start_at_zero(log: PartitionLog) -> None:
    assert refused(log, idempotent(9, 0, 17)) == ErrorCode.unknown_producer_id
    assert log.producer_state_for(9) is None
    log.close()


def test_whole_append_is_checked_before_writing(log: PartitionLog) -> None:
    assert refused(log, idempotent(1, 0, 0, 2), idempotent(1, 0, 5, 2)) == (
        ErrorCode.out_of_order_sequence_number
    )
    assert refused(log, idempotent(1, 0, 0), idempotent(2, 0, 3)) == ErrorCode.unknown_producer_id
    assert append(log, idempotent(1, 0, 0, 2), idempotent(1, 0, 2, 2), plain()) == (0, 4, False)
    assert log.producer_state_for(1).last_seq == 3  # type: ignore[union-attr]
    log.close()


def test_sequence_wraps_after_int32_max() -> None:
    manager = ProducerStateManager()
    manager.replay(idempotent(1, 0, 2**31 - 3, count=2)[1])  # ends at 2**31 - 2
    with pytest.raises(RecordsError):
        manager.check([idempotent(1, 0, 0, count=1)[1]])
    last_one = idempotent(1, 0, 2**31 - 1, count=3)[1]  # 2**31 - 1, then 0 and 1
    assert last_one.last_sequence == 1
    assert manager.check([last_one, idempotent(1, 0, 2, count=1)[1]]) is None
    manager.replay(last_one)
    assert manager.check([last_one]) is not None  # a duplicate across the wrap
    assert manager.check([idempotent(1, 0, 2, count=1)[1]]) is None


def test_state_survives_clean_reopen(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=600)
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    append(log, idempotent(1, 0, 0))
    append(log, idempotent(2, 5, 0))
    append(log, idempotent(1, 0, 5))
    log.close()
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    report = log.recovery_report
    assert report.producer_snapshot_offset == log.log_end_offset
    assert report.producer_batches_replayed == 0
    assert append(log, idempotent(1, 0, 5)) == (10, 14, True)
    assert append(log, idempotent(2, 5, 0)) == (5, 9, True)
    assert refused(log, idempotent(2, 4, 5)) == ErrorCode.invalid_producer_epoch
    assert append(log, idempotent(1, 0, 10))[2] is False
    log.close()


def test_state_survives_unclean_reopen_without_snapshots(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=600)
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    offsets = [append(log, idempotent(1, 0, i * 5))[:2] for i in range(8)]
    log.close(clean=False)
    for snapshot in (tmp_path / "p").glob("*.snapshot"):
        snapshot.unlink()
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    assert log.recovery_report.producer_snapshot_offset == -1
    assert log.recovery_report.producer_batches_replayed == 8
    assert append(log, idempotent(1, 0, 35)) == (*offsets[7], True)
    assert append(log, idempotent(1, 0, 15)) == (*offsets[3], True)
    assert append(log, idempotent(1, 0, 40))[2] is False
    log.close()


def test_snapshots_at_roll_keep_two(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300)
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    for i in range(12):
        append(log, idempotent(1, 0, i * 5))
    active = log.segments[-1].base_offset
    log.close(clean=False)
    snapshots = sorted(int(p.name[:20]) for p in (tmp_path / "p").glob("*.snapshot"))
    assert len(snapshots) == 2 and snapshots[-1] == active
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    report = log.recovery_report
    assert report.producer_snapshot_offset == active
    assert report.producer_batches_replayed == (log.log_end_offset - active) // 5
    assert append(log, idempotent(1, 0, 55))[2]
    assert append(log, idempotent(1, 0, 60))[2] is False
    log.close()


def test_corrupt_snapshot_falls_back(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300)
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    for i in range(12):
        append(log, idempotent(1, 0, i * 5))
    log.close()
    newest = max((tmp_path / "p").glob("*.snapshot"))
    data = bytearray(newest.read_bytes())
    data[10] ^= 1
    newest.write_bytes(bytes(data))
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    report = log.recovery_report
    assert newest.name in report.removed_files
    assert 0 <= report.producer_snapshot_offset < log.log_end_offset
    assert append(log, idempotent(1, 0, 55))[2]
    log.close()


def test_truncation_rebuilds_producer_state(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=300)
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    for i in range(10):
        append(log, idempotent(1, 0, i * 5))
    assert log.truncate_to(30) == 30
    assert not any(int(p.name[:20]) > 30 for p in (tmp_path / "p").glob("*.snapshot"))
    entry = log.producer_state_for(1)
    assert entry is not None and entry.last_seq == 29
    assert append(log, idempotent(1, 0, 30)) == (30, 34, False)
    assert append(log, idempotent(1, 0, 25)) == (25, 29, True)
    log.close()
    log = PartitionLog.open(tmp_path / "p", config, now_ms=0)
    assert log.producer_state_for(1).last_seq == 34  # type: ignore[union-attr]
    log.close()


def test_follower_appends_skip_checks_but_track_state(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "p", LogConfig(), now_ms=0)
    view, header = idempotent(1, 0, 10)
    stamped = bytearray(bytes(view))
    result = log.append(
        [(memoryview(stamped), header)], now_ms=0, leader_epoch=0, producer_check=False
    )
    assert result.base_offset == 0
    assert log.producer_state_for(1).last_seq == 14  # type: ignore[union-attr]
    log.close()


def test_snapshot_format_round_trip() -> None:
    manager = ProducerStateManager()
    for pid in range(3):
        for i in range(7):
            manager.update(idempotent(pid, 2, i * 5)[1], 100 * pid + i * 5, 1_000 + i)
    data = manager.to_snapshot(42)
    other = ProducerStateManager()
    assert other.load_snapshot(data) == 42
    for pid in range(3):
        assert other.get(pid) == manager.get(pid)
        assert len(other.get(pid).batches) == 5  # type: ignore[union-attr]
    with pytest.raises(SnapshotError):
        other.load_snapshot(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(SnapshotError):
        other.load_snapshot(data[:10])


def test_snapshots_keep_a_producers_last_marker_and_read_the_older_format() -> None:
    manager = ProducerStateManager()
    manager.update(idempotent(1, 0, 0)[1], 0, 1_000)
    manager.end_txn(1, 1, 3, 1_001, offset=5)  # a marker, the producer's last batch
    manager.update(idempotent(2, 0, 0)[1], 6, 1_002)
    manager.end_txn(2, 0, 3, 1_003, offset=11)
    manager.update(idempotent(2, 0, 5)[1], 12, 1_004)  # data after it: not the last
    assert manager.last_batch_offsets() == frozenset({5, 16})
    other = ProducerStateManager()
    other.load_snapshot(manager.to_snapshot(17))
    assert other.get(1) == manager.get(1) and other.get(2) == manager.get(2)
    assert other.last_batch_offsets() == manager.last_batch_offsets()
    # version 2 has no last marker: read as none
    body = struct.pack(">4sqI", b"SPS2", 10, 1) + struct.pack(">qhiqqB", 7, 2, 4, 99, -1, 0)
    assert other.load_snapshot(body + struct.pack(">I", crc32c.crc32c(body))) == 10
    entry = other.get(7)
    assert entry is not None and (entry.epoch, entry.coordinator_epoch) == (2, 4)
    assert entry.last_marker_offset == -1 and other.last_batch_offsets() == frozenset()
