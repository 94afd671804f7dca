"""The transactions of one partition: which are open, where the last stable offset is,
and which were aborted (the `.txnindex` of each segment). A pure core, no I/O.

A transaction begins on a partition with the first transactional batch of its
producer and ends with that producer's COMMIT or ABORT marker. Its records become
"stable" (readable by read_committed consumers) once it ended and its marker is below
the high watermark, so:

    last stable offset = min(high watermark, first offset of every transaction that is
                             open, or ended with its marker not yet replicated)

Transitions of a producer's transaction on the partition:

    (none) --transactional batch--> open(first offset)
    open --marker at offset m--> ended(first, m) --high watermark > m--> (none)

An aborted transaction is written to the segment's `.txnindex` when its marker is
appended, in Kafka's layout: per entry int16 version (0), int64 producer id, int64
first offset, int64 last offset (the marker's), int64 last stable offset when it was
aborted. read_committed fetches list the aborted transactions their range overlaps,
so consumers drop those records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = [
    "ABORTED_TXN_SIZE",
    "AbortedTxn",
    "EndedTxn",
    "PartitionTxns",
    "TxnIndexError",
    "decode_txn_index",
    "encode_aborted",
    "overlapping",
]

_ENTRY = struct.Struct(">hqqqq")
ABORTED_TXN_SIZE = _ENTRY.size
_ENTRY_VERSION = 0


class TxnIndexError(ValueError):
    """A `.txnindex` that cannot be trusted."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    """The ABORT marker's offset."""
    last_stable_offset: int
    """The partition's last stable offset when the marker was appended."""


@dataclass(frozen=True, slots=True)
class EndedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class PartitionTxns:
    """Open and recently ended transactions of one partition, by producer id."""

    __slots__ = ("_ended", "_open")

    def __init__(self) -> None:
        self._open: dict[int, int] = {}
        self._ended: list[EndedTxn] = []
        """Ended, marker not yet below the high watermark; in marker order."""

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of its open transaction."""
        return dict(self._open)

    def on_batch(self, producer_id: int, first_offset: int) -> None:
        """A transactional data batch of `producer_id` was appended at `first_offset`."""
        self._open.setdefault(producer_id, first_offset)

    def on_marker(self, producer_id: int, offset: int, *, commit: bool) -> EndedTxn | None:
        """A COMMIT or ABORT marker of `producer_id` was appended at `offset`. Returns
        the transaction it ended (None: the producer had none open on this partition,
        as when a coordinator writes the markers of a transaction again)."""
        first = self._open.pop(producer_id, None)
        if first is None:
            return None
        ended = EndedTxn(producer_id, first, offset, aborted=not commit)
        self._ended.append(ended)
        return ended

    def aborted(self, ended: EndedTxn) -> AbortedTxn:
        """The `.txnindex` entry of an aborted transaction that just ended. Its last
        stable offset is Kafka's: the first offset of the earliest transaction still open
        (another producer's), else the offset after the marker - where a read_committed
        reader may stop looking for more aborted transactions."""
        firsts = [first for p, first in self._open.items() if p != ended.producer_id]
        lso = min(firsts) if firsts else ended.last_offset + 1
        return AbortedTxn(ended.producer_id, ended.first_offset, ended.last_offset, lso)

    @property
    def idle(self) -> bool:
        """No transaction open, none ended above the high watermark: the common case,
        asked at every fetch of every partition."""
        return not self._open and not self._ended

    def first_unstable_offset(self) -> int | None:
        if self.idle:
            return None
        firsts = [*self._open.values(), *(t.first_offset for t in self._ended)]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget ended transactions whose markers are replicated now (cheap when none
        are: this runs at every fetch)."""
        ended = self._ended
        replicated = 0
        while replicated < len(ended) and ended[replicated].last_offset < high_watermark:
            replicated += 1
        if replicated:
            del ended[:replicated]

    def truncate(self, end_offset: int) -> None:
        """The log was cut back to `end_offset` (a follower's truncation): transactions
        that began at or after it are gone; those whose marker is gone are open again."""
        self._open = {p: first for p, first in self._open.items() if first < end_offset}
        for ended in self._ended:
            if ended.first_offset < end_offset <= ended.last_offset:
                self._open.setdefault(ended.producer_id, ended.first_offset)
        self._ended = [t for t in self._ended if t.last_offset < end_offset]

    def restore(self, open_transactions: dict[int, int]) -> None:
        """Start from a producer-state snapshot's open transactions."""
        self._open = dict(open_transactions)
        self._ended = []

    def ended(self) -> list[EndedTxn]:
        """Ended transactions whose markers are not yet below the high watermark."""
        return list(self._ended)

    def keep_ended(self, earlier: Iterable[EndedTxn], end_offset: int) -> None:
        """After a rebuild from a snapshot (a truncation to `end_offset`): the ended
        transactions known before it whose markers are still in the log stay unstable
        until the high watermark passes them, though the rebuild began after them."""
        known = set(self._ended)
        for txn in earlier:
            reopened = self._open.get(txn.producer_id, end_offset) <= txn.last_offset
            if txn.last_offset < end_offset and txn not in known and not reopened:
                self._ended.append(txn)
        self._ended.sort(key=lambda txn: txn.last_offset)


def encode_aborted(entries: Iterable[AbortedTxn]) -> bytes:
    return b"".join(
        _ENTRY.pack(
            _ENTRY_VERSION, e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset
        )
        for e in entries
    )


def decode_txn_index(data: bytes) -> list[AbortedTxn]:
    """Every entry of a `.txnindex` file. A torn last entry (a crash mid-write) is
    dropped; anything else that does not parse raises TxnIndexError."""
    whole = len(data) - len(data) % ABORTED_TXN_SIZE
    entries: list[AbortedTxn] = []
    last = -1
    for pos in range(0, whole, ABORTED_TXN_SIZE):
        version, producer_id, first, last_offset, lso = _ENTRY.unpack_from(data, pos)
        if version != _ENTRY_VERSION:
            raise TxnIndexError(f"aborted transaction entry of version {version} at {pos}")
        if not first <= last_offset or last_offset <= last:
            raise TxnIndexError(f"aborted transaction entry out of order at {pos}")
        entries.append(AbortedTxn(producer_id, first, last_offset, lso))
        last = last_offset
    return entries


def overlapping(
    entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int
) -> Iterator[AbortedTxn]:
    """The aborted transactions a fetch of [fetch_offset, upper_bound_offset) must list:
    those with records in that range."""
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
            yield entry
