"""The classic group protocol, step by step with a manual clock."""

from __future__ import annotations

from group_harness import PROTOCOLS, Harness, stable_group
from kio.schema.errors import ErrorCode

from strom.group.coordinator import LeavingMember
from strom.group.records import GroupMetadataKey, GroupMetadataValue
from strom.group.state import GroupState


def test_first_join_asks_for_a_member_id_then_forms_the_group() -> None:
    h = Harness()
    first = h.joined(h.join())
    assert first.error is ErrorCode.member_id_required
    assert first.member_id.startswith("client-")
    second = h.joined(h.join(first.member_id))
    assert second.error is ErrorCode.none
    assert (second.generation_id, second.leader_id) == (1, first.member_id)
    assert second.protocol_name == "range"
    assert [m.member_id for m in second.members] == [first.member_id]
    assert h.group().state is GroupState.COMPLETING_REBALANCE


def test_leader_assignment_reaches_every_member_once_durable() -> None:
    h = Harness()
    a, ta = h.join_new()
    b, tb = h.join_new()
    assert tb not in h.replies  # a must rejoin first
    assert h.heartbeat(a, 1) is ErrorCode.rebalance_in_progress
    ta = h.join(a)
    ra, rb = h.joined(ta), h.joined(tb)
    assert ra.generation_id == rb.generation_id == 2
    assert ra.leader_id == a and len(ra.members) == 2 and rb.members == ()
    follower_sync = h.sync(b, 2)
    assert follower_sync not in h.replies  # waits for the leader
    h.sync(a, 2, {a: b"A", b: b"B"})
    assert h.synced(follower_sync).assignment == b"B"
    assert h.group().state is GroupState.STABLE
    key, value = h.records[-1]
    assert key == GroupMetadataKey("g")
    assert isinstance(value, GroupMetadataValue) and value.generation_id == 2
    assert {m.member_id: m.assignment for m in value.members} == {a: b"A", b: b"B"}


def test_heartbeat_errors() -> None:
    h = Harness()
    (a,), generation = stable_group(h, 1)
    assert h.heartbeat(a, generation) is ErrorCode.none
    assert h.heartbeat(a, generation + 1) is ErrorCode.illegal_generation
    assert h.heartbeat("nobody", generation) is ErrorCode.unknown_member_id
    assert h.heartbeat(a, generation, group="other") is ErrorCode.unknown_member_id


def test_silent_member_is_expelled_after_its_session_timeout() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    for _ in range(4):
        h.advance(3_000)
        assert (
            h.heartbeat(a, generation) is ErrorCode.none or h.group().state is not GroupState.STABLE
        )
    assert b not in h.group().members
    assert h.heartbeat(a, generation) is ErrorCode.rebalance_in_progress
    result = h.joined(h.join(a))
    assert result.generation_id == generation + 1
    assert [m.member_id for m in result.members] == [a]


def test_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)  # rebalance timeouts 30 s
    token = h.join(a, protocols=(("roundrobin", b"new"),))
    for _ in range(5):
        h.advance(5_000)
        # b heartbeats (so its session stays alive) but never rejoins.
        assert h.heartbeat(b, generation) is ErrorCode.rebalance_in_progress
        assert token not in h.replies
    h.advance(5_000)
    result = h.joined(token)
    assert result.error is ErrorCode.none
    assert [m.member_id for m in result.members] == [a]
    assert result.protocol_name == "roundrobin"
    assert h.heartbeat(b, generation) is ErrorCode.unknown_member_id


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    h = Harness(initial_rebalance_delay_ms=3_000)
    _a, ta = h.join_new()
    h.advance(2_000)
    _b, tb = h.join_new()
    h.advance(1_500)  # the first delay ended, but b arrived during it: wait once more
    assert ta not in h.replies
    h.advance(3_000)
    assert h.joined(ta).generation_id == h.joined(tb).generation_id == 1
    assert len(h.joined(ta).members) == 2


def test_sync_and_commit_checks() -> None:
    h = Harness()
    (a,), generation = stable_group(h, 1)
    assert h.synced(h.sync(a, generation + 5)).error is ErrorCode.illegal_generation
    assert h.synced(h.sync("ghost", generation)).error is ErrorCode.unknown_member_id
    _b, _tb = h.join_new()
    assert h.synced(h.sync(a, generation)).error is ErrorCode.rebalance_in_progress


def static_group(h: Harness, *instances: str) -> list[str]:
    """Static members joining within the initial delay: one generation, Stable."""
    tokens = [h.join(instance=i) for i in instances]
    for _ in range(len(instances) + 1):  # each newcomer extends the delay once
        h.advance(h.core.config.initial_rebalance_delay_ms)
    results = [h.joined(t) for t in tokens]
    ids = [r.member_id for r in results]
    leader = results[0].leader_id
    assignment = {m: m.encode() for m in ids}
    for member_id, instance in zip(ids, instances, strict=True):
        h.sync(member_id, 1, assignment if member_id == leader else None, instance=instance)
    assert h.group().state is GroupState.STABLE
    return ids


def test_static_member_restart_keeps_its_assignment_without_a_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    a, b = static_group(h, "pod-a", "pod-b")
    restarted = h.joined(h.join(instance="pod-b"))
    assert restarted.error is ErrorCode.none
    assert restarted.generation_id == 1  # no new generation
    assert restarted.member_id != b
    assert h.group().state is GroupState.STABLE
    synced = h.synced(h.sync(restarted.member_id, 1, instance="pod-b"))
    assert synced.assignment == b.encode()
    assert h.heartbeat(b, 1, instance="pod-b") is ErrorCode.fenced_instance_id
    assert h.heartbeat(restarted.member_id, 1, instance="pod-b") is ErrorCode.none
    assert h.heartbeat(a, 1, instance="pod-a") is ErrorCode.none


def test_static_leader_restart_skips_the_assignment() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    a, _ = static_group(h, "pod-a", "pod-b")
    assert h.group().leader_id == a
    restarted = h.joined(h.join(instance="pod-a"))
    assert restarted.skip_assignment and restarted.leader_id == restarted.member_id
    assert len(restarted.members) == 2
    assert h.group().state is GroupState.STABLE


def test_static_member_with_changed_subscription_triggers_a_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    static_group(h, "pod-a", "pod-b")
    token = h.join(instance="pod-b", protocols=(("range", b"other topics"),))
    assert token not in h.replies
    assert h.group().state is GroupState.PREPARING_REBALANCE


def test_leave_group_by_member_id_and_by_instance_id() -> None:
    h = Harness(initial_rebalance_delay_ms=100)
    ids = static_group(h, "i0", "i1", "i2")
    error, errors = h.leave(LeavingMember(ids[0]), LeavingMember("", "i1"), LeavingMember("ghost"))
    assert error is ErrorCode.none
    assert errors == [ErrorCode.none, ErrorCode.none, ErrorCode.unknown_member_id]
    assert list(h.group().members) == [ids[2]]
    assert h.group().state is GroupState.PREPARING_REBALANCE
    assert h.joined(h.join(ids[2], instance="i2")).generation_id == 2


def test_everyone_leaving_empties_the_group() -> None:
    h = Harness()
    (a, b), generation = stable_group(h, 2)
    h.leave(LeavingMember(a), LeavingMember(b))
    assert h.group().state is GroupState.EMPTY
    assert h.group().generation_id == generation + 1


def test_new_member_with_an_unsupported_protocol_is_refused() -> None:
    h = Harness()
    stable_group(h, 1)
    result = h.joined(h.join(protocols=(("sticky", b""),)))
    assert result.error is ErrorCode.inconsistent_group_protocol


def test_session_timeout_outside_the_broker_limits_is_refused() -> None:
    h = Harness(min_session_timeout_ms=6_000, max_session_timeout_ms=60_000)
    assert h.joined(h.join(session_ms=1_000)).error is ErrorCode.invalid_session_timeout
    assert h.joined(h.join(session_ms=90_000)).error is ErrorCode.invalid_session_timeout


def test_member_id_never_rejoining_is_forgotten() -> None:
    h = Harness()
    h.join()
    h.advance(11_000)
    assert "g" not in h.core.groups


def test_protocols_are_chosen_by_vote() -> None:
    h = Harness()
    _a, ta = h.join_new(protocols=(("roundrobin", b""), ("range", b"")))
    result = h.joined(ta)
    assert result.protocol_name == "roundrobin"
    assert PROTOCOLS[0][0] == "range"
