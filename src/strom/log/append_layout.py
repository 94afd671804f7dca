"""Where the batches of one append go: their offsets, sizes and bytes, before any write.

Pure: validated batches and the log's end in; the offsets and the pieces to write out.
A leader's batches get consecutive offsets from the log end (and its leader epoch and,
for LogAppendTime topics, the append time stamped into them); a follower's are kept as
its leader wrote them, and must only move forward from the log end.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from strom.log.segment import BatchInfo
from strom.protocol.records import BatchHeader, RecordsError, stamp_batch

BATCH_OVERHEAD_BYTES = 12
"""The base offset and length fields before each batch's counted length."""


def append_end(
    headers: Sequence[BatchHeader],
    *,
    log_end_offset: int,
    assign_offsets: bool,
    segment_bytes: int,
) -> tuple[int, int]:
    """(the log end after the append, its size in bytes). ValueError when a kept batch
    goes back into the log; RECORD_LIST_TOO_LARGE when the append alone exceeds
    segment.bytes."""
    total_bytes = 0
    next_offset = log_end_offset
    for header in headers:
        if not assign_offsets:
            # A compacted leader's log may skip offsets, never go back.
            if header.base_offset < next_offset:
                raise ValueError(
                    f"batch at offset {header.base_offset} does not continue the log "
                    f"at {next_offset}"
                )
            next_offset = header.base_offset
        total_bytes += header.batch_length + BATCH_OVERHEAD_BYTES
        next_offset += header.last_offset_delta + 1
    if total_bytes > segment_bytes:
        raise RecordsError(
            ErrorCode.record_list_too_large,
            f"{total_bytes} bytes in one append exceed segment.bytes {segment_bytes}",
        )
    return next_offset, total_bytes


def lay_out(
    batches: Sequence[tuple[memoryview, BatchHeader]],
    *,
    first_offset: int,
    leader_epoch: int,
    assign_offsets: bool,
    append_time_ms: int | None,
    now_ms: int,
) -> tuple[list[bytes | memoryview], list[BatchInfo]]:
    """The pieces to write (stamped where offsets are assigned) and each batch's
    (position, base offset, max timestamp, size) in the write."""
    pieces: list[bytes | memoryview] = []
    infos: list[BatchInfo] = []
    position = 0
    base = first_offset
    for view, header in batches:
        if assign_offsets:
            pieces += stamp_batch(
                view,
                header,
                base_offset=base,
                leader_epoch=leader_epoch,
                log_append_time_ms=append_time_ms,
            )
        else:
            pieces.append(view)
            base = header.base_offset
        size = header.batch_length + BATCH_OVERHEAD_BYTES
        max_timestamp = now_ms if append_time_ms is not None else header.max_timestamp
        infos.append((position, base, max_timestamp, size))
        position += size
        base += header.last_offset_delta + 1
    return pieces, infos
