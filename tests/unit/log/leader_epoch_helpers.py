"""What the leader epoch tests share: batches as a leader writes them and as a follower
copies them, opening a PartitionLog, and reading back the stored epochs and headers.
"""

from __future__ import annotations

from pathlib import Path

from strom.log import LogConfig, PartitionLog
from strom.log.leader_epochs import read_leader_epochs
from strom.protocol.records import (
    BatchHeader,
    NewRecord,
    encode_batch,
    iter_batches,
    replica_batches,
    validate_batches,
)

Batch = tuple[memoryview, BatchHeader]
Entries = list[tuple[int, int]]


def make_batch(count: int = 1, **kwargs: int) -> Batch:
    records = [NewRecord(key=None, value=b"v%d" % i) for i in range(count)]
    data = encode_batch(records, base_timestamp_ms=1_000, **kwargs)  # type: ignore[arg-type]
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def copied(base_offset: int, epochs: list[int], count: int = 2) -> bytes:
    """What a follower fetches: stamped batches from ``base_offset``, one per epoch given."""
    out = b""
    for epoch in epochs:
        records = [NewRecord(key=None, value=b"f%d" % i) for i in range(count)]
        out += encode_batch(
            records,
            base_timestamp_ms=1_000,
            base_offset=base_offset,
            partition_leader_epoch=epoch,
        )
        base_offset += count
    return out


def follow(log: PartitionLog, data: bytes) -> None:
    """Append what a follower fetched, as it is."""
    log.append(
        replica_batches(data), now_ms=0, leader_epoch=0, assign_offsets=False, producer_check=False
    )


def open_log(directory: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(directory, LogConfig(**config), now_ms=0)  # type: ignore[arg-type]


def stored(directory: Path) -> Entries | None:
    cache = read_leader_epochs(directory)
    return None if cache is None else list(cache.entries)


def stored_headers(log: PartitionLog) -> list[BatchHeader]:
    headers: list[BatchHeader] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        result = log.read(offset, 1 << 20)
        headers += [header for _, header in iter_batches(result.read_bytes())]
        offset = result.next_offset
    return headers
