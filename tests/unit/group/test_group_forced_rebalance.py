"""A rebalance forced by the broker (`GroupCoordinator.rebalance`), with a manual clock:
the members rejoin into the next generation as after a membership change, and a group
with nothing to rebalance is left as it is."""

from __future__ import annotations

import logging

import pytest
from group_harness import Harness, stable_group
from kio.schema.errors import ErrorCode

from strom.group.records import GroupMetadataKey, GroupMetadataValue
from strom.group.state import Group, GroupState


def test_a_stable_group_rebalances_into_the_next_generation_with_the_same_members(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    with caplog.at_level(logging.INFO, logger="strom.group"):
        result = h.rebalance(reason="fixture asked")
    assert (result.error, result.started, result.state) == (
        ErrorCode.none,
        True,
        GroupState.STABLE,
    )
    assert [r.getMessage() for r in caplog.records if "fixture asked" in r.getMessage()] == [
        f"group g: preparing rebalance from generation {generation} (requested: fixture asked)"
    ]
    group = h.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.rebalance_deadline_ms == h.now_ms + 30_000  # the members' rebalance timeout
    assert h.heartbeat(a, generation) is ErrorCode.rebalance_in_progress
    assert h.heartbeat(b, generation) is ErrorCode.rebalance_in_progress

    ta = h.join(a)
    assert ta not in h.replies  # waits for b
    tb = h.join(b)
    ra, rb = h.joined(ta), h.joined(tb)
    assert ra.generation_id == rb.generation_id == generation + 1
    assert ra.leader_id == rb.leader_id == a  # the leader stays
    assert [m.member_id for m in ra.members] == [a, b] and rb.members == ()
    follower = h.sync(b, generation + 1)
    h.sync(a, generation + 1, {a: b"A2", b: b"B2"})
    assert h.synced(follower).assignment == b"B2"
    group = h.group()
    assert (group.state, group.generation_id) == (GroupState.STABLE, generation + 1)
    assert list(group.members) == [a, b]
    key, value = h.records[-1]
    assert key == GroupMetadataKey("g")
    assert isinstance(value, GroupMetadataValue) and value.generation_id == generation + 1
    assert h.heartbeat(a, generation + 1) is ErrorCode.none


def test_a_group_waiting_for_the_leaders_assignment_rebalances_again() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    h.rebalance()
    ta, tb = h.join(a), h.join(b)
    assert h.group().state is GroupState.COMPLETING_REBALANCE
    follower = h.sync(b, generation + 1)
    assert follower not in h.replies  # waits for the leader's assignment
    result = h.rebalance()
    assert result.started and result.state is GroupState.COMPLETING_REBALANCE
    assert h.synced(follower).error is ErrorCode.rebalance_in_progress
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.joined(ta).generation_id == h.joined(tb).generation_id == generation + 1
    ta, tb = h.join(a), h.join(b)
    assert h.joined(ta).generation_id == h.joined(tb).generation_id == generation + 2


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    h.rebalance()
    ta = h.join(a)
    for _ in range(3):  # b stays alive (session 10 s) but never rejoins
        h.advance(9_000)
        assert h.heartbeat(b, generation) is ErrorCode.rebalance_in_progress
    assert ta not in h.replies
    assert h.core.next_deadline_ms() == h.now_ms + 3_000  # 30 s after the rebalance began
    h.advance(3_000)
    result = h.joined(ta)
    assert (result.generation_id, [m.member_id for m in result.members]) == (
        generation + 1,
        [a],
    )
    assert h.heartbeat(b, generation) is ErrorCode.unknown_member_id


def test_an_empty_group_is_left_as_it_is() -> None:
    h = Harness()
    (a,), _ = stable_group(h, 1)
    h.heartbeat(a, 1)
    h.advance(10_000)  # a's session timeout: the group is Empty, at generation 2
    before = h.group()
    assert (before.state, before.generation_id) == (GroupState.EMPTY, 2)
    result = h.rebalance()
    assert (result.error, result.started, result.state) == (
        ErrorCode.none,
        False,
        GroupState.EMPTY,
    )
    after = h.group()
    assert (after.state, after.generation_id, after.state_timestamp_ms) == (
        GroupState.EMPTY,
        2,
        before.state_timestamp_ms,
    )
    assert h.core.next_deadline_ms() is None


def test_an_unknown_group_is_not_found_and_not_created() -> None:
    h = Harness()
    stable_group(h, 1)
    result = h.rebalance(group="nobody")
    assert (result.error, result.started, result.state) == (
        ErrorCode.group_id_not_found,
        False,
        None,
    )
    assert h.core.store.peek("nobody") is None
    assert h.group().state is GroupState.STABLE


def test_a_dead_group_is_not_found() -> None:
    h = Harness()
    h.core.store.committed["g"] = Group("g", GroupState.DEAD, h.now_ms)
    result = h.rebalance()
    assert (result.error, result.started, result.state) == (
        ErrorCode.group_id_not_found,
        False,
        GroupState.DEAD,
    )
    assert h.group().state is GroupState.DEAD


def test_a_group_already_preparing_a_rebalance_is_left_as_it_is() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    c, tc = h.join_new()  # a third member: the group prepares a rebalance
    group = h.group()
    assert group.state is GroupState.PREPARING_REBALANCE
    deadline, since = group.rebalance_deadline_ms, group.state_timestamp_ms
    h.now_ms += 1_000
    result = h.rebalance()
    assert (result.error, result.started, result.state) == (
        ErrorCode.none,
        False,
        GroupState.PREPARING_REBALANCE,
    )
    group = h.group()
    assert (group.state, group.rebalance_deadline_ms, group.state_timestamp_ms) == (
        GroupState.PREPARING_REBALANCE,
        deadline,
        since,
    )
    assert group.generation_id == generation and tc not in h.replies
    ta, tb = h.join(a), h.join(b)
    results = [h.joined(t) for t in (ta, tb, tc)]
    assert {r.generation_id for r in results} == {generation + 1}
    assert {m.member_id for m in results[0].members} == {a, b, c}


def test_a_rebalance_decided_on_a_pending_write_is_discarded_with_it() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    h.rebalance()
    ta, tb = h.join(a), h.join(b)
    h.hold = True
    h.sync(b, generation + 1)
    leader_sync = h.sync(a, generation + 1, {a: b"A", b: b"B"})
    stable_write = h.last_write_id  # the Stable group's record, not durable yet
    result = h.rebalance()
    assert result.started and result.state is GroupState.STABLE  # decided on the pending one
    assert h.fail(stable_write) == (stable_write, h.last_write_id)
    assert leader_sync in h.failed_tokens
    assert h.group().state is GroupState.COMPLETING_REBALANCE  # as before the leader's sync
    assert h.joined(ta).generation_id == h.joined(tb).generation_id == generation + 1
