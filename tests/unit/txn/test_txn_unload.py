"""The coordinator's timers one at a time, and forgetting the ids of a partition that is no
longer led here (with the writes under way for them)."""

from __future__ import annotations

from test_txn_coordinator import ORDERS, TX, Harness

from strom.txn.state import TxnState


def test_the_two_timers_act_apart() -> None:
    h = Harness(id_expiration_ms=5_000)
    h.init("idle")
    h.init()
    h.add(1001, 0, ORDERS)
    h.now_ms += 60_001
    assert [r.write.txn_id for r in h.coordinator.expire_ids(h.now_ms) if r.write] == ["idle"]
    [abort] = h.coordinator.abort_timed_out(h.now_ms)
    assert abort.write is not None and abort.write.txn_id == TX
    assert abort.write.value is not None
    assert abort.write.value.state is TxnState.PREPARE_ABORT
    assert h.coordinator.abort_timed_out(h.now_ms) == [], "one change at a time"
    assert h.coordinator.expire_ids(h.now_ms) == [], "the expiry is under way too"


def test_forgotten_ids_are_gone_and_their_writes_answer_nobody() -> None:
    h = Harness()
    h.init()
    h.init("other")
    pending = h.coordinator.add_partitions(TX, 1000, 0, ORDERS, h.now_ms, transaction_version=0)
    assert pending.write is not None
    assert h.coordinator.forget([TX, "unknown"]) == [pending.write.write_id]
    assert TX not in h.coordinator.entries and "other" in h.coordinator.entries
    assert h.coordinator.durable(pending.write.write_id, h.now_ms) is None
    assert h.coordinator.failed(pending.write.write_id, pending.error) is None
    assert h.coordinator.forget([]) == []


def test_a_forgotten_id_loads_again_from_its_records() -> None:
    h = Harness()
    h.init()
    h.add(1000, 0, ORDERS)
    h.coordinator.forget([TX])
    for txn_id, value in h.log:
        h.coordinator.load(txn_id, value)
    assert h.state.state is TxnState.ONGOING and h.state.partitions == frozenset(ORDERS)
    assert h.coordinator.loaded(h.now_ms) == []
