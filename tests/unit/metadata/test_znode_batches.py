"""Entries packed into ZooKeeper multi-ops (metadata/znode_batches.py): order, sizes, cuts."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.metadata.znode_batches import batches, op_size
from strom.metadata.znodes import OpKind, ZnodeOp

ops = st.builds(
    ZnodeOp,
    st.sampled_from(list(OpKind)),
    st.text(alphabet="abc/", min_size=1, max_size=30).map(lambda p: "/" + p),
    st.binary(max_size=200),
)
entries = st.lists(st.lists(ops, max_size=6), max_size=12).map(
    lambda lists: [(index, tuple(entry)) for index, entry in enumerate(lists)]
)


def op(size: int, path: str = "/t") -> ZnodeOp:
    """An op whose estimated size is `size` bytes."""
    return ZnodeOp(OpKind.SET, path, b"x" * (size - op_size(ZnodeOp(OpKind.SET, path))))


@given(entries=entries, budget=st.integers(min_value=1, max_value=1500))
def test_every_op_and_entry_once_in_order_and_batches_within_budget(
    entries: list[tuple[int, tuple[ZnodeOp, ...]]], budget: int
) -> None:
    packed = batches(entries, budget)
    assert [o for b in packed for o in b.ops] == [o for _, entry in entries for o in entry]
    assert [e for b in packed for e in b.done] == [index for index, _ in entries]
    for batch in packed:
        assert batch.ops or batch.done
        assert batch.size == sum(op_size(o) for o in batch.ops)
        assert batch.size <= budget or len(batch.ops) == 1
    # An entry is done in the batch holding its last op; one that fits is never cut.
    where: dict[int, int] = {}
    for number, batch in enumerate(packed):
        for o in batch.ops:
            where.setdefault(id(o), number)
    for number, batch in enumerate(packed):
        for index in batch.done:
            entry = entries[index][1]
            if entry:
                assert where[id(entry[-1])] == number
                if sum(op_size(o) for o in entry) <= budget:
                    assert where[id(entry[0])] == number


def test_small_entries_share_one_multi_op_until_the_budget() -> None:
    a, b, c = (op(100, f"/{n}") for n in "abc")
    packed = batches([("e1", [a]), ("e2", [b]), ("e3", [c])], budget=250)
    assert [(x.ops, x.done) for x in packed] == [([a, b], ["e1", "e2"]), ([c], ["e3"])]


def test_an_entry_larger_than_the_budget_is_cut_in_order() -> None:
    big = [op(100, f"/{n}") for n in range(5)]
    packed = batches([("small", [op(100, "/s")]), ("big", big)], budget=250)
    assert [len(x.ops) for x in packed] == [1, 2, 2, 1]
    assert [x.done for x in packed] == [["small"], [], [], ["big"]]


def test_an_entry_without_ops_is_done_with_the_batch_before_it() -> None:
    a = op(100)
    assert [(x.ops, x.done) for x in batches([("e1", [a]), ("e2", [])], 250)] == [
        ([a], ["e1", "e2"])
    ]
    assert [(x.ops, x.done) for x in batches([("e1", [])], 250)] == [([], ["e1"])]
    assert batches([], 250) == []


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(ValueError, match="budget must be positive"):
        batches([], 0)
