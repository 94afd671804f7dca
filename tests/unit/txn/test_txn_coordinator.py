"""The transaction coordinator's decisions, driven as the shell drives them: a request,
then the write it asks for made durable (or failed), then the markers written."""

from __future__ import annotations

import itertools
from dataclasses import replace

from kio.schema.errors import ErrorCode

from strom.txn.coordinator import MarkerJob, TxnConfig, TxnCoordinator, TxnResult
from strom.txn.metadata import MAX_EPOCH
from strom.txn.records import TxnLogValue, decode_value, encode_value
from strom.txn.state import TxnState

E = ErrorCode
ORDERS = [("orders", 0), ("orders", 1)]
TX = "payments"


class Harness:
    """A coordinator, a clock, producer ids from 1000 up, and a log of every record
    made durable (each also checked to encode and decode in Kafka's layout)."""

    def __init__(self, **config: int) -> None:
        self.coordinator = TxnCoordinator(TxnConfig(**config))
        self.now_ms = 1_000_000
        self.ids = itertools.count(1000)
        self.log: list[tuple[str, TxnLogValue | None]] = []

    def allocate(self) -> int:
        return next(self.ids)

    def settle(self, result: TxnResult) -> TxnResult:
        """Make the result's write durable; the answer the request gets."""
        if result.write is None:
            return result
        value = result.write.value
        if value is not None:
            assert decode_value(encode_value(value, version=1)) == value
        self.log.append((result.write.txn_id, value))
        answer = self.coordinator.durable(result.write.write_id, self.now_ms)
        assert answer is not None
        return answer

    def init(self, txn_id: str = TX, *, expected: tuple[int, int] | None = None) -> TxnResult:
        return self.settle(
            self.coordinator.init_producer_id(txn_id, 60_000, expected, self.now_ms, self.allocate)
        )

    def add(
        self, pid: int, epoch: int, partitions: list[tuple[str, int]], tv: int = 0
    ) -> TxnResult:
        return self.settle(
            self.coordinator.add_partitions(
                TX, pid, epoch, partitions, self.now_ms, transaction_version=tv
            )
        )

    def end(self, pid: int, epoch: int, commit: bool, tv: int = 0) -> TxnResult:
        return self.settle(
            self.coordinator.end_txn(
                TX, pid, epoch, commit, self.now_ms, self.allocate, transaction_version=tv
            )
        )

    def complete(self, job: MarkerJob | None) -> None:
        assert job is not None
        write = self.coordinator.markers_written(job.txn_id)
        assert write is not None
        self.settle(TxnResult(write=write))

    @property
    def state(self) -> TxnLogValue:
        return self.coordinator.entries[TX].value


def test_a_new_id_gets_a_producer_id_and_epoch_0_once_its_record_is_durable() -> None:
    h = Harness()
    pending = h.coordinator.init_producer_id(TX, 60_000, None, h.now_ms, h.allocate)
    assert pending.write is not None and pending.write.value is not None
    assert pending.write.value.state is TxnState.EMPTY
    assert (
        h.coordinator.add_partitions(TX, 1000, 0, ORDERS, h.now_ms, transaction_version=0).error
        is E.invalid_producer_id_mapping
    ), "nothing is known before the record is durable"
    answer = h.settle(pending)
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (E.none, 1000, 0)


def test_a_commit_adds_partitions_prepares_writes_markers_and_completes() -> None:
    h = Harness()
    h.init()
    assert h.add(1000, 0, ORDERS).error is E.none
    h.now_ms += 50
    assert h.add(1000, 0, [("audit", 0)]).error is E.none
    assert h.state.state is TxnState.ONGOING
    assert h.state.partitions == {*ORDERS, ("audit", 0)}
    assert h.state.start_ms == 1_000_000, "the transaction began with its first partition"

    answer = h.end(1000, 0, commit=True)
    assert answer.error is E.none
    assert answer.markers == MarkerJob(TX, 1000, 0, True, frozenset({*ORDERS, ("audit", 0)}), 0)
    assert h.state.state is TxnState.PREPARE_COMMIT
    # the markers are being written: the id takes no other change meanwhile
    assert (
        h.coordinator.add_partitions(TX, 1000, 0, ORDERS, h.now_ms, transaction_version=0).error
        is E.concurrent_transactions
    )

    h.complete(answer.markers)
    assert h.state.state is TxnState.COMPLETE_COMMIT
    assert h.state.partitions == frozenset()
    assert [v.state for _, v in h.log if v] == [
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.ONGOING,
        TxnState.PREPARE_COMMIT,
        TxnState.COMPLETE_COMMIT,
    ]


def test_adding_partitions_already_in_the_transaction_writes_nothing() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS)
    again = h.coordinator.add_partitions(TX, 1000, 0, ORDERS[:1], h.now_ms, transaction_version=0)
    assert again.error is E.none and again.write is None


def test_a_second_init_fences_the_first_producer() -> None:
    h = Harness()
    h.init()
    assert h.init().producer_epoch == 1
    assert h.add(1000, 0, ORDERS).error is E.producer_fenced
    assert h.end(1000, 0, commit=True).error is E.producer_fenced
    assert h.add(999, 1, ORDERS).error is E.invalid_producer_id_mapping


def test_init_over_an_open_transaction_aborts_it_with_a_bumped_epoch_then_asks_for_a_retry() -> (
    None
):
    h = Harness(transaction_version=1)
    h.init()
    h.add(1000, 0, ORDERS)
    answer = h.init()
    assert answer.error is E.concurrent_transactions
    assert answer.markers is not None and not answer.markers.commit
    assert answer.markers.producer_epoch == 1, "the abort markers fence epoch 0's writes"
    assert h.end(1000, 0, commit=True).error is E.producer_fenced
    h.complete(answer.markers)
    assert h.state.state is TxnState.COMPLETE_ABORT
    retried = h.init()
    assert (retried.error, retried.producer_epoch) == (E.none, 2)


def test_an_open_transaction_times_out_and_its_producer_is_fenced() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS)
    h.now_ms += 60_000
    assert h.coordinator.tick(h.now_ms) == [], "not before the timeout has passed"
    assert h.coordinator.next_deadline_ms() == h.now_ms + 1
    h.now_ms += 1
    [abort] = h.coordinator.tick(h.now_ms)
    answer = h.settle(abort)
    assert answer.markers is not None and not answer.markers.commit
    h.complete(answer.markers)
    assert (h.state.state, h.state.producer_epoch) == (TxnState.COMPLETE_ABORT, 1)
    assert h.end(1000, 0, commit=True).error is E.producer_fenced


def test_an_idle_id_expires_with_a_tombstone() -> None:
    h = Harness(id_expiration_ms=5_000)
    h.init()
    h.now_ms += 4_999
    assert h.coordinator.tick(h.now_ms) == []
    h.now_ms += 1
    [expiry] = h.coordinator.tick(h.now_ms)
    assert expiry.write is not None and expiry.write.value is None
    h.settle(expiry)
    assert TX not in h.coordinator.entries
    assert h.log[-1] == (TX, None)
    assert h.init().producer_id == 1001, "a new life gets a new producer id"


def test_timeouts_are_bounded_by_the_maximum() -> None:
    h = Harness(max_timeout_ms=10_000)
    result = h.coordinator.init_producer_id(TX, 10_001, None, h.now_ms, h.allocate)
    assert result.error is E.invalid_transaction_timeout and result.write is None
    assert h.coordinator.init_producer_id(TX, 0, None, h.now_ms, h.allocate).error is (
        E.invalid_transaction_timeout
    )
    assert h.coordinator.init_producer_id("", 1, None, h.now_ms, h.allocate).error is (
        E.invalid_request
    )


def test_end_of_a_transaction_that_is_not_open_under_version_1() -> None:
    h = Harness()
    h.init()
    assert h.end(1000, 0, commit=True).error is E.invalid_txn_state
    h.add(1000, 0, ORDERS)
    answer = h.end(1000, 0, commit=False)
    assert h.end(1000, 0, commit=False).error is E.concurrent_transactions
    h.complete(answer.markers)
    assert h.end(1000, 0, commit=False).error is E.none, "a retried abort"
    assert h.end(1000, 0, commit=True).error is E.invalid_txn_state


def test_version_2_bumps_the_epoch_at_every_end_and_answers_the_new_one() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS, tv=2)
    answer = h.end(1000, 0, commit=True, tv=2)
    assert (answer.producer_id, answer.producer_epoch) == (1000, 1)
    assert answer.markers is not None and answer.markers.producer_epoch == 1
    assert answer.markers.transaction_version == 2
    h.complete(answer.markers)
    assert (h.state.state, h.state.producer_epoch) == (TxnState.COMPLETE_COMMIT, 1)
    # a retry with the epoch before the bump is answered as it was
    retry = h.end(1000, 0, commit=True, tv=2)
    assert (retry.error, retry.producer_epoch) == (E.none, 1)
    assert h.end(1000, 0, commit=False, tv=2).error is E.invalid_txn_state
    # the next transaction runs on epoch 1
    assert h.add(1000, 1, ORDERS, tv=2).error is E.none


def test_version_2_may_abort_when_no_transaction_began() -> None:
    h = Harness()
    h.init()
    answer = h.end(1000, 0, commit=False, tv=2)
    assert answer.error is E.none and answer.markers is not None
    assert answer.markers.partitions == frozenset()
    assert h.end(1000, 1, commit=False, tv=2).error is E.concurrent_transactions
    h.complete(answer.markers)
    assert h.state.state is TxnState.COMPLETE_ABORT
    assert h.end(1000, 0, commit=True, tv=1).error is E.producer_fenced


def test_version_2_takes_a_new_producer_id_when_the_epochs_run_out() -> None:
    h = Harness()
    h.init()
    h.coordinator.entries[TX].value = replace(h.state, producer_epoch=MAX_EPOCH - 1)
    h.add(1000, MAX_EPOCH - 1, ORDERS, tv=2)
    answer = h.end(1000, MAX_EPOCH - 1, commit=True, tv=2)
    assert (answer.producer_id, answer.producer_epoch) == (1001, 0)
    h.complete(answer.markers)
    assert (h.state.producer_id, h.state.producer_epoch) == (1001, 0)
    assert h.state.previous_producer_id == 1000
    retry = h.end(1000, MAX_EPOCH - 1, commit=True, tv=2)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, 1001, 0)


def test_version_1_init_rotates_the_producer_id_when_the_epochs_run_out() -> None:
    h = Harness()
    h.init()
    h.coordinator.entries[TX].value = replace(h.state, producer_epoch=MAX_EPOCH - 1)
    answer = h.init(expected=(1000, MAX_EPOCH - 1))
    assert (answer.producer_id, answer.producer_epoch) == (1001, 0)


def test_a_recovering_producer_keeps_its_id_and_a_retried_init_is_answered_again() -> None:
    h = Harness()
    h.init()
    bumped = h.init(expected=(1000, 0))
    assert (bumped.producer_id, bumped.producer_epoch) == (1000, 1)
    again = h.init(expected=(1000, 0))
    assert (again.error, again.producer_epoch) == (E.none, 1), "the same answer as before"
    assert h.init(expected=(77, 1)).error is E.producer_fenced


def test_verify_partitions_says_which_are_in_the_open_transaction() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS[:1])
    verdict = h.coordinator.verify_partitions(TX, 1000, 0, ORDERS)
    assert verdict.partition_errors == {
        ORDERS[0]: E.none,
        ORDERS[1]: E.transaction_abortable,
    }
    fenced = h.coordinator.verify_partitions(TX, 1000, 7, ORDERS)
    assert set(fenced.partition_errors.values()) == {E.producer_fenced}
    unknown = h.coordinator.verify_partitions("other", 1000, 0, ORDERS)
    assert set(unknown.partition_errors.values()) == {E.invalid_producer_id_mapping}


def test_a_failed_write_leaves_the_id_as_it_was() -> None:
    h = Harness()
    h.init()
    pending = h.coordinator.add_partitions(TX, 1000, 0, ORDERS, h.now_ms, transaction_version=0)
    assert pending.write is not None
    answer = h.coordinator.failed(pending.write.write_id, E.not_coordinator)
    assert answer is not None and answer.error is E.not_coordinator
    assert h.state.state is TxnState.EMPTY
    assert h.add(1000, 0, ORDERS).error is E.none, "and it takes the next change"


def test_a_new_id_whose_first_record_failed_is_forgotten() -> None:
    h = Harness()
    pending = h.coordinator.init_producer_id(TX, 60_000, None, h.now_ms, h.allocate)
    assert pending.write is not None
    h.coordinator.failed(pending.write.write_id, E.not_enough_replicas)
    assert TX not in h.coordinator.entries


def test_a_failed_fence_does_not_bump_the_epoch_twice() -> None:
    h = Harness(transaction_version=1)
    h.init()
    h.add(1000, 0, ORDERS)
    first = h.coordinator.init_producer_id(TX, 60_000, None, h.now_ms, h.allocate)
    assert first.write is not None and first.write.value is not None
    assert first.write.value.producer_epoch == 1
    h.coordinator.failed(first.write.write_id, E.not_enough_replicas)
    second = h.coordinator.init_producer_id(TX, 60_000, None, h.now_ms, h.allocate)
    assert second.write is not None and second.write.value is not None
    assert second.write.value.producer_epoch == 1


def test_a_failed_completion_stays_owed() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS)
    answer = h.end(1000, 0, commit=True)
    assert answer.markers is not None
    write = h.coordinator.markers_written(TX)
    assert write is not None
    h.coordinator.failed(write.write_id, E.not_enough_replicas)
    h.complete(answer.markers)
    assert h.state.state is TxnState.COMPLETE_COMMIT


def test_a_new_coordinator_writes_the_markers_of_prepared_transactions_again() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS)
    h.end(1000, 0, commit=False)
    replayed = TxnCoordinator(TxnConfig())
    for txn_id, value in h.log:
        replayed.load(txn_id, value)
    [job] = replayed.loaded(h.now_ms)
    assert job == MarkerJob(TX, 1000, 0, False, frozenset(ORDERS), 0)
    write = replayed.markers_written(TX)
    assert write is not None and write.value is not None
    assert write.value.state is TxnState.COMPLETE_ABORT
