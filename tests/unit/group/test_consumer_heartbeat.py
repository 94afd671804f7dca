"""KIP-848 consumer groups: the heartbeat decision, epochs, reconciliation, timeouts."""

from __future__ import annotations

from consumer_harness import EMPTY, ConsumerHarness, topic_id
from kio.schema.errors import ErrorCode

from strom.group.consumer.state import ConsumerGroupState, MemberState

T = topic_id("t")


def test_first_member_gets_every_partition_at_epoch_one() -> None:
    h = ConsumerHarness({"t": 4})
    r = h.heartbeat("", 0)
    assert r.error == ErrorCode.none
    assert r.member_id and r.member_epoch == 1
    assert r.heartbeat_interval_ms == 5000
    assert r.assignment == {T: frozenset(range(4))}
    group = h.core.committed_group("g")
    assert group is not None and group.state == ConsumerGroupState.STABLE


def test_second_member_waits_until_the_first_revokes() -> None:
    h = ConsumerHarness({"t": 4})
    a = h.heartbeat("a", 0)
    b = h.heartbeat("b", 0)
    assert b.member_epoch == 2
    assert b.assignment == {}  # its partitions are still a's
    # a is asked to revoke two partitions, and stays at epoch 1 meanwhile
    ra = h.heartbeat("a", 1, owned={T: frozenset(range(4))})
    assert ra.member_epoch == 1 and ra.assignment is not None
    kept = ra.assignment[T]
    assert len(kept) == 2
    group = h.core.group("g")
    assert group is not None and group.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    # b still gets nothing
    rb = h.heartbeat("b", 2, owned=EMPTY)
    assert rb.assignment in (None, {})
    # a revokes: it moves to epoch 2
    ra = h.heartbeat("a", 1, owned={T: kept})
    assert ra.member_epoch == 2
    assert a.member_id == "a"
    rb = h.heartbeat("b", 2, owned=EMPTY)
    assert rb.assignment == {T: frozenset(range(4)) - kept}
    group = h.core.group("g")
    assert group is not None and group.state == ConsumerGroupState.STABLE


def test_unknown_member_and_fenced_epoch() -> None:
    h = ConsumerHarness({"t": 2})
    h.heartbeat("a", 0)
    assert h.heartbeat("x", 1, owned=EMPTY).error == ErrorCode.unknown_member_id
    assert h.heartbeat("a", 7, owned=EMPTY).error == ErrorCode.fenced_member_epoch
    assert h.heartbeat("a", 1, owned=EMPTY, group="nope").error == ErrorCode.unknown_member_id


def test_previous_epoch_is_accepted_with_a_subset() -> None:
    h = ConsumerHarness({"t": 2})
    h.heartbeat("a", 0)  # epoch 1; previous 0
    assert h.heartbeat("a", 0, owned=EMPTY).member_epoch == 1


def test_invalid_requests() -> None:
    h = ConsumerHarness({"t": 2})
    assert h.heartbeat("a", 0, group="").error == ErrorCode.invalid_request
    assert h.heartbeat("a", 0, rebalance_timeout_ms=-1).error == ErrorCode.invalid_request
    assert h.heartbeat("a", 5, group="g").error == ErrorCode.unknown_member_id
    assert h.heartbeat("a", -3).error == ErrorCode.invalid_request
    r = h.heartbeat("a", 0, server_assignor="sticky")
    assert r.error == ErrorCode.unsupported_assignor
    r = h.heartbeat("a", 0, topics=None, subscribed_topic_regex="(")
    assert r.error == ErrorCode.invalid_regular_expression


def test_leave_moves_partitions() -> None:
    h = ConsumerHarness({"t": 2})
    h.heartbeat("a", 0)
    h.heartbeat("b", 0)
    kept = h.heartbeat("a", 1, owned={T: frozenset({0, 1})}).assignment
    assert kept is not None
    ra = h.heartbeat("a", 1, owned=kept)
    assert ra.member_epoch == 2
    rb = h.heartbeat("b", 2, owned=EMPTY)
    assert rb.assignment is not None and rb.assignment[T] == frozenset({0, 1}) - kept[T]
    assert h.heartbeat("a", -1).member_epoch == -1
    rb = h.heartbeat("b", 2, owned=rb.assignment)
    assert rb.member_epoch == 3  # a left: the group epoch 3 and its new target
    assert rb.assignment == {T: frozenset({0, 1})}


def test_session_timeout_removes_member() -> None:
    h = ConsumerHarness({"t": 2}, session_timeout_ms=1000)
    h.heartbeat("a", 0)
    h.heartbeat("b", 0)
    kept = h.heartbeat("a", 1, owned={T: frozenset({0, 1})}).assignment
    assert kept is not None
    h.heartbeat("a", 1, owned=kept)
    h.now_ms += 600
    rb = h.heartbeat("b", 2, owned=EMPTY)
    h.now_ms += 600
    decisions = h.tick()
    assert len(decisions) == 1  # a's session is over, not b's
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"b"}
    rb = h.heartbeat("b", 2, owned=rb.assignment)
    assert rb.assignment == {T: frozenset({0, 1})}


def test_rebalance_timeout_fences_a_member_that_does_not_revoke() -> None:
    h = ConsumerHarness({"t": 2})
    h.heartbeat("a", 0, rebalance_timeout_ms=500)
    h.heartbeat("b", 0)
    h.heartbeat("a", 1, owned={T: frozenset({0, 1})})  # asked to revoke one
    assert h.core.next_deadline_ms() == h.now_ms + 500
    h.tick(501)
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"b"}


def test_static_member_comes_back_to_its_assignment() -> None:
    h = ConsumerHarness({"t": 4})
    h.heartbeat("a", 0, instance_id="i1")
    h.heartbeat("b", 0, instance_id="i2")
    kept = h.heartbeat("a", 1, owned={T: frozenset(range(4))}).assignment
    assert kept is not None and len(kept[T]) == 2
    ra = h.heartbeat("a", 1, owned=kept, instance_id="i1")
    assert ra.member_epoch == 2
    h.heartbeat("b", 2, owned=EMPTY, instance_id="i2")
    assert h.heartbeat("a", -2, instance_id="i1").member_epoch == -2
    # another process with the same instance id before a's leave is refused
    assert h.heartbeat("c", 0, instance_id="i2").error == ErrorCode.unreleased_instance_id
    back = h.heartbeat("a2", 0, instance_id="i1")
    assert back.error == ErrorCode.none
    assert back.assignment == kept
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"a2", "b"}
    assert h.heartbeat("a", 2, owned=EMPTY, instance_id="i1").error == ErrorCode.fenced_instance_id


def test_regex_subscription() -> None:
    h = ConsumerHarness({"orders-1": 1, "orders-2": 1, "other": 1, "__hidden": 1})
    r = h.heartbeat("a", 0, topics=None, subscribed_topic_regex="orders-.*")
    assert r.assignment == {
        topic_id("orders-1"): frozenset({0}),
        topic_id("orders-2"): frozenset({0}),
    }


def test_new_topic_partitions_bump_the_epoch() -> None:
    h = ConsumerHarness({"t": 1})
    h.heartbeat("a", 0)
    h.topics["t"] = h.topics["t"].__class__(T, 3)
    r = h.heartbeat("a", 1, owned={T: frozenset({0})})
    assert r.member_epoch == 2 and r.assignment == {T: frozenset({0, 1, 2})}


def test_group_max_size() -> None:
    h = ConsumerHarness({"t": 1}, max_size=1)
    h.heartbeat("a", 0)
    assert h.heartbeat("b", 0).error == ErrorCode.group_max_size_reached


def test_offset_commit_rules() -> None:
    h = ConsumerHarness({"t": 1})
    assert h.core.check_offset_commit("g", "", -1) is None
    h.heartbeat("a", 0)
    assert h.core.check_offset_commit("g", "a", 1) == ErrorCode.none
    assert h.core.check_offset_commit("g", "a", 0) == ErrorCode.stale_member_epoch
    assert h.core.check_offset_commit("g", "z", 1) == ErrorCode.unknown_member_id
    assert h.core.check_offset_commit("g", "a", 1, api_version=8) == ErrorCode.unsupported_version
    assert h.core.check_offset_commit("g", "", -1) == ErrorCode.unknown_member_id
    h.heartbeat("a", -1)
    assert h.core.check_offset_commit("g", "", -1) == ErrorCode.none


def test_replay_rebuilds_the_same_groups() -> None:
    h = ConsumerHarness({"t": 3, "u": 2})
    h.heartbeat("a", 0)
    h.heartbeat("b", 0, topics=("t",))
    h.heartbeat(
        "a", 1, owned={topic_id("t"): frozenset(range(3)), topic_id("u"): frozenset(range(2))}
    )
    h.heartbeat("c", 0, instance_id="i")
    other = h.replayed()
    assert other.committed == h.core.committed


def test_failed_write_is_undone() -> None:
    h = ConsumerHarness({"t": 2})
    h.heartbeat("a", 0)
    h.hold = True
    h.heartbeat("b", 0)
    assert h.core.group("g") is not None
    write_id = h.held.pop()
    assert h.core.failed(write_id) == [write_id]
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"a"}
    assert h.core.group("g") == h.core.committed_group("g")


def test_delete_only_an_empty_group() -> None:
    h = ConsumerHarness({"t": 1})
    assert h.core.delete_group("g")[0] == ErrorCode.group_id_not_found
    h.heartbeat("a", 0)
    assert h.core.delete_group("g")[0] == ErrorCode.non_empty_group
    assert h.core.live_subscriptions() == {"g": frozenset({"t"})}
    h.heartbeat("a", -1)
    assert h.core.live_subscriptions() == {}
    error, decision = h.core.delete_group("g")
    assert error == ErrorCode.none and decision.records
    h.complete(decision.write_id, decision)
    assert h.core.group("g") is None and h.core.committed_group("g") is None
    assert h.replayed().committed == {}


def test_a_failed_removal_is_tried_again() -> None:
    h = ConsumerHarness({"t": 1}, session_timeout_ms=1000)
    h.heartbeat("a", 0)
    h.hold = True
    assert len(h.tick(1001)) == 1
    h.core.failed(h.held.pop())
    group = h.core.group("g")
    assert group is not None and "a" in group.members
    h.hold = False
    assert len(h.tick(1)) == 1  # the session timer fires again
    group = h.core.group("g")
    assert group is not None and not group.members


def test_blank_ids_are_refused_as_kafka_trims_them() -> None:
    h = ConsumerHarness({"t": 2})
    for blank in ("", " ", "\t\n"):
        r = h.heartbeat("a", 0, group=blank)
        assert (r.error, r.message) == (ErrorCode.invalid_request, "GroupId can't be empty.")
        r = h.heartbeat("a", 0, instance_id=blank)
        assert (r.error, r.message) == (ErrorCode.invalid_request, "InstanceId can't be empty.")
        r = h.heartbeat("a", 0, rack_id=blank)
        assert (r.error, r.message) == (ErrorCode.invalid_request, "RackId can't be empty.")
        r = h.heartbeat(blank, 1)
        assert (r.error, r.message) == (ErrorCode.invalid_request, "MemberId can't be empty.")
    assert h.core.group_ids() == []


def test_v1_needs_a_member_id_even_to_join() -> None:
    h = ConsumerHarness({"t": 2})
    r = h.heartbeat("", 0, api_version=1)
    assert (r.error, r.message) == (ErrorCode.invalid_request, "MemberId can't be empty.")
    assert h.heartbeat(" ", 0, api_version=1).error == ErrorCode.invalid_request
    joined = h.heartbeat("", 0, api_version=0)  # v0: the coordinator makes one
    assert joined.error == ErrorCode.none and joined.member_id


def test_a_join_with_an_empty_subscription_is_a_member_subscribed_to_nothing() -> None:
    h = ConsumerHarness({"t": 2})
    r = h.heartbeat("a", 0, topics=None, subscribed_topic_regex=None)
    assert r.error == ErrorCode.invalid_request
    assert r.message is not None and "must be non-null" in r.message
    empty = h.heartbeat("a", 0, topics=())
    assert (empty.error, empty.assignment) == (ErrorCode.none, {})
    regex = h.heartbeat("b", 0, topics=None, subscribed_topic_regex="")
    assert (regex.error, regex.assignment) == (ErrorCode.none, {})
    group = h.core.group("g")
    assert group is not None and set(group.members) == {"a", "b"}


def test_a_join_listing_a_topic_without_partitions_is_refused() -> None:
    h = ConsumerHarness({"t": 2})
    r = h.heartbeat("a", 0, owned={topic_id("t"): frozenset()})
    assert (r.error, r.message) == (
        ErrorCode.invalid_request,
        "TopicPartitions must be empty when (re-)joining.",
    )


def test_member_epoch_rules() -> None:
    h = ConsumerHarness({"t": 2})
    assert h.heartbeat("a", -3).message == "MemberEpoch is invalid."
    assert h.heartbeat("a", -(2**31)).message == "MemberEpoch is invalid."
    assert h.heartbeat("a", -2).message == "InstanceId can't be null."
    assert h.heartbeat("", -1).message == "MemberId can't be empty."
    # v0 lets a static member leave without its member id: the instance decides.
    h.heartbeat("a", 0, instance_id="i")
    r = h.heartbeat("", -2, instance_id="i")
    assert r.error == ErrorCode.fenced_instance_id
    assert h.heartbeat("a", 2**31 - 1).error == ErrorCode.fenced_member_epoch


def test_rebalance_timeouts_of_zero_and_huge_are_accepted_at_join() -> None:
    h = ConsumerHarness({"t": 2})
    assert h.heartbeat("a", 0, rebalance_timeout_ms=0).error == ErrorCode.none
    assert h.heartbeat("b", 0, rebalance_timeout_ms=2**31 - 1).error == ErrorCode.none
    assert h.heartbeat("c", 0, rebalance_timeout_ms=-1).error == ErrorCode.invalid_request
