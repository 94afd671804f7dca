"""Leader epochs in a PartitionLog: which appends record an epoch, truncation and
retention, and opening a log whose epoch file is missing, malformed or left by a crash.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from leader_epoch_helpers import (
    Entries,
    copied,
    follow,
    make_batch,
    open_log,
    stored,
    stored_headers,
)

from strom.log import CheckpointError
from strom.log.leader_epochs import LEADER_EPOCH_CHECKPOINT_FILE, open_leader_epochs
from strom.log.segment import Segment
from strom.protocol.records import RecordsError, replica_batches

# ---------------------------------------------------------------------------- the log


def test_leader_appends_record_each_new_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch(3)], now_ms=0, leader_epoch=0)
    log.append([make_batch(2), make_batch(1)], now_ms=0, leader_epoch=0)
    log.append([make_batch(2)], now_ms=0, leader_epoch=2)
    log.append([make_batch(1)], now_ms=0, leader_epoch=1)  # older: left alone
    log.append([make_batch(1)], now_ms=0, leader_epoch=-1)
    log.append([make_batch(4)], now_ms=0, leader_epoch=7)
    assert log.leader_epochs.entries == ((0, 0), (2, 6), (7, 10))
    assert stored(tmp_path / "p") == [(0, 0), (2, 6), (7, 10)]
    assert log.end_offset_for_epoch(2) == (2, 10)
    assert log.end_offset_for_epoch(7) == (7, 14)
    assert log.end_offset_for_epoch(5) == (2, 10)
    assert log.end_offset_for_epoch(8) == (-1, -1)
    log.close()


def test_the_epoch_is_persisted_before_its_first_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = open_log(tmp_path / "p")
    seen: list[Entries | None] = []
    original = Segment.append

    def spy(segment: Segment, *args: object, **kwargs: object) -> None:
        seen.append(stored(tmp_path / "p"))
        original(segment, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Segment, "append", spy)
    log.append([make_batch()], now_ms=0, leader_epoch=4)
    follow(log, copied(1, [4, 6, 9]))
    assert seen == [[(4, 0)], [(4, 0), (6, 3), (9, 5)]]
    log.close()


def test_a_refused_append_records_no_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=100)
    with pytest.raises(RecordsError, match=r"segment\.bytes"):
        log.append([make_batch(40)], now_ms=0, leader_epoch=3)
    assert log.leader_epochs.entries == () and stored(tmp_path / "p") is None
    follow(log, copied(0, [1]))
    with pytest.raises(ValueError, match="does not continue the log"):
        follow(log, copied(0, [3]))  # going back: refused
    assert log.leader_epochs.entries == ((1, 0),)
    log.close()


def test_a_follower_copies_a_compacted_leaders_gaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    follow(log, copied(5, [2]))
    assert log.log_end_offset > 5
    assert log.leader_epochs.entries == ((2, 5),)
    assert [h.base_offset for h in stored_headers(log)] == [5]
    log.close()


def test_follower_appends_take_each_batchs_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    data = copied(0, [1, 1, 3, -1, 2, 5])
    log.append(replica_batches(data), now_ms=0, leader_epoch=99, assign_offsets=False)
    assert log.leader_epochs.entries == ((1, 0), (3, 4), (5, 10))
    assert [h.partition_leader_epoch for h in stored_headers(log)] == [1, 1, 3, -1, 2, 5]
    log.close()


def test_assign_epoch_start_at_the_log_end(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append([make_batch(3)], now_ms=0, leader_epoch=1)
    log.assign_epoch_start(2, 3)
    assert log.leader_epochs.entries == ((1, 0), (2, 3))
    assert log.end_offset_for_epoch(1) == (1, 3)
    assert log.end_offset_for_epoch(2) == (2, 3)
    log.append([make_batch()], now_ms=0, leader_epoch=2)  # the epoch is known: no change
    assert log.leader_epochs.entries == ((1, 0), (2, 3))
    assert log.end_offset_for_epoch(2) == (2, 4)
    for wrong in (3, 5):
        with pytest.raises(ValueError, match="not the log end"):
            log.assign_epoch_start(3, wrong)
    log.assign_epoch_start(2, 4)  # not newer: no-op
    assert log.leader_epochs.entries == ((1, 0), (2, 3))
    log.close()


def test_truncation_drops_epochs_past_the_new_end(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=300)
    for epoch in (1, 1, 2, 2, 4, 4, 6):
        log.append([make_batch(2)], now_ms=0, leader_epoch=epoch)
    assert log.leader_epochs.entries == ((1, 0), (2, 4), (4, 8), (6, 12))
    assert log.truncate_to(100) == 14
    assert log.leader_epochs.entries == ((1, 0), (2, 4), (4, 8), (6, 12))
    assert log.truncate_to(9) == 8  # the batch holding 9 goes whole
    assert log.leader_epochs.entries == ((1, 0), (2, 4))
    assert stored(tmp_path / "p") == [(1, 0), (2, 4)]
    log.append([make_batch()], now_ms=0, leader_epoch=5)
    assert log.leader_epochs.entries == ((1, 0), (2, 4), (5, 8))
    log.close()


def test_retention_moves_the_first_epoch_up(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200, retention_bytes=250)
    for epoch in (1, 1, 1, 2, 2, 3, 3, 3):
        log.append([make_batch(2)], now_ms=0, leader_epoch=epoch)
    assert log.leader_epochs.entries == ((1, 0), (2, 6), (3, 10))
    assert log.delete_old_segments(now_ms=0)
    start = log.log_start_offset
    assert 6 < start < 16
    expected = [(2, start), (3, 10)] if start < 10 else [(3, start)]
    assert list(log.leader_epochs.entries) == expected
    assert stored(tmp_path / "p") == expected
    log.close()


def test_truncate_fully_and_start_above_the_log_end(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory, segment_bytes=200)
    batch = make_batch(1, producer_id=9, producer_epoch=0, base_sequence=0)
    log.append([batch], now_ms=0, leader_epoch=1)
    for _ in range(6):
        log.append([make_batch(2)], now_ms=0, leader_epoch=2)
    assert log.producer_state_for(9) is not None
    log.truncate_fully_and_start_at(1_000)
    assert (log.log_start_offset, log.log_end_offset, log.size_bytes) == (1_000, 1_000, 0)
    assert [s.base_offset for s in log.segments] == [1_000]
    assert log.leader_epochs.entries == () and stored(directory) is None
    assert log.producer_state_for(9) is None
    assert log.end_offset_for_epoch(2) == (-1, -1)
    follow(log, copied(1_000, [5]))
    assert log.log_end_offset == 1_002
    assert log.leader_epochs.entries == ((5, 1_000),)
    for clean in (True, False):
        log.close(clean=clean)
        log = open_log(directory)
        assert (log.log_start_offset, log.log_end_offset) == (1_000, 1_002)
        assert log.leader_epochs.entries == ((5, 1_000),)
        assert log.producer_state_for(9) is None
    log.close()


def test_truncate_fully_below_the_log_start(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append([make_batch(3)], now_ms=0, leader_epoch=1)
    log.truncate_fully_and_start_at(50)
    follow(log, copied(50, [3, 4]))
    assert (log.log_start_offset, log.log_end_offset) == (50, 54)
    assert log.leader_epochs.entries == ((3, 50), (4, 52))
    log.truncate_fully_and_start_at(20)
    assert (log.log_start_offset, log.log_end_offset, log.leader_epochs.entries) == (20, 20, ())
    log.close(clean=False)
    log = open_log(directory)
    assert (log.log_start_offset, log.log_end_offset, log.leader_epochs.entries) == (20, 20, ())
    with pytest.raises(ValueError):
        log.truncate_fully_and_start_at(-1)
    log.close()


# ---------------------------------------------------------------------------- open and crashes


def test_a_missing_file_is_rebuilt_from_the_batches(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory, segment_bytes=200)
    for epoch in (0, 0, 3, 3, 3, 5, 8, 8):
        log.append([make_batch(2)], now_ms=0, leader_epoch=epoch)
    entries = log.leader_epochs.entries
    assert len(log.segments) > 2
    for clean in (True, False):
        log.close(clean=clean)
        (directory / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
        log = open_log(directory)
        assert log.leader_epochs.entries == entries
        assert stored(directory) == list(entries)
    log.close()


def test_an_empty_log_without_a_file_writes_none(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.close()
    log = open_log(tmp_path / "p")
    assert log.leader_epochs.entries == () and stored(tmp_path / "p") is None
    log.close()


def test_a_malformed_file_stops_the_open(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append([make_batch()], now_ms=0, leader_epoch=2)
    log.close()
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n1\n2 zero\n")
    with pytest.raises(CheckpointError, match=r"line 3: .* \(remove the file"):
        open_log(directory)
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).unlink()
    log = open_log(directory)
    assert log.leader_epochs.entries == ((2, 0),)
    log.close()


def test_crash_leaves_entries_past_the_log_end_and_open_drops_them(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append([make_batch(2)], now_ms=0, leader_epoch=1)
    log.append([make_batch(2)], now_ms=0, leader_epoch=3)
    size_before = log.size_bytes
    log.append([make_batch(2)], now_ms=0, leader_epoch=4)  # recorded, then written
    log.close(clean=False)
    # the crash lost the last batch (never fsynced) but not the checkpoint (fsynced first)
    os.truncate(directory / f"{0:020d}.log", size_before + 30)
    # and an even later epoch had been recorded for a batch that was never written
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n4\n1 0\n3 2\n4 4\n6 9\n")
    log = open_log(directory)
    assert log.recovery_report.truncations and log.log_end_offset == 4
    assert log.leader_epochs.entries == ((1, 0), (3, 2))
    assert stored(directory) == [(1, 0), (3, 2)]
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(4) == (-1, -1)
    log.append([make_batch()], now_ms=0, leader_epoch=4)
    assert log.leader_epochs.entries == ((1, 0), (3, 2), (4, 4))
    log.close()


def test_crash_after_clearing_for_a_full_truncation_rebuilds(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory)
    log.append([make_batch(2)], now_ms=0, leader_epoch=1)
    log.append([make_batch(2)], now_ms=0, leader_epoch=2)
    log.leader_epochs.clear()  # what truncate_fully_and_start_at does first; then a crash
    log.close(clean=False)
    log = open_log(directory)
    assert log.leader_epochs.entries == ((1, 0), (2, 2))
    log.close()


def test_open_clips_entries_below_the_log_start(tmp_path: Path) -> None:
    directory = tmp_path / "p"
    log = open_log(directory, segment_bytes=200, retention_bytes=0)
    for epoch in (1, 1, 2, 2, 2, 3):
        log.append([make_batch(2)], now_ms=0, leader_epoch=epoch)
    log.close()
    # a crash between deleting segments and rewriting the checkpoint
    saved = (directory / LEADER_EPOCH_CHECKPOINT_FILE).read_text()
    log = open_log(directory, segment_bytes=200, retention_bytes=0)
    log.delete_old_segments(now_ms=0)
    start = log.log_start_offset
    log.close(clean=False)
    (directory / LEADER_EPOCH_CHECKPOINT_FILE).write_text(saved)
    log = open_log(directory)
    assert log.leader_epochs.entries[0][1] == start
    log.close()


def test_open_leader_epochs_of_an_empty_log_writes_nothing(tmp_path: Path) -> None:
    segment = Segment.create(tmp_path, 7, index_interval_bytes=4096, now_ms=0)
    try:
        assert open_leader_epochs(tmp_path, [segment]).entries == ()
        assert stored(tmp_path) is None
    finally:
        segment.close()
