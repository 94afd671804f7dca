"""Random sequences of producer requests, timeouts, fences and failed writes against
the transaction coordinator, checked after every step against a reference model that
knows only what a producer may rely on: who the current producer is, which partitions
its open transaction holds, and that every durable change is a legal one."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.txn.coordinator import MarkerJob, TxnConfig, TxnCoordinator, TxnResult
from strom.txn.records import TxnLogValue, decode_value, encode_value
from strom.txn.state import can_follow

TX = "t"
PARTITIONS = [("a", 0), ("a", 1), ("b", 0)]


@dataclass
class Model:
    """What the reference expects."""

    producer: tuple[int, int] | None = None
    """The (producer id, epoch) the last successful InitProducerId or EndTxn gave."""
    stale: set[tuple[int, int]] = field(default_factory=set)
    """Producer ids and epochs handed out before and fenced since."""
    open_partitions: set[tuple[str, int]] = field(default_factory=set)


KINDS = ["init", "add", "add", "add", "end", "end", "markers", "markers", "wait"]
KINDS += ["stale_add", "fail_next"]
ops = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.sets(st.sampled_from(PARTITIONS), min_size=1),
        st.booleans(),
        st.integers(1, 25_000),
    ),
    min_size=4,
    max_size=60,
)


A, B = {PARTITIONS[0]}, {PARTITIONS[2]}


@settings(max_examples=1000, deadline=None)
@given(ops, st.sampled_from([0, 2]))
@example([("init", A, 0, 1), ("add", A, 0, 1), ("add", B, 0, 1), ("end", A, 1, 1)], 0)
@example([("init", A, 0, 1), ("add", A, 0, 1), ("init", A, 0, 1), ("stale_add", A, 0, 1)], 2)
def test_random_transactions_keep_the_producers_promises(
    steps: list[tuple[str, set[tuple[str, int]], bool, int]], version: int
) -> None:
    coordinator = TxnCoordinator(TxnConfig(max_timeout_ms=30_000, transaction_version=2))
    ids = itertools.count(100)
    now_ms = 0
    model = Model()
    committed: TxnLogValue | None = None
    fail_next = False
    jobs: list[MarkerJob] = []

    def allocate() -> int:
        return next(ids)

    def settle(result: TxnResult) -> TxnResult:
        nonlocal committed, fail_next
        if result.write is None:
            return result
        if fail_next:
            fail_next = False
            answer = coordinator.failed(result.write.write_id, ErrorCode.not_enough_replicas)
            assert answer is not None
            return answer
        value = result.write.value
        assert value is not None
        assert decode_value(encode_value(value, version=1)) == value
        if committed is not None:
            legal = can_follow(
                value.state, committed.state, transaction_version=value.client_transaction_version
            )
            assert legal, (committed.state, value.state)
        committed = value
        answer = coordinator.durable(result.write.write_id, now_ms)
        assert answer is not None
        if answer.markers is not None:
            jobs.append(answer.markers)
        return answer

    def fenced(state_before: Model) -> None:
        if state_before.producer is not None:
            model.stale.add(state_before.producer)
        model.producer = None
        model.open_partitions = set()

    for op, partitions, commit, wait_ms in steps:
        if op == "init":
            result = settle(coordinator.init_producer_id(TX, 20_000, None, now_ms, allocate))
            if result.error is ErrorCode.none:
                if model.producer is not None:
                    model.stale.add(model.producer)
                model.producer = (result.producer_id, result.producer_epoch)
                assert model.producer not in model.stale, "a fenced epoch handed out again"
                model.open_partitions = set()
            elif result.error is ErrorCode.concurrent_transactions and result.markers:
                fenced(model)
        elif op == "add" and model.producer is not None:
            pid, epoch = model.producer
            result = settle(
                coordinator.add_partitions(
                    TX, pid, epoch, partitions, now_ms, transaction_version=version
                )
            )
            if result.error is ErrorCode.none:
                model.open_partitions |= partitions
            else:
                assert result.error in (
                    ErrorCode.concurrent_transactions,
                    ErrorCode.not_enough_replicas,
                    ErrorCode.producer_fenced,
                ), result.error
        elif op == "end" and model.producer is not None:
            pid, epoch = model.producer
            result = settle(
                coordinator.end_txn(
                    TX, pid, epoch, commit, now_ms, allocate, transaction_version=version
                )
            )
            if result.error is ErrorCode.none and result.markers is not None:
                assert result.markers.partitions == model.open_partitions
                assert result.markers.commit == commit
                model.open_partitions = set()
                if version >= 2:
                    model.stale.add(model.producer)
                    model.producer = (result.producer_id, result.producer_epoch)
        elif op == "stale_add":
            for pid, epoch in model.stale:
                refused = coordinator.add_partitions(
                    TX, pid, epoch, PARTITIONS[:1], now_ms, transaction_version=version
                )
                assert refused.error is not ErrorCode.none, "a fenced producer was let in"
                assert refused.write is None
        elif op == "wait":
            now_ms += wait_ms
            for result in coordinator.tick(now_ms):
                before = Model(model.producer, set(model.stale), set(model.open_partitions))
                answer = settle(result)
                if answer.markers is not None:
                    fenced(before)
        elif op == "fail_next":
            fail_next = True
        elif op == "markers" and jobs:
            job = jobs.pop(0)
            write = coordinator.markers_written(job.txn_id)
            if write is not None:
                settle(TxnResult(write=write))
