"""The driver's half of the exactly-once sink: which transactions commit() and abort() end,
and which task ids abort() takes over. The broker calls are replaced by recorders."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from strom.spark import source
from strom.spark.errors import BrokerError
from strom.spark.options import WriteOptions
from strom.spark.txn_coordinator import PendingTransaction

OPTIONS = WriteOptions("h:1", "out", {}, exactly_once=True, transactional_id_prefix=None)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    recorded: list[tuple[str, Any]] = []

    def end(_bootstrap: str, pending: PendingTransaction, *, commit: bool) -> None:
        recorded.append(("commit" if commit else "abort", pending.transactional_id))
        if pending.transactional_id.endswith("fenced"):
            raise BrokerError("strom: PRODUCER_FENCED")

    monkeypatch.setattr(source, "end_transaction", end)
    monkeypatch.setattr(source, "fence", lambda _o, tid: recorded.append(("fence", tid)))
    return recorded


def written(transactional_id: str) -> source.WriteCommit:
    pending = PendingTransaction(transactional_id, 7, 0)
    return source.WriteCommit(10, {"out": 10}, pending=pending, prefix="q")


def test_commit_ends_every_open_transaction_and_skips_the_written(calls: list[Any]) -> None:
    messages: list[Any] = [written("q-p0"), source.WriteCommit(skipped=True, prefix="q")]
    messages.append(written("q-p2"))
    source._end_transactions(OPTIONS, messages, commit=True)
    assert calls == [("commit", "q-p0"), ("commit", "q-p2")]


def test_a_refused_commit_fails_the_batch(calls: list[Any]) -> None:
    with pytest.raises(BrokerError, match="PRODUCER_FENCED"):
        source._end_transactions(OPTIONS, [written("q-fenced"), written("q-p1")], commit=True)
    assert calls == [("commit", "q-fenced")]


def test_abort_ends_the_finished_and_takes_over_the_failed(calls: list[Any]) -> None:
    messages: list[Any] = [written("q-fenced"), None, written("q-p2"), None]
    source._end_transactions(OPTIONS, messages, commit=False)
    assert calls == [
        ("abort", "q-fenced"),  # refused: logged, the others still ended
        ("abort", "q-p2"),
        ("fence", "q-p1"),
        ("fence", "q-p3"),
    ]


def test_abort_with_no_finished_task_of_a_stream_knows_no_prefix(calls: list[Any]) -> None:
    source._end_transactions(OPTIONS, [None, None], commit=False)
    assert calls == []
    batch = WriteOptions("h:1", "out", {}, exactly_once=True, transactional_id_prefix="job")
    source._end_transactions(batch, [None, None], commit=False)
    assert calls == [("fence", "job-p0"), ("fence", "job-p1")]
