"""A write that fails leaves the coordinator exactly as before it (and before every later
decision made on it); a write that succeeds changes it exactly as replaying its records
on a fresh coordinator does."""

from __future__ import annotations

from typing import Any

from group_harness import Harness
from kio.schema.errors import ErrorCode

from strom.group import offsets
from strom.group.coordinator import LeavingMember
from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.state import Group, GroupState, SyncResult


def snapshot(h: Harness) -> dict[str, Any]:
    """Everything the committed state holds, as plain values."""

    def group_state(group: Group) -> Any:
        members = {
            m.member_id: (
                m.group_instance_id,
                m.protocols,
                m.assignment,
                m.heartbeat_deadline_ms,
                m.join_token,
                m.sync_token,
            )
            for m in group.members.values()
        }
        return (
            group.state,
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            members,
            dict(group.static_members),
            dict(group.pending_members),
            group.rebalance_deadline_ms,
            dict(group.offsets),
        )

    return {group_id: group_state(g) for group_id, g in h.core.groups.items()}


def joined_pair(h: Harness) -> tuple[str, str, int, int]:
    """Two members that both got the JoinGroup answer of one generation."""
    a, _ = h.join_new()
    b, tb = h.join_new()  # a rebalance: a rejoins
    ta = h.join(a)
    return a, b, ta, tb


def stable_pair(h: Harness) -> tuple[str, str, int]:
    """Two members in a Stable group."""
    a, b, ta, tb = joined_pair(h)
    generation = h.joined(ta).generation_id
    assert h.joined(tb).generation_id == generation
    leader = h.joined(ta).leader_id
    follower_sync = h.sync(b if leader == a else a, generation)
    h.sync(leader, generation, {a: b"A", b: b"B"})
    assert h.synced(follower_sync).assignment in (b"A", b"B")
    assert h.group().state is GroupState.STABLE
    return a, b, generation


def test_a_failed_sync_leaves_the_group_waiting_for_the_assignment() -> None:
    h = Harness()
    a, ta = h.join_new()
    generation = h.joined(ta).generation_id
    before = snapshot(h)
    h.hold = True
    token = h.sync(a, generation, {a: b"mine"})
    assert h.held and token not in h.replies
    assert h.group().state is GroupState.COMPLETING_REBALANCE  # committed: not yet
    h.fail(h.held[0])
    assert snapshot(h) == before
    assert token in h.failed_tokens
    h.hold = False
    again = h.sync(a, generation, {a: b"mine"})  # the client retries: it works
    assert h.synced(again).assignment == b"mine"
    assert h.group().state is GroupState.STABLE


def test_a_failed_sync_keeps_the_other_members_waiting() -> None:
    h = Harness()
    a, b, ta, _ = joined_pair(h)
    generation = h.joined(ta).generation_id
    leader = h.joined(ta).leader_id
    follower = b if leader == a else a
    waiting = h.sync(follower, generation)
    before = snapshot(h)
    h.hold = True
    leader_sync = h.sync(leader, generation, {a: b"A", b: b"B"})
    h.fail(h.held[0])
    assert snapshot(h) == before
    assert leader_sync in h.failed_tokens
    assert waiting not in h.failed_tokens and waiting not in h.replies  # still parked
    h.hold = False
    h.sync(leader, generation, {a: b"A", b: b"B"})
    assert isinstance(h.replies[waiting], SyncResult)
    assert h.synced(waiting).error is ErrorCode.none


def test_a_failed_join_that_empties_the_group_changes_nothing() -> None:
    # The last member's session expires; the rebalance completes with nobody left, which
    # writes the Empty group: that write fails.
    h = Harness()
    a, _, generation = stable_pair(h)
    h.leave(LeavingMember(a))
    before = snapshot(h)
    h.hold = True
    h.advance(31_000)  # the other member never rejoins: the rebalance times out
    assert h.held
    assert snapshot(h) == before
    h.fail(h.held[0])
    assert snapshot(h) == before
    h.hold = False
    h.advance(0)  # the timer fires again and this time the write goes through
    assert h.group().state is GroupState.EMPTY
    assert h.group().generation_id == generation + 1


def test_a_failed_static_rejoin_keeps_the_old_member() -> None:
    h = Harness()
    first = h.join(instance="i1")
    generation = h.joined(first).generation_id
    old_id = h.joined(first).member_id
    h.sync(old_id, generation, {old_id: b"x"}, instance="i1")
    before = snapshot(h)
    h.hold = True
    rejoin = h.join(instance="i1")  # a restart: it replaces itself, writing the group
    h.fail(h.held[0])
    assert snapshot(h) == before
    assert rejoin in h.failed_tokens
    assert h.group().static_members == {"i1": old_id}


def test_a_failed_leave_keeps_the_member() -> None:
    h = Harness()
    a, b, _ = stable_pair(h)
    h.hold = True
    h.leave(LeavingMember(a))  # the group rebalances without a record ...
    h.leave(LeavingMember(b))  # ... until nobody is left: that write (Empty) fails
    before_failure = h.held[:]
    assert len(before_failure) == 1
    committed_before = snapshot(h)
    h.fail(before_failure[0])
    assert snapshot(h) == committed_before
    assert set(h.group().members) == {b}  # the first leave had no write: committed


def test_a_failed_commit_is_not_visible_and_changes_nothing() -> None:
    h = Harness()
    commit = CommitRequest("solo", offsets=(OffsetToCommit("t", 0, 5),))
    assert h.commit(commit) == [ErrorCode.none]
    before = snapshot(h)
    h.hold = True
    assert h.commit(CommitRequest("solo", offsets=(OffsetToCommit("t", 0, 9),))) == [ErrorCode.none]
    assert offsets.fetch(h.core, "solo", None)[0][1].offset == 5  # type: ignore[union-attr]
    h.fail(h.held[0])
    assert snapshot(h) == before
    assert offsets.fetch(h.core, "solo", None)[0][1].offset == 5  # type: ignore[union-attr]
    # A group that a failed commit would have created does not exist either.
    h.commit(CommitRequest("new", offsets=(OffsetToCommit("t", 0, 1),)))
    h.fail(h.held[0])
    assert "new" not in h.core.groups


def test_a_decision_made_on_a_failed_write_is_discarded_too() -> None:
    h = Harness()
    a, ta = h.join_new()
    generation = h.joined(ta).generation_id
    before = snapshot(h)
    h.hold = True
    sync = h.sync(a, generation, {a: b"mine"})  # pending: Stable with the assignment
    first = h.held[0]
    commit = CommitRequest("g", generation, a, offsets=(OffsetToCommit("t", 0, 3),))
    assert h.commit(commit) == [ErrorCode.none]  # accepted only because of the sync
    beat = h.heartbeat(a, generation)
    assert beat is ErrorCode.none
    assert len(h.held) == 2
    discarded = h.fail(first)
    assert len(discarded) == 3  # the sync, the commit and the heartbeat (no record)
    assert h.held == []
    assert snapshot(h) == before
    assert sync in h.failed_tokens
    # The commit's write completing now is too late: it is not applied.
    assert offsets.fetch(h.core, "g", None) == []


def test_a_later_write_waits_for_the_earlier_one_of_its_group() -> None:
    h = Harness()
    h.commit(CommitRequest("g", offsets=(OffsetToCommit("t", 0, 1),)))
    h.hold = True
    h.commit(CommitRequest("g", offsets=(OffsetToCommit("t", 0, 2),)))
    h.commit(CommitRequest("g", offsets=(OffsetToCommit("t", 0, 3),)))
    h.commit(CommitRequest("other", offsets=(OffsetToCommit("t", 0, 7),)))
    first, second, other = h.held
    h.complete(second)
    assert offsets.fetch(h.core, "g", None)[0][1].offset == 1  # type: ignore[union-attr]
    h.complete(other)  # another group's write does not wait
    assert offsets.fetch(h.core, "other", None)[0][1].offset == 7  # type: ignore[union-attr]
    h.complete(first)
    assert offsets.fetch(h.core, "g", None)[0][1].offset == 3  # type: ignore[union-attr]


def test_forgetting_groups_fails_their_waiting_requests() -> None:
    h = Harness()
    a, ta = h.join_new()
    b_first = h.join()
    b_id = h.joined(b_first).member_id
    parked = h.join(b_id)  # parked in PreparingRebalance, waiting for a
    assert parked not in h.replies
    discarded = h.core.forget(["g"])
    assert parked in discarded.tokens
    assert "g" not in h.core.groups and h.core.store.pending == 0
    assert ta in h.replies and a
