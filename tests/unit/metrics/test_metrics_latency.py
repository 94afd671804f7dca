"""The commit timer of a metadata store: proposals matched to commits, counted in buckets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.metrics.latency import CommitTimer


def test_each_commit_counts_the_proposals_at_or_below_it_once() -> None:
    timer = CommitTimer((0.01, 0.1, 1.0))
    timer.proposed(5, 10.0)
    timer.proposed(6, 10.05)
    timer.proposed(9, 10.5)
    timer.committed(6, 10.06)  # 5 took 60 ms, 6 took 10 ms
    assert timer.waiting == 1
    timer.committed(6, 12.0)  # nothing new at or below 6
    timer.committed(20, 13.0)  # 9 took 2.5 s
    snap = timer.snapshot()
    assert snap.counts == (1, 1, 0, 1)
    assert snap.count == 3
    assert snap.total_seconds == pytest.approx(0.06 + 0.01 + 2.5)
    assert snap.cumulative() == [("0.01", 1), ("0.1", 2), ("1.0", 2), ("+Inf", 3)]
    assert timer.waiting == 0


def test_a_time_on_a_bound_falls_in_that_bucket_as_le_says() -> None:
    timer = CommitTimer((0.5, 1.0))
    timer.observe(0.5)
    timer.observe(1.0)
    timer.observe(1.0000001)
    assert timer.snapshot().counts == (1, 1, 1)


def test_what_a_lost_leadership_proposed_is_never_counted() -> None:
    timer = CommitTimer()
    timer.proposed(1, 0.0)
    timer.proposed(2, 0.0)
    timer.abandon()
    timer.committed(2, 5.0)
    assert timer.snapshot().count == 0
    assert timer.waiting == 0


def test_bounds_must_increase() -> None:
    with pytest.raises(ValueError, match="must increase"):
        CommitTimer((1.0, 0.5))


@given(st.lists(st.tuples(st.integers(0, 50), st.floats(0, 100)), max_size=40), st.integers(0, 60))
def test_every_proposal_is_counted_at_most_once_and_none_is_left_behind(
    proposals: list[tuple[int, float]], up_to: int
) -> None:
    timer = CommitTimer()
    offsets = sorted({offset for offset, _ in proposals})
    for offset in offsets:
        timer.proposed(offset, 0.0)
    timer.committed(up_to, 1.0)
    timer.committed(up_to, 2.0)
    committed = [o for o in offsets if o <= up_to]
    assert timer.snapshot().count == len(committed)
    assert timer.waiting == len(offsets) - len(committed)
    assert timer.snapshot().cumulative()[-1] == ("+Inf", len(committed))
