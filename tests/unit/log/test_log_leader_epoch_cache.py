"""LeaderEpochCache: assigning, looking up and truncating epochs as Kafka does, and its
checkpoint file (written in Kafka's format, a malformed one named by path and line).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from leader_epoch_helpers import Entries, stored

from strom.log import CheckpointError, LeaderEpochCache
from strom.log.leader_epochs import LEADER_EPOCH_CHECKPOINT_FILE, read_leader_epochs

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
