"""What the PartitionLog tests share: batches of given sizes and timestamps, opening a
log, and reading all its records back.
"""

from __future__ import annotations

from pathlib import Path

from strom.log import LogConfig, PartitionLog
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


def make_batch(
    count: int = 1,
    *,
    value_size: int = 10,
    timestamp_ms: int = 1_000,
    timestamps: list[int] | None = None,
    compression: Compression = Compression.NONE,
) -> Batch:
    records = [
        NewRecord(
            key=None,
            value=bytes([i % 256]) * value_size,
            timestamp_ms=None if timestamps is None else timestamps[i],
        )
        for i in range(count)
    ]
    data = encode_batch(records, base_timestamp_ms=timestamp_ms, compression=compression)
    return validate_batches(data, max_batch_bytes=1 << 30)[0]


def read_all(log: PartitionLog, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record, reading the way a consumer does."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None]] = []
    while offset < log.log_end_offset:
        result = log.read(offset, 300)
        assert result.size_bytes > 0
        data = result.read_bytes()
        for pos, header in iter_batches(data):
            for record in decode_batch(data[pos : pos + header.size_bytes])[1]:
                if record.offset >= offset:
                    out.append((record.offset, record.value))
        assert result.next_offset > offset
        offset = result.next_offset
    return out


def open_log(path: Path, now_ms: int = 0, **config: int) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**config), now_ms=now_ms)  # type: ignore[arg-type]
