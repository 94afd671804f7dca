"""strom.durable_files: atomic replacement, cleanup after a failure, and the fsyncs.

Real files in tmp_path throughout. Which fsyncs happen (and in what order relative to
the rename) cannot be seen on disk without crashing the machine, so those tests wrap
``os.fsync`` and ``os.replace`` with spies that record what they were given and then do
the real call.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from strom.durable_files import (
    StagedReplacement,
    replace_file,
    sync_directory,
    sync_fd,
    temp_path,
    write_all,
)

Event = tuple[str, object]


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Event]]:
    """("fsync-dir", inode) / ("fsync-file", inode) / ("replace", (src, dst)), in order."""
    recorded: list[Event] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        info = os.fstat(fd)
        kind = "fsync-dir" if stat.S_ISDIR(info.st_mode) else "fsync-file"
        recorded.append((kind, info.st_ino))
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        recorded.append(("replace", (Path(src).name, Path(dst).name)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    yield recorded


def test_creates_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "state"
    replace_file(path, b"one")
    assert path.read_bytes() == b"one"
    assert os.listdir(tmp_path) == ["state"]


def test_replaces_the_whole_content(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"a much longer old content")
    replace_file(path, b"new")
    assert path.read_bytes() == b"new"
    replace_file(path, b"")
    assert path.read_bytes() == b""
    assert os.listdir(tmp_path) == ["state"]


def test_the_temp_file_sits_beside_the_target_with_tmp_appended(tmp_path: Path) -> None:
    assert temp_path(tmp_path / "meta.properties") == tmp_path / "meta.properties.tmp"


def test_a_stale_temp_file_is_overwritten_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "state"
    temp_path(path).write_bytes(b"garbage left by a crash, longer than the data")
    replace_file(path, b"fresh")
    assert path.read_bytes() == b"fresh"
    assert not temp_path(path).exists()


def test_the_target_is_replaced_by_rename_not_rewritten_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")
    with path.open("rb") as reader:  # a reader that opened the old file keeps seeing it
        replace_file(path, b"new")
        assert reader.read() == b"old"
    assert path.read_bytes() == b"new"


def test_a_failed_rename_removes_the_temp_file_and_keeps_the_target(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.mkdir()  # renaming a file over a directory fails
    (path / "inside").write_bytes(b"kept")
    with pytest.raises(OSError):
        replace_file(path, b"new")
    assert not temp_path(path).exists()
    assert (path / "inside").read_bytes() == b"kept"


def test_a_failed_write_removes_the_temp_file_and_keeps_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")
    real_write = os.write
    calls = []

    def write_then_fail(fd: int, data: bytes) -> int:  # a short write, then a full disk
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_write(fd, bytes(data)[:2])

    monkeypatch.setattr(os, "write", write_then_fail)
    with pytest.raises(OSError, match="No space"):
        replace_file(path, b"new content")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state"]


def test_a_failed_fsync_removes_the_temp_file_and_keeps_the_target(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")

    def fail(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="Input/output"):
        replace_file(path, b"new")
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state"]


def test_file_fsynced_before_the_rename_and_directory_after(
    tmp_path: Path, events: list[Event]
) -> None:
    path = tmp_path / "state"
    replace_file(path, b"data")
    file_inode = path.stat().st_ino  # the renamed temp file keeps its inode
    assert events == [
        ("fsync-file", file_inode),
        ("replace", ("state.tmp", "state")),
        ("fsync-dir", tmp_path.stat().st_ino),
    ]


def test_sync_flags_skip_the_fsyncs_but_not_the_rename(tmp_path: Path, events: list[Event]) -> None:
    path = tmp_path / "state"
    replace_file(path, b"data", sync_dir=False)
    assert [kind for kind, _ in events] == ["fsync-file", "replace"]
    events.clear()
    replace_file(path, b"more", sync=False)
    assert [kind for kind, _ in events] == ["replace", "fsync-dir"]
    events.clear()
    replace_file(path, b"last", sync=False, sync_dir=False)
    assert [kind for kind, _ in events] == ["replace"]
    assert path.read_bytes() == b"last"


def test_sync_directory_fsyncs_that_directory(tmp_path: Path, events: list[Event]) -> None:
    sync_directory(tmp_path)
    assert events == [("fsync-dir", tmp_path.stat().st_ino)]


def test_a_staged_replacement_changes_nothing_until_committed(
    tmp_path: Path, events: list[Event]
) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")
    staged = StagedReplacement(path, b"new")
    assert path.read_bytes() == b"old"
    assert temp_path(path).read_bytes() == b"new"
    assert events == []  # nothing fsynced yet: the caller chooses when
    staged.commit(sync_dir=False)
    assert path.read_bytes() == b"new"
    assert [kind for kind, _ in events] == ["fsync-file", "replace"]
    staged.discard()  # after a commit: nothing to do
    assert path.read_bytes() == b"new"
    assert os.listdir(tmp_path) == ["state"]


def test_a_discarded_replacement_leaves_the_target_and_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "state"
    path.write_bytes(b"old")
    staged = StagedReplacement(path, b"new")
    staged.discard()
    staged.discard()
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["state"]
    with pytest.raises(RuntimeError, match="already committed or discarded"):
        staged.commit()


def test_a_replacement_commits_once(tmp_path: Path) -> None:
    staged = StagedReplacement(tmp_path / "state", b"one")
    staged.commit()
    with pytest.raises(RuntimeError, match="already committed or discarded"):
        staged.commit()


def test_write_all_writes_everything_despite_short_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write

    def short_write(fd: int, data: bytes) -> int:
        return real_write(fd, bytes(data)[:3])

    monkeypatch.setattr(os, "write", short_write)
    path = tmp_path / "out"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        write_all(fd, bytearray(b"0123456789"))
    finally:
        os.close(fd)
    assert path.read_bytes() == b"0123456789"


def test_sync_fd_syncs_a_files_data_and_a_directory_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, int]] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        calls.append(("fsync", fd))
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        calls.append(("fdatasync", fd))
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    path = tmp_path / "data"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    directory = os.open(tmp_path, os.O_RDONLY)
    try:
        os.write(fd, b"appended")
        sync_fd(fd)  # the data and the new size; not the timestamps
        sync_fd(directory)  # names: a full fsync
    finally:
        os.close(fd)
        os.close(directory)
    assert calls == [("fdatasync", fd), ("fsync", directory)]
    assert path.read_bytes() == b"appended"
    with pytest.raises(OSError):
        sync_fd(fd)  # closed: the error is raised, not swallowed
