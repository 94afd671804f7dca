"""The `simple` assignor of share groups, by the rule of Kafka's SimpleAssignor.

Share-partitions are not exclusive: with more members than partitions, a partition is
given to several members. The rule, for a set of partitions P and the members M that
may take them:

- the desired sharing of a partition is ceil(|M| / |P|) members;
- the desired count of member i (0-based, in member id order) is
  ceil(s·|P|·(i+1)/|M|) - ceil(s·|P|·i/|M|), with s the desired sharing, so the counts
  differ by at most one and add up to s·|P|;
- a member first keeps what it had that it may still have (stickiness); a member
  with more than its count gives up the excess; a partition shared by more than the
  desired sharing loses the excess members; then every partition short of its sharing
  is offered, in order, to the members still short of their count, round robin,
  skipping members that already have it.

When every member subscribes to the same topics, P is all their partitions together
(Kafka's homogeneous builder); otherwise the rule is applied topic by topic, over the
members subscribing to that topic (its heterogeneous builder). Only assignable
partitions are given out (in Kafka 4.1+, those whose share-partition state is
initialized: `initialize.py`). Every assignable subscribed partition ends with at least
one member, only subscribers get a topic's partitions, and the result depends only on
the input. Kafka walks its hash maps in their own order; strom walks members, topics
and partitions sorted, so where Kafka's choice is arbitrary strom's may differ, by the
same rule.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["SIMPLE_ASSIGNOR", "ShareMemberSpec", "assign_simple"]

SIMPLE_ASSIGNOR = "simple"

Partition = tuple[uuid.UUID, int]
ShareAssignmentResult = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True, slots=True)
class ShareMemberSpec:
    """One member as the assignor sees it."""

    topics: frozenset[uuid.UUID]
    """The ids of the existing topics it subscribes to."""
    current: Mapping[uuid.UUID, frozenset[int]]
    """Its partitions in the current target assignment."""


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _assign_pool(
    members: list[str],
    partitions: list[Partition],
    current: Mapping[str, set[Partition]],
) -> dict[str, set[Partition]]:
    """The rule over one pool of partitions and the members that may take them."""
    result: dict[str, set[Partition]] = {m: set() for m in members}
    if not members or not partitions:
        return result
    sharing = _ceil_div(len(members), len(partitions))
    total = sharing * len(partitions)
    desired = {
        m: _ceil_div(total * (i + 1), len(members)) - _ceil_div(total * i, len(members))
        for i, m in enumerate(members)
    }
    pool = set(partitions)
    holders: dict[Partition, list[str]] = {tp: [] for tp in partitions}
    # 1. Keep what may still be had.
    for m in members:
        for tp in sorted(current.get(m, set()) & pool):
            result[m].add(tp)
            holders[tp].append(m)
    # 2. Overfilled members give up their excess (their highest partitions).
    for m in members:
        for tp in sorted(result[m], reverse=True)[: max(0, len(result[m]) - desired[m])]:
            result[m].discard(tp)
            holders[tp].remove(m)
    # 3. Overshared partitions lose their excess members (the last in id order).
    for tp in partitions:
        while len(holders[tp]) > sharing:
            m = max(holders[tp])
            holders[tp].remove(m)
            result[m].discard(tp)
    # 4. Partitions short of their sharing go to unfilled members, round robin.
    unfilled = [m for m in members if len(result[m]) < desired[m]]
    cursor = 0
    for tp in partitions:
        if not unfilled:
            break
        missing = sharing - len(holders[tp])
        tried = 0
        while missing > 0 and unfilled and tried < len(unfilled):
            cursor %= len(unfilled)
            m = unfilled[cursor]
            if tp in result[m]:
                cursor += 1
                tried += 1
                continue
            result[m].add(tp)
            holders[tp].append(m)
            missing -= 1
            tried = 0
            if len(result[m]) >= desired[m]:
                unfilled.pop(cursor)
            else:
                cursor += 1
    return result


def assign_simple(
    members: Mapping[str, ShareMemberSpec],
    topics: Mapping[uuid.UUID, int],
    assignable: Mapping[uuid.UUID, frozenset[int]] | None = None,
) -> ShareAssignmentResult:
    """The target assignment of every member: topic id -> partitions. `topics`: the
    partition count of every subscribed topic that exists; `assignable`: the partitions
    that may be assigned (those whose share state is initialized), None for all."""

    def pool_of(topic_id: uuid.UUID) -> list[Partition]:
        allowed = None if assignable is None else assignable.get(topic_id, frozenset())
        return [(topic_id, p) for p in range(topics[topic_id]) if allowed is None or p in allowed]

    order = sorted(members)
    assigned: dict[str, set[Partition]] = {m: set() for m in order}
    current = {m: {(t, p) for t, ps in members[m].current.items() for p in ps} for m in order}
    subscriptions = {frozenset(members[m].topics & topics.keys()) for m in order}
    if len(subscriptions) == 1:
        (subscribed,) = subscriptions
        pool = [tp for t in sorted(subscribed) for tp in pool_of(t)]
        assigned = _assign_pool(order, pool, current)
    else:
        for topic_id in sorted(topics):
            subscribers = [m for m in order if topic_id in members[m].topics]
            pool = pool_of(topic_id)
            for m, tps in _assign_pool(subscribers, pool, current).items():
                assigned[m] |= tps
    result: ShareAssignmentResult = {}
    for m in order:
        by_topic: dict[uuid.UUID, set[int]] = {}
        for t, p in assigned.get(m, set()):
            by_topic.setdefault(t, set()).add(p)
        result[m] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result
