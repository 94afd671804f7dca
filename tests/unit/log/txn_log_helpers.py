"""What the tests of a log's transactions share: transactional batches, markers, and a
plain model of what the log should know of its transactions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strom.log import LogConfig, PartitionLog
from strom.log.transactions import AbortedTxn
from strom.protocol.batch_header import parse_batch_header
from strom.protocol.markers import encode_marker_batch
from strom.protocol.records import BatchHeader, NewRecord, encode_batch, validate_batches

Batch = tuple[memoryview, BatchHeader]


def txn_batch(
    producer_id: int, count: int = 1, *, epoch: int = 0, sequence: int = -1, key: bytes = b"k"
) -> Batch:
    """A transactional data batch (without sequence unless given, as a coordinator's)."""
    data = encode_batch(
        [NewRecord(key=key, value=b"v%d" % i) for i in range(count)],
        base_timestamp_ms=1_000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def plain_batch(count: int = 1, *, key: bytes = b"k") -> Batch:
    data = encode_batch(
        [NewRecord(key=key, value=b"p%d" % i) for i in range(count)], base_timestamp_ms=1_000
    )
    return validate_batches(data, max_batch_bytes=1 << 20)[0]


def marker(producer_id: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> Batch:
    view = memoryview(
        encode_marker_batch(
            producer_id=producer_id,
            producer_epoch=epoch,
            commit=commit,
            coordinator_epoch=coordinator_epoch,
            timestamp_ms=1_000,
        )
    )
    return view, parse_batch_header(view)


def append(log: PartitionLog, *batches: Batch) -> int:
    """Append as a leader; returns the first offset."""
    return log.append(list(batches), now_ms=0, leader_epoch=0).base_offset


def open_log(path: Path, **config: int) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**config), now_ms=0)  # type: ignore[arg-type]


def all_aborted(log: PartitionLog) -> list[AbortedTxn]:
    return log.aborted_transactions(log.log_start_offset, log.log_end_offset + 1)


@dataclass(frozen=True, slots=True)
class Entry:
    """One batch of the model log: a producer's data (transactional when the producer
    id is >= 0) or a marker."""

    offset: int
    count: int
    producer_id: int
    commit: bool | None = None
    """None: a data batch; else a marker."""


@dataclass(slots=True)
class TxnModel:
    """The batches a log holds, and what replaying them says of transactions."""

    # Transitions: (add | truncate)*; the answers are computed from scratch each time.
    entries: list[Entry] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.entries[-1].offset + self.entries[-1].count if self.entries else 0

    def add(self, producer_id: int, count: int, commit: bool | None) -> None:
        self.entries.append(Entry(self.end, count, producer_id, commit))

    def truncate(self, offset: int) -> None:
        self.entries = [e for e in self.entries if e.offset + e.count <= offset]

    def replay(self) -> tuple[dict[int, int], list[AbortedTxn]]:
        open_txns: dict[int, int] = {}
        aborted: list[AbortedTxn] = []
        for e in self.entries:
            if e.producer_id < 0:
                continue
            if e.commit is None:
                open_txns.setdefault(e.producer_id, e.offset)
                continue
            first = open_txns.pop(e.producer_id, None)
            if first is not None and not e.commit:
                others = list(open_txns.values())
                lso = min(others) if others else e.offset + 1
                aborted.append(AbortedTxn(e.producer_id, first, e.offset, lso))
        return open_txns, aborted

    def last_stable_offset(self, high_watermark: int) -> int:
        open_txns, _ = self.replay()
        return min([high_watermark, *open_txns.values()])


def batches_for(entries: Sequence[Entry]) -> list[Batch]:
    out: list[Batch] = []
    for e in entries:
        if e.producer_id < 0:
            out.append(plain_batch(e.count))
        elif e.commit is None:
            out.append(txn_batch(e.producer_id, e.count))
        else:
            out.append(marker(e.producer_id, commit=e.commit))
    return out
