"""Helpers for the tests of compaction with transactions: keyed transactional batches,
markers, and the two readers - read_uncommitted and read_committed, the latter filtering
with the aborted transactions of each fetch the way Kafka's consumer does."""

from __future__ import annotations

from pathlib import Path

from cleaner_helpers import Batch, Entry

from strom.log import PartitionLog
from strom.log.transactions import AbortedTxn
from strom.protocol.batch_header import parse_batch_header
from strom.protocol.markers import encode_marker_batch, marker_of
from strom.protocol.records import (
    BatchHeader,
    NewRecord,
    Record,
    decode_batch,
    encode_batch,
    iter_batches,
    validate_batches,
)


def txn_records(
    producer_id: int,
    records: list[tuple[bytes, bytes | None]],
    *,
    sequence: int,
    epoch: int = 0,
    timestamp_ms: int = 1_000,
) -> Batch:
    """A transactional batch of a client producer (with sequence numbers)."""
    data = encode_batch(
        [NewRecord(k, v, timestamp_ms=timestamp_ms + i) for i, (k, v) in enumerate(records)],
        base_timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def end_marker(
    producer_id: int, *, commit: bool, epoch: int = 0, timestamp_ms: int = 1_000
) -> Batch:
    view = memoryview(
        encode_marker_batch(
            producer_id=producer_id,
            producer_epoch=epoch,
            commit=commit,
            coordinator_epoch=0,
            timestamp_ms=timestamp_ms,
        )
    )
    return view, parse_batch_header(view)


def fetches(
    log: PartitionLog, end: int, max_bytes: int = 300
) -> list[tuple[list[AbortedTxn], list[tuple[BatchHeader, list[Record]]]]]:
    """What fetches from the log start up to ``end`` return: per fetch, the aborted
    transactions a read_committed fetch lists and the batches."""
    out = []
    offset = log.log_start_offset
    while offset < end:
        result = log.read(offset, max_bytes, max_offset=end)
        if result.size_bytes == 0:
            break
        data = result.read_bytes()
        batches = [
            (header, decode_batch(data[pos : pos + header.size_bytes])[1])
            for pos, header in iter_batches(data)
        ]
        out.append((log.aborted_transactions(offset, result.next_offset), batches))
        offset = result.next_offset
    return out


def read_uncommitted(log: PartitionLog) -> list[Entry]:
    """Every record of a data batch, as a read_uncommitted consumer sees them."""
    return [
        (r.offset, r.key, r.value)
        for _, batches in fetches(log, log.log_end_offset)
        for header, records in batches
        if not header.is_control
        for r in records
    ]


def read_committed(log: PartitionLog) -> list[Entry]:
    """What a read_committed consumer sees: up to the last stable offset, without the
    batches of the aborted transactions each fetch lists (a producer's batches are
    skipped from its aborted transaction's first offset to its ABORT marker)."""
    out: list[Entry] = []
    end = log.last_stable_offset(log.log_end_offset)
    for aborted, batches in fetches(log, end):
        pending = sorted(aborted, key=lambda txn: txn.first_offset)
        skipping: set[int] = set()
        for header, records in batches:
            if header.producer_id >= 0:
                while pending and pending[0].first_offset <= header.last_offset:
                    skipping.add(pending.pop(0).producer_id)
                if header.is_control:
                    if records and not marker_of(records[0].key, records[0].value).commit:
                        skipping.discard(header.producer_id)
                    continue
                if header.is_transactional and header.producer_id in skipping:
                    continue
            if not header.is_control:
                out += [(r.offset, r.key, r.value) for r in records if r.offset < end]
    return out


def stored_batches(log: PartitionLog) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch of every segment file, with its records."""
    out = []
    for info in log.segments:
        data = (log.directory / f"{info.base_offset:020d}.log").read_bytes()
        for pos, header in iter_batches(data):
            out.append((header, decode_batch(data[pos : pos + header.size_bytes])[1]))
    return out


def txn_index_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.txnindex"))
