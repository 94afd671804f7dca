"""Share-partitions are assigned only once their state is initialized (Kafka 4.1+):
asked for, retried, failed, and the state partition metadata record that tracks it."""

from __future__ import annotations

from share_group_harness import ShareHarness, topic_id

from strom.group.share.initialize import ShareInitializeTopic
from strom.group.share.records import ShareStatePartitionsKey, ShareStateTopic

T = topic_id("t")


def test_a_failed_initialization_is_asked_again_at_the_next_heartbeat() -> None:
    h = ShareHarness({"t": 2})
    h.initialize = False
    h.heartbeat("a", 0)
    (asked,) = h.asked
    h.apply(h.core.state_not_initialized("g", {T: frozenset({0, 1})}, h.now_ms))
    group = h.core.group("g")
    assert group is not None and group.state_partitions.initializing == ()
    assert h.heartbeat("a", 1).assignment is None
    assert len(h.asked) == 2 and h.asked[1].topics == asked.topics


def test_an_initialization_left_unanswered_is_asked_again_after_the_retry_interval() -> None:
    h = ShareHarness({"t": 2}, initialize_retry_interval_ms=30_000)
    h.initialize = False
    h.heartbeat("a", 0)
    h.now_ms += 29_999
    h.heartbeat("a", 1)
    assert len(h.asked) == 1
    h.now_ms += 1
    h.heartbeat("a", 1)
    assert len(h.asked) == 2
    # the topic is known now (being initialized), so Kafka asks with start offset 0
    assert h.asked[1].topics == (ShareInitializeTopic(T, "t", frozenset({0, 1}), 0),)


def test_partly_initialized_topics_assign_what_is_initialized() -> None:
    h = ShareHarness({"t": 3})
    h.initialize = False
    h.heartbeat("a", 0)
    h.apply(h.core.state_initialized("g", {T: frozenset({0, 2})}, h.topics, h.now_ms))
    group = h.core.group("g")
    assert group is not None
    assert group.state_partitions.initialized == (ShareStateTopic(T, "t", frozenset({0, 2})),)
    assert group.state_partitions.initializing == (ShareStateTopic(T, "t", frozenset({1})),)
    r = h.heartbeat("a", 1)
    assert r.member_epoch == 2 and r.assignment == {T: frozenset({0, 2})}
    h.apply(h.core.state_initialized("g", {T: frozenset({1})}, h.topics, h.now_ms))
    r = h.heartbeat("a", 2)
    assert r.member_epoch == 3 and r.assignment == {T: frozenset({0, 1, 2})}
    # the same answer twice writes nothing
    assert h.core.state_initialized("g", {T: frozenset({1})}, h.topics, h.now_ms).records == []


def test_a_restart_keeps_what_is_initialized() -> None:
    h = ShareHarness({"t": 2})
    h.join("a")
    restarted = ShareHarness({"t": 2})
    for key, value in h.log:
        restarted.core.load(key, value, restarted.now_ms)
    assert any(isinstance(k, ShareStatePartitionsKey) for k, _ in h.log)
    r = restarted.heartbeat("b", 0)
    assert restarted.asked == []
    assert r.assignment is not None and sum(len(ps) for ps in r.assignment.values()) == 1
