"""Hypothesis: random joins, heartbeats, leaves, session expiries, topic changes and
failed writes (the share-partition state initialized as soon as asked). After every
step every initialized subscribed partition is in some member's target,
every member that heartbeats is at its target, and replaying the records written equals
the live state."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from share_group_harness import ShareHarness, topic_id

from strom.group.share.heartbeat import ShareTopic, metadata_hash
from strom.group.share.initialize import assignable_partitions, initialized_assignment_pending
from strom.group.share.state import ShareGroup

MEMBERS = ["m1", "m2", "m3", "m4", "m5"]
NAMES = ["t1", "t2", "t3"]

step = st.one_of(
    st.tuples(
        st.just("join"), st.sampled_from(MEMBERS), st.frozensets(st.sampled_from(NAMES), min_size=1)
    ),
    st.tuples(st.just("beat"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(
        st.just("resubscribe"),
        st.sampled_from(MEMBERS),
        st.frozensets(st.sampled_from(NAMES), min_size=1),
    ),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS), st.none()),
    st.tuples(st.just("wait"), st.integers(1_000, 30_000), st.none()),
    st.tuples(st.just("grow"), st.sampled_from(NAMES), st.none()),
    st.tuples(st.just("fail"), st.sampled_from(MEMBERS), st.none()),
)


def _same(a: ShareGroup, b: ShareGroup) -> bool:
    return (
        a.group_epoch,
        a.metadata_hash,
        a.assignment_epoch,
        a.members,
        {m: dict(t) for m, t in a.target.items()},
    ) == (
        b.group_epoch,
        b.metadata_hash,
        b.assignment_epoch,
        b.members,
        {m: dict(t) for m, t in b.target.items()},
    )


def _check(h: ShareHarness) -> None:
    live = h.core.committed_group("g")
    replayed = h.replayed().get("g")
    assert (live is None) == (replayed is None)
    if live is None or replayed is None:
        return
    assert _same(live, replayed)
    assert h.core.group("g") is not None and _same(h.core.group("g"), live)  # type: ignore[arg-type]
    if live.group_epoch != live.assignment_epoch:
        return
    if metadata_hash(live.subscribed_topic_names(), h.topics) != live.metadata_hash:
        return  # the topics changed since: the next heartbeat reassigns
    ids = {h.topics[n].topic_id for n in live.subscribed_topic_names() if n in h.topics}
    if initialized_assignment_pending(live, ids):
        return  # state initialized since: the next heartbeat reassigns
    assignable = assignable_partitions(live)
    for name in live.subscribed_topic_names():
        topic = h.topics.get(name)
        if topic is None:
            continue
        subscribers = {
            m for m, member in live.members.items() if name in member.subscribed_topic_names
        }
        for p in sorted(assignable.get(topic.topic_id, frozenset())):
            holders = {m for m, t in live.target.items() if p in t.get(topic.topic_id, frozenset())}
            assert holders and holders <= subscribers, (name, p)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, max_size=40))
def test_random_membership_keeps_partitions_assigned_and_replay_equal(steps: list) -> None:  # type: ignore[type-arg]
    h = ShareHarness({"t1": 2, "t2": 1}, session_timeout_ms=20_000)
    epochs: dict[str, int] = {}
    for kind, arg, topics in steps:
        if kind == "wait":
            h.advance(arg)
            group = h.core.group("g")
            epochs = {m: e for m, e in epochs.items() if group is not None and m in group.members}
        elif kind == "grow":
            old = h.topics.get(arg)
            h.topics = {
                **h.topics,
                arg: ShareTopic(topic_id(arg), (old.partitions if old else 0) + 1),
            }
        elif kind in ("join", "resubscribe"):
            epoch = 0 if kind == "join" else epochs.get(arg)
            if epoch is None:
                continue
            r = h.heartbeat(arg, epoch, tuple(sorted(topics)))
            assert r.error == ErrorCode.none, r.message
            epochs[arg] = r.member_epoch
        elif kind == "beat":
            if arg not in epochs:
                continue
            r = h.heartbeat(arg, epochs[arg])
            assert r.error == ErrorCode.none, r.message
            epochs[arg] = r.member_epoch
            group = h.core.group("g")
            assert group is not None and r.member_epoch == group.assignment_epoch
        elif kind == "leave":
            if arg not in epochs:
                continue
            assert h.heartbeat(arg, -1).error == ErrorCode.none
            del epochs[arg]
        else:  # a join whose write fails: nothing of it stays
            if arg in epochs:
                continue
            h.hold = True
            r = h.heartbeat(arg, 0, ("t1",))
            h.hold = False
            for decision in h.held:
                h.core.failed(decision.write_id)
            h.held.clear()
            group = h.core.group("g")
            assert group is None or arg not in group.members
        _check(h)
    # Settle: every member heartbeats until nothing changes; then every subscribed
    # partition that exists is initialized and assigned.
    for _ in range(3):
        for member_id in sorted(epochs):
            r = h.heartbeat(member_id, epochs[member_id])
            assert r.error == ErrorCode.none, r.message
            epochs[member_id] = r.member_epoch
    _check(h)
    live = h.core.committed_group("g")
    if live is None or not live.members:
        return
    for name in live.subscribed_topic_names():
        if name in h.topics:
            topic = h.topics[name]
            assigned = set().union(*(t.get(topic.topic_id, set()) for t in live.target.values()))
            assert assigned == set(range(topic.partitions)), name
