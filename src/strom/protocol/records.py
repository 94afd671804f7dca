"""Kafka record batches (magic v2): validate, stamp, decode and encode.

Written by hand on purpose. kio decodes requests and hands us a Produce request's
``records`` field as raw bytes; its optional ``kio.records`` helpers decode uncompressed
batches only, allocate objects per record and cannot validate or re-stamp a batch in
place. The broker needs exactly that: validate a produced batch without decoding its
records, rewrite the 16-byte prefix (base offset, length, leader epoch) that the CRC does
not cover, and store the client's bytes unchanged. Full decoding (all four codecs) and
encoding are here too, for tests, compaction, tools and the internal metadata log.
The codecs, and the bound on what a batch may decompress to, are in ``compression``.

This module validates and stamps batches, and is the one import path for all of it:
the header layout and ``BatchHeader`` are in ``batch_header``, record decoding and
encoding (and the record layout) in ``record_codec``; both are re-exported here.

Nothing here does I/O; all functions are pure.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import crc32c
from kio.schema.errors import ErrorCode

from strom.protocol.batch_header import (
    ATTRIBUTES_POS,
    ATTRIBUTES_STRUCT,
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    CRC_STRUCT,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    I64_STRUCT,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAX_TIMESTAMP_POS,
    MIN_BATCH_LENGTH,
    MIN_RECORD_BODY,
    PREFIX_STRUCT,
    TIMESTAMP_TYPE_BIT,
    BatchHeader,
    Buffer,
    RecordErrors,
    RecordsError,
    TimestampType,
    corrupt,
    decompress_records,
    invalid,
    iter_batches,
    parse_batch_header,
)
from strom.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression
from strom.protocol.record_codec import (
    Header,
    NewRecord,
    Record,
    RecordInput,
    decode_batch,
    encode_batch,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "DEFAULT_MAX_DECOMPRESSED_BYTES",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "Compression",
    "Header",
    "NewRecord",
    "Record",
    "RecordErrors",
    "RecordInput",
    "RecordsError",
    "TimestampType",
    "decode_batch",
    "encode_batch",
    "iter_batches",
    "parse_batch_header",
    "replica_batches",
    "stamp_batch",
    "validate_batches",
]


def validate_batches(
    records: Buffer,
    *,
    max_batch_bytes: int,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[tuple[memoryview, BatchHeader]]:
    """Validate a produce request's records and split them into batches, without copying.

    Checks framing, magic, CRC32C, record counts and size, then walks the record length
    prefixes to check that exactly ``records_count`` records fill the batch. A compressed
    batch is decompressed for that walk into at most ``max_decompressed_bytes`` (more is
    refused with INVALID_RECORD, undecodable data with CORRUPT_MESSAGE); the batch
    returned is still the client's compressed bytes.
    """
    view = memoryview(records)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    end = len(view)
    if end == 0:
        raise corrupt("empty record set")
    # A bytes object is faster to index than a memoryview; a view is copied only if an
    # uncompressed batch needs its record lengths walked.
    data: bytes | bytearray | memoryview = (
        records if isinstance(records, bytes | bytearray) else view
    )
    out: list[tuple[memoryview, BatchHeader]] = []
    pos = 0
    unpack = HEADER_STRUCT.unpack_from
    while pos < end:
        remaining = end - pos
        if remaining <= MAGIC_POS:
            raise corrupt(f"{remaining} trailing bytes at position {pos} are not a batch")
        magic = data[pos + MAGIC_POS]
        if magic != CURRENT_MAGIC:
            raise RecordsError(
                ErrorCode.unsupported_for_message_format,
                f"record batch magic {magic} at position {pos} is not supported (only v2)",
            )
        if remaining < BATCH_HEADER_SIZE:
            raise corrupt(f"truncated batch header at position {pos}")
        header = BatchHeader(*unpack(data, pos))
        if header.batch_length < MIN_BATCH_LENGTH:
            raise corrupt(f"batch length {header.batch_length} at position {pos} is too small")
        size = header.batch_length + LOG_OVERHEAD
        if size > remaining:
            raise corrupt(f"batch at position {pos} needs {size} bytes but only {remaining} remain")
        batch_end = pos + size
        if crc32c.crc32c(view[pos + CRC_START : batch_end]) != header.crc:
            raise corrupt(f"CRC mismatch in batch at position {pos}")
        if header.records_count < 1:
            raise invalid(f"batch at position {pos} has {header.records_count} records")
        if header.last_offset_delta != header.records_count - 1:
            raise invalid(
                f"batch at position {pos}: last offset delta {header.last_offset_delta} "
                f"does not match {header.records_count} records"
            )
        if header.attributes & CONTROL_BIT:
            raise invalid("clients may not write control batches")
        if size > max_batch_bytes:
            raise RecordsError(
                ErrorCode.message_too_large,
                f"batch of {size} bytes exceeds the maximum of {max_batch_bytes}",
            )
        codec = header.attributes & COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise RecordsError(
                ErrorCode.unsupported_compression_type, f"unknown compression codec {codec}"
            )
        if codec == Compression.NONE:
            if isinstance(data, memoryview):
                data = bytes(view)
            records_ok = _record_lengths_fill(
                data, pos + BATCH_HEADER_SIZE, batch_end, header.records_count
            )
        else:
            where = f"batch at position {pos}: "
            payload = view[pos + BATCH_HEADER_SIZE : batch_end]
            plain = decompress_records(codec, payload, max_decompressed_bytes, where)
            records_ok = _record_lengths_fill(plain, 0, len(plain), header.records_count)
        if not records_ok:
            raise invalid(
                f"batch at position {pos}: records do not match its count "
                f"{header.records_count} and length"
            )
        out.append((view[pos:batch_end], header))
        pos = batch_end
    return out


def replica_batches(data: Buffer) -> list[tuple[memoryview, BatchHeader]]:
    """Split a Fetch response's records (a follower's copy of its leader's log) into
    whole batches, without copying. Checks framing, magic, CRC32C and that offsets only
    grow (they may skip, and need not start at 0), but walks no records. A trailing
    partial batch is dropped; anything else wrong raises RecordsError."""
    view = memoryview(data).cast("B")
    out: list[tuple[memoryview, BatchHeader]] = []
    pos = next_offset = 0
    while len(view) - pos >= LOG_OVERHEAD:
        size = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True) + LOG_OVERHEAD
        if size < BATCH_HEADER_SIZE:
            raise corrupt(f"batch length {size - LOG_OVERHEAD} at position {pos} is too small")
        if pos + size > len(view):
            break  # Fetch responses may end with a partial batch
        header = BatchHeader(*HEADER_STRUCT.unpack_from(view, pos))
        if header.magic != CURRENT_MAGIC:
            raise RecordsError(
                ErrorCode.unsupported_for_message_format,
                f"record batch magic {header.magic} at position {pos} is not supported",
            )
        if crc32c.crc32c(view[pos + CRC_START : pos + size]) != header.crc:
            raise corrupt(f"CRC mismatch in batch at position {pos}")
        if header.base_offset < next_offset or header.last_offset_delta < 0:
            raise corrupt(f"batch at position {pos} has offsets out of order")
        out.append((view[pos : pos + size], header))
        next_offset, pos = header.next_offset, pos + size
    return out


def _load_compiled_fill() -> Callable[[Buffer, int, int, int, int], bool] | None:
    """The compiled walk, unless STROM_PURE_PYTHON=1 asks for the Python one or the
    install had no C compiler to build it."""
    if os.environ.get("STROM_PURE_PYTHON") == "1":
        return None
    try:
        from strom.protocol import _walk
    except ImportError:
        return None
    return _walk.record_lengths_fill


_compiled_fill = _load_compiled_fill()
COMPILED_WALK = _compiled_fill is not None
"""Whether the produce path's record walk runs compiled in this process."""


def _record_lengths_fill(data: bytes | bytearray, pos: int, end: int, count: int) -> bool:
    """True when exactly ``count`` length-prefixed records fill ``data[pos:end]``: the hot
    loop of the produce path, compiled (strom.protocol._walk) when the install could build
    it, else in Python (also with STROM_PURE_PYTHON=1); both answer alike."""
    if count > (end - pos) // (1 + MIN_RECORD_BODY):
        return False
    if _compiled_fill is not None:
        return _compiled_fill(data, pos, end, count, 2 * MIN_RECORD_BODY)
    return record_lengths_fill_python(data, pos, end, count)


def record_lengths_fill_python(data: bytes | bytearray, pos: int, end: int, count: int) -> bool:
    """The walk in Python: only the zigzag length varint of each record is read. One- and
    two-byte varints (records up to 8 KiB) take the fast branches; an odd varint is a
    negative length. Reading past ``end`` is harmless (``pos`` only grows, so it can no
    longer land on ``end``) and past the buffer raises IndexError, so the loop needs no
    bounds checks of its own.
    """
    min_varint = 2 * MIN_RECORD_BODY
    try:
        for _ in range(count):
            b = data[pos]
            if b < 0x80:
                if b & 1 or b < min_varint:
                    return False
                pos += 1 + (b >> 1)
                continue
            b2 = data[pos + 1]
            if b2 < 0x80:
                value = (b & 0x7F) | (b2 << 7)
                pos += 2
            else:
                value = (b & 0x7F) | ((b2 & 0x7F) << 7)
                shift = 14
                pos += 2
                while True:
                    if shift > 28:
                        return False
                    b = data[pos]
                    pos += 1
                    value |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
            if value & 1 or value < min_varint:
                return False
            pos += value >> 1
    except IndexError:
        return False
    return pos == end


def stamp_batch(
    batch: memoryview,
    header: BatchHeader,
    *,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> list[bytes | memoryview]:
    """Pieces to write (with one ``os.writev``) for ``batch`` at ``base_offset``.

    Without ``log_append_time_ms`` only the 16-byte prefix the CRC does not cover is
    replaced. With it, the batch is copied, marked LogAppendTime, its maxTimestamp set
    and its CRC recomputed (baseTimestamp is kept, as Kafka does).
    """
    prefix = PREFIX_STRUCT.pack(base_offset, header.batch_length, leader_epoch)
    if log_append_time_ms is None:
        return [prefix, batch[16:]]
    copy = bytearray(batch)
    copy[:16] = prefix
    attributes = header.attributes | TIMESTAMP_TYPE_BIT
    ATTRIBUTES_STRUCT.pack_into(copy, ATTRIBUTES_POS, attributes)
    I64_STRUCT.pack_into(copy, MAX_TIMESTAMP_POS, log_append_time_ms)
    crc = crc32c.crc32c(memoryview(copy)[CRC_START:])
    CRC_STRUCT.pack_into(copy, CRC_START - 4, crc)
    return [memoryview(copy)]
