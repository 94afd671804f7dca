"""What of a partition log is fsynced, and what a group commit still has to fsync.

The owner of a log asks ``PartitionLog.flush_plan`` for duplicated descriptors, fsyncs
them in a worker thread and reports back with ``mark_flushed``. This module keeps the
bookkeeping: unflushed message counts and age (for flush.messages / flush.ms), the
segments with unsynced log bytes, the rolled segments whose indexes still need an fsync,
and the recovery point - the base offset of the oldest segment that may hold unsynced
data or index entries, from which an unclean open checks every batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from strom.log.config import LogConfig
from strom.log.files import write_recovery_point
from strom.log.results import FlushPlan
from strom.log.segment import Segment

__all__ = ["DurabilityTracker"]


class DurabilityTracker:
    """Flush bookkeeping of one partition log."""

    # Transitions: on_append / on_roll / on_segment_removed / on_truncated mark work;
    # make_plan hands it out (at most one plan in flight); on_flushed settles it and may
    # advance the recovery point (which only a truncation moves back).
    __slots__ = (
        "_dir_dirty",
        "_first_unflushed_ms",
        "_not_durable",
        "_pending_first_ms",
        "_pending_index",
        "_pending_log",
        "directory",
        "flushed_offset",
        "recovery_point",
        "unflushed_messages",
    )

    def __init__(self, directory: Path, *, log_end_offset: int, active_base: int) -> None:
        self.directory = directory
        self.flushed_offset = log_end_offset
        self.unflushed_messages = 0
        self.recovery_point = active_base
        self._first_unflushed_ms: int | None = None
        self._pending_first_ms: int | None = None  # first append since the last plan
        self._pending_log: set[int] = set()  # segments with log bytes not in any plan
        self._pending_index: set[int] = set()  # rolled segments whose indexes need fsync
        self._not_durable: set[int] = {active_base}
        self._dir_dirty = False

    def on_append(self, base_offset: int, messages: int, now_ms: int) -> None:
        self.unflushed_messages += messages
        if self._first_unflushed_ms is None:
            self._first_unflushed_ms = now_ms
        if self._pending_first_ms is None:
            self._pending_first_ms = now_ms
        self._pending_log.add(base_offset)

    def on_roll(self, old_base: int, new_base: int) -> None:
        self._pending_index.add(old_base)
        self._not_durable.add(new_base)
        self._dir_dirty = True

    def on_file_created(self) -> None:
        """A file was added to the directory (a segment's first transaction index)."""
        self._dir_dirty = True

    def on_segment_removed(self, base_offset: int) -> None:
        self._pending_log.discard(base_offset)
        self._pending_index.discard(base_offset)
        self._not_durable.discard(base_offset)
        self._dir_dirty = True

    def on_truncated(self, active_base: int, log_end_offset: int) -> None:
        """After a truncation (whose files and directory the log fsynced itself)."""
        self._pending_index.discard(active_base)
        self._not_durable.add(active_base)
        self._dir_dirty = False
        self.flushed_offset = min(self.flushed_offset, log_end_offset)
        if active_base < self.recovery_point:
            write_recovery_point(self.directory, active_base)
            self.recovery_point = active_base

    def needs_flush(self, now_ms: int, config: LogConfig) -> bool:
        if self._pending_index:
            return True
        if self.unflushed_messages >= config.flush_messages:
            return True
        first = self._first_unflushed_ms
        return first is not None and now_ms - first >= config.flush_ms

    def dirty_segments(self) -> set[int]:
        return self._not_durable | self._pending_log | self._pending_index

    def make_plan(self, segments: Mapping[int, Segment], log_end_offset: int) -> FlushPlan:
        fds: list[int] = []
        synced: list[int] = []
        try:
            for base in sorted(self._pending_log | self._pending_index):
                segment = segments.get(base)
                if segment is None:
                    continue
                fds.append(os.dup(segment.fd))
                if base in self._pending_index:
                    fds.append(os.dup(segment.offset_index.fd))
                    fds.append(os.dup(segment.time_index.fd))
                    if segment.txn_index.fd >= 0:
                        fds.append(os.dup(segment.txn_index.fd))
                    synced.append(base)
            if self._dir_dirty:
                fds.append(os.open(self.directory, os.O_RDONLY))
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        self._dir_dirty = False
        self._pending_log.clear()
        self._pending_index.clear()
        self._pending_first_ms = None
        return FlushPlan(fds, log_end_offset, self.unflushed_messages, tuple(synced))

    def on_flushed(self, plan: FlushPlan, *, log_end_offset: int, active_base: int) -> None:
        self.flushed_offset = max(self.flushed_offset, min(plan.up_to_offset, log_end_offset))
        self.unflushed_messages = max(0, self.unflushed_messages - plan.messages)
        self._first_unflushed_ms = self._pending_first_ms if self.unflushed_messages else None
        for base in plan.synced_segments:
            if base != active_base:
                self._not_durable.discard(base)
        self.advance_recovery_point(active_base)

    def advance_recovery_point(self, active_base: int) -> None:
        point = min(self._not_durable | {active_base})
        if point > self.recovery_point:
            write_recovery_point(self.directory, point)
            self.recovery_point = point

    def on_clean_close(self, active_base: int, log_end_offset: int) -> None:
        """Everything was fsynced by the closing log."""
        write_recovery_point(self.directory, active_base)
        self.recovery_point = active_base
        self.flushed_offset = log_end_offset
