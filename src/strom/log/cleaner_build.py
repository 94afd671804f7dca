"""Building a cleaning pass's cleaned segments: the expensive part, safe in any thread.

``build_cleaned(plan)`` reads only the plan's duplicated descriptors and writes only
``<base>.log.cleaned``, ``<base>.index.cleaned``, ``<base>.timeindex.cleaned`` (and,
when aborted transactions keep batches in it, ``<base>.txnindex.cleaned``) files
(fsynced, and the directory too): nothing the log's owner uses. The rules it applies
are in ``cleaner``'s docstring, batch by batch in ``cleaner_batches``. If it fails or is
stopped it removes what it wrote; if the process dies meanwhile, the next open removes
the ``.cleaned`` leftovers.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from strom.durable_files import sync_directory
from strom.log.cleaner import (
    MAX_RELATIVE_OFFSET,
    CleanedSegment,
    CleaningAborted,
    CleaningPlan,
    CleaningResult,
    PlannedSegment,
    cleaned_path,
)
from strom.log.cleaner_batches import BatchCleaner, records_of
from strom.log.cleaner_txns import PassTxns
from strom.log.index import OffsetIndex, TimeIndex
from strom.log.offset_map import OffsetMap
from strom.log.segment import (
    LOG_SUFFIX,
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    iter_stored_batches,
)
from strom.log.transactions import encode_aborted
from strom.protocol.records import BatchHeader

__all__ = ["build_cleaned"]

_WRITE_CHUNK = 1 << 20
_OUT_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
_MAX_TIMESTAMP = struct.Struct(">q")
_MAX_TIMESTAMP_POS = 35


def _never() -> bool:
    return False


def build_cleaned(plan: CleaningPlan, should_stop: Callable[[], bool] = _never) -> CleaningResult:
    """Write the cleaned segments of ``plan``; releases the plan's descriptors.

    Raises CleaningAborted when ``should_stop()`` turns true (checked between batches)
    or a planned segment holds data that cannot be decoded; nothing is left behind then.
    """
    try:
        return _Builder(plan, should_stop).run()
    finally:
        plan.release()


def _stored_batches(
    segment: PlannedSegment, fd: int
) -> Iterator[tuple[int, BatchHeader, memoryview]]:
    end = 0
    for pos, header, data in iter_stored_batches(fd, 0, segment.size_bytes):
        yield pos, header, data
        end = pos + header.size_bytes
    if end != segment.size_bytes:
        raise CleaningAborted(f"segment {segment.base_offset}: unreadable batch at position {end}")


def _groups(plan: CleaningPlan, map_end: int) -> list[list[int]]:
    """Indexes of the planned segments to rewrite (those starting below ``map_end``),
    grouped: a group's original sizes fit segment.bytes, its offsets the indexes."""
    groups: list[list[int]] = []
    size = 0
    for i, segment in enumerate(plan.segments):
        if segment.base_offset >= map_end:
            break
        if groups:
            first = plan.segments[groups[-1][0]]
            if (
                size + segment.size_bytes <= plan.segment_bytes
                and segment.next_offset - 1 - first.base_offset <= MAX_RELATIVE_OFFSET
            ):
                groups[-1].append(i)
                size += segment.size_bytes
                continue
        groups.append([i])
        size = segment.size_bytes
    return groups


class _IndexBuilder:
    """The entries ``Segment`` would index for these batches (same interval rule), plus
    the entry sealing adds at the end."""

    # Transitions: created -> (add)* -> seal() once.
    __slots__ = ("interval", "last_time_ts", "max_ts", "offset_of_max", "offsets", "since", "times")

    def __init__(self, interval: int) -> None:
        self.interval = interval
        self.since = 0
        self.max_ts = -1
        self.offset_of_max = -1
        self.last_time_ts = -1
        self.offsets: list[tuple[int, int]] = []
        self.times: list[tuple[int, int]] = []

    def add(self, position: int, base_offset: int, max_timestamp: int, size: int) -> None:
        if max_timestamp > self.max_ts:
            self.max_ts, self.offset_of_max = max_timestamp, base_offset
        if self.since > self.interval:
            self.offsets.append((base_offset, position))
            if self.max_ts > self.last_time_ts:
                self.times.append((self.max_ts, self.offset_of_max))
                self.last_time_ts = self.max_ts
            self.since = 0
        self.since += size

    def seal(self) -> None:
        if self.max_ts > self.last_time_ts:
            self.times.append((self.max_ts, self.offset_of_max))
            self.last_time_ts = self.max_ts


def _write_all(fd: int, data: bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Builder:
    """One pass's build: map the dirty range, then write the groups."""

    # Transitions: created -> run() once (-> result, or an exception with files removed).
    __slots__ = (
        "bytes_after",
        "bytes_before",
        "map_end",
        "offsets",
        "plan",
        "should_stop",
        "txns",
        "written",
    )

    def __init__(self, plan: CleaningPlan, should_stop: Callable[[], bool]) -> None:
        self.plan = plan
        self.should_stop = should_stop
        self.offsets = OffsetMap(plan.map_budget_bytes)
        self.txns = PassTxns(plan.aborted)
        self.map_end = plan.dirty_start
        self.written: list[Path] = []
        self.bytes_before = self.bytes_after = 0

    def run(self) -> CleaningResult:
        plan = self.plan
        try:
            self._build_map()
            cleaner = BatchCleaner(plan, self.offsets, self.map_end, self.txns)
            groups = _groups(plan, self.map_end)
            cleaned = [self._write_group(group, cleaner) for group in groups]
            if cleaned:
                sync_directory(plan.directory)
        except BaseException:
            for path in self.written:
                path.unlink(missing_ok=True)
            raise
        since = cleaner.pending_since_ms
        old = plan.checkpoint
        if self.map_end < old.cleaned_offset and old.tombstones_since_ms >= 0:
            # Part of the cleaned range was not rewritten: its tombstones are still there.
            since = old.tombstones_since_ms if since < 0 else min(since, old.tombstones_since_ms)
        return CleaningResult(
            plan=plan,
            cleaned=tuple(cleaned),
            checkpoint=old.after_pass(self.map_end, plan.now_ms, since),
            map_end=self.map_end,
            keys=len(self.offsets),
            bytes_before=self.bytes_before,
            bytes_after=self.bytes_after,
            records_removed=cleaner.records_removed,
            tombstones_removed=cleaner.tombstones_removed,
            markers_removed=cleaner.markers_removed,
            stale_snapshots_to=cleaner.stale_snapshots_to,
        )

    def _check_stop(self) -> None:
        if self.should_stop():
            raise CleaningAborted("stopped")

    def _build_map(self) -> None:
        """Keys of the dirty range -> latest offset, until the map's budget is used. Records
        of aborted transactions are not mapped: they never shadow an older value."""
        plan = self.plan
        offsets = self.offsets
        for segment, fd in zip(plan.segments, plan.fds, strict=True):
            if segment.next_offset <= plan.dirty_start:
                continue
            for _, header, data in _stored_batches(segment, fd):
                if header.base_offset < plan.dirty_start:
                    continue
                if offsets.full and self.map_end > plan.dirty_start:
                    return
                self._check_stop()
                if (
                    header.records_count
                    and not header.is_control
                    and not self.txns.is_aborted(header)
                ):
                    offsets.put_records(header.base_offset, records_of(data, header)[1])
                self.map_end = header.next_offset
            self.map_end = max(self.map_end, segment.next_offset)

    def _write_group(self, group: list[int], cleaner: BatchCleaner) -> CleanedSegment:
        plan = self.plan
        segments = [plan.segments[i] for i in group]
        base = segments[0].base_offset
        index = _IndexBuilder(plan.index_interval_bytes)
        path = cleaned_path(plan.directory, base, LOG_SUFFIX)
        self.written.append(path)
        out_fd = os.open(path, _OUT_FLAGS, 0o644)
        out = bytearray()
        position = 0
        try:
            for k, i in enumerate(group):
                segment, fd = plan.segments[i], plan.fds[i]
                last_segment = k == len(group) - 1
                for pos, header, data in _stored_batches(segment, fd):
                    self._check_stop()
                    is_last = last_segment and pos + header.size_bytes == segment.size_bytes
                    self.bytes_before += header.size_bytes
                    kept = cleaner.clean(header, data, is_last)
                    if kept is None:
                        continue
                    max_timestamp = _MAX_TIMESTAMP.unpack_from(kept, _MAX_TIMESTAMP_POS)[0]
                    index.add(position, header.base_offset, max_timestamp, len(kept))
                    out += kept
                    position += len(kept)
                    if len(out) >= _WRITE_CHUNK:
                        _write_all(out_fd, out)
                        out.clear()
            if position == 0:
                raise CleaningAborted(f"cleaned segment {base} would be empty")
            _write_all(out_fd, out)
            os.fsync(out_fd)
        finally:
            os.close(out_fd)
        index.seal()
        for suffix, cls, entries in (
            (OFFSET_INDEX_SUFFIX, OffsetIndex, index.offsets),
            (TIME_INDEX_SUFFIX, TimeIndex, index.times),
        ):
            index_path = cleaned_path(plan.directory, base, suffix)
            self.written.append(index_path)
            index_file = cls(index_path, base)
            try:
                index_file.replace(entries)
                index_file.sync()
            finally:
                index_file.close()
        aborted = cleaner.take_txn_entries()
        if aborted:
            txn_path = cleaned_path(plan.directory, base, TXN_INDEX_SUFFIX)
            self.written.append(txn_path)
            txn_fd = os.open(txn_path, _OUT_FLAGS, 0o644)
            try:
                _write_all(txn_fd, bytearray(encode_aborted(aborted)))
                os.fsync(txn_fd)
            finally:
                os.close(txn_fd)
        self.bytes_after += position
        return CleanedSegment(
            base,
            segments[-1].next_offset,
            tuple(s.base_offset for s in segments),
            position,
            has_txn_index=bool(aborted),
        )
