"""What one stored batch changes in a partition's producers and transactions.

The same steps run for every batch a log takes in, whether a leader appends it, a
follower copies it or a restart replays it: a data batch updates its producer (and a
transactional one opens the producer's transaction), a COMMIT or ABORT marker ends the
producer's transaction (``ProducerStateManager.end_txn``, ``PartitionTxns.on_marker``).
An ABORT that ended a transaction gives the `.txnindex` entry to write.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strom.log.producer_state import ProducerStateManager
from strom.log.transactions import AbortedTxn, PartitionTxns
from strom.protocol.markers import EndTxnMarker, MarkerError, marker_of
from strom.protocol.record_codec import decode_batch
from strom.protocol.records import BatchHeader, RecordsError

__all__ = ["marker_in", "require_marker", "track_batch"]


def marker_in(batch: bytes | memoryview, header: BatchHeader) -> EndTxnMarker | None:
    """The transaction marker a stored control batch holds; None for a batch that is not
    one (a data batch, another control type, an emptied or unreadable control batch)."""
    if not header.is_control or header.producer_id < 0 or header.records_count < 1:
        return None
    try:
        _, records = decode_batch(batch, verify_crc=False)
        return marker_of(records[0].key, records[0].value) if records else None
    except (MarkerError, RecordsError):
        return None


def require_marker(batch: bytes | memoryview, header: BatchHeader) -> EndTxnMarker:
    """The marker of a control batch a leader is about to append: INVALID_RECORD if it
    holds none (a leader writes only markers it built)."""
    marker = marker_in(batch, header)
    if marker is None:
        raise RecordsError(ErrorCode.invalid_record, "control batch without a transaction marker")
    return marker


def track_batch(
    producers: ProducerStateManager,
    txns: PartitionTxns,
    header: BatchHeader,
    base_offset: int,
    timestamp: int,
    marker: EndTxnMarker | None,
) -> AbortedTxn | None:
    """Record a batch stored at `base_offset` (its marker, if a control batch, read with
    `marker_in`). Returns the `.txnindex` entry when it is an ABORT marker that ended a
    transaction."""
    producer_id = header.producer_id
    if producer_id < 0:
        return None
    if header.is_control:
        if marker is None:
            return None
        producers.end_txn(
            producer_id, header.producer_epoch, marker.coordinator_epoch, timestamp, base_offset
        )
        ended = txns.on_marker(producer_id, base_offset, commit=marker.commit)
        return txns.aborted(ended) if ended is not None and ended.aborted else None
    producers.update(header, base_offset, timestamp)
    if header.is_transactional:
        txns.on_batch(producer_id, base_offset)
    return None
