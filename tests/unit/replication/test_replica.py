"""The replication core (replication/replica.py): effects for metadata, fetches, time."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strom.log.leader_epochs import LeaderEpochs
from strom.replication.replica import (
    ISR_RETRY_MS,
    Assignment,
    Commit,
    FailWaiters,
    Follow,
    ProposeIsr,
    Replica,
    Role,
    StartEpoch,
    Truncate,
)

LAG_MS = 1_000


def leading(isr: tuple[int, ...] = (1, 2, 3), *, min_isr: int = 2, end: int = 10) -> Replica:
    replica = Replica(1, lag_time_max_ms=LAG_MS)
    effects = replica.apply(
        Assignment(1, 5, 7, (1, 2, 3), isr, min_isr), log_end=end, durable_end=end, now_ms=0
    )
    assert effects[0] == StartEpoch(5, end)
    return replica


def test_a_new_leader_starts_its_epoch_at_its_log_end_and_a_follower_follows() -> None:
    assert leading().role is Role.LEADER
    follower = Replica(2, high_watermark=8, lag_time_max_ms=LAG_MS)
    effects = follower.apply(
        Assignment(1, 5, 7, (1, 2, 3), (1, 2, 3), 2), log_end=10, durable_end=10, now_ms=0
    )
    assert effects == [Follow(1, 5)] and follower.role is Role.FOLLOWER


def test_losing_leadership_fails_the_waiting_writes_and_follows_the_new_leader() -> None:
    replica = leading()
    effects = replica.apply(
        Assignment(2, 6, 8, (1, 2, 3), (2, 3), 2), log_end=10, durable_end=10, now_ms=5
    )
    assert isinstance(effects[0], FailWaiters) and effects[1] == Follow(2, 6)


def test_older_metadata_never_moves_the_leader_epoch_back() -> None:
    replica = leading()
    assert (
        replica.apply(
            Assignment(2, 4, 9, (1, 2, 3), (2, 3), 2), log_end=10, durable_end=10, now_ms=5
        )
        == []
    )
    assert replica.leader_epoch == 5 and replica.role is Role.LEADER


def test_the_high_watermark_waits_for_every_isr_member() -> None:
    replica = leading(end=0)
    assert replica.on_durable(4) == []
    error, effects = replica.on_follower_fetch(
        2, 4, log_start=0, log_end=4, durable_end=4, now_ms=1
    )
    assert error == ErrorCode.none and effects == []  # member 3 not heard from
    _, effects = replica.on_follower_fetch(3, 3, log_start=0, log_end=4, durable_end=4, now_ms=1)
    assert effects == [Commit(3)] and replica.high_watermark == 3


def test_no_high_watermark_while_the_isr_is_below_min_insync_replicas() -> None:
    replica = leading(isr=(1,), min_isr=2, end=0)
    assert replica.on_durable(5) == []
    assert replica.admit(-1)[0] == ErrorCode.not_enough_replicas
    assert replica.admit(1)[0] == ErrorCode.none


def test_a_fenced_replica_is_not_proposed_for_the_isr_but_an_eligible_one_is() -> None:
    """KIP-841: proposing a fenced replica would have the whole change refused, keeping
    the caught-up, eligible ones out with it."""
    replica = leading(isr=(1,), min_isr=1, end=0)
    replica.set_ineligible(frozenset({3}), now_ms=0)
    _, effects = replica.on_follower_fetch(3, 0, log_start=0, log_end=0, durable_end=0, now_ms=1)
    assert effects == []
    _, effects = replica.on_follower_fetch(2, 0, log_start=0, log_end=0, durable_end=0, now_ms=2)
    assert effects == [ProposeIsr((1, 2), 5, 7, joining=(2,), leaving=())]
    replica.isr_answered((1, 2), 8, durable_end=0, now_ms=3)
    assert replica.isr == (1, 2)
    assert replica.set_ineligible(frozenset(), now_ms=4) == [
        ProposeIsr((1, 2, 3), 5, 8, joining=(3,), leaving=())
    ]


def test_a_refused_change_is_proposed_again_only_after_the_retry_delay() -> None:
    replica = leading(end=0)
    replica.on_follower_fetch(2, 0, log_start=0, log_end=0, durable_end=0, now_ms=LAG_MS)
    assert replica.tick(now_ms=LAG_MS + 1) == [ProposeIsr((1, 2), 5, 7, joining=(), leaving=(3,))]
    replica.isr_refused(ErrorCode.ineligible_replica, now_ms=LAG_MS + 2)
    assert replica.tick(now_ms=LAG_MS + 3) == []
    assert replica.tick(now_ms=LAG_MS + 2 + ISR_RETRY_MS)[0].isr == (1, 2)  # type: ignore[union-attr]


def test_fetches_outside_the_log_or_from_strangers_are_refused() -> None:
    replica = leading()
    kwargs = {"log_start": 2, "log_end": 10, "durable_end": 10, "now_ms": 0}
    assert replica.on_follower_fetch(2, 11, **kwargs)[0] == ErrorCode.offset_out_of_range
    assert replica.on_follower_fetch(2, 1, **kwargs)[0] == ErrorCode.offset_out_of_range
    assert replica.on_follower_fetch(9, 5, **kwargs)[0] == ErrorCode.not_leader_or_follower


def test_a_follower_that_led_an_epoch_without_appending_truncates_that_epoch_away() -> None:
    """Anomaly 1: the follower led epoch 5 from offset 100 without appending; its new
    leader knows epochs 3 and 6. The truncation lands at the follower's log end and must
    still be carried out, so the empty epoch leaves its cache and the next fetch agrees."""
    leader_epochs = LeaderEpochs([(3, 40), (6, 100)])
    follower_epochs = LeaderEpochs([(3, 40), (5, 100)])
    follower = Replica(2, high_watermark=100, lag_time_max_ms=LAG_MS)
    leader = leading(end=100)
    diverging = leader.diverging(
        100, follower_epochs.latest_epoch, lambda e: leader_epochs.end_offset_for(e, 100)
    )
    assert diverging == (3, 100)
    truncate = follower.truncation(
        *diverging, end_offset_for=lambda e: follower_epochs.end_offset_for(e, 100), log_end=100
    )
    assert truncate == Truncate(100)
    follower_epochs.truncate_from_end(100)  # what PartitionLog.truncate_to(100) does at its end
    assert (
        leader.diverging(
            100, follower_epochs.latest_epoch, lambda e: leader_epochs.end_offset_for(e, 100)
        )
        is None
    )


def test_a_follower_caps_the_leaders_high_watermark_at_its_log_end() -> None:
    follower = Replica(2, lag_time_max_ms=LAG_MS)
    follower.apply(Assignment(1, 5, 7, (1, 2), (1, 2), 1), log_end=3, durable_end=3, now_ms=0)
    follower.on_leader_high_watermark(10, log_end=3)
    assert follower.high_watermark == 3
    follower.truncated(log_end=2)
    assert follower.high_watermark == 2


def test_an_unanswered_change_keeps_counting_and_goes_again() -> None:
    """The controller may have made a change whose answer was lost: until the metadata
    says, the proposed ISR counts for the high watermark (here: member 2 being added
    must have the records), and the same change is sent again."""
    replica = leading(isr=(1, 3), min_isr=1, end=0)
    replica.on_durable(0)
    _, effects = replica.on_follower_fetch(2, 0, log_start=0, log_end=0, durable_end=0, now_ms=1)
    assert effects == [ProposeIsr((1, 2, 3), 5, 7, joining=(2,), leaving=())]
    replica.isr_unanswered(now_ms=2)
    replica.on_follower_fetch(3, 5, log_start=0, log_end=5, durable_end=5, now_ms=3)
    assert replica.on_durable(5) == [] and replica.high_watermark == 0  # 2 has nothing
    assert replica.tick(now_ms=2 + ISR_RETRY_MS) == effects
    replica.isr_refused(ErrorCode.invalid_update_version, now_ms=3 + ISR_RETRY_MS)
    assert replica.leader is not None and replica.leader.pending_isr == (1, 2, 3)
    replica.apply(  # the metadata settles it: the change was made
        Assignment(1, 5, 8, (1, 2, 3), (1, 2, 3), 1), log_end=5, durable_end=5, now_ms=9
    )
    assert replica.leader.pending_isr is None and replica.isr == (1, 2, 3)
