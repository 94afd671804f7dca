"""Random request sequences against the coordinator: invariants hold after every step,
and once clients fall silent every waiting request is answered."""

from __future__ import annotations

from group_harness import Harness
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.group.coordinator import LeavingMember
from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.records import GroupMetadataKey
from strom.group.state import GroupState, JoinResult

MEMBERS = 4

step = st.one_of(
    st.tuples(st.just("join"), st.integers(0, MEMBERS - 1), st.booleans()),
    st.tuples(st.just("sync"), st.integers(0, MEMBERS - 1), st.booleans()),
    st.tuples(st.just("heartbeat"), st.integers(0, MEMBERS - 1), st.booleans()),
    st.tuples(st.just("leave"), st.integers(0, MEMBERS - 1), st.booleans()),
    st.tuples(st.just("advance"), st.integers(0, 12_000), st.booleans()),
    st.tuples(st.just("rebalance"), st.just(0), st.booleans()),
)


def check(h: Harness, last_generation: int) -> int:
    group = h.core.groups.get("g")
    if group is None:
        return last_generation
    assert group.generation_id >= last_generation
    if group.state is GroupState.EMPTY:
        assert not group.members
    if group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
        assert group.leader_id in group.members
        assert all(m.join_token is None for m in group.members.values())
    if group.state is GroupState.STABLE:
        assert all(m.sync_token is None for m in group.members.values())
    for instance, member_id in group.static_members.items():
        assert group.members[member_id].group_instance_id == instance
    return group.generation_id


@settings(max_examples=200, deadline=None)
@given(st.lists(step, max_size=60), st.integers(0, 2**32))
def test_random_sequences_keep_the_invariants(
    steps: list[tuple[str, int, bool]], seed: int
) -> None:
    h = Harness(seed=seed, initial_rebalance_delay_ms=500)
    ids: dict[int, str] = {}
    generations: dict[int, int] = {}
    generation = 0
    for action, n, static in steps:
        instance = f"i{n}" if static else None
        if action == "join":
            token = h.join(ids.get(n, ""), instance=instance, rebalance_ms=20_000)
            reply = h.replies.get(token)
            if isinstance(reply, JoinResult) and reply.member_id:
                ids[n] = reply.member_id
        elif action == "sync" and n in ids:
            group = h.core.groups.get("g")
            gen = group.generation_id if group is not None else -1
            assignment = {m: b"x" for m in ids.values()}
            h.sync(ids[n], gen, assignment, instance=instance)
        elif action == "heartbeat" and n in ids:
            h.heartbeat(ids[n], generations.get(n, 1), instance=instance)
        elif action == "leave" and n in ids:
            h.leave(LeavingMember(ids[n], instance))
        elif action == "advance":
            h.advance(n)
        elif action == "rebalance":
            h.rebalance()
        for reply in h.replies.values():
            if isinstance(reply, JoinResult) and reply.generation_id > 0:
                for k, member_id in ids.items():
                    if member_id == reply.member_id:
                        generations[k] = reply.generation_id
        generation = check(h, generation)
    asked = h._next
    for _ in range(200):  # the clients fall silent: every waiting request gets an answer
        h.advance(5_000)
        generation = check(h, generation)
    waiting = [t for t in range(1, asked + 1) if t not in h.replies]
    assert not waiting, f"requests never answered: {waiting}"
    group = h.core.groups.get("g")
    assert group is None or not group.members


def committed_matches_replay(h: Harness) -> None:
    """The committed state is what replaying the committed records gives: the offsets of
    every group, and every settled group (Stable or Empty) as its record describes it."""
    fresh = Harness()
    for key, value in h.records:
        fresh.core.load(key, value, h.now_ms)
    live, replayed = h.core.groups, fresh.core.groups
    for group_id in live.keys() | replayed.keys():
        mine = live.get(group_id)
        theirs = replayed.get(group_id)
        assert (mine.offsets if mine else {}) == (theirs.offsets if theirs else {}), group_id
    described = {key.group_id for key, _ in h.records if isinstance(key, GroupMetadataKey)}
    for group_id in described:
        mine, theirs = live.get(group_id), replayed.get(group_id)
        if mine is None or theirs is None:
            assert mine is None or mine.generation_id == 0 or not mine.members, group_id
            continue
        if mine.state in (GroupState.STABLE, GroupState.EMPTY) and mine.generation_id:
            assert mine.to_record() == theirs.to_record(), group_id


write_step = st.one_of(
    step,
    st.tuples(st.just("commit"), st.integers(0, MEMBERS - 1), st.booleans()),
    st.tuples(st.just("hold"), st.just(0), st.booleans()),
    st.tuples(st.just("settle"), st.integers(1, 3), st.booleans()),
    st.tuples(st.just("settle"), st.integers(1, 3), st.just(True)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(write_step, min_size=10, max_size=80), st.integers(0, 2**32))
def test_random_failed_writes_leave_committed_state_equal_to_replay(
    steps: list[tuple[str, int, bool]], seed: int
) -> None:
    """Random requests while writes are held, completed in log order or failed: the
    committed state is always what its committed records rebuild on a new coordinator."""
    h = Harness(seed=seed, initial_rebalance_delay_ms=500)
    h.hold = True
    ids: dict[int, str] = {}
    for action, n, flag in steps:
        instance = f"i{n}" if flag else None
        group = h.core.store.peek("g")
        generation = group.generation_id if group is not None else -1
        if action == "join":
            token = h.join(ids.get(n, ""), instance=instance, rebalance_ms=20_000)
            reply = h.replies.get(token)
            if isinstance(reply, JoinResult) and reply.member_id:
                ids[n] = reply.member_id
        elif action == "sync" and n in ids:
            h.sync(ids[n], generation, {m: b"x" for m in ids.values()}, instance=instance)
        elif action == "heartbeat" and n in ids:
            h.heartbeat(ids[n], generation, instance=instance)
        elif action == "leave" and n in ids:
            h.leave(LeavingMember(ids[n], instance))
        elif action == "commit" and flag and n in ids:  # a member's commit
            h.commit(CommitRequest("g", generation, ids[n], offsets=(OffsetToCommit("t", n, n),)))
        elif action == "commit":  # an assign() consumer's, in a group of its own
            h.commit(CommitRequest("solo", offsets=(OffsetToCommit("t", n, len(h.held)),)))
        elif action == "advance":
            h.advance(n)
        elif action == "rebalance":
            h.rebalance()
        elif action == "hold":
            h.hold = flag
        elif action == "settle":
            for _ in range(n):
                if h.held:  # the log makes writes durable in order; the oldest may fail
                    (h.fail if flag else h.complete)(h.held[0])
        committed_matches_replay(h)
    h.hold = False
    while h.held:
        h.complete(h.held[0])
    committed_matches_replay(h)
    asked = h._next
    for _ in range(200):
        h.advance(5_000)
    committed_matches_replay(h)
    waiting = [t for t in range(1, asked + 1) if t not in h.replies and t not in h.failed_tokens]
    assert not waiting, f"requests never answered: {waiting}"
