"""Leader epochs: the cache and its file, a PartitionLog keeping them, crashes, a model."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from strom.log import CheckpointError, LeaderEpochCache, LogConfig, PartitionLog
from strom.log.leader_epochs import (
    LEADER_EPOCH_CHECKPOINT_FILE,
    open_leader_epochs,
    read_leader_epochs,
)
from strom.log.segment import Segment
from strom.protocol.records import (
    BatchHeader,
    NewRecord,
    RecordsError,
    encode_batch,
    iter_batches,
    replica_batches,
    validate_batches,
)

Batch = tuple[memoryview, BatchHeader]
Entries = list[tuple[int, int]]


def make_batch(count: int = 1, **kwargs: int) -> Batch:
    records = [NewRecord(key=None, value=b"v%d" % i) for i in range(count)]
    data = encode_batch(records, base_timestamp_ms=1_000, **kwargs)  # type: ignore[arg-type]
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def copied(base_offset: int, epochs: list[int], count: int = 2) -> bytes:
    """What a follower fetches: stamped batches from ``base_offset``, one per epoch given."""
    out = b""
    for epoch in epochs:
        records = [NewRecord(key=None, value=b"f%d" % i) for i in range(count)]
        out += encode_batch(
            records,
            base_timestamp_ms=1_000,
            base_offset=base_offset,
            partition_leader_epoch=epoch,
        )
        base_offset += count
    return out


def follow(log: PartitionLog, data: bytes) -> None:
    """Append what a follower fetched, as it is."""
    log.append(
        replica_batches(data), now_ms=0, leader_epoch=0, assign_offsets=False, producer_check=False
    )


def open_log(directory: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config), now_ms=0)  # type: ignore[arg-type]


def stored(directory: Path) -> Entries | None:
    cache = read_leader_epochs(directory)
    return None if cache is None else list(cache.entries)


def stored_headers(log: PartitionLog) -> list[BatchHeader]:
    headers: list[BatchHeader] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        headers += [header for _, header in iter_batches(result.read_bytes())]
        offset = result.next_offset
    return headers


# ---------------------------------------------------------------------------- the cache


def cache_with(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in entries:
        cache.assign(epoch, start)
    return cache


def test_empty_cache(tmp_path: Path) -> None:
    cache = LeaderEpochCache(tmp_path)
    assert (cache.latest_epoch, cache.entries) == (-1, ())
    assert cache.end_offset_for(-1, 10) == (-1, -1)
    assert cache.end_offset_for(0, 10) == (-1, -1)
    cache.assign(-1, 0)  # never recorded
    cache.truncate_from_end(0)
    cache.truncate_from_start(5)
    assert not (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).exists()


def test_assign_appends_and_persists_in_kafkas_format(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    assert cache.entries == ((1, 0), (3, 10), (5, 20)) and cache.latest_epoch == 5
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    assert path.read_text() == "0\n3\n1 0\n3 10\n5 20\n"
    assert os.listdir(tmp_path) == [LEADER_EPOCH_CHECKPOINT_FILE]


def test_assign_ignores_old_and_current_epochs(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (3, 10))
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text("sentinel")  # any write would replace it
    for epoch, start in ((3, 15), (3, 5), (2, 30), (-1, 40)):
        cache.assign(epoch, start)
    assert cache.entries == ((3, 10),)
    assert path.read_text() == "sentinel"


def test_assign_below_latest_start_drops_later_entries(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    cache.assign(6, 10)
    assert cache.entries == ((1, 0), (6, 10))
    assert stored(tmp_path) == [(1, 0), (6, 10)]


def test_assign_at_latest_start_replaces_it(tmp_path: Path) -> None:
    # a leader that recorded its epoch at its log end and lost the leadership before
    # writing anything: the next epoch starts at the same offset
    cache = cache_with(tmp_path, (1, 0), (4, 10))
    cache.assign(5, 10)
    assert cache.entries == ((1, 0), (5, 10))


def test_assign_refuses_a_negative_offset(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        LeaderEpochCache(tmp_path).assign(2, -1)


@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (-1, (-1, -1)),  # undefined epoch
        (5, (5, 30)),  # the latest: it ends at the log end
        (6, (-1, -1)),  # above every epoch known
        (100, (-1, -1)),
        (0, (0, 0)),  # below every epoch: the request, ending where the first starts
        (1, (1, 10)),  # a known epoch ends where the next starts
        (2, (1, 10)),  # an unknown one between: the floor epoch and the next start
        (3, (3, 20)),
        (4, (3, 20)),
    ],
)
def test_end_offset_for_follows_kafka(
    tmp_path: Path, requested: int, expected: tuple[int, int]
) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    assert cache.end_offset_for(requested, 30) == expected


def test_end_offset_for_a_single_entry(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (4, 7))
    assert [cache.end_offset_for(e, 9) for e in (-1, 0, 3, 4, 5)] == [
        (-1, -1),
        (0, 7),
        (3, 7),
        (4, 9),
        (-1, -1),
    ]


@pytest.mark.parametrize(
    ("end", "expected"),
    [
        (31, [(1, 0), (3, 10), (5, 20)]),
        (21, [(1, 0), (3, 10), (5, 20)]),
        (20, [(1, 0), (3, 10)]),
        (11, [(1, 0), (3, 10)]),
        (10, [(1, 0)]),
        (0, []),
    ],
)
def test_truncate_from_end(tmp_path: Path, end: int, expected: Entries) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10), (5, 20))
    cache.truncate_from_end(end)
    assert list(cache.entries) == expected
    assert stored(tmp_path) == expected


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (0, [(1, 5), (3, 10), (5, 20)]),  # before the first entry: unchanged
        (5, [(1, 5), (3, 10), (5, 20)]),
        (7, [(1, 7), (3, 10), (5, 20)]),  # the first moves up
        (10, [(3, 10), (5, 20)]),  # exactly at an entry: earlier ones go
        (15, [(3, 15), (5, 20)]),
        (25, [(5, 25)]),  # past every entry: the latest stays, moved
    ],
)
def test_truncate_from_start(tmp_path: Path, start: int, expected: Entries) -> None:
    cache = cache_with(tmp_path, (1, 5), (3, 10), (5, 20))
    cache.truncate_from_start(start)
    assert list(cache.entries) == expected
    assert stored(tmp_path) == expected


def test_clear_removes_the_file(tmp_path: Path) -> None:
    cache = cache_with(tmp_path, (1, 0), (3, 10))
    cache.clear()
    assert cache.entries == () and cache.latest_epoch == -1
    assert stored(tmp_path) is None
    cache.clear()  # twice is fine
    cache.assign(2, 50)
    assert stored(tmp_path) == [(2, 50)]


def test_entries_given_must_be_in_order(tmp_path: Path) -> None:
    for bad in ([(1, 0), (1, 5)], [(1, 5), (2, 5)], [(2, 0), (1, 5)], [(-1, 0)]):
        with pytest.raises(ValueError):
            LeaderEpochCache(tmp_path, bad)


def test_missing_file_reads_as_none(tmp_path: Path) -> None:
    assert read_leader_epochs(tmp_path) is None
    (tmp_path / LEADER_EPOCH_CHECKPOINT_FILE).write_text("0\n0\n")
    cache = read_leader_epochs(tmp_path)
    assert cache is not None and cache.entries == ()


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("1\n0\n", 1),
        ("0\n2\n1 0\n", 4),
        ("0\n1\n1 0 3\n", 3),
        ("0\n1\n1\n", 3),
        ("0\n1\nx 0\n", 3),
        ("0\n1\n-1 0\n", 3),
        ("0\n2\n1 0\n1 5\n", 4),  # epochs must increase
        ("0\n3\n1 0\n2 5\n3 5\n", 5),  # and so must offsets
    ],
)
def test_malformed_file_names_path_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / LEADER_EPOCH_CHECKPOINT_FILE
    path.write_text(text)
    with pytest.raises(CheckpointError) as info:
        read_leader_epochs(tmp_path)
    assert (info.value.path, info.value.line) == (path, line)
    assert str(info.value).startswith(f"{path}: line {line}: ")


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


# ---------------------------------------------------------------------------- the model


def model_entries(history: list[tuple[int, int]], explicit: Entries, log_start: int) -> Entries:
    """The expected cache: the first offset of each epoch among the batches not truncated
    away (``history``: base offset, epoch; retention's victims included) and the
    epochs recorded at election; an epoch that a later one starts at or before is gone;
    then what lies before the log start is clipped, as retention does."""
    first: dict[int, int] = {}
    for base, epoch in history:
        if epoch >= 0:
            first.setdefault(epoch, base)
    for epoch, start in explicit:
        first[epoch] = min(first.get(epoch, start), start)
    entries = sorted(first.items())
    entries = [(e, s) for e, s in entries if not any(e2 > e and s2 <= s for e2, s2 in entries)]
    before = [entry for entry in entries if entry[1] <= log_start]
    after = [entry for entry in entries if entry[1] > log_start]
    return ([(before[-1][0], log_start)] if before else []) + after


def brute_end_offset(entries: Entries, requested: int, log_end: int) -> tuple[int, int]:
    if requested == -1:
        return -1, -1
    if entries and entries[-1][0] == requested:
        return requested, log_end
    higher = [entry for entry in entries if entry[0] > requested]
    if not higher:
        return -1, -1
    floor = [entry for entry in entries if entry[0] <= requested]
    return (floor[-1][0] if floor else requested), higher[0][1]


class LeaderEpochMachine(RuleBasedStateMachine):
    """Leaders and followers appending, truncations, retention and reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.directory = self.tmp / "p"
        self.config = LogConfig(segment_bytes=300, index_interval_bytes=64)
        self.log = PartitionLog.open(self.directory, self.config, now_ms=0)
        self.epoch = 0  # the newest epoch handed out: epochs never go back
        self.history: list[tuple[int, int]] = []  # (base offset, epoch) of batches
        self.explicit: Entries = []  # assign_epoch_start calls

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cut(self, end: int) -> None:
        """The log was cut at ``end``: so were the model's records."""
        self.history = [(base, epoch) for base, epoch in self.history if base < end]
        self.explicit = [(epoch, start) for epoch, start in self.explicit if start < end]
        if end <= self.log.log_start_offset:
            self.history.clear()
            self.explicit.clear()

    @rule(sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3), bump=st.integers(0, 2))
    def leader_append(self, sizes: list[int], bump: int) -> None:
        self.epoch += bump
        base = self.log.append(
            [make_batch(n) for n in sizes], now_ms=0, leader_epoch=self.epoch
        ).base_offset
        for n in sizes:
            self.history.append((base, self.epoch))
            base += n

    @rule(
        bumps=st.lists(st.integers(0, 2), min_size=1, max_size=3),
        partial=st.integers(0, 40),
    )
    def follower_append(self, bumps: list[int], partial: int) -> None:
        epochs = []
        for bump in bumps:
            self.epoch += bump
            epochs.append(self.epoch)
        end = self.log.log_end_offset
        data = copied(end, epochs)
        data += copied(end + 2 * len(epochs), [self.epoch])[:partial]  # a cut-off batch
        batches = replica_batches(data)
        assert len(batches) == len(epochs)
        self.log.append(
            batches, now_ms=0, leader_epoch=0, assign_offsets=False, producer_check=False
        )
        self.history += [(end + 2 * i, epoch) for i, epoch in enumerate(epochs)]

    @rule(bump=st.integers(0, 2))
    def elected(self, bump: int) -> None:
        self.epoch += bump
        self.log.assign_epoch_start(self.epoch, self.log.log_end_offset)
        self.explicit.append((self.epoch, self.log.log_end_offset))

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log.log_end_offset + 2), label="offset")
        if offset < self.log.log_end_offset:
            self.cut(self.log.truncate_to(offset))
        else:  # no record goes, but epochs starting at the log end do
            end = self.log.log_end_offset
            assert self.log.truncate_to(offset) == end
            self.cut(end)

    @rule(data=st.data())
    def truncate_fully(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log.log_end_offset + 30), label="offset")
        self.log.truncate_fully_and_start_at(offset)
        self.history.clear()
        self.explicit.clear()

    @rule()
    def roll(self) -> None:
        self.log.roll(0)

    @rule(keep_bytes=st.integers(0, 1_000))
    def retention(self, keep_bytes: int) -> None:
        self.log.reconfigure(replace(self.config, retention_bytes=keep_bytes))
        self.log.delete_old_segments(now_ms=0)
        self.log.reconfigure(self.config)

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        self.log.close(clean=clean)
        self.log = PartitionLog.open(self.directory, self.config, now_ms=0)
        self.cut(self.log.log_end_offset)

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        start, end = log.log_start_offset, log.log_end_offset
        in_log = [(h.base_offset, h.partition_leader_epoch) for h in stored_headers(log)]
        assert in_log == [(base, epoch) for base, epoch in self.history if base >= start]
        expected = model_entries(self.history, self.explicit, start)
        assert list(log.leader_epochs.entries) == expected
        assert stored(self.directory) in ((None, []) if not expected else (expected,))
        for requested in range(-1, self.epoch + 3):
            assert log.end_offset_for_epoch(requested) == brute_end_offset(expected, requested, end)


LeaderEpochMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
test_leader_epochs_match_a_model = LeaderEpochMachine.TestCase


def test_truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    """A replica that became leader (epoch 3 at its end, 4) and appended nothing before
    leadership moved on: its next leader knows nothing of epoch 3, so the follower's
    truncation to its own log end must drop it, or it would be its last fetched epoch
    forever and every fetch would diverge at the same offset."""
    log = open_log(tmp_path / "p")
    log.append([make_batch(4)], now_ms=0, leader_epoch=1)
    log.assign_epoch_start(3, log.log_end_offset)
    assert log.leader_epochs.entries == ((1, 0), (3, 4))
    assert log.truncate_to(4) == 4
    assert log.leader_epochs.entries == ((1, 0),)
    assert stored(tmp_path / "p") == [(1, 0)]
    log.close()
