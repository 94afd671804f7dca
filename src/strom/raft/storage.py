"""The controller's durable Raft state in one directory: hard state, log and snapshots.

    opened (recovered) -> persist / save_snapshot / compact ... -> closed

Written by hand: no library keeps a Raft log with these crash rules. Synchronous file
I/O, called from one worker thread at a time, so nothing here locks.

Files (all integers big-endian):

- ``quorum-state``: ``[magic "SRQS"][version u8 = 1][term i64][voted_for i64, -1 = none]
  [crc32c u32 of the bytes before it]``. Replaced as a whole: written to
  ``quorum-state.tmp``, fsynced, renamed over the old one, directory fsynced.
- ``<first index, 20 digits>.log``: log segments, each named by the index of its first
  record. A record is ``[length u32][crc32c u32][index i64][term i64][data]``: length
  counts index, term and data; the CRC-32C covers the same bytes. A segment is rolled
  (a new file started) at the start of a ``persist`` once it holds ``segment_bytes``, so
  one ``persist`` always appends to one file and compaction deletes whole files.
- ``snapshot-<index, 20 digits>-<term, 20 digits>.bin``: ``[magic "SRSN"][version u8 = 1]
  [index i64][term i64][data length u64][data][crc32c u32 of everything before it]``,
  written to a ``.tmp`` file, fsynced, renamed, directory fsynced; older snapshot files are
  removed after that.

Crash semantics. When ``persist`` returns, everything it was given is durable: its
appends end with one fdatasync of the segment, and a new hard state is renamed into
place after its fsync, followed by one directory fsync. A crash inside ``persist`` leaves
a prefix of the appended entries and the old or the new hard state. The rare steps that
drop data are each made durable before the next one starts: a truncation deletes later
files (last first), fsyncs the directory, then ftruncates and fsyncs the file it cuts; a
received snapshot is saved (with its fsyncs) before any entry it covers is deleted. The
truncation comes first (the outcome is the one `Ready` describes either way), so after
any crash every stored entry past the newest snapshot belongs after it: the core only
keeps entries after a received snapshot when its log matched at the snapshot's index,
and otherwise truncates every stored entry past it.

Recovery at open. ``.tmp`` files are deleted. The newest snapshot that reads back intact
is used (a damaged one is skipped with a warning). Segments wholly covered by it are
deleted. The others are read record by record: indexes must be consecutive across files
and start at or before the snapshot's index + 1 (or at 1). A bad record (torn, wrong
length, CRC mismatch) in the last file is the end of an interrupted write and is cut off
with a warning when no valid record follows it, or when a zeroed 512-byte block lies
between it and the next valid record (pages written back out of order before the crash
leave such holes; the final fdatasync never happened, so none of it was acknowledged).
Anything else - a bad record in an earlier file, a bad record followed by intact data, a
valid record with the wrong index, a gap between files - raises ``RaftStorageError``
naming the file and the byte position. Entries up to the snapshot's index are not
returned (and the files holding only such entries are deleted); the entries returned
are consecutive from the snapshot's index + 1 (or 1).
"""

from __future__ import annotations

import logging
import os
import re
import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from strom.raft.messages import Entry, HardState, Ready, Restored, Snapshot

__all__ = ["QUORUM_STATE", "SEGMENT_BYTES", "RaftStorage", "RaftStorageError"]

log = logging.getLogger(__name__)

SEGMENT_BYTES = 8 * 1024 * 1024
QUORUM_STATE = "quorum-state"
TMP_SUFFIX = ".tmp"

_RECORD = struct.Struct(">IIqq")  # length, crc32c, index, term
_RECORD_HEADER_BYTES = _RECORD.size  # 24
_RECORD_MIN_LENGTH = 16  # index + term
_LENGTH_AND_CRC_BYTES = 8
_CRC = struct.Struct(">I")
_QUORUM = struct.Struct(">4sBqq")
_QUORUM_MAGIC = b"SRQS"
_SNAPSHOT = struct.Struct(">4sBqqQ")
_SNAPSHOT_MAGIC = b"SRSN"
_VERSION = 1
_SEGMENT_NAME = re.compile(r"(\d{20})\.log")
_SNAPSHOT_NAME = re.compile(r"snapshot-(\d{20})-(\d{20})\.bin")
_HOLE_BYTES = 512
_ZEROS = bytes(_HOLE_BYTES)
_fdatasync = getattr(os, "fdatasync", os.fsync)


class RaftStorageError(Exception):
    """The stored Raft state is damaged in a way a crash cannot explain, or unreadable."""


@dataclass(slots=True)
class _Segment:
    base_index: int
    path: Path
    positions: array[int] = field(default_factory=lambda: array("Q"))  # of each record
    size_bytes: int = 0

    @property
    def next_index(self) -> int:
        return self.base_index + len(self.positions)


@dataclass(slots=True)
class _Scan:
    positions: array[int]
    entries: list[Entry]  # those with index >= the scan's keep_from
    end: int  # byte position after the last good record
    problem: str | None  # why the scan stopped before the end of the data


class RaftStorage:
    """One node's Raft directory; `open` it, then persist Readies and snapshots.

    Holds the segments' record positions in memory; only the last segment is kept open.
    """

    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self._directory = directory
        self._segment_bytes = segment_bytes
        self._segments: list[_Segment] = []
        self._active_fd: int | None = None  # open on self._segments[-1] when not None
        self._hard_state = HardState(0, None)
        self._snapshot: Snapshot | None = None
        self._restored = Restored(self._hard_state, None, ())
        self._closed = False

    # --- opening ----------------------------------------------------------------------

    @classmethod
    def open(cls, directory: Path, *, segment_bytes: int = SEGMENT_BYTES) -> RaftStorage:
        """Open (creating the directory if missing) and recover what a crash left behind."""
        if segment_bytes <= 0:
            raise ValueError(f"segment_bytes must be positive, not {segment_bytes}")
        storage = cls(directory, segment_bytes)
        storage._recover()
        return storage

    def _recover(self) -> None:
        directory = self._directory
        if not directory.is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            _sync_directory(directory.parent)
        for tmp in directory.glob(f"*{TMP_SUFFIX}"):
            log.info("%s: removing %s left by an interrupted write", directory, tmp.name)
            tmp.unlink()
        state_path = directory / QUORUM_STATE
        if state_path.exists():
            self._hard_state = _decode_hard_state(state_path)
        self._snapshot = self._load_latest_snapshot()
        snapshot_index = self.snapshot_index
        bases = sorted(
            int(match.group(1))
            for path in directory.iterdir()
            if (match := _SEGMENT_NAME.fullmatch(path.name))
        )
        while len(bases) >= 2 and bases[1] <= snapshot_index + 1:  # wholly under the snapshot
            _unlink(self._segment_path(bases.pop(0)))
        entries: list[Entry] = []
        for position, base in enumerate(bases):
            entries += self._load_segment(base, last=position == len(bases) - 1)
        if self._segments and not self._segments[-1].positions:
            _unlink(self._segments.pop().path)
        self._drop_covered(snapshot_index)
        _sync_directory(directory)
        self._restored = Restored(self._hard_state, self._snapshot, tuple(entries))

    def _load_segment(self, base: int, *, last: bool) -> list[Entry]:
        path = self._segment_path(base)
        if not self._segments:
            if base > self.snapshot_index + 1:
                raise RaftStorageError(
                    f"{path}: the log starts at index {base}, but "
                    + (
                        f"the snapshot ends at index {self.snapshot_index}"
                        if self._snapshot
                        else "there is no snapshot"
                    )
                )
        elif base != self._segments[-1].next_index:
            raise RaftStorageError(
                f"{path}: starts at index {base}, but the segment before it ends at index "
                f"{self._segments[-1].next_index - 1}"
            )
        data = path.read_bytes()
        scan = _scan(path, data, base, keep_from=self.snapshot_index + 1)
        if scan.problem is not None:
            resumes_at = _valid_record_after(data, scan.end, base + len(scan.positions))
            if not last or resumes_at is not None:
                after = "" if resumes_at is None else f", and a valid record at byte {resumes_at}"
                raise RaftStorageError(f"{path}: {scan.problem} at byte {scan.end}{after}")
            log.warning(
                "%s: %s at byte %d (a write cut short by a crash): truncating %d bytes",
                path,
                scan.problem,
                scan.end,
                len(data) - scan.end,
            )
            fd = os.open(path, os.O_WRONLY)
            try:
                os.ftruncate(fd, scan.end)
                os.fsync(fd)
            finally:
                os.close(fd)
        self._segments.append(_Segment(base, path, scan.positions, scan.end))
        return scan.entries

    def _load_latest_snapshot(self) -> Snapshot | None:
        found = sorted(
            (
                (int(match.group(1)), int(match.group(2)), path)
                for path in self._directory.iterdir()
                if (match := _SNAPSHOT_NAME.fullmatch(path.name))
            ),
            reverse=True,
        )
        for index, term, path in found:
            try:
                return _decode_snapshot(path, index, term)
            except RaftStorageError as exc:
                log.warning("%s: ignoring a damaged snapshot: %s", self._directory, exc)
        return None

    # --- reading ----------------------------------------------------------------------

    def restored(self) -> Restored:
        """What was read at open: hard state, latest snapshot and the entries after it."""
        return self._restored

    def latest_snapshot(self) -> Snapshot | None:
        return self._snapshot

    @property
    def snapshot_index(self) -> int:
        return 0 if self._snapshot is None else self._snapshot.index

    @property
    def first_index(self) -> int:
        """The first index a caller may read: right after the snapshot (or 1)."""
        return self.snapshot_index + 1

    @property
    def last_index(self) -> int:
        """The last stored index, or the snapshot's index when no entry follows it."""
        if self._segments:
            return max(self._segments[-1].next_index - 1, self.snapshot_index)
        return self.snapshot_index

    @property
    def size_bytes(self) -> int:
        """Bytes in the log's segment files (snapshots not counted)."""
        return sum(segment.size_bytes for segment in self._segments)

    def entries(self, low: int, high: int) -> list[Entry]:
        """The stored entries in [low, high), clamped to [first_index, last_index]."""
        self._check_open()
        low = max(low, self.first_index)
        high = min(high, self.last_index + 1)
        out: list[Entry] = []
        for segment in self._segments:
            start_index = max(low, segment.base_index)
            end_index = min(high, segment.next_index)
            if start_index >= end_index:
                continue
            start = segment.positions[start_index - segment.base_index]
            end = (
                segment.size_bytes
                if end_index == segment.next_index
                else segment.positions[end_index - segment.base_index]
            )
            with segment.path.open("rb") as file:
                file.seek(start)
                data = file.read(end - start)
            scan = _scan(segment.path, data, start_index, keep_from=start_index)
            if scan.problem is not None or len(scan.entries) != end_index - start_index:
                raise RaftStorageError(
                    f"{segment.path}: {scan.problem or 'short read'} at byte {start + scan.end}"
                )
            out += scan.entries
        return out

    # --- writing ----------------------------------------------------------------------

    def persist(self, ready: Ready) -> None:
        """Steps 1-4 of `Ready`: hard state, truncation, received snapshot, appends.

        Durable when this returns; see the module docstring for what a crash leaves.
        A truncation at or below the snapshot's index drops everything stored after it.
        """
        self._check_open()
        state = ready.hard_state if ready.hard_state != self._hard_state else None
        state_fd: int | None = None
        state_tmp = self._directory / (QUORUM_STATE + TMP_SUFFIX)
        try:
            if state is not None:
                state_fd = os.open(state_tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                _write_all(state_fd, _encode_hard_state(state))
            if ready.truncate_from is not None:  # before the snapshot: see the docstring
                self._truncate(ready.truncate_from)
            if ready.snapshot is not None:
                self.save_snapshot(ready.snapshot)
                self.compact(ready.snapshot.index)
            created = self._append(ready.entries) if ready.entries else False
            if ready.entries and self._active_fd is not None:
                _fdatasync(self._active_fd)
            if state is not None and state_fd is not None:
                os.fsync(state_fd)
                os.close(state_fd)
                state_fd = None
                os.replace(state_tmp, self._directory / QUORUM_STATE)
                self._hard_state = state
                created = True
            if created:
                _sync_directory(self._directory)
        finally:
            if state_fd is not None:
                os.close(state_fd)

    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Save a snapshot atomically and durably, then remove the older snapshot files.

        Entries it covers stay until `compact`; if it reaches past every stored entry,
        the log's files go at once (nothing in them follows the snapshot).
        """
        self._check_open()
        if snapshot.index < self.snapshot_index:
            raise ValueError(
                f"snapshot at index {snapshot.index} is older than the saved one at "
                f"index {self.snapshot_index}"
            )
        name = f"snapshot-{snapshot.index:020d}-{snapshot.term:020d}.bin"
        path = self._directory / name
        tmp = self._directory / (name + TMP_SUFFIX)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_all(fd, _encode_snapshot(snapshot))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _sync_directory(self._directory)
        self._snapshot = snapshot
        for old in self._directory.iterdir():
            if old.name != name and _SNAPSHOT_NAME.fullmatch(old.name):
                old.unlink()
        if self._segments and self._segments[-1].next_index - 1 < snapshot.index:
            self._drop_segments(len(self._segments))
            _sync_directory(self._directory)

    def compact(self, up_to_index: int) -> None:
        """Delete the segment files whose entries all lie at or below `up_to_index`."""
        self._check_open()
        if up_to_index > self.snapshot_index:
            raise ValueError(
                f"cannot compact up to index {up_to_index}: the saved snapshot ends at "
                f"index {self.snapshot_index}"
            )
        if self._drop_covered(up_to_index):
            _sync_directory(self._directory)

    def close(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None
        self._closed = True

    # --- internals ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RaftStorageError(f"{self._directory}: the Raft storage is closed")

    def _segment_path(self, base_index: int) -> Path:
        return self._directory / f"{base_index:020d}.log"

    def _drop_covered(self, up_to_index: int) -> int:
        """Delete the leading segments whose entries all lie at or below `up_to_index`."""
        count = 0
        while count < len(self._segments) and self._segments[count].next_index <= up_to_index + 1:
            count += 1
        if count:
            self._drop_segments(count, from_front=True)
        return count

    def _drop_segments(self, count: int, *, from_front: bool = False) -> None:
        """Delete `count` segments at the front (oldest first) or the back (newest first)."""
        if count == 0:
            return
        if not from_front or count == len(self._segments):
            self._close_active()
        if from_front:
            doomed, self._segments = self._segments[:count], self._segments[count:]
        else:
            doomed = self._segments[len(self._segments) - count :][::-1]
            del self._segments[len(self._segments) - count :]
        for segment in doomed:
            _unlink(segment.path)

    def _close_active(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None

    def _truncate(self, from_index: int) -> None:
        """Drop the stored entries from `from_index` on (those under the snapshot are
        dropped already)."""
        from_index = max(from_index, self.first_index)
        if from_index > self.last_index:
            return
        doomed = sum(1 for segment in self._segments if segment.base_index >= from_index)
        if doomed:
            self._drop_segments(doomed)
            _sync_directory(self._directory)
        if not self._segments or self._segments[-1].next_index <= from_index:
            return
        segment = self._segments[-1]
        keep = from_index - segment.base_index
        position = segment.positions[keep]
        fd = self._active()
        os.ftruncate(fd, position)
        os.fsync(fd)
        del segment.positions[keep:]
        segment.size_bytes = position

    def _active(self) -> int:
        if self._active_fd is None:
            self._active_fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND)
        return self._active_fd

    def _append(self, entries: Sequence[Entry]) -> bool:
        """Write `entries` to the last segment (rolling first if it is full); no fsync.

        Returns whether a file was created (so the directory needs an fsync).
        """
        first = entries[0].index
        if first != self.last_index + 1:
            raise ValueError(f"entries start at index {first}, the log ends at {self.last_index}")
        created = False
        if not self._segments or self._segments[-1].size_bytes >= self._segment_bytes:
            self._close_active()
            segment = _Segment(first, self._segment_path(first))
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND
            self._active_fd = os.open(segment.path, flags, 0o644)
            self._segments.append(segment)
            created = True
        segment = self._segments[-1]
        data = _encode_records(entries, first, segment.size_bytes, segment.positions)
        _write_all(self._active(), data)
        segment.size_bytes += len(data)
        return created


# --- records and files ----------------------------------------------------------------


def _encode_records(
    entries: Sequence[Entry], first_index: int, start: int, positions: array[int]
) -> bytearray:
    """Frame `entries` (which must be consecutive from `first_index`); record positions."""
    out = bytearray(_RECORD_HEADER_BYTES * len(entries) + sum(len(e.data) for e in entries))
    view = memoryview(out)
    pack_header = _RECORD.pack_into
    pack_crc = _CRC.pack_into
    checksum = crc32c.crc32c
    append = positions.append
    position = 0
    expected = first_index
    try:
        for entry in entries:
            if entry.index != expected:
                raise ValueError(f"entry index {entry.index} where {expected} was expected")
            data = entry.data
            end = position + _RECORD_HEADER_BYTES + len(data)
            pack_header(out, position, _RECORD_MIN_LENGTH + len(data), 0, expected, entry.term)
            out[position + _RECORD_HEADER_BYTES : end] = data
            pack_crc(out, position + 4, checksum(view[position + _LENGTH_AND_CRC_BYTES : end]))
            append(start + position)
            position = end
            expected += 1
    except BaseException:
        del positions[len(positions) - (expected - first_index) :]
        raise
    finally:
        view.release()
    return out


def _scan(path: Path, data: bytes, base_index: int, *, keep_from: int) -> _Scan:
    """Read the records of `data` (the first with `base_index`) up to the first bad one."""
    positions: array[int] = array("Q")
    entries: list[Entry] = []
    view = memoryview(data)
    unpack = _RECORD.unpack_from
    checksum = crc32c.crc32c
    size = len(data)
    position = 0
    index = base_index
    problem: str | None = None
    while position < size:
        if size - position < _RECORD_HEADER_BYTES:
            problem = "a torn record header"
            break
        length, crc, stored_index, term = unpack(data, position)
        end = position + _LENGTH_AND_CRC_BYTES + length
        if length < _RECORD_MIN_LENGTH or end > size:
            problem = f"a record of impossible or torn length {length}"
            break
        if checksum(view[position + _LENGTH_AND_CRC_BYTES : end]) != crc:
            problem = "a record with a CRC-32C mismatch"
            break
        if stored_index != index:
            view.release()
            raise RaftStorageError(
                f"{path}: a record with index {stored_index} where {index} was expected, "
                f"at byte {position}"
            )
        positions.append(position)
        if index >= keep_from:
            entries.append(Entry(index, term, data[position + _RECORD_HEADER_BYTES : end]))
        position = end
        index += 1
    view.release()
    return _Scan(positions, entries, position, problem)


def _valid_record_after(data: bytes, bad: int, index: int) -> int | None:
    """Where a valid record (index >= `index`) follows the bad one at byte `bad`, when that
    means damage; None when the rest is the torn end of an interrupted write: no valid
    record follows, or a zeroed block (a hole a crash left) lies before the next one."""
    view = memoryview(data)
    unpack = _RECORD.unpack_from
    size = len(data)
    try:
        for position in range(bad + 1, size - _RECORD_HEADER_BYTES + 1):
            length, crc, stored_index, _ = unpack(data, position)
            end = position + _LENGTH_AND_CRC_BYTES + length
            if length < _RECORD_MIN_LENGTH or end > size or stored_index < index:
                continue
            if crc32c.crc32c(view[position + _LENGTH_AND_CRC_BYTES : end]) == crc:
                return None if _has_hole(data, bad, position) else position
        return None
    finally:
        view.release()


def _has_hole(data: bytes, start: int, end: int) -> bool:
    block = -(-start // _HOLE_BYTES) * _HOLE_BYTES
    while block + _HOLE_BYTES <= end:
        if data[block : block + _HOLE_BYTES] == _ZEROS:
            return True
        block += _HOLE_BYTES
    return False


def _encode_hard_state(state: HardState) -> bytes:
    voted_for = -1 if state.voted_for is None else state.voted_for
    body = _QUORUM.pack(_QUORUM_MAGIC, _VERSION, state.term, voted_for)
    return body + _CRC.pack(crc32c.crc32c(body))


def _decode_hard_state(path: Path) -> HardState:
    data = path.read_bytes()
    if len(data) != _QUORUM.size + _CRC.size:
        raise RaftStorageError(f"{path}: {len(data)} bytes, not {_QUORUM.size + _CRC.size}")
    magic, version, term, voted_for = _QUORUM.unpack_from(data)
    (crc,) = _CRC.unpack_from(data, _QUORUM.size)
    if magic != _QUORUM_MAGIC or version != _VERSION:
        raise RaftStorageError(f"{path}: not a version {_VERSION} quorum-state file")
    if crc32c.crc32c(data[: _QUORUM.size]) != crc:
        raise RaftStorageError(f"{path}: CRC-32C mismatch")
    if term < 0 or voted_for < -1:
        raise RaftStorageError(f"{path}: impossible term {term} or vote {voted_for}")
    return HardState(term, None if voted_for == -1 else voted_for)


def _encode_snapshot(snapshot: Snapshot) -> bytes:
    header = _SNAPSHOT.pack(
        _SNAPSHOT_MAGIC, _VERSION, snapshot.index, snapshot.term, len(snapshot.data)
    )
    crc = crc32c.crc32c(snapshot.data, crc32c.crc32c(header))
    return b"".join((header, snapshot.data, _CRC.pack(crc)))


def _decode_snapshot(path: Path, index: int, term: int) -> Snapshot:
    data = path.read_bytes()
    if len(data) < _SNAPSHOT.size + _CRC.size:
        raise RaftStorageError(f"{path}: only {len(data)} bytes")
    magic, version, stored_index, stored_term, length = _SNAPSHOT.unpack_from(data)
    if magic != _SNAPSHOT_MAGIC or version != _VERSION:
        raise RaftStorageError(f"{path}: not a version {_VERSION} snapshot file")
    if (stored_index, stored_term) != (index, term):
        raise RaftStorageError(f"{path}: holds index {stored_index} term {stored_term}")
    if len(data) != _SNAPSHOT.size + length + _CRC.size:
        raise RaftStorageError(f"{path}: {len(data)} bytes for {length} bytes of data")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(memoryview(data)[: -_CRC.size]) != crc:
        raise RaftStorageError(f"{path}: CRC-32C mismatch")
    return Snapshot(index, term, data[_SNAPSHOT.size : -_CRC.size])


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    try:
        while view:
            written = os.write(fd, view)
            view = view[written:]
    finally:
        view.release()


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
