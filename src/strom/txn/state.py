"""The states of a transaction at its coordinator, and which changes between them are legal.

    EMPTY                no transaction open (a new id, or one just initialised)
    ONGOING              partitions or offsets were added; the producer is writing
    PREPARE_COMMIT       EndTxn(commit) is durable; markers are being written
    PREPARE_ABORT        EndTxn(abort), a timeout or a fence is durable; markers too
    COMPLETE_COMMIT      every marker is written; the id can start a new transaction
    COMPLETE_ABORT       the same, after an abort
    DEAD                 the id expired and is being removed (a tombstone follows)
    PREPARE_EPOCH_FENCE  the epoch was bumped to fence a producer; an abort follows

Legal changes (a state may follow only the states listed for it):

    EMPTY                <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT      (InitProducerId)
    ONGOING              <- ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
    PREPARE_COMMIT       <- ONGOING
    PREPARE_ABORT        <- ONGOING, PREPARE_EPOCH_FENCE, and, for transaction
                            version 2 clients, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
                            (a client unsure whether its transaction began may abort)
    COMPLETE_COMMIT      <- PREPARE_COMMIT
    COMPLETE_ABORT       <- PREPARE_ABORT
    DEAD                 <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
    PREPARE_EPOCH_FENCE  <- ONGOING

The numbers are the `TransactionStatus` byte of Kafka's transaction log, and the names
are what DescribeTransactions and ListTransactions report.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["PREVIOUS_STATES", "TxnState", "can_follow"]


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def wire_name(self) -> str:
        """The name Kafka's admin APIs use: `PrepareCommit`, `CompleteAbort`..."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def expirable(self) -> bool:
        """An id idle in this state may expire (`transactional.id.expiration.ms`)."""
        return self in _EXPIRABLE

    @property
    def in_progress(self) -> bool:
        """A transaction is open or being completed: markers are still owed."""
        return self in _IN_PROGRESS


_EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
_IN_PROGRESS = frozenset({TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})

PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: _EXPIRABLE,
    TxnState.ONGOING: _EXPIRABLE | {TxnState.ONGOING},
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: _EXPIRABLE | {TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE},
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: _EXPIRABLE,
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}
"""For each state, the states it may follow (the table in the module docstring)."""

_ABORT_WITHOUT_TRANSACTION = _EXPIRABLE


def can_follow(new: TxnState, old: TxnState, *, transaction_version: int) -> bool:
    """Whether a transaction in state `old` may move to `new`. A PREPARE_ABORT straight
    from a finished or empty transaction is legal only for transaction version 2
    clients, which abort when they are unsure whether their transaction began."""
    if old not in PREVIOUS_STATES[new]:
        return False
    if new is TxnState.PREPARE_ABORT and old in _ABORT_WITHOUT_TRANSACTION:
        return transaction_version >= 2
    return True
