"""The controller's durable Raft state in one directory: hard state, log and snapshots.

    opened (recovered) -> persist / save_snapshot / compact ... -> closed

Written by hand: no library keeps a Raft log with these crash rules. Synchronous file
I/O, called from one worker thread at a time, so nothing here locks.

Files (all integers big-endian; the bytes are encoded and checked in storage_format):

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
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strom.durable_files import (
    TMP_SUFFIX,
    StagedReplacement,
    replace_file,
    sync_directory,
    write_all,
)
from strom.raft.messages import Entry, HardState, Ready, Restored, Snapshot
from strom.raft.storage_format import (
    RaftStorageError,
    decode_hard_state,
    decode_snapshot,
    encode_hard_state,
    encode_records,
    encode_snapshot,
    scan_records,
    valid_record_after,
)

__all__ = ["QUORUM_STATE", "SEGMENT_BYTES", "RaftStorage", "RaftStorageError"]

log = logging.getLogger(__name__)

SEGMENT_BYTES = 8 * 1024 * 1024
QUORUM_STATE = "quorum-state"

_SEGMENT_NAME = re.compile(r"(\d{20})\.log")
_SNAPSHOT_NAME = re.compile(r"snapshot-(\d{20})-(\d{20})\.bin")
_fdatasync = getattr(os, "fdatasync", os.fsync)


@dataclass(slots=True)
class _Segment:
    base_index: int
    path: Path
    positions: array[int] = field(default_factory=lambda: array("Q"))  # of each record
    size_bytes: int = 0

    @property
    def next_index(self) -> int:
        return self.base_index + len(self.positions)


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
            sync_directory(directory.parent)
        for tmp in directory.glob(f"*{TMP_SUFFIX}"):
            log.info("%s: removing %s left by an interrupted write", directory, tmp.name)
            tmp.unlink()
        state_path = directory / QUORUM_STATE
        if state_path.exists():
            self._hard_state = decode_hard_state(state_path, state_path.read_bytes())
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
        sync_directory(directory)
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
        scan = scan_records(path, data, base, keep_from=self.snapshot_index + 1)
        if scan.problem is not None:
            resumes_at = valid_record_after(data, scan.end, base + len(scan.positions))
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
                return decode_snapshot(path, path.read_bytes(), index, term)
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
            scan = scan_records(segment.path, data, start_index, keep_from=start_index)
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
        staged = (
            None
            if state is None
            else StagedReplacement(self._directory / QUORUM_STATE, encode_hard_state(state))
        )
        try:
            if ready.truncate_from is not None:  # before the snapshot: see the docstring
                self._truncate(ready.truncate_from)
            if ready.snapshot is not None:
                self.save_snapshot(ready.snapshot)
                self.compact(ready.snapshot.index)
            created = self._append(ready.entries) if ready.entries else False
            if ready.entries and self._active_fd is not None:
                _fdatasync(self._active_fd)
            if state is not None and staged is not None:
                staged.commit(sync_dir=False)  # the one directory fsync follows
                self._hard_state = state
                created = True
            if created:
                sync_directory(self._directory)
        finally:
            if staged is not None:
                staged.discard()  # nothing once committed; else the temp file goes

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
        replace_file(self._directory / name, encode_snapshot(snapshot))
        self._snapshot = snapshot
        for old in self._directory.iterdir():
            if old.name != name and _SNAPSHOT_NAME.fullmatch(old.name):
                old.unlink()
        if self._segments and self._segments[-1].next_index - 1 < snapshot.index:
            self._drop_segments(len(self._segments))
            sync_directory(self._directory)

    def compact(self, up_to_index: int) -> None:
        """Delete the segment files whose entries all lie at or below `up_to_index`."""
        self._check_open()
        if up_to_index > self.snapshot_index:
            raise ValueError(
                f"cannot compact up to index {up_to_index}: the saved snapshot ends at "
                f"index {self.snapshot_index}"
            )
        if self._drop_covered(up_to_index):
            sync_directory(self._directory)

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
            sync_directory(self._directory)
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
        data = encode_records(entries, first, segment.size_bytes, segment.positions)
        write_all(self._active(), data)
        segment.size_bytes += len(data)
        return created


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)
