"""The fixed 61-byte header of a Kafka record batch (magic v2), and what the batch code shares.

Layout (all big-endian)::

    baseOffset i64 @0, batchLength i32 @8 (bytes after this field),
    partitionLeaderEpoch i32 @12, magic i8 @16, crc u32 @17 (CRC32C of [21:end]),
    attributes i16 @21, lastOffsetDelta i32 @23, baseTimestamp i64 @27,
    maxTimestamp i64 @35, producerId i64 @43, producerEpoch i16 @51,
    baseSequence i32 @53, recordsCount i32 @57, records @61

Attributes: bits 0-2 the compression codec, bit 3 LogAppendTime, bit 4 transactional,
bit 5 control. The names without ``__all__`` entries (positions, bits, structs, error
helpers) are for the other batch modules, ``records`` and ``record_codec``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeAlias

from kio.schema.errors import ErrorCode

from strom.protocol.compression import Compression, DecompressionError, decompress

__all__ = [
    "BATCH_HEADER_SIZE",
    "CURRENT_MAGIC",
    "LOG_OVERHEAD",
    "MIN_BATCH_LENGTH",
    "BatchHeader",
    "Buffer",
    "RecordsError",
    "TimestampType",
    "iter_batches",
    "parse_batch_header",
]

BATCH_HEADER_SIZE = 61
"""Bytes before the first record of a v2 batch."""
LOG_OVERHEAD = 12
"""baseOffset + batchLength: the bytes not counted by batchLength."""
MIN_BATCH_LENGTH = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
CURRENT_MAGIC = 2

CRC_START = 21  # the CRC covers [attributes .. end]
MAGIC_POS = 16
ATTRIBUTES_POS = 21
MAX_TIMESTAMP_POS = 35
MIN_RECORD_BODY = 6  # attributes, ts delta, offset delta, key len, value len, headers
INT32_MAX = 2**31 - 1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
PREFIX_STRUCT = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
CRC_STRUCT = struct.Struct(">I")
ATTRIBUTES_STRUCT = struct.Struct(">h")
I64_STRUCT = struct.Struct(">q")

assert HEADER_STRUCT.size == BATCH_HEADER_SIZE

Buffer: TypeAlias = bytes | bytearray | memoryview


class TimestampType(IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class RecordsError(ValueError):
    """Bad record data; ``error_code`` is what the client should be told."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


class RecordErrors(RecordsError):
    """Records refused one by one (KIP-467): the whole append is refused, and the client
    is told each bad record's index in its batch and why (Produce's `record_errors`)."""

    def __init__(self, error_code: ErrorCode, errors: list[tuple[int, str]]) -> None:
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        super().__init__(
            error_code,
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]",
        )
        self.errors = errors


def corrupt(message: str) -> RecordsError:
    return RecordsError(ErrorCode.corrupt_message, message)


def invalid(message: str) -> RecordsError:
    return RecordsError(ErrorCode.invalid_record, message)


def decompress_records(codec: int, data: Buffer, max_bytes: int, where: str) -> bytes | bytearray:
    """Decompress a records section; RecordsError when undecodable or too large."""
    try:
        return decompress(codec, data, max_bytes=max_bytes)
    except DecompressionError as exc:
        if exc.too_large:
            raise invalid(f"{where}{exc}") from exc
        raise corrupt(f"{where}{exc}") from exc
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
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_BIT:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; int32 that wraps to 0 after 2**31 - 1."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) % (INT32_MAX + 1)


def parse_batch_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte header at ``pos``. Raises RecordsError if fewer bytes remain."""
    if pos < 0 or len(buf) - pos < BATCH_HEADER_SIZE:
        raise corrupt(f"batch header needs {BATCH_HEADER_SIZE} bytes at position {pos}")
    return BatchHeader(*HEADER_STRUCT.unpack_from(buf, pos))


def iter_batches(buf: Buffer, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each complete v2 batch from ``start``.

    Stops silently at the first batch that is incomplete, has an impossible length or is
    not magic v2; compare the last position + size with ``len(buf)`` to find a torn tail.
    Checks no CRC.
    """
    end = len(buf)
    pos = start
    unpack = HEADER_STRUCT.unpack_from
    while end - pos >= BATCH_HEADER_SIZE:
        header = BatchHeader(*unpack(buf, pos))
        if header.batch_length < MIN_BATCH_LENGTH or header.magic != CURRENT_MAGIC:
            return
        size = header.batch_length + LOG_OVERHEAD
        if pos + size > end:
            return
        yield pos, header
        pos += size
