"""Full decoding and encoding of Kafka record batches (magic v2), all four codecs.

For tests, compaction, tools and the internal metadata log; the produce path never
decodes records (see ``records``). Record layout: length varint, attributes i8,
timestampDelta varlong, offsetDelta varint, key (varint length, -1 = null), value
(same), headers count varint, then per header key (varint length, utf-8) and value
(varint length, -1 = null). Varints are zigzag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

import crc32c
from kio.schema.errors import ErrorCode

from strom.protocol.batch_header import (
    BATCH_HEADER_SIZE,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_START,
    CRC_STRUCT,
    CURRENT_MAGIC,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    MIN_RECORD_BODY,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Buffer,
    RecordsError,
    TimestampType,
    corrupt,
    decompress_records,
    invalid,
    parse_batch_header,
)
from strom.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES, Compression, compress

__all__ = ["Header", "NewRecord", "Record", "RecordInput", "decode_batch", "encode_batch"]

Header: TypeAlias = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


class _RecordReader:
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
                raise corrupt("record data ends inside a varint")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return (value >> 1) ^ -(value & 1)
            shift += 7
        raise corrupt(f"varint longer than {max_bytes} bytes")

    def varlong(self) -> int:
        return self.varint(10)

    def take(self, length: int) -> bytes:
        if length < 0 or self.pos + length > self.end:
            raise corrupt(f"record field of {length} bytes overruns its record")
        start = self.pos
        self.pos += length
        return self.data[start : self.pos]

    def nullable(self) -> bytes | None:
        length = self.varint()
        if length == -1:
            return None
        if length < -1:
            raise invalid(f"negative field length {length}")
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
        raise corrupt(
            f"batch length {header.batch_length} does not fit the {len(view)} bytes given"
        )
    body = view[: header.size_bytes]
    if verify_crc and crc32c.crc32c(body[CRC_START:]) != header.crc:
        raise corrupt("CRC mismatch")
    if header.records_count < 0:
        raise invalid(f"negative record count {header.records_count}")
    codec = header.attributes & COMPRESSION_MASK
    raw = body[BATCH_HEADER_SIZE:]
    if codec == Compression.NONE:
        data = bytes(raw)
    else:
        plain = decompress_records(codec, raw, max_decompressed_bytes, "")
        data = plain if isinstance(plain, bytes) else bytes(plain)
    reader = _RecordReader(data)
    log_append = header.attributes & TIMESTAMP_TYPE_BIT
    records: list[Record] = []
    for _ in range(header.records_count):
        records.append(_decode_record(reader, header, bool(log_append)))
    if reader.pos != reader.end:
        raise invalid(f"{reader.end - reader.pos} bytes left after the last record")
    return header, records


def _decode_record(reader: _RecordReader, header: BatchHeader, log_append: bool) -> Record:
    length = reader.varint()
    if length < MIN_RECORD_BODY:
        raise invalid(f"record length {length} is too small")
    record_end = reader.pos + length
    if record_end > reader.end:
        raise corrupt("record overruns its batch")
    reader.end, batch_end = record_end, reader.end
    reader.take(1)  # record attributes: unused in v2
    timestamp_delta = reader.varlong()
    offset_delta = reader.varint()
    key = reader.nullable()
    value = reader.nullable()
    header_count = reader.varint()
    if header_count < 0:
        raise invalid(f"negative header count {header_count}")
    headers: list[Header] = []
    for _ in range(header_count):
        key_length = reader.varint()
        if key_length < 0:
            raise invalid("record header key is null")
        try:
            header_key = reader.take(key_length).decode()
        except UnicodeDecodeError as exc:
            raise invalid("record header key is not utf-8") from exc
        headers.append((header_key, reader.nullable()))
    if reader.pos != record_end:
        raise invalid("record length does not match its fields")
    reader.end = batch_end
    timestamp = header.max_timestamp if log_append else header.base_timestamp + timestamp_delta
    return Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))


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
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
    count = len(records)
    out = bytearray(BATCH_HEADER_SIZE)
    HEADER_STRUCT.pack_into(
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
    CRC_STRUCT.pack_into(out, CRC_START - 4, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
