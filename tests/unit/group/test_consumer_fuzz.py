"""Hypothesis: assignors, reconciliation over random sequences, record round trips."""

from __future__ import annotations

import uuid

from consumer_harness import EMPTY, ConsumerHarness, topic_id
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.group.consumer.assignors import AssignmentSpec, assign_range, assign_uniform
from strom.group.consumer.records import (
    ConsumerGroupEpochKey,
    ConsumerGroupEpochValue,
    CurrentAssignmentKey,
    CurrentAssignmentValue,
    MemberSubscriptionKey,
    MemberSubscriptionValue,
    PartitionMetadataKey,
    PartitionMetadataValue,
    TargetAssignmentEpochKey,
    TargetAssignmentEpochValue,
    TargetAssignmentKey,
    TargetAssignmentValue,
    TopicMetadata,
    decode_consumer_key,
    decode_consumer_value,
    encode_consumer_key,
    encode_consumer_value,
)

TOPICS = [topic_id(f"t{i}") for i in range(4)]

members_st = st.dictionaries(
    st.sampled_from([f"m{i}" for i in range(8)]),
    st.frozensets(st.sampled_from(TOPICS), min_size=1),
    min_size=1,
)
topics_st = st.fixed_dictionaries({t: st.integers(0, 12) for t in TOPICS})


def _specs(
    subs: dict[str, frozenset[uuid.UUID]], current: dict[str, dict[uuid.UUID, frozenset[int]]]
) -> dict[str, AssignmentSpec]:
    return {m: AssignmentSpec(topics, current.get(m, {})) for m, topics in subs.items()}


def _owners(result: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[tuple[uuid.UUID, int], str]:
    owners: dict[tuple[uuid.UUID, int], str] = {}
    for member, assignment in result.items():
        for t, ps in assignment.items():
            for p in ps:
                assert (t, p) not in owners, "a partition assigned twice"
                owners[(t, p)] = member
    return owners


def _check_exact(
    subs: dict[str, frozenset[uuid.UUID]], topics: dict[uuid.UUID, int], result
) -> None:  # type: ignore[no-untyped-def]
    owners = _owners(result)
    wanted = {
        (t, p) for t, n in topics.items() if any(t in s for s in subs.values()) for p in range(n)
    }
    assert set(owners) == wanted
    for (t, _), member in owners.items():
        assert t in subs[member]


@settings(max_examples=300, deadline=None)
@given(members_st, topics_st, st.data())
def test_uniform_is_exact_balanced_and_sticky(subs, topics, data) -> None:  # type: ignore[no-untyped-def]
    first = assign_uniform(_specs(subs, {}), topics)
    _check_exact(subs, topics, first)
    load = {m: sum(len(ps) for ps in first.get(m, {}).values()) for m in subs}
    owners = _owners(first)
    for (t, _), member in owners.items():  # no move would balance it better
        for other in subs:
            if t in subs[other]:
                assert load[member] <= load[other] + 1
    if len(set(subs.values())) == 1:
        assert max(load.values()) - min(load.values()) <= 1
    # the same members again: nothing moves
    assert assign_uniform(_specs(subs, first), topics) == first
    # one member leaves: the others keep what they had
    if len(subs) > 1:
        gone = data.draw(st.sampled_from(sorted(subs)))
        rest = {m: s for m, s in subs.items() if m != gone}
        second = assign_uniform(_specs(rest, first), topics)
        _check_exact(rest, topics, second)
        if len(set(rest.values())) == 1 and len(set(subs.values())) == 1:
            for m in rest:
                for t, ps in first.get(m, {}).items():
                    assert ps <= second[m].get(t, frozenset())


@settings(max_examples=300, deadline=None)
@given(members_st, topics_st)
def test_range_is_exact_and_balanced_per_topic(subs, topics) -> None:  # type: ignore[no-untyped-def]
    result = assign_range(_specs(subs, {}), topics)
    _check_exact(subs, topics, result)
    for t in topics:
        counts = [len(result[m].get(t, frozenset())) for m in subs if t in subs[m]]
        if counts:
            assert max(counts) - min(counts) <= 1


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["join", "heartbeat", "apply", "leave", "static-leave", "expire"]),
            st.integers(0, 4),
        ),
        max_size=80,
    ),
    st.sampled_from(["uniform", "range"]),
    st.integers(0, 2**32),
)
def test_no_partition_is_owned_twice(steps, assignor, seed) -> None:  # type: ignore[no-untyped-def]
    """Clients as real ones behave: a heartbeat reports what the client consumes; an
    assignment it gets is applied later ('apply': partitions revoked and added, then a
    heartbeat), so a slow client keeps consuming what it was asked to give up. Members
    join, leave, leave for a while (static) and die. At no point do two members hold a
    partition by the coordinator's books, nor do two clients consume one."""
    h = ConsumerHarness(
        {"a": 5, "b": 3}, seed=seed, assignors=(assignor,), session_timeout_ms=10_000
    )
    # who -> [member id, epoch, consumed, last assignment received (None: applied)]
    clients: dict[int, list] = {}  # type: ignore[type-arg]

    def instance(who: int) -> str | None:
        return f"i{who}" if who % 2 else None

    def beat(who: int) -> None:
        member_id, epoch, owned, _ = clients[who]
        r = h.heartbeat(member_id, epoch, owned=owned)
        if r.error != 0:
            del clients[who]  # fenced: it drops everything and may join again
            return
        clients[who][1] = r.member_epoch
        if r.assignment is not None:
            clients[who][3] = dict(r.assignment)

    for action, who in steps:
        h.now_ms += 1000
        if action == "join" and who not in clients:
            r = h.heartbeat(f"m{who}-{h.now_ms}", 0, instance_id=instance(who))
            if r.error == 0 and r.member_id:
                clients[who] = [r.member_id, r.member_epoch, {}, dict(r.assignment or {})]
        elif action == "heartbeat" and who in clients:
            beat(who)
        elif action == "apply" and who in clients:
            if clients[who][3] is not None:
                clients[who][2], clients[who][3] = clients[who][3], None
            beat(who)
        elif action == "leave" and who in clients:
            h.heartbeat(clients.pop(who)[0], -1, instance_id=instance(who))
        elif action == "static-leave" and who in clients and who % 2:
            h.heartbeat(clients.pop(who)[0], -2, instance_id=f"i{who}")
        elif action == "expire":
            h.tick(10_001)
            group = h.core.group("g")
            clients = {
                w: c for w, c in clients.items() if group is not None and c[0] in group.members
            }
        group = h.core.group("g")
        if group is None:
            continue
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for tp in member.owned():
                assert tp not in seen, f"{tp} held by {seen[tp]} and {member.member_id}"
                seen[tp] = member.member_id
        consumed: dict[tuple[uuid.UUID, int], int] = {}
        for w, (_, _, owned, _) in clients.items():
            for t, ps in owned.items():
                for p in ps:
                    assert (t, p) not in consumed, f"{consumed[(t, p)]} and {w} consume {(t, p)}"
                    consumed[(t, p)] = w
    assert h.replayed().committed == h.core.committed


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["join", "heartbeat", "leave", "expire"]),
            st.integers(0, 3),
            st.booleans(),
        ),
        max_size=50,
    ),
    st.integers(0, 2**32),
)
def test_a_failed_write_leaves_the_state_its_records_give(steps, seed) -> None:  # type: ignore[no-untyped-def]
    """Some writes fail (their decision and the later ones of the group are dropped); the
    others are durable. After each step the committed groups are exactly what replaying
    the durable records gives, and with nothing pending the newest state is the
    committed one."""
    h = ConsumerHarness({"a": 4}, seed=seed, session_timeout_ms=5_000)
    clients: dict[int, tuple[str, int, dict[uuid.UUID, frozenset[int]]]] = {}
    for action, who, fails in steps:
        h.now_ms += 1000
        h.hold = fails
        if action == "join" and who not in clients:
            r = h.heartbeat(f"m{who}-{h.now_ms}", 0)
            if r.error == 0 and r.member_id and not fails:
                clients[who] = (r.member_id, r.member_epoch, dict(r.assignment or {}))
        elif action == "heartbeat" and who in clients:
            member_id, epoch, owned = clients[who]
            r = h.heartbeat(member_id, epoch, owned=owned)
            if r.error != 0:
                del clients[who]
            elif not fails:
                assignment = owned if r.assignment is None else dict(r.assignment)
                clients[who] = (member_id, r.member_epoch, assignment)
        elif action == "leave" and who in clients:
            h.heartbeat(clients[who][0], -1)
            if not fails:
                del clients[who]
        elif action == "expire":
            h.tick(5_001)
        for write_id in h.held:
            h.core.failed(write_id)
        h.held.clear()
        h.hold = False
        assert h.core.pending == 0
        assert h.replayed().committed == h.core.committed
        assert h.core.group("g") == h.core.committed_group("g")


uuids = st.uuids()
assignment_st = st.dictionaries(
    uuids, st.frozensets(st.integers(0, 2**31 - 1), max_size=5), max_size=3
)
text = st.text(max_size=10)
opt_text = st.none() | text

records_st = st.one_of(
    st.tuples(
        st.builds(ConsumerGroupEpochKey, text),
        st.builds(ConsumerGroupEpochValue, st.integers(-(2**31), 2**31 - 1)),
    ),
    st.tuples(
        st.builds(PartitionMetadataKey, text),
        st.builds(
            PartitionMetadataValue,
            st.lists(st.builds(TopicMetadata, uuids, text, st.integers(0, 1000)), max_size=3).map(
                tuple
            ),
        ),
    ),
    st.tuples(
        st.builds(MemberSubscriptionKey, text, text),
        st.builds(
            MemberSubscriptionValue,
            opt_text,
            opt_text,
            text,
            text,
            st.lists(text, max_size=3).map(tuple),
            opt_text,
            st.integers(-1, 2**31 - 1),
            opt_text,
        ),
    ),
    st.tuples(
        st.builds(TargetAssignmentEpochKey, text),
        st.builds(TargetAssignmentEpochValue, st.integers(-1, 2**31 - 1)),
    ),
    st.tuples(
        st.builds(TargetAssignmentKey, text, text), st.builds(TargetAssignmentValue, assignment_st)
    ),
    st.tuples(
        st.builds(CurrentAssignmentKey, text, text),
        st.builds(
            CurrentAssignmentValue,
            st.integers(-2, 2**31 - 1),
            st.integers(-2, 2**31 - 1),
            st.integers(0, 2),
            assignment_st,
            assignment_st,
        ),
    ),
)


@settings(max_examples=300, deadline=None)
@given(records_st)
def test_records_round_trip(record) -> None:  # type: ignore[no-untyped-def]
    key, value = record
    decoded = decode_consumer_key(encode_consumer_key(key))
    assert decoded == key
    assert decode_consumer_value(decoded, encode_consumer_value(value)) == value


def test_value_layout_matches_kafkas_bytes() -> None:
    """A group epoch value is version 0, int32 epoch, then an empty tagged-field section."""
    assert encode_consumer_value(ConsumerGroupEpochValue(5)) == b"\x00\x00\x00\x00\x00\x05\x00"
    assert encode_consumer_key(ConsumerGroupEpochKey("g")) == b"\x00\x03\x00\x01g"
    member = encode_consumer_key(CurrentAssignmentKey("g", "m"))
    assert member == b"\x00\x08\x00\x01g\x00\x01m"
    assert EMPTY == {}
