"""Helpers for the compaction tests: keyed batches, full reads, one cleaning pass."""

from __future__ import annotations

from pathlib import Path

from strom.log import LogConfig, PartitionLog
from strom.log.cleaner import CleaningResult
from strom.log.cleaner_build import build_cleaned
from strom.protocol.records import (
    BatchHeader,
    Compression,
    NewRecord,
    decode_batch,
    encode_batch,
    iter_batches,
    validate_batches,
)

Batch = tuple[memoryview, BatchHeader]
Entry = tuple[int, bytes | None, bytes | None]
"""(offset, key, value) of one record."""

COMPACT = {"cleanup_policy": "compact", "min_cleanable_dirty_ratio": 0.0}


def keyed_batch(
    records: list[tuple[bytes | None, bytes | None]],
    *,
    timestamp_ms: int = 1_000,
    compression: Compression = Compression.NONE,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> Batch:
    data = encode_batch(
        [
            NewRecord(key, value, timestamp_ms=timestamp_ms + i)
            for i, (key, value) in enumerate(records)
        ],
        base_timestamp_ms=timestamp_ms,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    return validate_batches(data, max_batch_bytes=1 << 30)[0]


def open_log(path: Path, now_ms: int = 0, **config: object) -> PartitionLog:
    settings: dict[str, object] = {**COMPACT, **config}
    return PartitionLog.open(path, LogConfig(**settings), now_ms=now_ms)  # type: ignore[arg-type]


def put(
    log: PartitionLog,
    key: bytes | None,
    value: bytes | None,
    *,
    now_ms: int = 0,
    compression: Compression = Compression.NONE,
) -> int:
    batch = keyed_batch([(key, value)], timestamp_ms=now_ms, compression=compression)
    return log.append([batch], now_ms=now_ms, leader_epoch=0).base_offset


def read_all(log: PartitionLog, max_bytes: int = 700) -> list[Entry]:
    """Every record, read the way a consumer does (from the log start, fetch by fetch)."""
    offset = log.log_start_offset
    out: list[Entry] = []
    while offset < log.log_end_offset:
        result = log.read(offset, max_bytes)
        assert result.next_offset > offset, (offset, result)
        data = result.read_bytes()
        for pos, header in iter_batches(data):
            for record in decode_batch(data[pos : pos + header.size_bytes])[1]:
                if record.offset >= offset:
                    out.append((record.offset, record.key, record.value))
        offset = result.next_offset
    return out


def stored_headers(log: PartitionLog) -> list[BatchHeader]:
    headers: list[BatchHeader] = []
    for info in log.segments:
        data = (log.directory / f"{info.base_offset:020d}.log").read_bytes()
        headers += [header for _, header in iter_batches(data)]
    return headers


def clean(
    log: PartitionLog, now_ms: int, *, map_budget_bytes: int = 1 << 30
) -> CleaningResult | None:
    """One whole pass (plan, build, swap); None when there was nothing to plan."""
    plan = log.cleaning_plan(now_ms, map_budget_bytes=map_budget_bytes)
    if plan is None:
        return None
    result = build_cleaned(plan)
    assert log.swap_cleaned(result, now_ms=now_ms)
    return result


def latest_by_key(entries: list[Entry]) -> dict[bytes | None, Entry]:
    latest: dict[bytes | None, Entry] = {}
    for entry in entries:
        latest[entry[1]] = entry
    return latest
