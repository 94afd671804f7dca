"""The log of one partition: a directory of segments, appended to and read by offset.

Pure apart from plain file I/O: no clock (``now_ms`` comes in), no threads, no locks -
one owner task calls it. Durability is split so the owner can group-commit in a worker
thread: ``flush_plan`` hands out duplicated descriptors to fsync, ``mark_flushed``
records the result. Compaction is split the same way: ``cleaning_plan`` here,
``cleaner_build.build_cleaned`` in a worker thread, ``swap_cleaned`` here again
(``partition_log_parts`` holds those, and the transaction queries).
"""

from __future__ import annotations

import os
import shutil
from bisect import bisect_right
from collections.abc import Sequence
from pathlib import Path

from strom.durable_files import replace_file, sync_directory, sync_fd
from strom.log import timestamps
from strom.log.append_layout import append_end, lay_out
from strom.log.cleaner_state import CleanerState
from strom.log.config import LogConfig
from strom.log.durability import DurabilityTracker
from strom.log.files import (
    CLEAN_SHUTDOWN_FILE,
    write_recovery_point,
)
from strom.log.leader_epochs import LeaderEpochCache, open_leader_epochs
from strom.log.opening import load_directory
from strom.log.partition_log_parts import LogCompaction, LogTransactions
from strom.log.producer_state import ProducerEntry, ProducerStateManager
from strom.log.record_filter import check_keys
from strom.log.recovery import RecoveryReport, RecoveryReportBuilder
from strom.log.results import AppendResult, FlushPlan, OffsetOutOfRange, ReadResult, SegmentInfo
from strom.log.retention import LogRetention, opened_start
from strom.log.segment import Segment
from strom.log.snapshots import restore_producer_state, write_snapshot
from strom.log.transactions import PartitionTxns
from strom.log.txn_tracking import marker_in, require_marker, track_batch
from strom.protocol.markers import EndTxnMarker
from strom.protocol.records import BatchHeader, TimestampType

_MAX_RELATIVE_OFFSET = 2**31 - 1


class PartitionLog(LogCompaction, LogTransactions, LogRetention):
    """Segments, indexes and producer state of one partition directory."""

    # Transitions: open() -> (append | read | roll | flush_plan/mark_flushed | truncate_to
    #   | truncate_fully_and_start_at | assign_epoch_start | delete_old_segments
    #   | delete_records_before |
    #   cleaning_plan -> swap_cleaned or abandon_cleaning)* -> closed, by close or delete.
    # A closed log refuses every call. The active segment is always the last one.
    # Every change to sealed segments is told to ``_cleaner``, so a cleaning pass
    # planned before it is discarded rather than swapped in. A new leader epoch is
    # recorded in ``_leader_epochs`` before its first batch is written.
    __slots__ = (
        "_bases",
        "_cleaner",
        "_closed",
        "_config",
        "_durability",
        "_leader_epochs",
        "_producers",
        "_report",
        "_segments",
        "_txns",
        "directory",
    )

    def __init__(self, directory: Path, config: LogConfig, segments: list[Segment]) -> None:
        """Use ``PartitionLog.open``."""
        self.directory = directory
        self._config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._start = segments[0].base_offset
        self._producers = ProducerStateManager()
        self._txns = PartitionTxns()
        self._closed = False
        self._durability = DurabilityTracker(
            directory,
            log_end_offset=segments[-1].next_offset,
            active_base=segments[-1].base_offset,
        )
        self._report: RecoveryReport | None = None
        self._cleaner = CleanerState(directory)
        self._leader_epochs = LeaderEpochCache(directory)

    # ------------------------------------------------------------------ open

    @classmethod
    def open(
        cls, directory: Path, config: LogConfig, *, now_ms: int, create: bool = True
    ) -> PartitionLog:
        """Open (and, unless ``create`` is False, create) a partition directory,
        repairing whatever an unclean shutdown left; see ``recovery_report``."""
        directory = Path(directory)
        segments, report, stored_point = load_directory(
            directory, config, now_ms=now_ms, create=create
        )
        log = cls(directory, config, segments)
        try:
            active = segments[-1]
            first = active.read_header(0) if not active.is_empty else None
            if first is not None:
                stamp = first.max_timestamp
                active.rolling_base_ms = min(stamp, now_ms) if stamp >= 0 else now_ms
            if report.deleted_segments or report.removed_files:
                sync_directory(directory)
            if stored_point != active.base_offset:
                write_recovery_point(directory, active.base_offset)
            log._start = opened_start(directory, segments)
            log._load_producer_state(report)
            log._leader_epochs = open_leader_epochs(directory, segments)
        except BaseException:
            log.close(clean=False)
            raise
        log._report = report.build(log.log_start_offset, log.log_end_offset)
        return log

    def _load_producer_state(self, report: RecoveryReportBuilder | None) -> None:
        """Newest snapshot at or below the log end, then the batch headers after it; the
        `.txnindex` of each segment checked batch by batch is rebuilt on the way."""
        rebuild = () if report is None else report.txn_indexes_to_rebuild
        loaded, removed, replayed = restore_producer_state(
            self.directory, self._producers, self._segments, self._txns, rebuild
        )
        if report is not None:
            report.removed_files.extend(removed)
            report.producer_snapshot_offset = -1 if loaded is None else loaded
            report.producer_batches_replayed = replayed

    # ------------------------------------------------------------------ properties

    @property
    def config(self) -> LogConfig:
        return self._config

    def reconfigure(self, config: LogConfig) -> None:
        """Apply changed topic configs (they take effect from the next append)."""
        self._config = config
        for segment in self._segments:
            segment.index_interval_bytes = config.index_interval_bytes

    @property
    def recovery_report(self) -> RecoveryReport:
        assert self._report is not None
        return self._report

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def segments(self) -> tuple[SegmentInfo, ...]:
        last = len(self._segments) - 1
        return tuple(
            SegmentInfo(
                s.base_offset,
                s.next_offset,
                s.size_bytes,
                s.max_timestamp,
                s.offset_of_max_timestamp,
                i == last,
            )
            for i, s in enumerate(self._segments)
        )

    @property
    def flushed_offset(self) -> int:
        """Every offset below this one is fsynced."""
        return self._durability.flushed_offset

    @property
    def unflushed_messages(self) -> int:
        return self._durability.unflushed_messages

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def leader_epochs(self) -> LeaderEpochCache:
        """Read it freely; change it only through this log's methods."""
        return self._leader_epochs

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (epoch, end offset); see ``LeaderEpochCache``."""
        self._check_open()
        return self._leader_epochs.end_offset_for(leader_epoch, self.log_end_offset)

    def assign_epoch_start(self, leader_epoch: int, offset: int) -> None:
        """A new leader records that ``leader_epoch`` starts at ``offset``, which must be
        the log end. No-op unless the epoch is newer than the latest recorded."""
        self._check_open()
        if offset != self.log_end_offset:
            raise ValueError(f"epoch start {offset} is not the log end {self.log_end_offset}")
        self._leader_epochs.assign(leader_epoch, offset)

    def producer_state_for(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    @property
    def producers(self) -> ProducerStateManager:
        """The idempotent producers' state, to ask (`repeats`, `continues`), not change."""
        return self._producers

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"partition log {self.directory} is closed")

    # ------------------------------------------------------------------ append

    def append(
        self,
        batches: Sequence[tuple[memoryview, BatchHeader]],
        *,
        now_ms: int,
        leader_epoch: int,
        producer_check: bool = True,
        assign_offsets: bool = True,
    ) -> AppendResult:
        """Append batches checked by ``records.validate_batches``, with one ``writev``.

        Offsets are assigned from the log end offset (``assign_offsets=False`` keeps the
        batches as they are - a follower copying its leader - and requires their offsets
        to increase from the log end; a compacted leader's may skip some). Idempotent
        producer checks (``producer_check``) run for all batches before anything is
        written; a RecordsError leaves the log unchanged (RECORD_LIST_TOO_LARGE when the
        append alone exceeds segment.bytes). A new leader epoch (``leader_epoch``, or each
        kept batch's own) is recorded before writing.

        Transactions: a transactional batch opens its producer's transaction, a COMMIT
        or ABORT marker (a control batch) ends it, and an ABORT that ended one is added to
        the active segment's `.txnindex` (``txn_tracking``). With ``producer_check`` a
        marker of an older producer or coordinator epoch is refused (RecordsError).
        """
        self._check_open()
        if not batches:
            raise ValueError("nothing to append")
        headers = [header for _, header in batches]
        log_append = self._config.message_timestamp_type == TimestampType.LOG_APPEND_TIME
        if assign_offsets and self._config.compact:
            check_keys(batches, self.directory.name)  # INVALID_RECORD: a record without a key
        markers: dict[int, EndTxnMarker] = {}
        for i, (view, header) in enumerate(batches):
            if header.is_control and header.producer_id >= 0:
                marker = require_marker(view, header) if producer_check else marker_in(view, header)
                if marker is not None:
                    markers[i] = marker
        if producer_check:
            for i, marker in markers.items():
                header = headers[i]
                self._producers.check_marker(
                    header.producer_id, header.producer_epoch, marker.coordinator_epoch
                )
            duplicate = self._producers.check(headers)
            if duplicate is not None:
                return AppendResult(
                    duplicate.first_offset,
                    duplicate.last_offset,
                    duplicate.timestamp if log_append else -1,
                    self.log_start_offset,
                    duplicate=True,
                )
        first_offset = self.log_end_offset
        next_offset, total_bytes = append_end(
            headers,
            log_end_offset=first_offset,
            assign_offsets=assign_offsets,
            segment_bytes=self._config.segment_bytes,
        )
        self._maybe_roll(total_bytes, next_offset - 1, now_ms)
        log_append = log_append and assign_offsets
        pieces, infos = lay_out(
            batches,
            first_offset=first_offset,
            leader_epoch=leader_epoch,
            assign_offsets=assign_offsets,
            append_time_ms=now_ms if log_append else None,
            now_ms=now_ms,
        )
        if assign_offsets:
            self._leader_epochs.assign(leader_epoch, first_offset)
        else:
            for header in headers:
                self._leader_epochs.assign(header.partition_leader_epoch, header.base_offset)
        active = self._segments[-1]
        active.append(pieces, infos, next_offset=next_offset, now_ms=now_ms)
        messages = 0
        for i, (info, header) in enumerate(zip(infos, headers, strict=True)):
            _, batch_base, max_timestamp, _ = info
            messages += header.records_count
            aborted = track_batch(
                self._producers, self._txns, header, batch_base, max_timestamp, markers.get(i)
            )
            if aborted is not None and active.txn_index.append(aborted):
                self._durability.on_file_created()
        self._durability.on_append(active.base_offset, messages, now_ms)
        return AppendResult(
            first_offset, next_offset - 1, now_ms if log_append else -1, self.log_start_offset
        )

    def _maybe_roll(self, incoming_bytes: int, last_offset: int, now_ms: int) -> None:
        active = self._segments[-1]
        if active.is_empty:
            return
        config = self._config
        if (
            active.size_bytes + incoming_bytes > config.segment_bytes
            or (
                active.rolling_base_ms is not None
                and now_ms - active.rolling_base_ms > config.segment_ms
            )
            or last_offset - active.base_offset > _MAX_RELATIVE_OFFSET
        ):
            self.roll(now_ms)

    def roll(self, now_ms: int) -> int:
        """Start a new active segment at the log end (no-op if the active one is empty).

        Writes a producer state snapshot at the roll offset. Returns the active base.
        """
        self._check_open()
        old = self._segments[-1]
        if old.is_empty:
            return old.base_offset
        old.seal()
        base = old.next_offset
        segment = Segment.create(
            self.directory,
            base,
            index_interval_bytes=self._config.index_interval_bytes,
            now_ms=now_ms,
        )
        self._segments.append(segment)
        self._bases.append(base)
        self._durability.on_roll(old.base_offset, base)
        write_snapshot(
            self.directory,
            self._producers,
            base,
            sync=False,
            log_start_offset=self.log_start_offset,
        )
        return base

    # ------------------------------------------------------------------ read

    def read(
        self,
        fetch_offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches from the one containing ``fetch_offset``, within one segment.

        At most ``max_bytes`` (but one batch at least if ``min_one_batch``); none whose
        base offset is ``max_offset`` or more. Raises OffsetOutOfRange outside
        ``[log_start_offset, log_end_offset]``. Decodes nothing.
        """
        self._check_open()
        start, end = self.log_start_offset, self.log_end_offset
        if fetch_offset < start or fetch_offset > end:
            raise OffsetOutOfRange(fetch_offset, start, end)
        limit = end if max_offset is None else min(max_offset, end)
        if fetch_offset < limit:
            i = bisect_right(self._bases, fetch_offset) - 1
            for segment in self._segments[i:]:
                result = segment.read(
                    fetch_offset, max_bytes, limit=limit, min_one_batch=min_one_batch
                )
                if result is not None:
                    return result
        active = self._segments[-1]
        return ReadResult(active.fd, active.size_bytes, 0, fetch_offset, fetch_offset)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record stamped ``timestamp_ms`` or later."""
        self._check_open()
        return timestamps.offset_for_timestamp(self._segments, self.log_start_offset, timestamp_ms)

    def max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp at or after the
        log start; (-1, -1) if none."""
        self._check_open()
        return timestamps.max_timestamp(self._segments, self.log_start_offset)

    # ------------------------------------------------------------------ flush

    def needs_flush(self, now_ms: int) -> bool:
        """True when flush.messages or flush.ms say so, or a rolled segment awaits fsync."""
        return self._durability.needs_flush(now_ms, self._config)

    def flush_plan(self) -> FlushPlan:
        """Duplicated descriptors to fsync (in a worker thread); then ``mark_flushed``.

        Keep at most one plan in flight. The caller owns and must close every fd.
        """
        self._check_open()
        by_base = {s.base_offset: s for s in self._segments}
        return self._durability.make_plan(by_base, self.log_end_offset)

    def mark_flushed(self, plan: FlushPlan) -> None:
        """Record that every fd of ``plan`` was fsynced."""
        if not self._closed:
            self._durability.on_flushed(
                plan,
                log_end_offset=self.log_end_offset,
                active_base=self._segments[-1].base_offset,
            )

    def flush(self) -> None:
        """Synchronous flush of everything written so far (tests, shutdown)."""
        plan = self.flush_plan()
        try:
            for fd in plan.fds:
                sync_fd(fd)
        finally:
            for fd in plan.fds:
                os.close(fd)
        self.mark_flushed(plan)

    # ------------------------------------------------------------------ truncation

    def truncate_to(self, offset: int) -> int:
        """Drop every batch at or after ``offset``; returns the new log end offset.

        A batch containing ``offset`` is dropped whole, so the new end can be lower than
        ``offset``. Truncating below the first segment empties the log and restarts it at
        ``offset``; below a start DeleteRecords set, the log starts at ``offset``.
        Producer state is rebuilt, leader epochs starting at or after the new end are
        dropped; ReadResults from before become invalid.

        At or past the log end no record goes, but leader epochs starting at the log end
        still do: a replica that became leader records its epoch at its log end, and if it
        appended nothing before leadership moved on, its followers' leader knows nothing
        of that epoch. Kept, it would be this log's last fetched epoch forever: every
        fetch would be answered with a divergence at this same log end.
        """
        self._check_open()
        if offset >= self.log_end_offset:
            self._leader_epochs.truncate_from_end(self.log_end_offset)
            return self.log_end_offset
        if offset < self._segments[0].base_offset:
            self._restart_at(offset)
        else:
            self._lower_start(offset)
            i = bisect_right(self._bases, offset) - 1
            while len(self._segments) > i + 1:
                self._delete_segment(-1)
            segment = self._segments[i]
            found = segment.find_batch(offset)
            if found is not None:  # (offset may lie in a gap left by compaction)
                position, header = found
                segment.truncate_to(position, min(header.base_offset, offset))
            segment.rolling_base_ms = None if segment.is_empty else segment.rolling_base_ms
        return self._after_truncation()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop all data, leader epochs, producer state and transactions: the log restarts
        empty at ``offset``, which may be above its end. ReadResults from before become
        invalid."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at offset {offset}")
        self._leader_epochs.clear()  # first: a crash before the data is gone rebuilds it
        self._restart_at(offset)
        self._txns.restore({})
        self._producers.clear()  # its empty snapshot at offset prunes the older ones
        write_snapshot(self.directory, self._producers, offset, sync=True, log_start_offset=offset)
        self._after_truncation()

    def _after_truncation(self) -> int:
        sync_directory(self.directory)
        end = self.log_end_offset
        self._leader_epochs.truncate_from_end(end)
        self._cleaner.truncated(end)
        self._durability.on_truncated(self._segments[-1].base_offset, end)
        ended = self._txns.ended()
        self._load_producer_state(None)
        self._txns.keep_ended(ended, end)
        return end

    def _restart_at(self, offset: int) -> None:
        self._forget_start(offset)
        while self._segments:
            self._delete_segment(-1)
        segment = Segment.create(
            self.directory,
            offset,
            index_interval_bytes=self._config.index_interval_bytes,
            now_ms=0,
        )
        segment.next_offset = offset
        self._segments.append(segment)
        self._bases.append(offset)

    # ------------------------------------------------------------------ close

    def close(self, clean: bool = True) -> None:
        """Close the log. ``clean`` fsyncs everything, snapshots the producer state and
        leaves the marker that lets the next open skip recovery."""
        if self._closed:
            return
        try:
            if clean:
                active = self._segments[-1]
                active.seal()
                dirty = self._durability.dirty_segments()
                for segment in self._segments:
                    if segment.base_offset in dirty:
                        segment.sync()
                write_snapshot(
                    self.directory,
                    self._producers,
                    self.log_end_offset,
                    sync=True,
                    log_start_offset=self.log_start_offset,
                )
                self._durability.on_clean_close(active.base_offset, self.log_end_offset)
                replace_file(self.directory / CLEAN_SHUTDOWN_FILE, b"", sync_dir=False)
                sync_directory(self.directory)
        finally:
            self._closed = True
            for segment in self._segments:
                segment.close()

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion)."""
        self.close(clean=False)
        shutil.rmtree(self.directory, ignore_errors=True)
