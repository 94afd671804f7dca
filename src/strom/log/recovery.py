"""Loading a partition's segments at open, repairing what a crash left behind.

After a clean shutdown every segment is loaded quickly: its indexes are read and checked
for sanity (size a multiple of the entry size, increasing entries, last entry pointing at
a real batch) and only the batch headers after the last index entry are read. After an
unclean shutdown every segment at or above the recovery point (and always the last one)
is checked batch by batch - header sanity, contiguous offsets, CRC32C - and the log file
is truncated at the first bad batch; its indexes are rebuilt from what remains. A segment
whose quick load finds a problem gets the same full check. A segment that does not start
where the previous one ends is a gap or overlap: it and all later segments are deleted.

Within a segment, offsets must increase and may skip only where compaction can have
removed whole batches: below the next segment's base offset (the cleaner keeps the last
batch of every segment it writes, so segments still join up), and in the last segment
only up to the cleaner checkpoint. So a damaged base offset (the CRC does not cover it)
cannot pass for a gap, and the first batch of a segment may start after its base.
Before any of this, ``PartitionLog.open`` finishes a committed cleaner swap (see
``cleaner_swap``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import crc32c

from strom.log.config import LogConfig
from strom.log.segment import (
    LOG_SUFFIX,
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    BatchInfo,
    Segment,
    iter_stored_batches,
    scan_headers,
    segment_path,
)
from strom.protocol.records import BATCH_HEADER_SIZE

__all__ = [
    "RecoveryReport",
    "RecoveryReportBuilder",
    "SegmentTruncation",
    "load_segment",
    "load_segments",
    "recover_segment",
]

_CRC_START = 21


@dataclass(frozen=True, slots=True)
class SegmentTruncation:
    base_offset: int
    position: int
    truncated_bytes: int
    reason: str


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What ``PartitionLog.open`` found and repaired."""

    directory: str
    clean_shutdown: bool
    recovery_point: int
    checked_segments: tuple[int, ...] = ()
    truncations: tuple[SegmentTruncation, ...] = ()
    rebuilt_indexes: tuple[tuple[int, str], ...] = ()
    deleted_segments: tuple[tuple[int, str], ...] = ()
    removed_files: tuple[str, ...] = ()
    producer_snapshot_offset: int = -1
    producer_batches_replayed: int = 0
    log_start_offset: int = 0
    log_end_offset: int = 0
    completed_swap: tuple[int, ...] | None = None
    """Base offsets of the cleaned segments of an interrupted, committed cleaner swap
    that the open finished (``()`` for a damaged swap manifest that was dropped)."""

    @property
    def repaired(self) -> bool:
        """True when data or index files had to be changed."""
        return bool(
            self.truncations
            or self.rebuilt_indexes
            or self.deleted_segments
            or self.removed_files
            or self.completed_swap is not None
        )

    @property
    def truncated_bytes(self) -> int:
        return sum(t.truncated_bytes for t in self.truncations)

    def describe(self) -> list[str]:
        """Readable lines for the broker's log."""
        shutdown = "clean" if self.clean_shutdown else "unclean"
        lines = [
            f"{self.directory}: opened after {shutdown} shutdown, offsets "
            f"{self.log_start_offset}..{self.log_end_offset}"
        ]
        if self.checked_segments:
            lines.append(
                f"checked {len(self.checked_segments)} segment(s) batch by batch from offset "
                f"{self.checked_segments[0]} (recovery point {self.recovery_point})"
            )
        for t in self.truncations:
            lines.append(
                f"segment {t.base_offset}: truncated {t.truncated_bytes} byte(s) at position "
                f"{t.position}: {t.reason}"
            )
        for base_offset, reason in self.rebuilt_indexes:
            lines.append(f"segment {base_offset}: rebuilt indexes: {reason}")
        for base_offset, reason in self.deleted_segments:
            lines.append(f"segment {base_offset}: deleted: {reason}")
        if self.completed_swap:
            bases = ", ".join(str(base) for base in self.completed_swap)
            lines.append(f"finished an interrupted cleaner swap: cleaned segment(s) {bases}")
        elif self.completed_swap is not None:
            lines.append("removed an unreadable cleaner swap manifest")
        for name in self.removed_files:
            lines.append(f"removed stray file {name}")
        if self.producer_snapshot_offset >= 0 or self.producer_batches_replayed:
            lines.append(
                f"producer state: snapshot at {self.producer_snapshot_offset}, "
                f"{self.producer_batches_replayed} batch header(s) replayed"
            )
        return lines


@dataclass(slots=True)
class RecoveryReportBuilder:
    """Collects findings while a log opens."""

    # Transitions: created at open -> (note_*)* -> build() once the log is open.
    directory: str
    clean_shutdown: bool
    recovery_point: int
    checked_segments: list[int] = field(default_factory=list)
    truncations: list[SegmentTruncation] = field(default_factory=list)
    rebuilt_indexes: list[tuple[int, str]] = field(default_factory=list)
    deleted_segments: list[tuple[int, str]] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    producer_snapshot_offset: int = -1
    producer_batches_replayed: int = 0
    completed_swap: tuple[int, ...] | None = None
    txn_indexes_to_rebuild: list[int] = field(default_factory=list)
    """Checked segments holding control batches or a `.txnindex`: their index is
    rebuilt while the producer state is replayed."""

    def build(self, log_start_offset: int, log_end_offset: int) -> RecoveryReport:
        return RecoveryReport(
            directory=self.directory,
            clean_shutdown=self.clean_shutdown,
            recovery_point=self.recovery_point,
            checked_segments=tuple(self.checked_segments),
            truncations=tuple(self.truncations),
            rebuilt_indexes=tuple(self.rebuilt_indexes),
            deleted_segments=tuple(self.deleted_segments),
            removed_files=tuple(self.removed_files),
            producer_snapshot_offset=self.producer_snapshot_offset,
            producer_batches_replayed=self.producer_batches_replayed,
            log_start_offset=log_start_offset,
            log_end_offset=log_end_offset,
            completed_swap=self.completed_swap,
        )


def _bad_offset(base_offset: int, expected: int, gap_limit: int) -> str | None:
    """What is wrong with a batch at ``base_offset`` where ``expected`` was next: offsets
    may skip (compaction) but only to below ``gap_limit``."""
    if base_offset == expected or expected < base_offset < gap_limit:
        return None
    return f"batch has base offset {base_offset}, expected {expected}"


class _CheckedBatches:
    """Iterates a segment's valid batches from its start, remembering where it stopped."""

    # Transitions: created -> iterated once -> (problem, next_offset, valid_end) final.
    __slots__ = ("controls", "gap_limit", "next_offset", "problem", "segment", "valid_end")

    def __init__(self, segment: Segment, gap_limit: int) -> None:
        self.segment = segment
        self.gap_limit = gap_limit
        self.next_offset = segment.base_offset
        self.valid_end = 0
        self.problem: str | None = None
        self.controls = False

    def __iter__(self) -> Iterator[BatchInfo]:
        segment = self.segment
        end = segment.file_size()
        expected = segment.base_offset
        for pos, header, data in iter_stored_batches(segment.fd, 0, end):
            self.problem = _bad_offset(header.base_offset, expected, self.gap_limit)
            if self.problem is not None:
                break
            if crc32c.crc32c(data[_CRC_START:]) != header.crc:
                self.problem = f"CRC mismatch in batch at offset {expected}"
                break
            yield pos, header.base_offset, header.max_timestamp, header.size_bytes
            self.controls = self.controls or header.is_control
            expected = header.next_offset
            self.valid_end = pos + header.size_bytes
            self.next_offset = expected
        if self.problem is None and self.valid_end != end:
            self.problem = "incomplete or unreadable batch"


def recover_segment(
    segment: Segment, gap_limit: int, controls: list[int] | None = None
) -> SegmentTruncation | None:
    """Check every batch; truncate at the first bad one (fsynced); rebuild the indexes
    (but the `.txnindex`: the producer state's replay does that). The base offset goes
    to ``controls`` when the segment holds a control batch.

    Offsets may skip only to below ``gap_limit`` (see the module docstring)."""
    end = segment.file_size()
    checked = _CheckedBatches(segment, gap_limit)
    segment.rebuild_indexes(checked)
    if checked.controls and controls is not None:
        controls.append(segment.base_offset)
    segment.size_bytes = checked.valid_end
    segment.next_offset = checked.next_offset
    if checked.valid_end == end:
        return None
    os.ftruncate(segment.fd, checked.valid_end)
    os.fsync(segment.fd)
    return SegmentTruncation(
        segment.base_offset,
        checked.valid_end,
        end - checked.valid_end,
        checked.problem or "unreadable data",
    )


def load_segment(segment: Segment, *, eager: bool, gap_limit: int) -> str | None:
    """Load a segment trusting its sane indexes. Returns a problem needing a full check.

    Indexes are checked cheaply (size, last entries); ``eager`` also reads and checks
    every entry now (for the active segment) instead of at the first lookup. Offsets
    after the last index entry may skip only to below ``gap_limit``.
    """
    size = segment.file_size()
    for name, index in (("offset", segment.offset_index), ("time", segment.time_index)):
        problem = index.load() if eager else index.check()
        if problem is not None:
            return f"{name} index {problem}"
    problem = segment.txn_index.load()
    if problem is not None:
        return problem
    first = segment.read_header(0) if size > 0 else None
    if size > 0 and (
        first is None or _bad_offset(first.base_offset, segment.base_offset, gap_limit)
    ):
        return "first batch does not start at the segment's base offset"
    last = segment.offset_index.last_entry()
    has_timestamps = first is not None and first.max_timestamp >= 0
    if last is not None and has_timestamps and segment.time_index.last_entry() is None:
        return "time index is empty"
    expected, position = (segment.base_offset, 0) if last is None else last
    if position + BATCH_HEADER_SIZE > size and last is not None:
        return f"offset index points past the end of the log ({position} >= {size})"
    tail: list[BatchInfo] = []
    end = position
    for pos, header in scan_headers(segment.fd, position, size):
        if not tail and last is not None and header.base_offset != expected:
            return "last offset index entry does not point at its batch"
        if _bad_offset(header.base_offset, expected, gap_limit) is not None:
            return f"offsets are not in order at position {pos}"
        tail.append((pos, header.base_offset, header.max_timestamp, header.size_bytes))
        expected = header.next_offset
        end = pos + header.size_bytes
    if end != size:
        return f"incomplete or unreadable batch at position {end}"
    last_time = segment.time_index.last_entry()
    if last_time is not None and last_time[1] >= expected:
        return "time index points past the end of the log"
    segment.adopt_loaded_indexes(tail, expected, size)
    return None


def load_segments(
    directory: Path,
    config: LogConfig,
    bases: list[int],
    clean: bool,
    recovery_point: int,
    now_ms: int,
    report: RecoveryReportBuilder,
    cleaned_offset: int = 0,
) -> list[Segment]:
    """Open the segments at ``bases``, checking and repairing as the module describes;
    ``cleaned_offset`` is the cleaner checkpoint's (0 for a log never compacted)."""
    segments: list[Segment] = []
    try:
        for i, base in enumerate(bases):
            if segments and base != segments[-1].next_offset:
                reason = (
                    f"starts at offset {base} but the previous segment ends at "
                    f"{segments[-1].next_offset}"
                )
                for later in bases[i:]:
                    for suffix in (
                        LOG_SUFFIX,
                        OFFSET_INDEX_SUFFIX,
                        TIME_INDEX_SUFFIX,
                        TXN_INDEX_SUFFIX,
                    ):
                        segment_path(directory, later, suffix).unlink(missing_ok=True)
                    report.deleted_segments.append((later, reason))
                break
            missing = [
                suffix
                for suffix in (OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX)
                if not segment_path(directory, base, suffix).exists()
            ]
            segment = Segment(
                directory, base, index_interval_bytes=config.index_interval_bytes, now_ms=now_ms
            )
            segments.append(segment)
            is_last = i == len(bases) - 1
            gap_limit = cleaned_offset + 1 if is_last else bases[i + 1]
            problem = f"missing {' and '.join(missing)} file" if missing else None
            trusted = clean or (base < recovery_point and not is_last)
            if trusted and problem is None:
                problem = load_segment(segment, eager=is_last, gap_limit=gap_limit)
                if problem is None:
                    continue
            if problem is not None:
                report.rebuilt_indexes.append((base, problem))
            report.checked_segments.append(base)
            if segment_path(directory, base, TXN_INDEX_SUFFIX).exists():
                report.txn_indexes_to_rebuild.append(base)
            truncation = recover_segment(segment, gap_limit, report.txn_indexes_to_rebuild)
            if truncation is not None:
                report.truncations.append(truncation)
            segment.sync()
        if not segments:
            segment = Segment.create(
                directory, 0, index_interval_bytes=config.index_interval_bytes, now_ms=now_ms
            )
            segments.append(segment)
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments


def log_recovery(logger: logging.Logger, label: str, report: RecoveryReport) -> None:
    """Repairs are warnings, the check after a crash is INFO, a clean or new open DEBUG."""
    if report.repaired:
        level = logging.WARNING
    elif not report.clean_shutdown and report.log_end_offset > 0:
        level = logging.INFO
    else:
        level = logging.DEBUG
    if logger.isEnabledFor(level):
        for line in report.describe():
            logger.log(level, "%s: %s", label, line)
