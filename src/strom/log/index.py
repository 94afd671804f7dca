"""Sparse offset and time indexes of one segment, in memory and in append-only files.

Offset index entries: (relative offset u32, position u32), big-endian, 8 bytes; the
relative offset is that of the indexed batch's base offset. Time index entries:
(timestamp i64, relative offset u32), 12 bytes, with strictly increasing timestamps: the
segment's largest timestamp so far and the base offset of the batch that first reached
it. Index files are written without fsync on the append path; a damaged index is rebuilt
from the log at open.

Entries are loaded into ``array`` columns lazily, on the first lookup, so opening a log
with many segments reads only each index's last entries (``check``).
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

__all__ = ["OffsetIndex", "TimeIndex"]

_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
_CHECKED_TAIL_ENTRIES = 16


def _read_all(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    pos = 0
    while pos < size:
        chunk = os.pread(fd, size - pos, pos)
        if not chunk:
            break
        chunks.append(chunk)
        pos += len(chunk)
    return b"".join(chunks)


def _increasing_prefix(entries: Sequence[tuple[int, int]]) -> int:
    """Length of the longest prefix whose two columns both strictly increase."""
    for i in range(1, len(entries)):
        if entries[i][0] <= entries[i - 1][0] or entries[i][1] <= entries[i - 1][1]:
            return i
    return len(entries)


class _IndexFile:
    """An append-only file of fixed-size two-column entries, mirrored in memory."""

    # Transitions: opened -> (check)? -> loaded on first use -> (append | replace)* -> closed.
    # Entries appended before loading go to the file only; loading reads them back.
    __slots__ = ("_fd", "_first", "_loaded", "_second", "base_offset", "path")

    ENTRY: ClassVar[struct.Struct]
    TYPECODES: ClassVar[tuple[str, str]]

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._fd = os.open(path, _OPEN_FLAGS, 0o644)
        self._first = array(self.TYPECODES[0])
        self._second = array(self.TYPECODES[1])
        self._loaded = False

    @property
    def fd(self) -> int:
        return self._fd

    @property
    def entry_size(self) -> int:
        return self.ENTRY.size

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._first)

    def check(self) -> str | None:
        """Cheap sanity check of the file: its size and its last entries."""
        size = os.fstat(self._fd).st_size
        if size % self.entry_size:
            return f"size {size} is not a multiple of {self.entry_size}"
        count = min(size // self.entry_size, _CHECKED_TAIL_ENTRIES)
        tail = os.pread(self._fd, count * self.entry_size, size - count * self.entry_size)
        entries = list(self.ENTRY.iter_unpack(tail))
        if _increasing_prefix(entries) != len(entries):
            return "entries are not increasing"
        return None

    def load(self) -> str | None:
        """Read every entry into memory; returns a problem or None if all are sane.

        On a problem only the sane (increasing) prefix is kept.
        """
        data = _read_all(self._fd)
        whole = len(data) - len(data) % self.entry_size
        entries = list(self.ENTRY.iter_unpack(memoryview(data)[:whole]))
        keep = _increasing_prefix(entries)
        self._first = array(self.TYPECODES[0], (e[0] for e in entries[:keep]))
        self._second = array(self.TYPECODES[1], (e[1] for e in entries[:keep]))
        self._loaded = True
        if whole != len(data):
            return f"size {len(data)} is not a multiple of {self.entry_size}"
        if keep != len(entries):
            return "entries are not increasing"
        return None

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self.load()

    def _last_raw(self) -> tuple[int, int] | None:
        if self._loaded:
            return (self._first[-1], self._second[-1]) if self._first else None
        size = os.fstat(self._fd).st_size
        if size < self.entry_size:
            return None
        data = os.pread(self._fd, self.entry_size, size - size % self.entry_size - self.entry_size)
        first, second = self.ENTRY.unpack(data)
        return first, second

    def _append_raw(self, entries: Sequence[tuple[int, int]]) -> None:
        out = bytearray()
        for first, second in entries:
            out += self.ENTRY.pack(first, second)
        os.write(self._fd, out)
        if self._loaded:
            for first, second in entries:
                self._first.append(first)
                self._second.append(second)

    def _replace_raw(self, entries: Sequence[tuple[int, int]]) -> None:
        """Rewrite the file with exactly these entries (a rebuild)."""
        self._first = array(self.TYPECODES[0])
        self._second = array(self.TYPECODES[1])
        self._loaded = True
        os.ftruncate(self._fd, 0)
        if entries:
            self._append_raw(entries)

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_IndexFile):
    """Offset -> file position of a batch at or before it."""

    # Transitions: as _IndexFile.
    __slots__ = ()

    ENTRY = struct.Struct(">II")
    TYPECODES = ("I", "I")

    def last_entry(self) -> tuple[int, int] | None:
        """(absolute offset, position) of the last entry."""
        raw = self._last_raw()
        return None if raw is None else (self.base_offset + raw[0], raw[1])

    def lookup(self, offset: int) -> tuple[int, int]:
        """(absolute offset, position) of the last entry at or below ``offset``.

        Falls back to (base offset, 0) - the segment's start.
        """
        self._ensure_loaded()
        i = bisect_right(self._first, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._first[i], self._second[i]

    def floor_position(self, position: int) -> tuple[int, int]:
        """(absolute offset, position) of the last entry at or below ``position``.

        Falls back to (base offset, 0) - the segment's start.
        """
        self._ensure_loaded()
        i = bisect_right(self._second, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._first[i], self._second[i]

    def append(self, entries: Sequence[tuple[int, int]]) -> None:
        """Append (absolute offset, position) entries, in increasing order."""
        self._append_raw([(offset - self.base_offset, pos) for offset, pos in entries])

    def replace(self, entries: Sequence[tuple[int, int]]) -> None:
        self._replace_raw([(offset - self.base_offset, pos) for offset, pos in entries])


class TimeIndex(_IndexFile):
    """Timestamp -> a batch base offset from which a scan finds the first later record."""

    # Transitions: as _IndexFile.
    __slots__ = ()

    ENTRY = struct.Struct(">qI")
    TYPECODES = ("q", "I")

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry."""
        raw = self._last_raw()
        return None if raw is None else (raw[0], self.base_offset + raw[1])

    def lookup(self, timestamp: int) -> int | None:
        """Offset of the last entry whose timestamp is below ``timestamp``, if any.

        No batch up to that entry's batch holds a record at or after ``timestamp``, so a
        scan may start there.
        """
        self._ensure_loaded()
        i = bisect_left(self._first, timestamp) - 1
        if i < 0:
            return None
        return self.base_offset + self._second[i]

    def append(self, entries: Sequence[tuple[int, int]]) -> None:
        """Append (timestamp, absolute offset) entries; the caller keeps them increasing."""
        self._append_raw([(ts, offset - self.base_offset) for ts, offset in entries])

    def replace(self, entries: Sequence[tuple[int, int]]) -> None:
        self._replace_raw([(ts, offset - self.base_offset) for ts, offset in entries])
