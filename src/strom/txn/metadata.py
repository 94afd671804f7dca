"""One transactional id at its coordinator, and the new states its changes produce.

A `TxnEntry` holds the committed state of an id (`value`: what the last durable record
of `__transaction_state` says), the producer epoch before the last bump (which the log
does not hold, so it is -1 after a load, as in Kafka), and at most one pending change:
a record being written, or a transaction whose markers are being written. While a change
is pending, every other request for the id is answered CONCURRENT_TRANSACTIONS.

The functions below compute the record a change writes; none of them changes an entry.
The entry changes only in `TxnEntry.commit`, when a record is durable.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

from strom.txn.records import NO_PRODUCER_ID, TxnLogValue
from strom.txn.state import TxnState

__all__ = [
    "MAX_EPOCH",
    "NO_EPOCH",
    "Pending",
    "PendingKind",
    "TxnEntry",
    "added_partitions",
    "completed",
    "epoch_exhausted",
    "fenced_epoch",
    "prepared_end",
]

NO_EPOCH = -1
MAX_EPOCH = 0x7FFF
"""The coordinator keeps the last epoch to itself, so it can always fence a producer;
a client's epoch is at most MAX_EPOCH - 1 ("exhausted": the next bump takes a new id)."""


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


class PendingKind(Enum):
    WRITE = "write"
    """A record is being written; `Pending.value` is what it says."""
    MARKERS = "markers"
    """PrepareCommit or PrepareAbort is durable and the markers are being written;
    `Pending.value` is the CompleteCommit or CompleteAbort record owed afterwards."""
    COMPLETION = "completion"
    """The markers are written and that record is being written."""


@dataclass(frozen=True, slots=True)
class Pending:
    kind: PendingKind
    value: TxnLogValue | None
    """None: a tombstone (the id expires)."""
    write_id: int = 0
    last_producer_epoch: int = NO_EPOCH


@dataclass(slots=True)
class TxnEntry:
    txn_id: str
    value: TxnLogValue
    last_producer_epoch: int = NO_EPOCH
    pending: Pending | None = None
    durable: bool = True
    """False for an id created by InitProducerId whose first record is not durable yet."""

    def commit(self, value: TxnLogValue, last_producer_epoch: int) -> None:
        self.value = value
        self.last_producer_epoch = last_producer_epoch
        self.pending = None
        self.durable = True


def new_value(producer_id: int, timeout_ms: int, now_ms: int) -> TxnLogValue:
    """A new id: a fresh producer id with no epoch yet (the first InitProducerId bumps it
    to 0)."""
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=NO_EPOCH,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        last_update_ms=now_ms,
        start_ms=-1,
    )


def initialised(
    value: TxnLogValue, *, producer_id: int, epoch: int, timeout_ms: int, now_ms: int
) -> TxnLogValue:
    """InitProducerId's record: EMPTY with this producer id and epoch, no transaction."""
    return replace(
        value,
        producer_id=producer_id,
        previous_producer_id=value.producer_id,
        next_producer_id=NO_PRODUCER_ID,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        state=TxnState.EMPTY,
        partitions=frozenset(),
        start_ms=-1,
        last_update_ms=now_ms,
    )


def added_partitions(
    value: TxnLogValue,
    partitions: frozenset[tuple[str, int]],
    *,
    now_ms: int,
    transaction_version: int,
) -> TxnLogValue:
    """AddPartitionsToTxn's record: ONGOING with the partitions added; a transaction
    that was not open starts now."""
    starting = value.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
    return replace(
        value,
        state=TxnState.ONGOING,
        partitions=value.partitions | partitions,
        start_ms=now_ms if starting else value.start_ms,
        last_update_ms=now_ms,
        previous_producer_id=value.producer_id,
        client_transaction_version=transaction_version,
    )


def fenced_epoch(value: TxnLogValue) -> int:
    """The epoch that fences the current producer: one more than its own. (A fence whose
    record failed changed nothing, so the next one bumps from the same epoch: the
    failed epoch was never handed out.)"""
    return min(value.producer_epoch + 1, MAX_EPOCH)


def prepared_end(
    value: TxnLogValue,
    *,
    commit: bool,
    transaction_version: int,
    next_producer_id: int,
    now_ms: int,
    no_partitions_added: bool,
) -> TxnLogValue:
    """EndTxn's first record, PrepareCommit or PrepareAbort. Transaction version 2 bumps
    the epoch with every transaction (the markers carry the new one, so a zombie's late
    writes are fenced) and records the client's version; versions 0 and 1 keep the epoch
    and record version 0, as Kafka does."""
    epoch = value.producer_epoch
    if transaction_version >= 2 and value.producer_epoch < MAX_EPOCH:
        epoch = value.producer_epoch + 1
    return replace(
        value,
        state=TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
        producer_epoch=epoch,
        next_producer_id=next_producer_id,
        start_ms=now_ms if no_partitions_added else value.start_ms,
        last_update_ms=now_ms,
        previous_producer_id=value.producer_id,
        client_transaction_version=transaction_version if transaction_version >= 2 else 0,
    )


def completed(value: TxnLogValue, *, now_ms: int) -> TxnLogValue:
    """The record written once every marker is: CompleteCommit or CompleteAbort, no
    partitions. If version 2 used up the epochs of this producer id, the next one (chosen
    when the end was prepared) takes over at epoch 0."""
    rotate = value.client_transaction_version >= 2 and value.next_producer_id != NO_PRODUCER_ID
    return replace(
        value,
        state=(
            TxnState.COMPLETE_COMMIT
            if value.state is TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        ),
        producer_id=value.next_producer_id if rotate else value.producer_id,
        previous_producer_id=value.producer_id,
        producer_epoch=0 if rotate else value.producer_epoch,
        next_producer_id=NO_PRODUCER_ID,
        partitions=frozenset(),
        last_update_ms=now_ms,
    )
