"""Kafka record batches (magic v2): validate, stamp, decode and encode.

Written by hand on purpose. kio decodes requests and hands us a Produce request's
``records`` field as raw bytes; its optional ``kio.records`` helpers decode uncompressed
batches only, allocate objects per record and cannot validate or re-stamp a batch in
place. The broker needs exactly that: validate a produced batch without decoding its
records, rewrite the 16-byte prefix (base offset, length, leader epoch) that the CRC does
not cover, and store the client's bytes unchanged. Full decoding (all four codecs) and
encoding are here too, for tests, compaction, tools and the internal metadata log.
The codecs, and the bound on what a batch may decompress to, are in ``compression``.

Batch layout (all big-endian)::

    baseOffset i64 @0, batchLength i32 @8 (bytes after this field),
    partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17 (CRC32C of [21:end]),
    attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
    maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51,
    baseSequence i32 @53, recordsCount i32 @57, records @61

Record: length varint, attributes i8, timestampDelta varlong, offsetDelta varint,
key (varint length, -1 = null), value (same), headers count varint, then per header
key (varint length, utf-8) and value (varint length, -1 = null). Varints are zigzag.

Nothing here does I/O; all functions are pure.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeAlias

import crc32c
from kio.schema.errors import ErrorCode

from strom.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    DecompressionError,
    compress,
    decompress,
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

BATCH_HEADER_SIZE = 61
"""Bytes before the first record of a v2 batch."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted by batchLength."""
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
CURRENT_MAGIC = 2

_CRC_START = 21  # the CRC covers [attributes .. end]
_MAGIC_POS = 16
_ATTRIBUTES_POS = 21
_MAX_TIMESTAMP_POS = 35
_MIN_RECORD_BODY = 6  # attributes, ts delta, offset delta, key len, value len, headers
_INT32_MAX = 2**31 - 1

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_CRC = struct.Struct(">I")
_ATTRS = struct.Struct(">h")
_I64 = struct.Struct(">q")

assert _HEADER.size == BATCH_HEADER_SIZE

Buffer: TypeAlias = bytes | bytearray | memoryview
Header: TypeAlias = tuple[str, bytes | None]


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordsError(ValueError):
    """Bad record data; ``error_code`` is what the client should be told."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _corrupt(message: str) -> RecordsError:
    return RecordsError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> RecordsError:
    return RecordsError(ErrorCode.invalid_record, message)


def _decompress(codec: int, data: Buffer, max_bytes: int, where: str) -> bytes | bytearray:
    """Decompress a records section; RecordsError when undecodable or too large."""
    try:
        return decompress(codec, data, max_bytes=max_bytes)
    except DecompressionError as exc:
        if exc.too_large:
            raise _invalid(f"{where}{exc}") from exc
        raise _corrupt(f"{where}{exc}") from exc
    except ValueError as exc:
        raise RecordsError(ErrorCode.unsupported_compression_type, str(exc)) from exc


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & _TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; int32 that wraps to 0 after 2**31 - 1."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (_INT32_MAX + 1)


def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``. Raises RecordsError if fewer bytes remain."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise _corrupt(f"batch header needs {BATCH_HEADER_SIZE} bytes at position {pos}")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def iter_batches(buf: Buffer, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each complete v2 batch from ``start``.

    Stops silently at the first batch that is incomplete, has an impossible length or is
    not magic v2; compare the last position + size with ``len(buf)`` to find a torn tail.
    Checks no CRC.
    """
    end = len(buf)
    pos = start
    unpack = _HEADER.unpack_from
    while end - pos >= BATCH_HEADER_SIZE:
        header = BatchHeader(*unpack(buf, pos))
        if header.batch_length < MIN_BATCH_LENGTH or header.magic != CURRENT_MAGIC:
            return
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            return
        yield pos, header
        pos += size


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
        raise _corrupt("empty record set")
    # A bytes object is faster to index than a memoryview; a view is copied only if an
    # uncompressed batch needs its record lengths walked.
    data: bytes | bytearray | memoryview = (
        records if isinstance(records, bytes | bytearray) else view
    )
    out: list[tuple[memoryview, BatchHeader]] = []
    pos = 0
    unpack = _HEADER.unpack_from
    while pos < end:
        remaining = end - pos
        if remaining <= _MAGIC_POS:
            raise _corrupt(f"{remaining} trailing bytes at position {pos} are not a batch")
        magic = data[pos + _MAGIC_POS]
        if magic != CURRENT_MAGIC:
            raise RecordsError(
                ErrorCode.unsupported_for_message_format,
                f"record batch magic {magic} at position {pos} is not supported (only v2)",
            )
        if remaining < BATCH_HEADER_SIZE:
            raise _corrupt(f"truncated batch header at position {pos}")
        header = BatchHeader(*unpack(data, pos))
        if header.batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(f"batch length {header.batch_length} at position {pos} is too small")
        size = header.batch_length + LOG_OVERHEAD
        if size > remaining:
            raise _corrupt(
                f"batch at position {pos} needs {size} bytes but only {remaining} remain"
            )
        batch_end = pos + size
        if crc32c.crc32c(view[pos + _CRC_START : batch_end]) != header.crc:
            raise _corrupt(f"CRC mismatch in batch at position {pos}")
        if header.records_count < 1:
            raise _invalid(f"batch at position {pos} has {header.records_count} records")
        if header.last_offset_delta != header.records_count - 1:
            raise _invalid(
                f"batch at position {pos}: last offset delta {header.last_offset_delta} "
                f"does not match {header.records_count} records"
            )
        if header.attributes & _CONTROL_BIT:
            raise _invalid("clients may not write control batches")
        if size > max_batch_bytes:
            raise RecordsError(
                ErrorCode.message_too_large,
                f"batch of {size} bytes exceeds the maximum of {max_batch_bytes}",
            )
        codec = header.attributes & _COMPRESSION_MASK
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
            plain = _decompress(codec, payload, max_decompressed_bytes, where)
            records_ok = _record_lengths_fill(plain, 0, len(plain), header.records_count)
        if not records_ok:
            raise _invalid(
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
            raise _corrupt(f"batch length {size - LOG_OVERHEAD} at position {pos} is too small")
        if pos + size > len(view):
            break  # Fetch responses may end with a partial batch
        header = BatchHeader(*_HEADER.unpack_from(view, pos))
        if header.magic != CURRENT_MAGIC:
            raise RecordsError(
                ErrorCode.unsupported_for_message_format,
                f"record batch magic {header.magic} at position {pos} is not supported",
            )
        if crc32c.crc32c(view[pos + _CRC_START : pos + size]) != header.crc:
            raise _corrupt(f"CRC mismatch in batch at position {pos}")
        if header.base_offset < next_offset or header.last_offset_delta < 0:
            raise _corrupt(f"batch at position {pos} has offsets out of order")
        out.append((view[pos : pos + size], header))
        next_offset, pos = header.next_offset, pos + size
    return out


def _record_lengths_fill(data: bytes | bytearray, pos: int, end: int, count: int) -> bool:
    """True when exactly ``count`` length-prefixed records fill ``data[pos:end]``.

    The hot loop of the produce path: only the zigzag length varint of each record is
    read. One- and two-byte varints (records up to 8 KiB) take the fast branches; an odd
    varint is a negative length. Reading past ``end`` is harmless (``pos`` only grows,
    so it can no longer land on ``end``) and past the buffer raises IndexError, so the
    loop needs no bounds checks of its own.
    """
    min_varint = 2 * _MIN_RECORD_BODY
    if count > (end - pos) // (1 + _MIN_RECORD_BODY):
        return False
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
    prefix = _PREFIX.pack(base_offset, header.batch_length, leader_epoch)
    if log_append_time_ms is None:
        return [prefix, batch[16:]]
    copy = bytearray(batch)
    copy[:16] = prefix
    attributes = header.attributes | _TIMESTAMP_TYPE_BIT
    _ATTRS.pack_into(copy, _ATTRIBUTES_POS, attributes)
    _I64.pack_into(copy, _MAX_TIMESTAMP_POS, log_append_time_ms)
    crc = crc32c.crc32c(memoryview(copy)[_CRC_START:])
    _CRC.pack_into(copy, _CRC_START - 4, crc)
    return [memoryview(copy)]


# ---------------------------------------------------------------------------- decoding


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class _Reader:
    """Bounds-checked cursor over one record buffer."""

    # Transitions: pos only moves forward; every read raises RecordsError past the end.
    __slots__ = ("data", "end", "pos")

    def __init__(self, data: bytes, pos: int = 0) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data)

    def varint(self, max_bytes: int = 5) -> int:
        data = self.data
        pos = self.pos
        value = 0
        shift = 0
        for _ in range(max_bytes):
            if pos >= self.end:
                raise _corrupt("record data ends inside a varint")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise _corrupt(f"varint longer than {max_bytes} bytes")

    def varlong(self) -> int:
        return self.varint(10)

    def take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > self.end:
            raise _corrupt(f"record field of {length} bytes overruns its record")
        start = self.pos
        self.pos += length
        return self.data[start : self.pos]

    def nullable(self) -> bytes | None:
        length = self.varint()
        if length == -1:
            return None
        if length < -1:
            raise _invalid(f"negative field length {length}")
        return self.take(length)


def decode_batch(
    batch: Buffer,
    *,
    verify_crc: bool = True,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, list[Record]]:
    """Fully decode one batch, decompressing it into at most ``max_decompressed_bytes``.

    Raises RecordsError when malformed or when it decompresses to more than that.
    """
    view = memoryview(batch)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    header = parse_batch_header(view)
    if header.magic != CURRENT_MAGIC:
        raise RecordsError(
            ErrorCode.unsupported_for_message_format,
            f"record batch magic {header.magic} is not supported (only v2)",
        )
    if header.batch_length < MIN_BATCH_LENGTH or header.size_bytes > len(view):
        raise _corrupt(
            f"batch length {header.batch_length} does not fit the {len(view)} bytes given"
        )
    body = view[: header.size_bytes]
    if verify_crc and crc32c.crc32c(body[_CRC_START:]) != header.crc:
        raise _corrupt("CRC mismatch")
    if header.records_count < 0:
        raise _invalid(f"negative record count {header.records_count}")
    codec = header.attributes & _COMPRESSION_MASK
    raw = body[BATCH_HEADER_SIZE:]
    if codec == Compression.NONE:
        data = bytes(raw)
    else:
        plain = _decompress(codec, raw, max_decompressed_bytes, "")
        data = plain if isinstance(plain, bytes) else bytes(plain)
    reader = _Reader(data)
    log_append = header.attributes & _TIMESTAMP_TYPE_BIT
    records: list[Record] = []
    for _ in range(header.records_count):
        records.append(_decode_record(reader, header, bool(log_append)))
    if reader.pos != reader.end:
        raise _invalid(f"{reader.end - reader.pos} bytes left after the last record")
    return header, records


def _decode_record(reader: _Reader, header: BatchHeader, log_append: bool) -> Record:
    length = reader.varint()
    if length < _MIN_RECORD_BODY:
        raise _invalid(f"record length {length} is too small")
    record_end = reader.pos + length
    if record_end > reader.end:
        raise _corrupt("record overruns its batch")
    reader.end, batch_end = record_end, reader.end
    reader.take(1)  # record attributes: unused in v2
    timestamp_delta = reader.varlong()
    offset_delta = reader.varint()
    key = reader.nullable()
    value = reader.nullable()
    header_count = reader.varint()
    if header_count < 0:
        raise _invalid(f"negative header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        key_length = reader.varint()
        if key_length < 0:
            raise _invalid("record header key is null")
        try:
            header_key = reader.take(key_length).decode()
        except UnicodeDecodeError as exc:
            raise _invalid("record header key is not utf-8") from exc
        headers.append((header_key, reader.nullable()))
    if reader.pos != record_end:
        raise _invalid("record length does not match its fields")
    reader.end = batch_end
    timestamp = header.max_timestamp if log_append else header.base_timestamp + timestamp_delta
    return Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))


# ---------------------------------------------------------------------------- encoding


@dataclass(frozen=True, slots=True)
class NewRecord:
    """A record to encode; ``timestamp_ms`` None means the batch's base timestamp."""

    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] = ()
    timestamp_ms: int | None = None


RecordInput: TypeAlias = NewRecord | tuple[bytes | None, bytes | None, Sequence[Header]]


def _zigzag_varint(value: int, out: bytearray) -> None:
    n = (value << 1) ^ (value >> 63)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _encode_nullable(value: bytes | None, out: bytearray) -> None:
    if value is None:
        out.append(1)  # zigzag(-1)
    else:
        _zigzag_varint(len(value), out)
        out += value


def encode_batch(
    records: Sequence[RecordInput],
    *,
    base_timestamp_ms: int,
    base_offset: int = 0,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    partition_leader_epoch: int = 0,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """Encode one v2 batch with its CRC set.

    ``records`` items are ``NewRecord`` values or ``(key, value, headers)`` tuples, where
    headers are ``(str, bytes | None)`` pairs. Record timestamps default to
    ``base_timestamp_ms``; maxTimestamp is the largest record timestamp. An empty
    sequence gives a batch with zero records (as compaction leaves behind).
    """
    body = bytearray()
    max_timestamp = base_timestamp_ms if not records else -(2**63)
    record = bytearray()
    for offset_delta, item in enumerate(records):
        if isinstance(item, NewRecord):
            key, value, headers, ts = item.key, item.value, item.headers, item.timestamp_ms
        else:
            key, value, headers = item
            ts = None
        timestamp = base_timestamp_ms if ts is None else ts
        max_timestamp = max(max_timestamp, timestamp)
        record.clear()
        record.append(0)
        _zigzag_varint(timestamp - base_timestamp_ms, record)
        _zigzag_varint(offset_delta, record)
        _encode_nullable(key, record)
        _encode_nullable(value, record)
        _zigzag_varint(len(headers), record)
        for header_key, header_value in headers:
            _encode_nullable(header_key.encode(), record)
            _encode_nullable(header_value, record)
        _zigzag_varint(len(record), body)
        body += record
    payload = compress(compression, bytes(body))
    attributes = int(compression)
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    count = len(records)
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        out,
        0,
        base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        CURRENT_MAGIC,
        0,
        attributes,
        max(count - 1, 0),
        base_timestamp_ms,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    out += payload
    _CRC.pack_into(out, _CRC_START - 4, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)
