"""Timestamp lookups over a log's segments: ListOffsets by time and by max timestamp."""

from __future__ import annotations

from collections.abc import Sequence

from strom.log.segment import Segment
from strom.protocol.records import decode_batch

__all__ = ["max_timestamp", "offset_for_timestamp"]


def offset_for_timestamp(
    segments: Sequence[Segment], log_start_offset: int, timestamp_ms: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record stamped ``timestamp_ms`` or later."""
    for segment in segments:
        if segment.max_timestamp < timestamp_ms:
            continue
        position = 0
        scan_from = segment.time_index.lookup(timestamp_ms)
        if scan_from is not None:
            found = segment.find_batch(scan_from)
            position = found[0] if found is not None else 0
        for pos, header in segment.headers(position):
            if header.max_timestamp < timestamp_ms:
                continue
            _, records = decode_batch(segment.read_batch(pos, header.size_bytes))
            for record in records:
                if record.timestamp >= timestamp_ms and record.offset >= log_start_offset:
                    return record.offset, record.timestamp
    return None


def max_timestamp(segments: Sequence[Segment], log_start_offset: int = 0) -> tuple[int, int]:
    """(timestamp, offset) of the record with the largest timestamp at or after
    ``log_start_offset`` (the first such record on a tie); (-1, -1) if none."""
    first = segments[0] if segments else None
    if (
        first is None
        or first.base_offset >= log_start_offset
        or first.offset_of_max_timestamp >= log_start_offset
    ):
        return _largest(segments)
    # DeleteRecords started the log after the first segment's newest record: read the
    # rest of that segment record by record.
    head = _largest_from(first, log_start_offset)
    rest = _largest(segments[1:])
    return head if head[0] >= 0 and head[0] >= rest[0] else rest


def _largest(segments: Sequence[Segment]) -> tuple[int, int]:
    best: Segment | None = None
    for segment in segments:
        if segment.max_timestamp >= 0 and (
            best is None or segment.max_timestamp > best.max_timestamp
        ):
            best = segment
    if best is None:
        return -1, -1
    found = best.find_batch(best.offset_of_max_timestamp)
    if found is None:
        return best.max_timestamp, best.offset_of_max_timestamp
    position, header = found
    _, records = decode_batch(best.read_batch(position, header.size_bytes))
    for record in records:
        if record.timestamp == best.max_timestamp:
            return record.timestamp, record.offset
    return best.max_timestamp, header.last_offset


def _largest_from(segment: Segment, start: int) -> tuple[int, int]:
    found = segment.find_batch(start)
    best = (-1, -1)
    for pos, header in segment.headers(found[0] if found is not None else 0):
        if header.max_timestamp <= best[0]:
            continue
        _, records = decode_batch(segment.read_batch(pos, header.size_bytes))
        for record in records:
            if record.offset >= start and record.timestamp > best[0]:
                best = (record.timestamp, record.offset)
    return best
