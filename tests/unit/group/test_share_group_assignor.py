"""The `simple` share group assignor: Kafka's sharing rule, coverage, determinism."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from strom.group.share.assignor import ShareMemberSpec, assign_simple

A = uuid.UUID(int=1)
B = uuid.UUID(int=2)
TOPICS = [uuid.UUID(int=i) for i in range(1, 5)]


def spec(*topics: uuid.UUID, **current: frozenset[int]) -> ShareMemberSpec:
    return ShareMemberSpec(
        frozenset(topics), {uuid.UUID(int=int(k[1:])): v for k, v in current.items()}
    )


def test_fewer_members_than_partitions_split_them() -> None:
    result = assign_simple({"m1": spec(A), "m2": spec(A)}, {A: 5})
    # counts 3 and 2; unowned partitions are dealt round robin
    assert result == {"m1": {A: frozenset({0, 2, 4})}, "m2": {A: frozenset({1, 3})}}


def test_more_members_than_partitions_share_them() -> None:
    result = assign_simple({m: spec(A) for m in ("m1", "m2", "m3")}, {A: 1})
    assert result == {m: {A: frozenset({0})} for m in ("m1", "m2", "m3")}
    result = assign_simple({m: spec(A) for m in ("m1", "m2", "m3")}, {A: 2})
    # sharing ceil(3/2) = 2: four shares, counts 2, 1, 1
    assert result == {
        "m1": {A: frozenset({0, 1})},
        "m2": {A: frozenset({0})},
        "m3": {A: frozenset({1})},
    }


def test_current_assignment_is_kept_where_balance_allows() -> None:
    result = assign_simple({"m1": spec(A), "m2": spec(A, t1=frozenset({0, 1}))}, {A: 2})
    assert result == {"m1": {A: frozenset({1})}, "m2": {A: frozenset({0})}}


def test_heterogeneous_subscriptions_go_topic_by_topic() -> None:
    result = assign_simple({"m1": spec(A), "m2": spec(A, B)}, {A: 2, B: 1})
    assert result == {
        "m1": {A: frozenset({0})},
        "m2": {A: frozenset({1}), B: frozenset({0})},
    }


def test_no_members_or_no_topics() -> None:
    assert assign_simple({}, {A: 3}) == {}
    assert assign_simple({"m1": spec()}, {A: 3}) == {"m1": {}}


@st.composite
def groups(draw: st.DrawFn) -> tuple[dict[str, ShareMemberSpec], dict[uuid.UUID, int]]:
    topics = {t: draw(st.integers(0, 6)) for t in draw(st.sets(st.sampled_from(TOPICS)))}
    member_ids = draw(st.sets(st.text("abcdef", min_size=1, max_size=3), max_size=9))
    members = {}
    for member_id in sorted(member_ids):
        subscribed = draw(st.frozensets(st.sampled_from(TOPICS)))
        current = draw(
            st.dictionaries(
                st.sampled_from(TOPICS), st.frozensets(st.integers(0, 7), max_size=4), max_size=3
            )
        )
        members[member_id] = ShareMemberSpec(subscribed, current)
    return members, topics


@given(groups())
def test_every_subscribed_partition_has_a_subscribed_member(
    group: tuple[dict[str, ShareMemberSpec], dict[uuid.UUID, int]],
) -> None:
    members, topics = group
    result = assign_simple(members, topics)
    assert set(result) == set(members)
    for topic_id, count in topics.items():
        subscribers = {m for m, s in members.items() if topic_id in s.topics}
        for partition in range(count):
            holders = {m for m in result if partition in result[m].get(topic_id, frozenset())}
            if subscribers:
                assert holders, (topic_id, partition)
            assert holders <= subscribers
    for member_id, assignment in result.items():
        for topic_id, partitions in assignment.items():
            assert topic_id in members[member_id].topics and topic_id in topics
            assert partitions and all(0 <= p < topics[topic_id] for p in partitions)


@given(groups())
def test_same_input_same_output(
    group: tuple[dict[str, ShareMemberSpec], dict[uuid.UUID, int]],
) -> None:
    members, topics = group
    shuffled = dict(reversed(list(members.items())))
    assert assign_simple(members, topics) == assign_simple(
        shuffled, dict(reversed(list(topics.items())))
    )


@given(groups())
def test_homogeneous_groups_are_balanced(
    group: tuple[dict[str, ShareMemberSpec], dict[uuid.UUID, int]],
) -> None:
    members, topics = group
    same = {m: ShareMemberSpec(frozenset(topics), s.current) for m, s in members.items()}
    result = assign_simple(same, topics)
    total = sum(topics.values())
    if not same or not total:
        return
    sharing = -(-len(same) // total)
    counts = [sum(len(ps) for ps in a.values()) for a in result.values()]
    assert max(counts) - min(counts) <= 1 or sharing > 1
    for topic_id, count in topics.items():
        for partition in range(count):
            holders = [m for m in result if partition in result[m].get(topic_id, frozenset())]
            assert 1 <= len(holders) <= sharing


@given(groups(), st.data())
def test_only_assignable_partitions_are_given_out_and_all_of_them(
    group: tuple[dict[str, ShareMemberSpec], dict[uuid.UUID, int]], data: st.DataObject
) -> None:
    members, topics = group
    assignable = {
        t: data.draw(st.frozensets(st.integers(0, max(count - 1, 0))))
        for t, count in topics.items()
    }
    result = assign_simple(members, topics, assignable)
    for topic_id, count in topics.items():
        subscribed = any(topic_id in s.topics for s in members.values())
        for partition in range(count):
            holders = {m for m in result if partition in result[m].get(topic_id, frozenset())}
            if partition not in assignable[topic_id]:
                assert not holders
            elif subscribed:
                assert holders
