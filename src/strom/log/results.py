"""Values the partition log hands back to its callers."""

from __future__ import annotations

import os
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.protocol.records import RecordsError

__all__ = ["AppendResult", "FlushPlan", "OffsetOutOfRange", "ReadResult", "SegmentInfo"]


class OffsetOutOfRange(RecordsError):
    """A fetch or lookup outside ``[log_start_offset, log_end_offset]``."""

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(
            ErrorCode.offset_out_of_range,
            f"offset {offset} is outside the log's range {log_start_offset}..{log_end_offset}",
        )
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


@dataclass(frozen=True, slots=True)
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time_ms: int
    """The stamped append time, or -1 when the topic keeps CreateTime."""
    log_start_offset: int
    duplicate: bool = False
    """True when an idempotent producer's retry matched a cached batch: nothing was
    written and the offsets are those of the original append."""


@dataclass(frozen=True, slots=True)
class ReadResult:
    """A run of whole batches in one segment file: its descriptor, position and size.

    ``read_bytes`` copies them out with ``os.pread``; the fetch handler puts those bytes
    in its response.

    ``fd`` belongs to the log: it stays valid until the next ``delete_old_segments``,
    ``truncate_to``, ``close`` or ``delete`` of that log; never close it.
    """

    fd: int
    position: int
    size_bytes: int
    first_offset: int
    """Base offset of the first batch returned (may be below the fetch offset: the
    whole batch containing it is returned), or the fetch offset when empty."""
    next_offset: int
    """Offset after the last batch returned, or the fetch offset when empty."""

    def read_bytes(self) -> bytes:
        if self.size_bytes <= 0:
            return b""
        chunks: list[bytes] = []
        done = 0
        while done < self.size_bytes:
            chunk = os.pread(self.fd, self.size_bytes - done, self.position + done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)


@dataclass(frozen=True, slots=True)
class FlushPlan:
    """What a group commit must fsync; made by ``flush_plan``, settled by ``mark_flushed``.

    ``fds`` are duplicated descriptors (segment logs, indexes of rolled segments, and the
    directory when files were created or removed): the caller fsyncs and closes each.
    """

    fds: list[int]
    up_to_offset: int
    messages: int
    synced_segments: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    base_offset: int
    next_offset: int
    size_bytes: int
    max_timestamp: int
    """Largest batch max timestamp in the segment, -1 if none."""
    offset_of_max_timestamp: int
    """Base offset of the first batch that has ``max_timestamp``, -1 if none."""
    is_active: bool
