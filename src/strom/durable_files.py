"""Durable replacement of a small file: the one implementation every part of strom uses.

A file's content is replaced by writing ``<name>.tmp`` beside it, fsyncing that file,
renaming it over the target (atomic on POSIX: a reader finds the old content or the new,
never a mix) and fsyncing the directory, so that the rename itself survives a crash.
Whoever opens such a directory treats a ``.tmp`` file as the leftover of an interrupted
write and deletes it. When a step fails the temp file is removed and the target is left
as it was.

- ``replace_file(path, data)``: all of the above in one call. ``sync=False`` skips the
  file's fsync, ``sync_dir=False`` the directory's (for a caller that fsyncs the directory
  once for several changes, or on purpose only later).
- ``StagedReplacement``: the same in two steps, for a caller that writes the new content
  early and renames it into place only after other work (Raft's ``persist`` stages its
  hard state, appends and fsyncs its log, then commits).
- ``sync_directory(directory)``: fsync a directory, making created, renamed and removed
  names durable.
- ``sync_fd(fd)``: make what was written through a descriptor durable: ``fdatasync`` for
  a regular file (its data and the size needed to read it back, without the timestamps
  a full ``fsync`` also journals: on the machines measured, 0.23 ms against 1.4 ms for a
  200-byte append), ``fsync`` for a directory.

Used by the partition logs (recovery point, checkpoints, snapshots, cleaner files), the
Raft storage, and the server (``meta.properties``, ``partition.metadata``). A leaf module:
it imports nothing from strom, so any core may use it.

Written by hand: a few ``os`` calls, and no library places the fsyncs where strom needs them.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

__all__ = [
    "TMP_SUFFIX",
    "StagedReplacement",
    "replace_file",
    "sync_directory",
    "sync_fd",
    "temp_path",
    "write_all",
]

TMP_SUFFIX = ".tmp"


def temp_path(path: Path) -> Path:
    """Where the new content of ``path`` is written before it replaces it."""
    return path.with_name(path.name + TMP_SUFFIX)


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """Write all of ``data`` to ``fd`` (``os.write`` may write less than it is given)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    finally:
        view.release()


def sync_directory(directory: Path) -> None:
    """fsync a directory so that created, renamed and removed names are durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_fd(fd: int) -> None:
    """Make what was written through ``fd`` durable (see the module's notes)."""
    if stat.S_ISREG(os.fstat(fd).st_mode) and hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:
        os.fsync(fd)


class StagedReplacement:
    """New content for ``path``, written to ``<name>.tmp`` but not yet renamed over it.

    Transitions: staged (made by the constructor) -> committed (``commit``) or
    discarded (``discard``). ``discard`` after ``commit`` (or twice) does nothing, so
    ``finally: staged.discard()`` is always safe; ``commit`` after either raises.
    """

    __slots__ = ("_fd", "path", "tmp")

    def __init__(self, path: Path, data: bytes | bytearray) -> None:
        self.path = path
        self.tmp = temp_path(path)
        self._fd: int | None = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(self._fd, data)
        except BaseException:
            self.discard()
            raise

    def commit(self, *, sync: bool = True, sync_dir: bool = True) -> None:
        """fsync the new content (unless not ``sync``), rename it over ``path``, then
        fsync the directory (unless not ``sync_dir``). On failure before the rename the
        temp file is removed and ``path`` is untouched."""
        fd = self._fd
        if fd is None:
            raise RuntimeError(f"{self.tmp}: already committed or discarded")
        self._fd = None
        try:
            try:
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.tmp, self.path)
        except BaseException:
            _remove(self.tmp)
            raise
        if sync_dir:
            sync_directory(self.path.parent)

    def discard(self) -> None:
        """Close and remove the temp file, unless already committed or discarded."""
        fd = self._fd
        if fd is None:
            return
        self._fd = None
        try:
            os.close(fd)
        finally:
            _remove(self.tmp)


def replace_file(
    path: Path, data: bytes | bytearray, *, sync: bool = True, sync_dir: bool = True
) -> None:
    """Replace ``path``'s content with ``data`` atomically; durably unless told otherwise:
    the data is fsynced before the rename (``sync``) and the directory after it
    (``sync_dir``). On failure the temp file is removed and ``path`` is untouched."""
    StagedReplacement(path, data).commit(sync=sync, sync_dir=sync_dir)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):  # cleaning up after a failure: keep its exception
        path.unlink(missing_ok=True)
