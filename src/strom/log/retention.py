"""Where a ``PartitionLog`` starts: retention dropping old segments, and DeleteRecords
moving the start forward to any offset (a mixin, like ``partition_log_parts``).

The log start is the first segment's base offset unless DeleteRecords set it inside
that segment; then it is stored in ``log-start-offset`` (fsynced before the call returns
and before any segment goes) and read back at open. Records below the start stay in the
first segment's file until retention or a later deletion removes the whole segment, but
no read, ListOffsets or replica sees them: the log answers as if they were gone.
"""

from __future__ import annotations

from pathlib import Path

from strom.durable_files import sync_directory
from strom.log.cleaner_state import CleanerState
from strom.log.config import LogConfig
from strom.log.durability import DurabilityTracker
from strom.log.files import LOG_START_FILE, read_log_start, write_log_start
from strom.log.leader_epochs import LeaderEpochCache
from strom.log.segment import Segment
from strom.log.snapshots import prune_snapshots

__all__ = ["LogRetention", "opened_start"]


def opened_start(directory: Path, segments: list[Segment]) -> int:
    """The start of a log being opened: the stored one when it lies within the log,
    else the first segment's base (and a stored start that no longer applies, left by
    a crash while the log restarted lower, is removed so that it never applies again)."""
    base, end = segments[0].base_offset, segments[-1].next_offset
    stored = read_log_start(directory)
    if base < stored <= end:
        return stored
    if stored >= 0:
        (directory / LOG_START_FILE).unlink(missing_ok=True)
        sync_directory(directory)
    return base


class LogRetention:
    """Retention and DeleteRecords of a ``PartitionLog``."""

    # Transitions: _start only rises (delete_records_before), except when the log is
    # truncated below it or restarts (_lower_start, _forget_start).
    __slots__ = ("_start",)
    _bases: list[int]
    _cleaner: CleanerState
    _config: LogConfig
    _durability: DurabilityTracker
    _leader_epochs: LeaderEpochCache
    _segments: list[Segment]
    directory: Path

    def _check_open(self) -> None:
        raise NotImplementedError

    @property
    def log_start_offset(self) -> int:
        return max(self._start, self._segments[0].base_offset)

    def delete_records_before(self, offset: int) -> list[int]:
        """DeleteRecords: the log starts at ``offset`` from now on (the caller keeps it at
        or below the high watermark); whole segments below it are deleted. Returns their
        base offsets; nothing changes when ``offset`` is not above the start. ReadResults
        from before become invalid."""
        self._check_open()
        end = self._segments[-1].next_offset
        if not 0 <= offset <= end:
            raise ValueError(f"cannot start the log at {offset}: its end is {end}")
        if offset <= self.log_start_offset:
            return []
        write_log_start(self.directory, offset)
        self._start = offset
        deleted: list[int] = []
        while len(self._segments) > 1 and self._segments[1].base_offset <= offset:
            deleted.append(self._delete_segment(0))
        self._start_moved(bool(deleted))
        return deleted

    def delete_old_segments(self, now_ms: int) -> list[int]:
        """Retention: drop whole old segments by time, then by size; never the active one.

        Only with "delete" in cleanup.policy. Returns the base offsets deleted.
        ReadResults from before become invalid.
        """
        self._check_open()
        deleted: list[int] = []
        config = self._config
        if not config.delete or self._cleaner.failed:
            return deleted
        if config.retention_ms >= 0:
            while (
                len(self._segments) > 1
                and now_ms - self._segments[0].largest_timestamp > config.retention_ms
            ):
                deleted.append(self._delete_segment(0))
        if config.retention_bytes >= 0:
            excess = sum(s.size_bytes for s in self._segments) - config.retention_bytes
            while len(self._segments) > 1 and excess - self._segments[0].size_bytes >= 0:
                excess -= self._segments[0].size_bytes
                deleted.append(self._delete_segment(0))
        if deleted:
            self._start_moved(True)
        return deleted

    def _start_moved(self, segments_deleted: bool) -> None:
        self._leader_epochs.truncate_from_start(self.log_start_offset)
        if segments_deleted:
            self._cleaner.segments_changed()
            prune_snapshots(self.directory, self._segments[0].base_offset)
            self._durability.advance_recovery_point(self._segments[-1].base_offset)

    def _delete_segment(self, i: int) -> int:
        segment = self._segments.pop(i)
        self._bases.pop(i)
        segment.delete()
        self._durability.on_segment_removed(segment.base_offset)
        return segment.base_offset

    def _lower_start(self, offset: int) -> None:
        """The log was truncated to ``offset``, below a start DeleteRecords set: it starts
        there now (nothing between is left to hide)."""
        if offset < self._start:
            self._start = offset
            write_log_start(self.directory, offset)

    def _forget_start(self, offset: int) -> None:
        """The log restarts empty at ``offset``: a stored start must not outlive it."""
        if (self.directory / LOG_START_FILE).exists():
            (self.directory / LOG_START_FILE).unlink()
            sync_directory(self.directory)
        self._start = offset
