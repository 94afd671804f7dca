"""What a cleaning pass knows of transactions, as it reads the log in offset order.

A pass cleans only below the last stable offset, so every transaction with a batch in
its range has ended, and the aborted ones are the `.txnindex` entries (producer id,
first offset, ABORT marker's offset) of the log's segments: a transactional data batch
of producer p at offset o is aborted when an entry of p has first <= o <= last (a
producer has one transaction at a time, so its entries' ranges never overlap); any
other transactional data batch belongs to a committed transaction.

While the pass writes its cleaned segments, ``PassTxns`` follows each producer's
current transaction: whether a batch of it stays in the log (``on_data``), and, when
its marker is read (``on_marker``), whether the transaction still has a batch - else
the marker may go, after its delete horizon - and which `.txnindex` entry stays: an
ABORT's, while its transaction keeps a batch (Kafka keeps the same ones; a replay of
the cleaned log rebuilds exactly those). Pure: no I/O.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from strom.log.transactions import AbortedTxn
from strom.protocol.records import BatchHeader

__all__ = ["PassTxns"]


class PassTxns:
    """The transactions of one pass's range."""

    # Transitions: created from the aborted entries -> (is_aborted | on_data | on_marker)*,
    # batches in offset order. A producer's transaction: (none) -on_data-> current
    # (with or without a kept batch) -on_marker-> (none).
    __slots__ = ("_by_marker", "_live", "_ranges")

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        by_producer: dict[int, list[AbortedTxn]] = {}
        self._by_marker: dict[tuple[int, int], AbortedTxn] = {}
        for entry in aborted:
            by_producer.setdefault(entry.producer_id, []).append(entry)
            self._by_marker[(entry.producer_id, entry.last_offset)] = entry
        self._ranges: dict[int, tuple[list[int], list[AbortedTxn]]] = {}
        for producer_id, entries in by_producer.items():
            entries.sort(key=lambda e: e.first_offset)
            self._ranges[producer_id] = ([e.first_offset for e in entries], entries)
        self._live: dict[int, bool] = {}

    def is_aborted(self, header: BatchHeader) -> bool:
        """Whether a data batch belongs to an aborted transaction."""
        if not header.is_transactional or header.is_control:
            return False
        ranges = self._ranges.get(header.producer_id)
        if ranges is None:
            return False
        firsts, entries = ranges
        i = bisect_right(firsts, header.base_offset) - 1
        return i >= 0 and header.base_offset <= entries[i].last_offset

    def on_data(self, header: BatchHeader, kept: bool) -> None:
        """A transactional data batch was cleaned; ``kept``: it stays (perhaps empty)."""
        producer_id = header.producer_id
        self._live[producer_id] = kept or self._live.get(producer_id, False)

    def on_marker(self, header: BatchHeader, commit: bool) -> tuple[bool, AbortedTxn | None]:
        """The marker of a producer's transaction was read: (whether the transaction keeps
        a batch in the log, the `.txnindex` entry that stays with the marker, if any)."""
        live = self._live.pop(header.producer_id, False)
        if not live or commit:
            return live, None
        return True, self._by_marker.get((header.producer_id, header.base_offset))
