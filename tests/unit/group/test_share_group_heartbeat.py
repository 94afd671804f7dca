"""KIP-932 share groups: the ShareGroupHeartbeat decision, as transcripts."""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from share_group_harness import ShareHarness, topic_id

from strom.group.share.heartbeat import ShareTopic
from strom.group.share.initialize import ShareInitialize, ShareInitializeTopic
from strom.group.share.namespace import GroupRequest, GroupType, share_group_conflict
from strom.group.share.records import (
    ShareCurrentAssignmentKey,
    ShareGroupEpochKey,
    ShareMemberKey,
    ShareStatePartitionsKey,
    ShareTargetEpochKey,
    ShareTargetEpochValue,
)
from strom.group.share.state import ShareGroupState

T = topic_id("t")
U = topic_id("u")


def test_the_first_member_waits_for_the_share_state_then_gets_every_partition() -> None:
    h = ShareHarness({"t": 3})
    h.initialize = False
    r = h.heartbeat("a", 0)
    assert r.error == ErrorCode.none
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("a", 1, 5000)
    assert r.assignment == {}  # nothing is initialized yet
    (asked,) = h.asked
    assert asked == ShareInitialize(
        "g", 1, (ShareInitializeTopic(T, "t", frozenset({0, 1, 2}), -1),)
    )
    assert [type(k) for k, _ in h.log] == [
        ShareMemberKey,
        ShareGroupEpochKey,
        ShareTargetEpochKey,
        ShareCurrentAssignmentKey,
        ShareStatePartitionsKey,
    ]
    assert h.heartbeat("a", 1).assignment is None
    assert len(h.asked) == 1  # still being initialized: not asked again
    h.initialize_all(asked)
    r = h.heartbeat("a", 1)
    assert r.member_epoch == 2 and r.assignment == {T: frozenset({0, 1, 2})}
    group = h.core.committed_group("g")
    assert group is not None and group.state == ShareGroupState.STABLE


def test_a_second_member_gets_its_share_at_once_without_revocation() -> None:
    h = ShareHarness({"t": 4})
    assert h.join("a").member_epoch == 2
    b = h.join("b")  # the state is initialized already: b is assigned at once
    assert b.member_epoch == 3 and b.assignment == {T: frozenset({2, 3})}
    # a is moved straight to its new target, no revocation step in between
    a = h.heartbeat("a", 2)
    assert a.member_epoch == 3 and a.assignment == {T: frozenset({0, 1})}
    # a steady heartbeat sends no assignment
    again = h.heartbeat("a", 3)
    assert again.member_epoch == 3 and again.assignment is None


def test_more_members_than_partitions_share_them() -> None:
    h = ShareHarness({"t": 2})
    for m in "abcde":
        h.heartbeat(m, 0)
    group = h.core.group("g")
    assert group is not None
    # ceil(5 / 2) = 3 members per partition: six shares over five members
    holders: dict[int, set[str]] = {0: set(), 1: set()}
    for member_id, target in group.target.items():
        for p in target.get(T, frozenset()):
            holders[p].add(member_id)
    assert [len(holders[0]), len(holders[1])] == [3, 3]
    counts = sorted(sum(len(ps) for ps in t.values()) for t in group.target.values())
    assert counts == [1, 1, 1, 1, 2]


def test_leave_removes_the_member_and_the_last_leave_empties_the_group() -> None:
    h = ShareHarness({"t": 2})
    h.join("a")
    h.join("b")
    r = h.heartbeat("b", -1)
    assert (r.error, r.member_id, r.member_epoch) == (ErrorCode.none, "b", -1)
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"a"} and group.group_epoch == 4
    r = h.heartbeat("a", 2)  # it never heard of epoch 3; its partitions are the same at 4
    assert r.member_epoch == 4 and r.assignment is None
    group = h.core.group("g")
    assert group is not None and group.members["a"].assigned == {T: frozenset({0, 1})}
    h.heartbeat("a", -1)
    group = h.core.group("g")
    assert group is not None and group.state == ShareGroupState.EMPTY
    assert group.assignment_epoch == group.group_epoch == 5
    assert h.log[-1] == (ShareTargetEpochKey("g"), ShareTargetEpochValue(5))


def test_session_timeout_removes_a_quiet_member() -> None:
    h = ShareHarness({"t": 2}, session_timeout_ms=10_000)
    h.heartbeat("a", 0)
    h.heartbeat("b", 0)
    h.advance(6_000)
    h.heartbeat("a", 1)
    assert h.core.next_deadline_ms() == h.now_ms - 6_000 + 10_000
    h.advance(4_000)  # b's session ends exactly now
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"a"}
    assert h.heartbeat("b", 2).error == ErrorCode.unknown_member_id


def test_subscription_change_bumps_the_epoch_and_filters_the_assignment() -> None:
    h = ShareHarness({"t": 2, "u": 1})
    r = h.join("a", ("t",))
    assert r.member_epoch == 2 and r.assignment == {T: frozenset({0, 1})}
    r = h.heartbeat("a", 2, ("t", "u"))  # u is asked for: t only, for now
    assert r.member_epoch == 3 and r.assignment == {T: frozenset({0, 1})}
    assert h.asked[-1].topics == (ShareInitializeTopic(U, "u", frozenset({0}), -1),)
    r = h.heartbeat("a", 3)
    assert r.member_epoch == 4 and r.assignment == {T: frozenset({0, 1}), U: frozenset({0})}
    r = h.heartbeat("a", 4, ("u",))
    assert r.member_epoch == 5 and r.assignment == {U: frozenset({0})}


def test_a_new_topic_or_more_partitions_bump_the_epoch() -> None:
    h = ShareHarness({"t": 1})
    assert h.join("a", ("t", "later")).member_epoch == 2
    h.topics = {**h.topics, "later": ShareTopic(topic_id("later"), 2)}
    r = h.heartbeat("a", 2)  # the topic's state is asked for and initialized
    assert r.member_epoch == 3 and r.assignment is None
    r = h.heartbeat("a", 3)
    assert r.member_epoch == 4
    assert r.assignment == {T: frozenset({0}), topic_id("later"): frozenset({0, 1})}
    h.topics = {**h.topics, "t": ShareTopic(T, 3)}
    r = h.heartbeat("a", 4)
    # new partitions of a known topic start at offset 0
    assert h.asked[-1].topics == (ShareInitializeTopic(T, "t", frozenset({1, 2}), 0),)
    r = h.heartbeat("a", r.member_epoch)
    assert r.assignment is not None and r.assignment[T] == {0, 1, 2}
    r = h.heartbeat("a", r.member_epoch)
    assert r.assignment is None


def test_rack_or_client_change_writes_the_member_without_a_bump() -> None:
    h = ShareHarness({"t": 1})
    h.join("a", client_id="c1")
    before = len(h.log)
    r = h.heartbeat("a", 2, rack_id="r1", client_id="c1")
    assert r.member_epoch == 2
    assert [type(k) for k, _ in h.log[before:]] == [ShareMemberKey]


def test_previous_epoch_is_accepted_other_epochs_are_fenced() -> None:
    h = ShareHarness({"t": 2})
    h.heartbeat("a", 0)
    h.heartbeat("b", 0)
    assert h.heartbeat("a", 1).member_epoch == 2  # a moves to 2, previous 1
    lost = h.heartbeat("a", 1)  # the answer with epoch 2 was lost
    assert lost.error == ErrorCode.none and lost.member_epoch == 2
    ahead = h.heartbeat("a", 5)
    assert ahead.error == ErrorCode.fenced_member_epoch
    assert ahead.message is not None and "greater member epoch (5)" in ahead.message
    group = h.core.group("g")
    assert group is not None and group.members["b"].previous_member_epoch == 0
    behind = h.heartbeat("b", 1)
    assert behind.error == ErrorCode.fenced_member_epoch
    assert behind.message is not None and "previous member epoch (0)" in behind.message


def test_rejoin_with_epoch_zero_keeps_the_member() -> None:
    h = ShareHarness({"t": 2})
    h.join("a")
    r = h.heartbeat("a", 0)
    assert r.error == ErrorCode.none and r.member_epoch == 2
    assert r.assignment == {T: frozenset({0, 1})}


def test_invalid_requests() -> None:
    h = ShareHarness({"t": 1})
    cases = [
        (("", 0, ("t",)), {}, "MemberId can't be empty."),
        (("a", 0, ("t",)), {"group_id": ""}, "GroupId can't be empty."),
        (("a", 0, ("t",)), {"rack_id": ""}, "RackId can't be empty."),
        (("a", 0, ()), {}, "SubscribedTopicNames must be set in first request."),
        (("a", -2, None), {}, "MemberEpoch is invalid."),
    ]
    for args, fields, message in cases:
        r = h.heartbeat(*args, **fields)
        assert (r.error, r.message) == (ErrorCode.invalid_request, message)
    assert h.log == []


def test_unknown_group_and_member() -> None:
    h = ShareHarness({"t": 1})
    r = h.heartbeat("a", 3)
    assert (r.error, r.message) == (ErrorCode.group_id_not_found, "Share group g not found.")
    r = h.heartbeat("a", -1)
    assert (r.error, r.message) == (ErrorCode.group_id_not_found, "Group g not found.")
    h.heartbeat("a", 0)
    r = h.heartbeat("x", 1)
    assert (r.error, r.message) == (
        ErrorCode.unknown_member_id,
        "Member x is not a member of group g.",
    )
    assert h.heartbeat("x", -1).error == ErrorCode.unknown_member_id


def test_max_size() -> None:
    h = ShareHarness({"t": 1}, max_size=2)
    h.heartbeat("a", 0)
    h.heartbeat("b", 0)
    r = h.heartbeat("c", 0)
    assert (r.error, r.message) == (
        ErrorCode.group_max_size_reached,
        "The share group has reached its maximum capacity of 2 members.",
    )
    assert h.heartbeat("a", 0).error == ErrorCode.none  # members may still rejoin


def test_a_group_id_of_another_type_is_not_a_share_group() -> None:
    h = ShareHarness({"t": 1})
    h.others["c"] = GroupType.CONSUMER
    r = h.heartbeat("a", 0, group_id="c")
    assert (r.error, r.message) == (ErrorCode.group_id_not_found, "Group c is not a share group.")
    assert h.core.describe("c", h.topics, h.other)[:2] == (
        ErrorCode.group_id_not_found,
        "Group c is not a share group.",
    )
    assert h.core.describe("nope", h.topics, h.other)[0] == ErrorCode.group_id_not_found


def test_describe() -> None:
    h = ShareHarness({"t": 2})
    h.join("b", client_id="cb", client_host="/10.0.0.2")
    h.join("a", rack_id="r", client_id="ca", client_host="/10.0.0.1")
    h.heartbeat("b", 2, client_id="cb", client_host="/10.0.0.2")
    error, message, group = h.core.describe("g", h.topics, h.other)
    assert error == ErrorCode.none and message is None and group is not None
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 3, 3)
    assert group.assignor_name == "simple"
    a, b = group.members
    assert (a.member_id, a.rack_id, a.client_id, a.client_host) == ("a", "r", "ca", "/10.0.0.1")
    assert a.assignment == ((T, "t", (1,)),)  # b kept partition 0 (sticky)
    assert (b.member_id, b.member_epoch, b.assignment) == ("b", 3, ((T, "t", (0,)),))


def test_a_failed_write_leaves_the_committed_group() -> None:
    h = ShareHarness({"t": 2})
    h.heartbeat("a", 0)
    h.hold = True
    h.heartbeat("b", 0)
    (decision,) = h.held
    assert h.core.failed(decision.write_id) == [decision.write_id]
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"a"} and group.group_epoch == 1


def test_a_share_group_id_blocks_the_other_protocols() -> None:
    assert share_group_conflict("s", GroupRequest.CONSUMER_GROUP) == (
        ErrorCode.group_id_not_found,
        "Group s is not a consumer group.",
    )
    assert share_group_conflict("s", GroupRequest.JOIN_GROUP) == (
        ErrorCode.inconsistent_group_protocol,
        None,
    )
    assert share_group_conflict("s", GroupRequest.SYNC_GROUP) == (ErrorCode.unknown_member_id, None)
    assert share_group_conflict("s", GroupRequest.LEAVE_GROUP) == (
        ErrorCode.unknown_member_id,
        "Group s not found.",
    )


def test_delete_only_an_empty_group() -> None:
    h = ShareHarness({"t": 1})
    h.heartbeat("a", 0)
    code, _ = h.core.delete_group("g")
    assert code == ErrorCode.non_empty_group
    h.heartbeat("a", -1)
    code, decision = h.core.delete_group("g")
    assert code == ErrorCode.none
    h.apply(decision)
    assert h.core.group("g") is None and h.core.committed_group("g") is None
    assert h.replayed() == {}
    assert h.core.delete_group("g")[0] == ErrorCode.group_id_not_found


def test_a_restart_loads_the_records_and_nothing_moves() -> None:
    h = ShareHarness({"t": 3})
    h.heartbeat("a", 0)
    h.heartbeat("b", 0)
    h.heartbeat("a", 1)
    before = h.core.committed_group("g")
    restarted = ShareHarness({"t": 3})
    for key, value in h.log:
        restarted.core.load(key, value, restarted.now_ms)
    group = restarted.core.committed_group("g")
    assert group is not None and before is not None
    assert (group.members, group.target, group.group_epoch) == (
        before.members,
        before.target,
        before.group_epoch,
    )
    r = restarted.heartbeat("a", 2)
    assert r.error == ErrorCode.none and r.member_epoch == 2 and r.assignment is None
    assert restarted.log == []  # nothing to write: same epoch, same topics
    restarted.advance(30_000)
    restarted.heartbeat("a", 2)
    restarted.advance(15_000)  # b never came back: its session from the load ran out
    group = restarted.core.group("g")
    assert group is not None and set(group.members) == {"a"}


def test_forget_drops_the_groups_their_writes_and_sessions() -> None:
    h = ShareHarness({"t": 1})
    h.join("a")
    h.hold = True
    h.heartbeat("b", 0)
    (held,) = h.held
    assert h.core.forget(["g"]) == [held.write_id]
    assert h.core.group("g") is None and h.core.next_deadline_ms() is None
