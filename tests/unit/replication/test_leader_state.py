"""The leader's view of its followers: high watermark, lag, ISR proposals."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strom.replication.follower import truncation_offset
from strom.replication.leader import LeaderState

LAG_MS = 1_000


def leader(
    *, isr: tuple[int, ...] = (1, 2, 3), replicas: tuple[int, ...] = (1, 2, 3), start: int = 0
) -> LeaderState:
    return LeaderState(
        node_id=1,
        replicas=replicas,
        isr=isr,
        leader_epoch=5,
        partition_epoch=7,
        epoch_start_offset=start,
        now_ms=0,
    )


def test_high_watermark_waits_for_every_isr_member() -> None:
    state = leader()
    assert state.high_watermark(own_end=10, min_isr=1) is None  # followers not heard yet
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    assert state.high_watermark(own_end=10, min_isr=1) is None
    state.on_fetch(3, 4, leader_end=10, now_ms=1)
    assert state.high_watermark(own_end=10, min_isr=1) == 4
    assert state.high_watermark(own_end=3, min_isr=1) == 3  # the leader's own durable end


def test_high_watermark_ignores_replicas_outside_the_isr() -> None:
    state = leader(isr=(1, 2))
    state.on_fetch(2, 8, leader_end=10, now_ms=1)
    state.on_fetch(3, 0, leader_end=10, now_ms=1)
    assert state.high_watermark(own_end=10, min_isr=1) == 8


def test_the_low_watermark_is_the_smallest_start_among_the_isr() -> None:
    state = leader(isr=(1, 2))
    assert state.low_watermark(own_start=5) == -1  # follower 2 has not said where it starts
    state.on_fetch(2, 10, leader_end=10, now_ms=1, follower_start=3)
    state.on_fetch(3, 10, leader_end=10, now_ms=1, follower_start=0)  # outside the ISR
    assert state.low_watermark(own_start=5) == 3
    state.on_fetch(2, 10, leader_end=10, now_ms=2, follower_start=5)
    assert state.low_watermark(own_start=5) == 5
    assert state.low_watermark(own_start=4) == 4
    assert leader(isr=(1,)).low_watermark(own_start=7) == 7


def test_high_watermark_stands_still_below_min_insync_replicas() -> None:
    state = leader(isr=(1,))
    assert state.high_watermark(own_end=10, min_isr=2) is None
    assert state.high_watermark(own_end=10, min_isr=1) == 10


def test_a_pending_expansion_counts_for_the_high_watermark() -> None:
    state = leader(isr=(1, 2))
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    state.on_fetch(3, 6, leader_end=10, now_ms=1)
    assert state.high_watermark(own_end=10, min_isr=1) == 10
    state.propose((1, 2, 3))
    assert state.maximal_isr == (1, 2, 3)
    assert state.high_watermark(own_end=10, min_isr=1) == 6


def test_a_pending_shrink_keeps_the_removed_member_counted() -> None:
    state = leader()
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    state.on_fetch(3, 5, leader_end=10, now_ms=1)
    state.propose((1, 2))
    assert state.high_watermark(own_end=10, min_isr=1) == 5
    state.update(replicas=(1, 2, 3), isr=(1, 2), partition_epoch=8, now_ms=2)
    assert state.pending_isr is None
    assert state.high_watermark(own_end=10, min_isr=1) == 10


def test_a_follower_at_the_log_end_is_caught_up() -> None:
    state = leader()
    state.on_fetch(2, 10, leader_end=10, now_ms=500)
    state.on_fetch(3, 10, leader_end=10, now_ms=500)
    assert state.lagging(now_ms=1_400, lag_ms=LAG_MS) == []
    assert state.lagging(now_ms=1_600, lag_ms=LAG_MS) == [2, 3]


def test_a_follower_reaching_the_previous_end_was_caught_up_at_the_previous_fetch() -> None:
    state = leader()
    state.on_fetch(2, 5, leader_end=10, now_ms=700)  # behind
    state.on_fetch(2, 10, leader_end=20, now_ms=900)  # reached where the leader was at 700
    progress = state.follower(2)
    assert progress is not None and progress.last_caught_up_ms == 700


def test_a_follower_that_never_catches_up_lags_after_the_lag_time() -> None:
    state = leader()
    for now in range(100, 2_000, 100):  # falling further behind a growing log
        state.on_fetch(2, now // 2, leader_end=now, now_ms=now)
        state.on_fetch(3, now, leader_end=now, now_ms=now)
    # a new member counts as caught up when the leader starts: 0 + lag
    assert state.lagging(now_ms=1_900, lag_ms=LAG_MS) == [2]
    assert state.next_isr(now_ms=1_900, lag_ms=LAG_MS, high_watermark=0) == (1, 3)


def test_a_caught_up_replica_joins_once_it_reaches_the_watermark_and_epoch_start() -> None:
    state = leader(isr=(1, 2), start=20)
    state.on_fetch(2, 30, leader_end=30, now_ms=1)
    state.on_fetch(3, 15, leader_end=30, now_ms=1)
    assert state.caught_up(high_watermark=10) == []  # below the epoch start
    state.on_fetch(3, 25, leader_end=30, now_ms=2)
    assert state.caught_up(high_watermark=30) == []  # below the high watermark
    assert state.caught_up(high_watermark=25) == [3]
    assert state.next_isr(now_ms=2, lag_ms=LAG_MS, high_watermark=25) == (1, 2, 3)


def test_one_change_at_a_time() -> None:
    state = leader(isr=(1, 2))
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    state.on_fetch(3, 10, leader_end=10, now_ms=1)
    proposal = state.next_isr(now_ms=1, lag_ms=LAG_MS, high_watermark=10)
    assert proposal == (1, 2, 3)
    state.propose(proposal)
    assert state.next_isr(now_ms=1, lag_ms=LAG_MS, high_watermark=10) is None
    state.refused()
    assert state.next_isr(now_ms=1, lag_ms=LAG_MS, high_watermark=10) == (1, 2, 3)


def test_a_stale_update_is_ignored() -> None:
    state = leader()
    state.update(replicas=(1, 2, 3), isr=(1,), partition_epoch=6, now_ms=1)
    assert state.isr == (1, 2, 3)


def test_fetches_from_non_replicas_are_not_recorded() -> None:
    state = leader()
    assert not state.on_fetch(9, 10, leader_end=10, now_ms=1)
    assert not state.on_fetch(1, 10, leader_end=10, now_ms=1)  # the leader itself


@given(
    ends=st.lists(st.integers(min_value=0, max_value=100), min_size=2, max_size=2),
    own=st.integers(min_value=0, max_value=100),
)
def test_the_high_watermark_never_exceeds_any_isr_member(ends: list[int], own: int) -> None:
    state = leader()
    state.on_fetch(2, ends[0], leader_end=100, now_ms=1)
    state.on_fetch(3, ends[1], leader_end=100, now_ms=1)
    assert state.high_watermark(own_end=own, min_isr=1) == min(own, *ends)


# --- where a follower truncates -----------------------------------------------------------


def epochs(entries: list[tuple[int, int]], log_end: int):  # type: ignore[no-untyped-def]
    """end_offset_for over (epoch, start) entries, Kafka's rules."""

    def end_offset_for(requested: int) -> tuple[int, int]:
        if requested < 0 or not entries:
            return (-1, -1)
        if requested == entries[-1][0]:
            return (requested, log_end)
        higher = [e for e in entries if e[0] > requested]
        if not higher:
            return (-1, -1)
        floor = [e for e in entries if e[0] <= requested]
        return (floor[-1][0] if floor else requested, higher[0][1])

    return end_offset_for


def test_matching_epochs_keep_the_shorter_log() -> None:
    local = epochs([(1, 0), (3, 10)], 20)
    assert (
        truncation_offset(3, 15, local_end_offset_for=local, log_end_offset=20, high_watermark=5)
        == 15
    )
    assert (
        truncation_offset(3, 25, local_end_offset_for=local, log_end_offset=20, high_watermark=5)
        == 20
    )


def test_a_follower_with_a_newer_epoch_the_leader_never_had_truncates_to_where_it_left() -> None:
    # The follower led briefly at epoch 4 from offset 12; the leader's epoch 3 ends at 12.
    local = epochs([(1, 0), (3, 10), (4, 12)], 18)
    assert (
        truncation_offset(3, 12, local_end_offset_for=local, log_end_offset=18, high_watermark=10)
        == 12
    )
    # The leader's epoch 3 ended earlier than the follower's: cut to the leader's end.
    assert (
        truncation_offset(3, 11, local_end_offset_for=local, log_end_offset=18, high_watermark=10)
        == 11
    )


def test_an_undefined_answer_keeps_the_high_watermark() -> None:
    local = epochs([(2, 0)], 9)
    assert (
        truncation_offset(-1, -1, local_end_offset_for=local, log_end_offset=9, high_watermark=4)
        == 4
    )


def test_a_member_that_leaves_the_isr_must_fetch_again_before_it_can_rejoin() -> None:
    state = leader()
    state.on_fetch(2, 10, leader_end=10, now_ms=1)
    state.on_fetch(3, 10, leader_end=10, now_ms=1)
    state.update(replicas=(1, 2, 3), isr=(1, 2), partition_epoch=8, now_ms=2)  # 3 fenced
    assert state.caught_up(high_watermark=10) == []
    state.on_fetch(3, 10, leader_end=10, now_ms=3)
    assert state.caught_up(high_watermark=10) == [3]
