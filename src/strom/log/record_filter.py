"""The records inside stored batches, as compaction sees them: keys, tombstones, rewrites.

The produce path never decodes records (see ``strom.protocol.records``); the cleaner and
the key check of compacted topics have to. They need less than ``records.decode_batch``
builds - per record only its byte span, offset and timestamp deltas, key and whether the
value is null - and the cleaner must rewrite a batch keeping each surviving record's
bytes exactly as stored (offset and timestamp deltas included), which
``records.encode_batch`` cannot do (it numbers records from 0). So this small scanner is
written by hand; decompression and compression are ``strom.protocol.compression``'s.

A rewritten batch keeps its base offset, last offset delta, base timestamp, producer id,
epoch and base sequence, partition leader epoch and attributes (so its codec): its last
offset and sequence stay what the producer wrote, as a consumer and a producer-state
replay expect. Only the record count, the records, the length, the max timestamp (the
largest surviving record's, for CreateTime batches) and the CRC change. An empty batch
(no records left) is written uncompressed; a placeholder (``placeholder_batch``) keeps
only the offsets.

A delete horizon (Kafka's KIP-534) is stamped on a batch the way Kafka does: attribute
bit 6 set and the base timestamp replaced by the horizon, each record's timestamp delta
rebased so that its timestamp stays what it was (``with_delete_horizon``). The cleaner
stamps it on the markers of transactions left without records (see ``cleaner``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import replace

import crc32c
from kio.schema.errors import ErrorCode

from strom.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    Compression,
    DecompressionError,
    compress,
    decompress,
)
from strom.protocol.records import (
    BATCH_HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    RecordErrors,
    RecordsError,
    TimestampType,
)

__all__ = [
    "DELETE_HORIZON_BIT",
    "NULL_KEY_MESSAGE",
    "RecordFields",
    "batch_records",
    "check_keys",
    "delete_horizon_ms",
    "empty_batch",
    "placeholder_batch",
    "rewrite_batch",
    "scan_records",
    "with_delete_horizon",
]

RecordFields = tuple[int, int, int, int, bytes | None, bool]
"""(start, end, offset delta, timestamp delta, key, is tombstone) of one record; start
and end delimit its bytes (length prefix included) in the batch's records section."""

NULL_KEY_MESSAGE = "Compacted topic cannot accept message without key"

_HEADER = struct.Struct(">qiibIhiqqqhii")
_CRC = struct.Struct(">I")
_CRC_START = 21
_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_BIT = 0x08
DELETE_HORIZON_BIT = 0x40
_MIN_RECORD_BODY = 6


def _corrupt(message: str) -> RecordsError:
    return RecordsError(ErrorCode.corrupt_message, message)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint (or varlong) at ``pos``: (value, position after it)."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    value = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise _corrupt("varint longer than 10 bytes")


def scan_records(data: bytes, count: int) -> list[RecordFields]:
    """The ``count`` records filling ``data`` (a batch's uncompressed records section).

    Raises RecordsError when they do not parse or do not fill it exactly. The cleaner's
    hot loop: one- and two-byte varints (the usual ones) are decoded inline.
    """
    records: list[RecordFields] = []
    append = records.append
    end = len(data)
    pos = 0
    try:
        for _ in range(count):
            start = pos
            b = data[pos]
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif data[pos + 1] < 0x80:
                n = (b & 0x7F) | (data[pos + 1] << 7)
                length, pos = (n >> 1) ^ -(n & 1), pos + 2
            else:
                length, pos = _varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_BODY or record_end > end:
                raise _corrupt(f"record of {length} bytes at {start} does not fit its batch")
            p = pos + 1  # after the attributes byte
            b = data[p]
            if b < 0x80:
                timestamp_delta, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                timestamp_delta, p = _varint(data, p)
            b = data[p]
            if b < 0x80:
                offset_delta, p = (b >> 1) ^ -(b & 1), p + 1
            elif data[p + 1] < 0x80:
                n = (b & 0x7F) | (data[p + 1] << 7)
                offset_delta, p = (n >> 1) ^ -(n & 1), p + 2
            else:
                offset_delta, p = _varint(data, p)
            b = data[p]
            if b < 0x80:
                key_length, p = (b >> 1) ^ -(b & 1), p + 1
            else:
                key_length, p = _varint(data, p)
            key: bytes | None = None
            if key_length >= 0:
                key = data[p : p + key_length]
                p += key_length
            elif key_length != -1:
                raise _corrupt(f"negative key length {key_length}")
            b = data[p]
            if b == 1:  # zigzag -1: a null value
                tombstone, p = True, p + 1
            else:
                if b < 0x80:
                    value_length, p = (b >> 1) ^ -(b & 1), p + 1
                elif data[p + 1] < 0x80:
                    n = (b & 0x7F) | (data[p + 1] << 7)
                    value_length, p = (n >> 1) ^ -(n & 1), p + 2
                else:
                    value_length, p = _varint(data, p)
                if value_length < 0 or p + value_length > record_end:
                    raise _corrupt(f"record at {start} has a bad value length")
                tombstone = False
            if p > record_end:
                raise _corrupt(f"record at {start} overruns its length")
            append((start, record_end, offset_delta, timestamp_delta, key, tombstone))
            pos = record_end
    except IndexError:
        raise _corrupt("records end inside a record") from None
    if pos != end:
        raise _corrupt(f"{end - pos} bytes left after the last record")
    return records


def batch_records(
    batch: bytes | memoryview, header: BatchHeader, *, verify_crc: bool = True
) -> tuple[bytes, list[RecordFields]]:
    """A stored batch's records section (decompressed) and its records."""
    view = memoryview(batch)[: header.size_bytes]
    if verify_crc and crc32c.crc32c(view[_CRC_START:]) != header.crc:
        raise _corrupt(f"CRC mismatch in batch at offset {header.base_offset}")
    raw = view[BATCH_HEADER_SIZE:]
    codec = header.attributes & _COMPRESSION_MASK
    if codec == Compression.NONE:
        data = bytes(raw)
    else:
        try:
            plain = decompress(codec, raw, max_bytes=DEFAULT_MAX_DECOMPRESSED_BYTES)
        except (DecompressionError, ValueError) as exc:
            raise _corrupt(f"batch at offset {header.base_offset}: {exc}") from exc
        data = plain if isinstance(plain, bytes) else bytes(plain)
    return data, scan_records(data, header.records_count)


def check_keys(batches: Sequence[tuple[memoryview, BatchHeader]], where: str) -> None:
    """Refuse batches holding a record without a key, as a compacted topic must:
    RecordErrors (INVALID_RECORD) naming each such record by its index (counted over
    the batches, as Kafka's one batch per partition counts it) with Kafka's message
    (`where` is the topic partition). The batches were validated already; their CRCs are
    not checked again."""
    errors: list[tuple[int, str]] = []
    index = 0
    for batch, header in batches:
        if not header.is_control:
            _, records = batch_records(batch, header, verify_crc=False)
            for i, record in enumerate(records):
                if record[4] is None:
                    errors.append((index + i, f"{NULL_KEY_MESSAGE} in topic partition {where}"))
        index += header.records_count
    if errors:
        raise RecordErrors(ErrorCode.invalid_record, errors)


def _zigzag(value: int, out: bytearray) -> None:
    n = (value << 1) ^ (value >> 63)
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _pack(
    header: BatchHeader,
    attributes: int,
    max_timestamp: int,
    count: int,
    payload: bytes,
    base_timestamp: int | None = None,
) -> bytes:
    out = bytearray(BATCH_HEADER_SIZE)
    _HEADER.pack_into(
        out,
        0,
        header.base_offset,
        BATCH_HEADER_SIZE - LOG_OVERHEAD + len(payload),
        header.partition_leader_epoch,
        2,
        0,
        attributes,
        header.last_offset_delta,
        header.base_timestamp if base_timestamp is None else base_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    out += payload
    _CRC.pack_into(out, _CRC_START - 4, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def rewrite_batch(header: BatchHeader, data: bytes, kept: list[RecordFields]) -> bytes:
    """``header``'s batch with only the ``kept`` records of its records section ``data``,
    compressed with the batch's own codec."""
    if not kept:
        return empty_batch(header)
    body = b"".join([data[record[0] : record[1]] for record in kept])
    codec = header.attributes & _COMPRESSION_MASK
    payload = body if codec == Compression.NONE else compress(Compression(codec), body)
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.base_timestamp + max(record[3] for record in kept)
    return _pack(header, header.attributes, max_timestamp, len(kept), payload)


def empty_batch(header: BatchHeader) -> bytes:
    """``header``'s batch with no records: it keeps the batch's offsets, producer id,
    epoch and sequences (and so the producer's state) in the log."""
    attributes = header.attributes & ~_COMPRESSION_MASK
    return _pack(header, attributes, header.max_timestamp, 0, b"")


def placeholder_batch(header: BatchHeader) -> bytes:
    """An empty batch holding only ``header``'s offsets, leader epoch and timestamps: no
    producer, not transactional, not control. What keeps a cleaned segment ending where
    the next begins, without a producer's batch or a transaction's in the log."""
    anonymous = replace(header, producer_id=-1, producer_epoch=-1, base_sequence=-1)
    attributes = header.attributes & _TIMESTAMP_TYPE_BIT
    return _pack(anonymous, attributes, header.max_timestamp, 0, b"")


def delete_horizon_ms(header: BatchHeader) -> int | None:
    """The delete horizon stamped on a batch, or None if it has none."""
    return header.base_timestamp if header.attributes & DELETE_HORIZON_BIT else None


def with_delete_horizon(
    header: BatchHeader, data: bytes, records: list[RecordFields], horizon_ms: int
) -> bytes:
    """``header``'s batch (records section ``data``, its ``records``) with every record
    and the delete horizon ``horizon_ms`` stamped on it: the base timestamp becomes the
    horizon, each record's timestamp delta is rebased so its timestamp stays."""
    shift = header.base_timestamp - horizon_ms
    body = bytearray()
    record = bytearray()
    for start, end, _, timestamp_delta, _, _ in records:
        _, attributes_pos = _varint(data, start)
        _, after_timestamp = _varint(data, attributes_pos + 1)
        record.clear()
        record.append(data[attributes_pos])
        _zigzag(timestamp_delta + shift, record)
        record += data[after_timestamp:end]
        _zigzag(len(record), body)
        body += record
    payload = compress(Compression(header.attributes & _COMPRESSION_MASK), bytes(body))
    attributes = header.attributes | DELETE_HORIZON_BIT
    return _pack(header, attributes, header.max_timestamp, len(records), payload, horizon_ms)
