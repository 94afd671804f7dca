"""What a cleaning pass keeps of each batch: the rules of ``cleaner``'s docstring applied
to one batch at a time, in offset order. Pure: ``cleaner_build`` reads the batches and
writes what this returns.
"""

from __future__ import annotations

from strom.log.cleaner import CleaningAborted, CleaningPlan
from strom.log.cleaner_txns import PassTxns
from strom.log.offset_map import OffsetMap
from strom.log.record_filter import (
    RecordFields,
    batch_records,
    delete_horizon_ms,
    empty_batch,
    placeholder_batch,
    rewrite_batch,
    with_delete_horizon,
)
from strom.log.transactions import AbortedTxn
from strom.log.txn_tracking import marker_in
from strom.protocol.records import BatchHeader, RecordsError

__all__ = ["BatchCleaner", "records_of"]


def records_of(data: memoryview, header: BatchHeader) -> tuple[bytes, list[RecordFields]]:
    """A batch's records section and records; CleaningAborted if they cannot be read."""
    try:
        return batch_records(data, header)
    except RecordsError as exc:
        raise CleaningAborted(f"cannot clean batch at offset {header.base_offset}: {exc}") from exc


class BatchCleaner:
    """The batches of one pass, cleaned in offset order, and what the pass removed."""

    # Transitions: created for a pass once its key map is built -> (clean |
    #   take_txn_entries after each cleaned segment)* -> its counters are read.
    __slots__ = (
        "map_end",
        "markers_removed",
        "offsets",
        "pending_since_ms",
        "plan",
        "records_removed",
        "stale_snapshots_to",
        "tombstones_removed",
        "txn_entries",
        "txns",
    )

    def __init__(
        self, plan: CleaningPlan, offsets: OffsetMap, map_end: int, txns: PassTxns
    ) -> None:
        self.plan = plan
        self.offsets = offsets
        self.map_end = map_end
        self.txns = txns
        self.records_removed = self.tombstones_removed = self.markers_removed = 0
        self.pending_since_ms = -1
        """Earliest time a kept tombstone was first cleaned, or a kept marker of an
        emptied transaction got its delete horizon (minus delete.retention.ms); -1: none."""
        self.stale_snapshots_to = -1
        """Offset of the last marker removed: producer state snapshots at or below it may
        hold its transaction as open, which the log no longer ends."""
        self.txn_entries: list[AbortedTxn] = []

    def take_txn_entries(self) -> list[AbortedTxn]:
        """The `.txnindex` entries of the markers cleaned since the last call."""
        entries, self.txn_entries = self.txn_entries, []
        return entries

    def clean(
        self, header: BatchHeader, data: memoryview, is_last: bool
    ) -> bytes | memoryview | None:
        """The batch as it stays in the cleaned segment, or None if it goes. ``is_last``:
        it is the last batch of its cleaned segment."""
        if header.is_control:
            return self._clean_control(header, data, is_last)
        kept: bytes | memoryview | None = data
        if header.base_offset < self.map_end:
            if header.records_count == 0:
                kept = None
            elif self.txns.is_aborted(header):
                self.records_removed += header.records_count
                kept = None
            else:
                kept = self._clean_records(header, data)
        live = kept is not None
        if kept is None:  # no record left
            kept, live = self._emptied(header, data, is_last)
        if header.is_transactional:
            self.txns.on_data(header, live)
        return kept

    def _emptied(
        self, header: BatchHeader, data: memoryview, is_last: bool
    ) -> tuple[bytes | memoryview | None, bool]:
        """What stays of a batch without records, and whether it stays as its producer's
        (and transaction's) batch: its producer's last batch stays, empty; the last batch
        of a cleaned segment becomes a placeholder of its offsets; any other goes."""
        if header.producer_id >= 0 and header.last_offset in self.plan.producer_last_offsets:
            return (data if header.records_count == 0 else empty_batch(header)), True
        if not is_last:
            return None, False
        if header.records_count == 0 and header.producer_id < 0 and not header.is_transactional:
            return data, False
        return placeholder_batch(header), False

    def _pending(self, since_ms: int) -> None:
        if self.pending_since_ms < 0 or since_ms < self.pending_since_ms:
            self.pending_since_ms = since_ms

    def _clean_control(
        self, header: BatchHeader, data: memoryview, is_last: bool
    ) -> bytes | memoryview | None:
        marker = marker_in(data, header)
        below_map_end = header.base_offset < self.map_end
        if marker is None:  # an emptied marker goes; another control batch stays
            emptied = header.records_count == 0 and below_map_end and not is_last
            return None if emptied else data
        live, entry = self.txns.on_marker(header, marker.commit)
        if entry is not None:
            self.txn_entries.append(entry)
        if live or not below_map_end:
            return data
        # Its transaction has no batch left: the marker goes once its delete horizon,
        # stamped on it by the first pass that finds it so, has passed - unless it is its
        # producer's last batch (it holds the producer's epochs for a replay).
        plan = self.plan
        producer_last = header.last_offset in plan.producer_last_offsets
        horizon_ms = delete_horizon_ms(header)
        kept: bytes | memoryview = data
        if horizon_ms is None:
            horizon_ms = plan.now_ms + plan.delete_retention_ms
            kept = with_delete_horizon(header, *records_of(data, header), horizon_ms)
        elif plan.now_ms >= horizon_ms and not producer_last:
            self.markers_removed += 1
            self.stale_snapshots_to = max(self.stale_snapshots_to, header.base_offset)
            return placeholder_batch(header) if is_last else None
        if not producer_last:
            self._pending(horizon_ms - plan.delete_retention_ms)
        return kept

    def _clean_records(self, header: BatchHeader, data: memoryview) -> bytes | memoryview | None:
        """The batch with the records that stay; None if none does."""
        plan = self.plan
        now_ms = plan.now_ms
        records_data, records = records_of(data, header)
        kept: list[RecordFields] = []
        base = header.base_offset
        map_end = self.map_end
        latest_of = self.offsets.latest
        for record in records:
            offset = base + record[2]
            key = record[4]
            if offset >= map_end or key is None:
                kept.append(record)
                continue
            latest = latest_of(key)
            if latest is not None and offset < latest:
                self.records_removed += 1
                continue
            if record[5]:
                if offset >= plan.dirty_start:
                    first_cleaned_ms = now_ms
                else:
                    first_cleaned_ms = plan.checkpoint.first_cleaned_ms(offset, now_ms)
                    if now_ms >= first_cleaned_ms + plan.delete_retention_ms:
                        self.records_removed += 1
                        self.tombstones_removed += 1
                        continue
                self._pending(first_cleaned_ms)
            kept.append(record)
        if len(kept) == len(records):
            return data
        if not kept:
            return None
        return rewrite_batch(header, records_data, kept)
