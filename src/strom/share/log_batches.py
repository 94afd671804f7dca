"""The log's record batches as a share-partition sees them: which offsets hold records
(with their timestamps), and the batches a ShareFetch answers. Pure: bytes in.

A control batch (a transaction marker) holds no record to deliver: its offset is left
out, so the core archives it as a gap. ShareFetch answers whole batches, as Kafka does;
those wholly outside the acquired offsets are dropped (Kafka's ShareFetchUtils slices
the same way), and the consumer keeps only the acquired records of the rest.
"""

from __future__ import annotations

from strom.protocol.batch_header import BATCH_HEADER_SIZE, parse_batch_header
from strom.protocol.record_codec import decode_batch
from strom.share.values import AcquiredRecords, FetchedRecord

__all__ = ["batch_spans", "fetched_records", "slice_batches"]


def batch_spans(data: bytes) -> list[tuple[int, int]]:
    """(position, size) of each whole batch in `data` (a partial last one left out)."""
    out = []
    view = memoryview(data)
    pos = 0
    while pos + BATCH_HEADER_SIZE <= len(data):
        size = parse_batch_header(view, pos).size_bytes
        if size <= 0 or pos + size > len(data):
            break
        out.append((pos, size))
        pos += size
    return out


def fetched_records(
    data: bytes, *, timestamps: bool = True, limit: int | None = None, from_offset: int = 0
) -> list[FetchedRecord]:
    """The records (offset, timestamp) at `from_offset` or above of the whole batches in
    `data` (whose first batch may start below it), control batches left out, in offset
    order; at most `limit` of them.

    Without `timestamps` (no delivery delay reads them) a batch whose offsets have no
    gap (its record count is its offset span: never compacted) is read from its header
    alone, each record given the batch's max timestamp; the others are decoded."""
    records: list[FetchedRecord] = []
    view = memoryview(data)
    for pos, size in batch_spans(data):
        if limit is not None and len(records) >= limit:
            break
        header = parse_batch_header(view, pos)
        if header.is_control:
            continue
        if not timestamps and header.records_count == header.last_offset_delta + 1:
            stamp = header.max_timestamp
            records.extend(
                FetchedRecord(offset, stamp)
                for offset in range(max(header.base_offset, from_offset), header.last_offset + 1)
            )
            continue
        _, decoded = decode_batch(view[pos : pos + size])
        records.extend(
            FetchedRecord(r.offset, r.timestamp) for r in decoded if r.offset >= from_offset
        )
    return records if limit is None else records[:limit]


def slice_batches(data: bytes, acquired: tuple[AcquiredRecords, ...]) -> bytes:
    """The batches of `data` that hold an acquired offset."""
    if not acquired:
        return b""
    first = acquired[0].first_offset
    last = acquired[-1].last_offset
    view = memoryview(data)
    kept = bytearray()
    for pos, size in batch_spans(data):
        header = parse_batch_header(view, pos)
        if header.last_offset < first or header.base_offset > last:
            continue
        kept += view[pos : pos + size]
    return bytes(kept)
