"""DeleteRecords in the log: the start moved to any offset, durable across clean and
unclean reopens, whole segments below it deleted, and truncation below it handled."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from partition_log_helpers import make_batch, open_log, read_all

from strom.log import OffsetOutOfRange, PartitionLog
from strom.log.files import LOG_START_FILE

SEGMENT_BYTES = 400
"""Two one-record batches of 100-byte values fill a segment."""


def filled(path: Path, records: int) -> PartitionLog:
    log = open_log(path, segment_bytes=SEGMENT_BYTES, retention_ms=-1)
    for i in range(records):
        log.append(
            [make_batch(1, value_size=100, timestamp_ms=1_000 + i)], now_ms=0, leader_epoch=0
        )
    return log


def test_a_start_inside_a_segment_hides_what_is_below_and_survives_a_crash(
    tmp_path: Path,
) -> None:
    log = filled(tmp_path / "p", 10)
    bases = [s.base_offset for s in log.segments]
    assert bases[:3] == [0, 2, 4]
    assert log.delete_records_before(3) == [0]
    assert log.log_start_offset == 3
    assert [s.base_offset for s in log.segments] == bases[1:]
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 1000)
    assert [offset for offset, _ in read_all(log)] == list(range(3, 10))
    assert log.offset_for_timestamp(0) == (3, 1_003)
    log.close(clean=False)
    log = open_log(tmp_path / "p", segment_bytes=SEGMENT_BYTES)
    assert (log.log_start_offset, log.log_end_offset) == (3, 10)
    assert log.recovery_report.log_start_offset == 3
    log.close()
    log = open_log(tmp_path / "p")
    assert log.log_start_offset == 3
    log.close()


def test_the_largest_timestamp_is_looked_for_at_or_after_the_start(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=SEGMENT_BYTES, retention_ms=-1)
    for stamp in (9_000, 8_000, 100, 200, 8_000):  # segments 0-1, 2-3, 4 (active)
        log.append([make_batch(1, value_size=100, timestamp_ms=stamp)], now_ms=0, leader_epoch=0)
    assert log.max_timestamp() == (9_000, 0)
    log.delete_records_before(1)  # the first segment's newest record is gone
    assert log.max_timestamp() == (8_000, 1)  # the first record of the tie
    log.truncate_to(4)
    log.delete_records_before(1)
    assert log.max_timestamp() == (8_000, 1)
    log.close()
    log = open_log(tmp_path / "q", segment_bytes=SEGMENT_BYTES, retention_ms=-1)
    for stamp in (9_000, 100, 200, 300):
        log.append([make_batch(1, value_size=100, timestamp_ms=stamp)], now_ms=0, leader_epoch=0)
    log.delete_records_before(1)
    assert log.max_timestamp() == (300, 3)
    log.delete_records_before(4)
    assert log.max_timestamp() == (-1, -1)
    log.close()


def test_whole_segments_below_go_but_never_the_active_one(tmp_path: Path) -> None:
    log = filled(tmp_path / "p", 10)
    active = log.segments[-1].base_offset
    log.delete_records_before(10)
    assert [s.base_offset for s in log.segments] == [active]
    assert (log.log_start_offset, log.log_end_offset) == (10, 10)
    assert read_all(log) == []
    log.append([make_batch(2)], now_ms=0, leader_epoch=0)
    assert [offset for offset, _ in read_all(log)] == [10, 11]
    log.close()


def test_a_start_at_or_below_the_current_one_changes_nothing(tmp_path: Path) -> None:
    log = filled(tmp_path / "p", 6)
    log.delete_records_before(4)
    assert log.delete_records_before(4) == []
    assert log.delete_records_before(1) == []
    assert log.log_start_offset == 4
    for bad in (-1, 7):
        with pytest.raises(ValueError, match="cannot start the log"):
            log.delete_records_before(bad)
    assert log.log_start_offset == 4
    log.close()


def test_truncation_below_the_start_moves_it_down_to_the_new_end(tmp_path: Path) -> None:
    log = filled(tmp_path / "p", 10)
    log.delete_records_before(5)  # segment 3..5 stays, starting at 5
    assert log.truncate_to(4) == 4  # a follower told to go back below it
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    log.close(clean=False)
    log = open_log(tmp_path / "p")
    assert (log.log_start_offset, log.log_end_offset) == (4, 4)
    log.close()


def test_a_restart_lower_forgets_the_stored_start(tmp_path: Path) -> None:
    log = filled(tmp_path / "p", 10)
    log.delete_records_before(8)
    log.truncate_fully_and_start_at(2)
    assert not (tmp_path / "p" / LOG_START_FILE).exists()
    log.append([make_batch(8)], now_ms=0, leader_epoch=1)
    log.close(clean=False)
    log = open_log(tmp_path / "p")
    assert (log.log_start_offset, log.log_end_offset) == (2, 10)
    log.close()


def test_a_stored_start_outside_the_log_is_ignored_and_removed(tmp_path: Path) -> None:
    log = filled(tmp_path / "p", 4)
    log.close()
    (tmp_path / "p" / LOG_START_FILE).write_text("99\n")  # a crash mid-restart left it
    log = open_log(tmp_path / "p")
    assert log.log_start_offset == 0
    assert not (tmp_path / "p" / LOG_START_FILE).exists()
    log.close()
    (tmp_path / "p" / LOG_START_FILE).write_text("not a number\n")
    log = open_log(tmp_path / "p")
    assert log.log_start_offset == 0
    log.close()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(1, 4)),
            st.tuples(st.just("delete"), st.integers(0, 60)),
            st.tuples(st.just("reopen"), st.booleans()),
        ),
        max_size=25,
    )
)
def test_the_start_follows_a_model_through_appends_deletions_and_reopens(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]
) -> None:
    path = tmp_path_factory.mktemp("log") / "p"
    log = open_log(path, segment_bytes=SEGMENT_BYTES, retention_ms=-1)
    start = end = 0
    try:
        for kind, value in steps:
            if kind == "append":
                log.append([make_batch(value, value_size=60)], now_ms=0, leader_epoch=0)
                end += value
            elif kind == "delete":
                wanted = min(value, end)
                log.delete_records_before(wanted)
                start = max(start, wanted)
            else:
                log.close(clean=bool(value))
                log = open_log(path, segment_bytes=SEGMENT_BYTES, retention_ms=-1)
            assert (log.log_start_offset, log.log_end_offset) == (start, end)
            assert [offset for offset, _ in read_all(log)] == list(range(start, end))
            assert log.segments[0].base_offset <= start
    finally:
        log.close()
