"""The transaction coordinator of the ids of some `__transaction_state` partitions, as a
pure state machine: InitProducerId, AddPartitionsToTxn (and AddOffsetsToTxn, which adds
the group's `__consumer_offsets` partition), its verify-only form (KIP-890), EndTxn, and
the timers (transaction timeouts, id expiry).

Every request returns a `TxnResult` at once: an answer, or a `TxnWrite` (a record for
`__transaction_state`) whose answer waits until the shell reports `durable(write_id)` or
`failed(write_id, error)`. When a PrepareCommit or PrepareAbort is durable the result
carries a `MarkerJob`: the shell writes the COMMIT or ABORT markers to every partition
of the transaction, then calls `markers_written(txn_id)`, which gives the last record of
the transaction (CompleteCommit or CompleteAbort). One change at a time per id (see
`metadata.py`); state changes only when a record is durable, by `TxnEntry.commit`.

Producer ids come from the caller (`allocate`), so the core holds no id blocks; times
come in as `now_ms`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from kio.schema.errors import ErrorCode

from strom.txn.metadata import (
    NO_EPOCH,
    Pending,
    PendingKind,
    TxnEntry,
    added_partitions,
    completed,
    epoch_exhausted,
    fenced_epoch,
    initialised,
    new_value,
    prepared_end,
)
from strom.txn.records import NO_PRODUCER_ID, TxnLogValue
from strom.txn.state import TxnState

__all__ = ["MarkerJob", "TxnConfig", "TxnCoordinator", "TxnResult", "TxnWrite"]

log = logging.getLogger(__name__)

Partitions = frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class TxnConfig:
    max_timeout_ms: int = 900_000
    """`transaction.max.timeout.ms`."""
    id_expiration_ms: int = 604_800_000
    """`transactional.id.expiration.ms`."""
    transaction_version: int = 2
    """The cluster's finalized `transaction.version`: what the coordinator's own aborts
    (timeouts, fences) follow."""


@dataclass(frozen=True, slots=True)
class TxnWrite:
    write_id: int
    txn_id: str
    value: TxnLogValue | None
    """None: a tombstone."""


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Write a COMMIT or ABORT marker for this producer to each partition."""

    txn_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: Partitions
    transaction_version: int


@dataclass(slots=True)
class TxnResult:
    error: ErrorCode = ErrorCode.none
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_EPOCH
    write: TxnWrite | None = None
    """When set, the answer above is the one to give once the write is durable."""
    markers: MarkerJob | None = None
    partition_errors: dict[tuple[str, int], ErrorCode] = field(default_factory=dict)
    """Verify-only AddPartitionsToTxn: each partition's answer."""


@dataclass(slots=True)
class _Waiting:
    """What a write answers once it is durable (or fails)."""

    txn_id: str
    answer: TxnResult
    fence_then_retry: bool = False
    """InitProducerId that fenced an open transaction: answered CONCURRENT_TRANSACTIONS
    once the abort is durable, so the producer retries after it completes."""


class TxnCoordinator:
    def __init__(self, config: TxnConfig) -> None:
        self.config = config
        self.entries: dict[str, TxnEntry] = {}
        self._waiting: dict[int, _Waiting] = {}
        self._next_write_id = 1

    # ------------------------------------------------------------------ InitProducerId

    def init_producer_id(
        self,
        txn_id: str,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        allocate: Callable[[], int],
    ) -> TxnResult:
        """`expected` is the (producer id, epoch) a producer recovering from an error
        sends (InitProducerId v3+), or None for a producer starting."""
        if not txn_id:
            return TxnResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return TxnResult(ErrorCode.invalid_transaction_timeout)
        entry = self.entries.get(txn_id)
        if entry is None:
            entry = TxnEntry(txn_id, new_value(allocate(), timeout_ms, now_ms), durable=False)
            self.entries[txn_id] = entry
        if entry.pending is not None:
            return TxnResult(ErrorCode.concurrent_transactions)
        value = entry.value
        if expected is not None and not self._known_producer(entry, *expected):
            return TxnResult(ErrorCode.producer_fenced)
        if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return TxnResult(ErrorCode.concurrent_transactions)
        if value.state is TxnState.ONGOING:
            return self._fence(entry, now_ms, fence_then_retry=True)
        return self._initialise(entry, timeout_ms, expected, now_ms, allocate)

    @staticmethod
    def _known_producer(entry: TxnEntry, producer_id: int, epoch: int) -> bool:
        """A recovering producer is still this id's producer: the id was just created,
        or it names the current producer id, or the previous one with an exhausted
        epoch (a retry of a rotation whose answer it never got)."""
        value = entry.value
        return (
            value.producer_epoch == NO_EPOCH
            or producer_id == value.producer_id
            or (producer_id == value.previous_producer_id and epoch_exhausted(epoch))
        )

    def _initialise(
        self,
        entry: TxnEntry,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        now_ms: int,
        allocate: Callable[[], int],
    ) -> TxnResult:
        value = entry.value
        expected_epoch = None if expected is None else expected[1]
        if epoch_exhausted(value.producer_epoch) and expected_epoch in (
            None,
            value.producer_epoch,
        ):
            producer_id, epoch = allocate(), 0
            last = value.producer_epoch if expected is not None else NO_EPOCH
        elif expected_epoch is None:
            producer_id, epoch, last = value.producer_id, value.producer_epoch + 1, NO_EPOCH
        elif value.producer_epoch == NO_EPOCH or expected_epoch == value.producer_epoch:
            producer_id, epoch = value.producer_id, value.producer_epoch + 1
            last = value.producer_epoch
        elif expected_epoch == entry.last_producer_epoch:
            # a retry of a bump that succeeded: the same answer again
            producer_id, epoch, last = value.producer_id, value.producer_epoch, expected_epoch
        else:
            return TxnResult(ErrorCode.producer_fenced)
        record = initialised(
            value, producer_id=producer_id, epoch=epoch, timeout_ms=timeout_ms, now_ms=now_ms
        )
        answer = TxnResult(ErrorCode.none, producer_id, epoch)
        return self._write(entry, record, answer, last_producer_epoch=last)

    # ------------------------------------------------------------- AddPartitionsToTxn

    def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[tuple[str, int]],
        now_ms: int,
        *,
        transaction_version: int,
    ) -> TxnResult:
        wanted = frozenset(partitions)
        entry = self._known(txn_id)
        if isinstance(entry, ErrorCode):
            return TxnResult(entry)
        if entry.pending is not None:
            return TxnResult(ErrorCode.concurrent_transactions)
        error = _producer_error(entry.value, producer_id, epoch)
        if error is not ErrorCode.none:
            return TxnResult(error)
        value = entry.value
        if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            return TxnResult(ErrorCode.concurrent_transactions)
        if value.state is TxnState.ONGOING and wanted <= value.partitions:
            return TxnResult(ErrorCode.none)
        record = added_partitions(
            value, wanted, now_ms=now_ms, transaction_version=transaction_version
        )
        last = entry.last_producer_epoch
        return self._write(entry, record, TxnResult(), last_producer_epoch=last)

    def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: Iterable[tuple[str, int]]
    ) -> TxnResult:
        """KIP-890's check before a transactional produce: is each partition in the
        open transaction? TRANSACTION_ABORTABLE for one that is not."""
        wanted = frozenset(partitions)
        entry = self._known(txn_id)
        if isinstance(entry, ErrorCode):
            error = entry
        else:
            error = _producer_error(entry.value, producer_id, epoch)
            if error is ErrorCode.none and entry.value.state in (
                TxnState.PREPARE_COMMIT,
                TxnState.PREPARE_ABORT,
            ):
                error = ErrorCode.concurrent_transactions
        if isinstance(entry, ErrorCode) or error is not ErrorCode.none:
            return TxnResult(error, partition_errors=dict.fromkeys(wanted, error))
        inside = entry.value.partitions
        return TxnResult(
            partition_errors={
                p: ErrorCode.none if p in inside else ErrorCode.transaction_abortable
                for p in wanted
            }
        )

    # ------------------------------------------------------------------------ EndTxn

    def end_txn(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        allocate: Callable[[], int],
        *,
        transaction_version: int,
    ) -> TxnResult:
        entry = self._known(txn_id)
        if isinstance(entry, ErrorCode):
            return TxnResult(entry)
        if transaction_version >= 2:
            if entry.pending is not None:
                return TxnResult(ErrorCode.concurrent_transactions)
            return self._end_v2(entry, producer_id, epoch, commit, now_ms, allocate)
        # before version 2, a fenced producer hears so even while markers are written
        error = _producer_error(entry.value, producer_id, epoch)
        if error is ErrorCode.none and entry.pending is not None:
            error = ErrorCode.concurrent_transactions
        if error is not ErrorCode.none:
            return TxnResult(error)
        state = entry.value.state
        if state is TxnState.ONGOING:
            return self._prepare_end(entry, commit, now_ms, allocate, version=transaction_version)
        return TxnResult(_repeated_end(state, commit, retry=True))

    def _end_v2(
        self,
        entry: TxnEntry,
        producer_id: int,
        epoch: int,
        commit: bool,
        now_ms: int,
        allocate: Callable[[], int],
    ) -> TxnResult:
        """Version 2 bumps the epoch at every end, so a retried EndTxn comes with the
        epoch before the bump (or, after a rotation, the previous producer id with the
        last epoch it had)."""
        value = entry.value
        retry_after_rotation = (
            producer_id == value.previous_producer_id
            and epoch_exhausted(epoch)
            and value.producer_epoch == 0
        )
        retry_after_bump = value.producer_epoch == epoch + 1
        retry = retry_after_bump or retry_after_rotation
        if producer_id != value.producer_id and not retry_after_rotation:
            return TxnResult(ErrorCode.invalid_producer_id_mapping)
        state = value.state
        if state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            valid_epoch = retry_after_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid_epoch = retry or epoch == value.producer_epoch
        else:
            valid_epoch = epoch == value.producer_epoch
        if not valid_epoch:
            return TxnResult(ErrorCode.producer_fenced)
        if state is TxnState.ONGOING:
            return self._prepare_end(entry, commit, now_ms, allocate, version=2)
        if state is TxnState.EMPTY and not commit:
            return self._prepare_end(entry, False, now_ms, allocate, version=2, nothing_added=True)
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            finished_commit = state is TxnState.COMPLETE_COMMIT
            if retry and commit == finished_commit:
                return TxnResult(ErrorCode.none, value.producer_id, value.producer_epoch)
            if not retry and not commit:
                # a producer unsure whether its transaction began aborts anyway
                return self._prepare_end(
                    entry, False, now_ms, allocate, version=2, nothing_added=True
                )
            return TxnResult(ErrorCode.invalid_txn_state)
        return TxnResult(_repeated_end(state, commit, retry=False))

    def _prepare_end(
        self,
        entry: TxnEntry,
        commit: bool,
        now_ms: int,
        allocate: Callable[[], int],
        *,
        version: int,
        nothing_added: bool = False,
        epoch_fence: bool = False,
    ) -> TxnResult:
        next_producer_id = NO_PRODUCER_ID
        if version >= 2 and epoch_exhausted(entry.value.producer_epoch):
            next_producer_id = allocate()
        record = prepared_end(
            entry.value,
            commit=commit,
            transaction_version=version,
            next_producer_id=next_producer_id,
            now_ms=now_ms,
            no_partitions_added=nothing_added,
        )
        if version >= 2:
            last = entry.value.producer_epoch
        elif epoch_fence:
            record, last = replace(record, producer_epoch=fenced_epoch(entry.value)), NO_EPOCH
        else:
            last = entry.last_producer_epoch
        return self._write(entry, record, TxnResult(), last)

    # -------------------------------------------------------------- fences and timers

    def _fence(self, entry: TxnEntry, now_ms: int, *, fence_then_retry: bool) -> TxnResult:
        """Abort the open transaction with a bumped epoch, so that its producer's next
        request is refused PRODUCER_FENCED. Version 2's abort bumps the epoch itself."""
        result = self._prepare_end(
            entry,
            False,
            now_ms,
            _no_allocation,
            version=self.config.transaction_version,
            epoch_fence=True,
        )
        if result.write is not None and fence_then_retry:
            self._waiting[result.write.write_id].fence_then_retry = True
        return result

    def tick(self, now_ms: int) -> list[TxnResult]:
        """Both timers at once: `abort_timed_out`, then `expire_ids`."""
        return self.abort_timed_out(now_ms) + self.expire_ids(now_ms)

    def abort_timed_out(self, now_ms: int) -> list[TxnResult]:
        """Abort transactions open longer than their timeout (each result carries its
        write): Kafka's check every `transaction.abort.timed.out.transaction.cleanup
        .interval.ms`."""
        results: list[TxnResult] = []
        for entry in self._idle():
            value = entry.value
            if value.state is TxnState.ONGOING and value.start_ms + value.timeout_ms < now_ms:
                log.info(
                    "Aborting transaction of %r: open since %d ms, timeout %d ms",
                    entry.txn_id,
                    value.start_ms,
                    value.timeout_ms,
                )
                results.append(self._fence(entry, now_ms, fence_then_retry=False))
        return results

    def expire_ids(self, now_ms: int) -> list[TxnResult]:
        """Remove ids idle longer than `transactional.id.expiration.ms` (each result
        carries its tombstone): Kafka's check every `transaction.remove.expired
        .transaction.cleanup.interval.ms`."""
        expiration_ms = self.config.id_expiration_ms
        return [
            self._expire(entry)
            for entry in self._idle()
            if entry.value.state.expirable and entry.value.last_update_ms + expiration_ms <= now_ms
        ]

    def _idle(self) -> list[TxnEntry]:
        """The ids with no change under way: the timers' candidates."""
        return [e for e in self.entries.values() if e.pending is None and e.durable]

    def next_deadline_ms(self) -> int | None:
        deadlines = [
            _deadline(entry.value, self.config.id_expiration_ms)
            for entry in self.entries.values()
            if entry.pending is None and entry.durable
        ]
        found = [d for d in deadlines if d is not None]
        return min(found) if found else None

    def _expire(self, entry: TxnEntry) -> TxnResult:
        write_id = self._new_write_id()
        entry.pending = Pending(PendingKind.WRITE, None, write_id)
        self._waiting[write_id] = _Waiting(entry.txn_id, TxnResult())
        return TxnResult(write=TxnWrite(write_id, entry.txn_id, None))

    # ------------------------------------------------------------ writes and markers

    def durable(self, write_id: int, now_ms: int) -> TxnResult | None:
        """The write is durable: its id's state moves on. Returns the answer to the
        request that waited for it (None if none did), with a MarkerJob when the write
        prepared the end of a transaction."""
        waiting = self._waiting.pop(write_id, None)
        if waiting is None:
            return None
        entry = self.entries.get(waiting.txn_id)
        if entry is None or entry.pending is None or entry.pending.write_id != write_id:
            return None
        pending = entry.pending
        if pending.value is None:
            del self.entries[entry.txn_id]
            log.info("Transactional id %r expired", entry.txn_id)
            return waiting.answer
        entry.commit(pending.value, pending.last_producer_epoch)
        answer = waiting.answer
        value = entry.value
        if value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT):
            answer.markers = self._markers(entry, now_ms)
            owed = entry.pending.value if entry.pending is not None else None
            if waiting.fence_then_retry:
                answer.error = ErrorCode.concurrent_transactions
            elif owed is not None and value.client_transaction_version >= 2:
                answer.producer_id, answer.producer_epoch = owed.producer_id, owed.producer_epoch
        return answer

    def _markers(self, entry: TxnEntry, now_ms: int) -> MarkerJob:
        value = entry.value
        entry.pending = Pending(
            PendingKind.MARKERS, completed(value, now_ms=now_ms), 0, entry.last_producer_epoch
        )
        return MarkerJob(
            entry.txn_id,
            value.producer_id,
            value.producer_epoch,
            value.state is TxnState.PREPARE_COMMIT,
            value.partitions,
            value.client_transaction_version,
        )

    def markers_written(self, txn_id: str) -> TxnWrite | None:
        """Every marker of the transaction is written: the CompleteCommit or
        CompleteAbort record to write now (None if nothing is owed)."""
        entry = self.entries.get(txn_id)
        if entry is None or entry.pending is None or entry.pending.kind is PendingKind.WRITE:
            return None
        owed = entry.pending.value
        write_id = self._new_write_id()
        entry.pending = Pending(
            PendingKind.COMPLETION, owed, write_id, entry.pending.last_producer_epoch
        )
        self._waiting[write_id] = _Waiting(txn_id, TxnResult())
        return TxnWrite(write_id, txn_id, owed)

    def failed(self, write_id: int, error: ErrorCode) -> TxnResult | None:
        """The write did not become durable: the id stays as it was (a completion stays
        owed: `markers_written` gives it again). The answer, with `error`, to the request
        that waited."""
        waiting = self._waiting.pop(write_id, None)
        if waiting is None:
            return None
        entry = self.entries.get(waiting.txn_id)
        if entry is not None and entry.pending is not None and entry.pending.write_id == write_id:
            pending = entry.pending
            if pending.kind is PendingKind.COMPLETION:
                entry.pending = Pending(
                    PendingKind.MARKERS, pending.value, 0, pending.last_producer_epoch
                )
            elif not entry.durable:
                del self.entries[entry.txn_id]  # a new id whose first record failed
            else:
                entry.pending = None
        return TxnResult(error)

    # ------------------------------------------------------------------------ loading

    def load(self, txn_id: str, value: TxnLogValue | None) -> None:
        """Replay one record of `__transaction_state` (a tombstone removes the id)."""
        if value is None:
            self.entries.pop(txn_id, None)
        else:
            self.entries[txn_id] = TxnEntry(txn_id, value)

    def loaded(self, now_ms: int) -> list[MarkerJob]:
        """After a load: the transactions whose end was prepared but not completed; their
        markers are written again (a partition ignores a marker it has)."""
        return [
            self._markers(entry, now_ms)
            for entry in self.entries.values()
            if entry.pending is None
            and entry.value.state in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
        ]

    def forget(self, txn_ids: Iterable[str]) -> list[int]:
        """Drop these ids: their `__transaction_state` partition is no longer led here (its
        next leader loads them). Returns the writes that were under way for them: their
        requests get NOT_COORDINATOR, and `durable` or `failed` for them does nothing."""
        gone = set(txn_ids)
        for txn_id in gone:
            self.entries.pop(txn_id, None)
        dropped = sorted(w for w, waiting in self._waiting.items() if waiting.txn_id in gone)
        for write_id in dropped:
            del self._waiting[write_id]
        return dropped

    # ------------------------------------------------------------------------ helpers

    def _write(
        self,
        entry: TxnEntry,
        record: TxnLogValue,
        answer: TxnResult,
        last_producer_epoch: int,
    ) -> TxnResult:
        write_id = self._new_write_id()
        entry.pending = Pending(PendingKind.WRITE, record, write_id, last_producer_epoch)
        self._waiting[write_id] = _Waiting(entry.txn_id, answer)
        return TxnResult(
            answer.error,
            answer.producer_id,
            answer.producer_epoch,
            write=TxnWrite(write_id, entry.txn_id, record),
        )

    def _known(self, txn_id: str) -> TxnEntry | ErrorCode:
        """The id's entry, once its first record is durable; else the error to answer."""
        if not txn_id:
            return ErrorCode.invalid_request
        entry = self.entries.get(txn_id)
        if entry is None or not entry.durable:
            return ErrorCode.invalid_producer_id_mapping
        return entry

    def _new_write_id(self) -> int:
        write_id = self._next_write_id
        self._next_write_id += 1
        return write_id


def _producer_error(value: TxnLogValue, producer_id: int, epoch: int) -> ErrorCode:
    if producer_id != value.producer_id:
        return ErrorCode.invalid_producer_id_mapping
    if epoch != value.producer_epoch:
        return ErrorCode.producer_fenced
    return ErrorCode.none


def _repeated_end(state: TxnState, commit: bool, *, retry: bool) -> ErrorCode:
    """EndTxn for a transaction that is not open: a repeat of the end already under way
    or done, or a wrong one."""
    if state is TxnState.PREPARE_COMMIT and commit:
        return ErrorCode.concurrent_transactions
    if state is TxnState.PREPARE_ABORT and not commit:
        return ErrorCode.concurrent_transactions
    if retry and state is TxnState.COMPLETE_COMMIT and commit:
        return ErrorCode.none
    if retry and state is TxnState.COMPLETE_ABORT and not commit:
        return ErrorCode.none
    return ErrorCode.invalid_txn_state


def _deadline(value: TxnLogValue, expiration_ms: int) -> int | None:
    if value.state is TxnState.ONGOING:
        return value.start_ms + value.timeout_ms + 1
    if value.state.expirable:
        return value.last_update_ms + expiration_ms
    return None


def _no_allocation() -> int:
    raise AssertionError("a fence under transaction version 2 cannot need a new producer id")
