"""The driver's half of the exactly-once sink: which transactions commit() and abort() end,
and which open transactions both take over afterwards. The broker calls are replaced by
recorders, and the cluster's open transactions by OPEN."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from strom.spark import source, txn_coordinator, txn_writer
from strom.spark.errors import BrokerError
from strom.spark.options import WriteOptions
from strom.spark.txn_coordinator import PendingTransaction

OPTIONS = WriteOptions("h:1", "out", {}, exactly_once=True, transactional_id_prefix=None)
# Open at the brokers when the driver looks: two attempts of write q that no message names,
# a task of write q from before attempts were in the ids, and other writes' transactions.
OPEN = {"q-p1-a0", "q-p3-a2", "q-p5", "q-p1-p0-a0", "qq-p0-a0", "job-p0-a1", "app-txn"}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    recorded: list[tuple[str, Any]] = []

    def end(
        _bootstrap: str, pending: PendingTransaction, *, commit: bool, security: object = None
    ) -> None:
        assert security is None  # the write's options ask for plaintext
        recorded.append(("commit" if commit else "abort", pending.transactional_id))
        if pending.transactional_id.endswith("fenced"):
            raise BrokerError("strom: PRODUCER_FENCED")

    # source imports them when it needs them (planning a query never does).
    monkeypatch.setattr(txn_coordinator, "end_transaction", end)
    monkeypatch.setattr(txn_writer, "fence", lambda _o, tid: recorded.append(("fence", tid)))
    monkeypatch.setattr(
        txn_coordinator, "open_transactions", lambda _bootstrap, _security=None: set(OPEN)
    )
    return recorded


def written(transactional_id: str) -> source.WriteCommit:
    pending = PendingTransaction(transactional_id, 7, 0)
    return source.WriteCommit(10, {"out": 10}, pending=pending, prefix="q")


def test_commit_ends_every_open_transaction_then_aborts_the_others(calls: list[Any]) -> None:
    messages: list[Any] = [written("q-p0-a0"), source.WriteCommit(skipped=True, prefix="q")]
    messages.append(written("q-p2-a1"))
    source._end_transactions(OPTIONS, messages, commit=True)
    assert calls == [
        ("commit", "q-p0-a0"),
        ("commit", "q-p2-a1"),
        ("fence", "q-p1-a0"),  # a failed attempt's worker, still writing after its retry
        ("fence", "q-p3-a2"),
        ("fence", "q-p5"),
    ]


def test_a_refused_commit_fails_the_batch(calls: list[Any]) -> None:
    with pytest.raises(BrokerError, match="PRODUCER_FENCED"):
        source._end_transactions(OPTIONS, [written("q-fenced"), written("q-p1-a0")], commit=True)
    assert calls == [("commit", "q-fenced")]


def test_abort_ends_the_finished_and_takes_over_the_rest(calls: list[Any]) -> None:
    messages: list[Any] = [written("q-fenced"), None, written("q-p2-a0"), None]
    source._end_transactions(OPTIONS, messages, commit=False)
    assert calls == [
        ("abort", "q-fenced"),  # refused: logged, the others still ended
        ("abort", "q-p2-a0"),
        ("fence", "q-p1-a0"),
        ("fence", "q-p3-a2"),
        ("fence", "q-p5"),
    ]


def test_abort_with_no_finished_task_of_a_stream_knows_no_prefix(calls: list[Any]) -> None:
    source._end_transactions(OPTIONS, [None, None], commit=False)
    assert calls == []
    batch = WriteOptions("h:1", "out", {}, exactly_once=True, transactional_id_prefix="job")
    source._end_transactions(batch, [None, None], commit=False)
    assert calls == [("fence", "job-p0-a1")]


def test_a_write_without_exactly_once_has_no_transactions_to_end(
    calls: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    plain = WriteOptions("h:1", "out", {})
    source._end_transactions(plain, [None, source.WriteCommit(10, {"out": 10})], commit=True)
    source._end_transactions(plain, [None], commit=False)
    assert calls == []
    assert not caplog.records  # nothing about transactions left open


def test_the_others_stay_open_when_the_brokers_cannot_list_them(
    calls: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(_bootstrap: str, _security: object = None) -> set[str]:
        raise BrokerError("strom: could not list the open transactions: refused")

    monkeypatch.setattr(txn_coordinator, "open_transactions", unreachable)
    source._end_transactions(OPTIONS, [written("q-p0-a0")], commit=True)
    assert calls == [("commit", "q-p0-a0")]  # committed all the same; the rest time out
