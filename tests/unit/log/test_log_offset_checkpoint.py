"""Kafka's checkpoint text files and replication-offset-checkpoint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.log import CheckpointError, read_offset_checkpoint, write_offset_checkpoint
from strom.log.offset_checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT_FILE,
    parse_int,
    read_checkpoint_file,
    write_checkpoint_file,
)


def test_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE
    offsets = {("orders", 1): 42, ("orders", 0): 7, ("__consumer_offsets", 12): 0}
    write_offset_checkpoint(path, offsets)
    assert path.read_text() == "0\n3\n__consumer_offsets 12 0\norders 0 7\norders 1 42\n"
    assert read_offset_checkpoint(path) == offsets
    assert os.listdir(tmp_path) == [REPLICATION_OFFSET_CHECKPOINT_FILE]  # no .tmp left


def test_rewrite_replaces_everything(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_offset_checkpoint(path, {("a", 0): 5, ("b", 0): 6})
    write_offset_checkpoint(path, {("a", 0): 9})
    assert read_offset_checkpoint(path) == {("a", 0): 9}
    write_offset_checkpoint(path, {})
    assert path.read_text() == "0\n0\n"
    assert read_offset_checkpoint(path) == {}


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(tmp_path / "nothing") == {}
    assert read_checkpoint_file(tmp_path / "nothing", list) is None


def test_empty_file_has_no_entries(tmp_path: Path) -> None:
    (tmp_path / "cp").write_bytes(b"")
    assert read_offset_checkpoint(tmp_path / "cp") == {}


def test_last_newline_is_optional(tmp_path: Path) -> None:
    (tmp_path / "cp").write_text("0\n1\nt 0 5")
    assert read_offset_checkpoint(tmp_path / "cp") == {("t", 0): 5}


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("1\n0\n", 1, "unknown version 1"),
        ("x\n0\n", 1, "bad version line"),
        ("0\n", 2, "missing the entry count"),
        ("0\n-1\n", 2, "negative entry count"),
        ("0\ntwo\n", 2, "bad entry count"),
        ("0\n2\nt 0 5\n", 4, "1 entries where the count says 2"),
        ("0\n1\nt 0 5\nt 1 6\n", 4, "more entries than the count 1"),
        ("0\n1\nt 0\n", 3, "expected 3 fields"),
        ("0\n1\nt 0 5 9\n", 3, "expected 3 fields"),
        ("0\n1\nt  0 5\n", 3, "expected 3 fields"),
        ("0\n1\nt 0 5x\n", 3, "is not an integer"),
        ("0\n1\nt 0 1_0\n", 3, "is not an integer"),
        ("0\n1\nt -1 5\n", 3, "negative partition"),
        ("0\n1\n 0 5\n", 3, "empty topic name"),
        ("0\n2\nt 0 5\n\n", 4, "expected 3 fields"),
        ("0\n2\nt 0 5\nt 0 6\n", 4, "t-0 appears twice"),
        ("0\n1\nt\u00e9 0 5\n", 3, "not ASCII text"),
    ],
)
def test_malformed_files_name_path_and_line(
    tmp_path: Path, text: str, line: int, problem: str
) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT_FILE
    path.write_bytes(text.encode())
    with pytest.raises(CheckpointError) as info:
        read_offset_checkpoint(path)
    assert info.value.path == path and info.value.line == line
    assert str(info.value).startswith(f"{path}: line {line}: ")
    assert problem in str(info.value)


@pytest.mark.parametrize("topic", ["", "a b", "tab\there", "caf\u00e9"])
def test_unwritable_topic_names_are_refused(tmp_path: Path, topic: str) -> None:
    with pytest.raises(ValueError, match="cannot be written"):
        write_offset_checkpoint(tmp_path / "cp", {(topic, 0): 1})
    assert not (tmp_path / "cp").exists()


def test_negative_partition_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="negative partition"):
        write_offset_checkpoint(tmp_path / "cp", {("t", -1): 1})


def test_a_stale_tmp_file_does_not_matter(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    (tmp_path / "cp.tmp").write_text("garbage")
    write_offset_checkpoint(path, {("t", 3): 8})
    assert read_offset_checkpoint(path) == {("t", 3): 8}
    assert not (tmp_path / "cp.tmp").exists()


def test_generic_file_with_other_entries(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_checkpoint_file(path, [(1, 2), (3, 4)])
    assert path.read_text() == "0\n2\n1 2\n3 4\n"
    parsed = read_checkpoint_file(path, lambda fields: tuple(parse_int(f) for f in fields))
    assert parsed == [(1, 2), (3, 4)]


def test_parse_int_is_strict() -> None:
    assert [parse_int(t) for t in ("0", "-7", "123")] == [0, -7, 123]
    for bad in ("", "+1", " 1", "1 ", "1_000", "0x10", "--1", "\u0661"):
        with pytest.raises(ValueError):
            parse_int(bad)


_topics = st.text(alphabet="abcXYZ09._-", min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(
    offsets=st.dictionaries(
        st.tuples(_topics, st.integers(0, 10_000)), st.integers(-1, 2**63 - 1), max_size=20
    )
)
def test_any_offsets_round_trip(
    tmp_path_factory: pytest.TempPathFactory, offsets: dict[tuple[str, int], int]
) -> None:
    path = tmp_path_factory.mktemp("cp") / REPLICATION_OFFSET_CHECKPOINT_FILE
    write_offset_checkpoint(path, offsets)
    assert read_offset_checkpoint(path) == offsets
