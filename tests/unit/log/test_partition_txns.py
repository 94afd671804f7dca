"""A partition's transactions: the last stable offset and the aborted-transaction index."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.log.transactions import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    PartitionTxns,
    TxnIndexError,
    decode_txn_index,
    encode_aborted,
    overlapping,
)


def test_the_last_stable_offset_waits_for_open_and_unreplicated_transactions() -> None:
    txns = PartitionTxns()
    assert txns.last_stable_offset(high_watermark=10) == 10
    txns.on_batch(7, 10)
    txns.on_batch(7, 12)  # the same transaction goes on
    txns.on_batch(8, 11)
    assert txns.open_transactions() == {7: 10, 8: 11}
    assert txns.last_stable_offset(high_watermark=14) == 10
    ended = txns.on_marker(7, 14, commit=True)
    assert ended is not None and (ended.first_offset, ended.last_offset) == (10, 14)
    assert txns.last_stable_offset(high_watermark=14) == 10, "its marker is not replicated"
    txns.on_high_watermark(15)
    assert txns.last_stable_offset(high_watermark=15) == 11
    aborted = txns.on_marker(8, 15, commit=False)
    assert aborted is not None and aborted.aborted
    assert txns.aborted(aborted) == AbortedTxn(8, 11, 15, 16), "nothing else open"
    txns.on_high_watermark(16)
    assert txns.last_stable_offset(high_watermark=16) == 16


def test_a_marker_for_a_producer_with_nothing_open_ends_nothing() -> None:
    txns = PartitionTxns()
    assert txns.on_marker(7, 3, commit=False) is None
    assert txns.last_stable_offset(high_watermark=4) == 4


def test_truncation_reopens_a_transaction_whose_marker_it_removed() -> None:
    txns = PartitionTxns()
    txns.on_batch(1, 0)
    txns.on_batch(2, 5)
    txns.on_marker(1, 8, commit=True)
    txns.truncate(6)
    assert txns.open_transactions() == {1: 0, 2: 5}
    txns.truncate(3)
    assert txns.open_transactions() == {1: 0}


def test_the_index_is_kafkas_34_byte_entries() -> None:
    entry = AbortedTxn(producer_id=42, first_offset=100, last_offset=130, last_stable_offset=90)
    data = encode_aborted([entry])
    assert ABORTED_TXN_SIZE == 34
    assert data == struct.pack(">hqqqq", 0, 42, 100, 130, 90)
    assert decode_txn_index(data) == [entry]
    assert decode_txn_index(data + data[:20]) == [entry], "a torn last entry is dropped"
    with pytest.raises(TxnIndexError, match="version 3"):
        decode_txn_index(struct.pack(">hqqqq", 3, 42, 100, 130, 90))
    with pytest.raises(TxnIndexError, match="out of order"):
        decode_txn_index(data + data)


def test_a_fetch_lists_the_aborted_transactions_its_range_overlaps() -> None:
    index = [AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 9, 0), AbortedTxn(3, 12, 20, 10)]
    assert [t.producer_id for t in overlapping(index, 6, 12)] == [2]
    assert [t.producer_id for t in overlapping(index, 0, 3)] == [1]
    assert [t.producer_id for t in overlapping(index, 10, 30)] == [3]


events = st.lists(
    st.tuples(st.sampled_from(["data", "commit", "abort", "replicate"]), st.integers(1, 4)),
    max_size=60,
)


@given(events)
def test_the_last_stable_offset_matches_a_recount_of_the_whole_log(
    steps: list[tuple[str, int]],
) -> None:
    txns = PartitionTxns()
    log: list[tuple[str, int]] = []  # (kind, producer) at each offset
    high_watermark = 0
    for kind, producer in steps:
        if kind == "replicate":
            high_watermark = len(log)
            txns.on_high_watermark(high_watermark)
        elif kind == "data":
            txns.on_batch(producer, len(log))
            log.append((kind, producer))
        else:
            txns.on_marker(producer, len(log), commit=kind == "commit")
            log.append((kind, producer))
        assert txns.last_stable_offset(high_watermark) == _recount(log, high_watermark)


def _recount(log: list[tuple[str, int]], high_watermark: int) -> int:
    """The first offset of a transaction with no marker below the high watermark."""
    first: dict[int, int] = {}
    unstable = [high_watermark]
    for offset, (kind, producer) in enumerate(log):
        if kind == "data":
            first.setdefault(producer, offset)
        elif producer in first:
            start = first.pop(producer)
            if offset >= high_watermark:
                unstable.append(start)
    unstable += first.values()
    return min(unstable)
