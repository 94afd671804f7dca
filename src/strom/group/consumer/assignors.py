"""Server-side assignors of consumer groups: `uniform` and `range`, as Kafka names them.

An assignor is a pure function from the members' subscriptions (topic ids) and the
current target assignment to a new target assignment. Both assign each partition of a
subscribed topic to exactly one member that subscribes to it, and nothing else.

- `uniform` spreads all partitions over the members as evenly as their subscriptions
  allow, and moves as few partitions as it can: every member first keeps the partitions
  it has that it still subscribes to, unowned partitions go to the least loaded eligible
  member, then partitions move from a member to an eligible member with at least two
  fewer until no such move is left. With equal subscriptions the members' counts differ
  by at most one.
- `range` works topic by topic: the members subscribing to a topic, ordered by member id,
  take consecutive ranges of its partitions, the first `partitions % members` one more.

Kafka's own builders (UniformHomogeneous/HeterogeneousAssignmentBuilder, RangeAssignor)
are faster on huge groups; these are strom's own and simpler. Neither Kafka's server
assignors nor these look at racks: a member's rack id is kept and described, not used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["ASSIGNORS", "AssignmentSpec", "assign_range", "assign_uniform"]

Partition = tuple[uuid.UUID, int]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """One member as an assignor sees it."""

    topics: frozenset[uuid.UUID]
    """The ids of the topics it subscribes to that exist."""
    current: Mapping[uuid.UUID, frozenset[int]]
    """Its partitions in the current target assignment."""


Result = dict[str, dict[uuid.UUID, frozenset[int]]]
Assignor = Callable[[Mapping[str, AssignmentSpec], Mapping[uuid.UUID, int]], Result]


def _result(owned: Mapping[str, list[Partition]]) -> Result:
    result: Result = {}
    for member_id, partitions in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for topic_id, partition in partitions:
            by_topic.setdefault(topic_id, set()).add(partition)
        result[member_id] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return result


def assign_range(members: Mapping[str, AssignmentSpec], topics: Mapping[uuid.UUID, int]) -> Result:
    owned: dict[str, list[Partition]] = {member_id: [] for member_id in members}
    for topic_id in sorted(topics):
        subscribers = sorted(m for m, spec in members.items() if topic_id in spec.topics)
        if not subscribers:
            continue
        count = topics[topic_id]
        share, extra = divmod(count, len(subscribers))
        start = 0
        for index, member_id in enumerate(subscribers):
            size = share + (1 if index < extra else 0)
            owned[member_id] += [(topic_id, p) for p in range(start, start + size)]
            start += size
    return _result(owned)


def assign_uniform(
    members: Mapping[str, AssignmentSpec], topics: Mapping[uuid.UUID, int]
) -> Result:
    order = sorted(members)
    owner: dict[Partition, str] = {}
    load: dict[str, int] = dict.fromkeys(order, 0)
    all_partitions = [(t, p) for t in sorted(topics) for p in range(topics[t])]
    eligible: dict[uuid.UUID, list[str]] = {
        t: [m for m in order if t in members[m].topics] for t in topics
    }
    # 1. Stickiness: a member keeps what it has and still may have.
    for member_id in order:
        spec = members[member_id]
        for topic_id in sorted(spec.current):
            if topic_id not in spec.topics or topic_id not in topics:
                continue
            for partition in sorted(spec.current[topic_id]):
                tp = (topic_id, partition)
                if partition < topics[topic_id] and tp not in owner:
                    owner[tp] = member_id
                    load[member_id] += 1
    # 2. Unowned partitions go to the least loaded member that may have them.
    for tp in all_partitions:
        if tp in owner or not eligible[tp[0]]:
            continue
        target = min(eligible[tp[0]], key=lambda m: (load[m], m))
        owner[tp] = target
        load[target] += 1
    # 3. Balance: move from a member to an eligible one with at least two fewer.
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda x: (-load[owner[x]], x)):
            source = owner[tp]
            target = min(eligible[tp[0]], key=lambda m: (load[m], m))
            if load[source] > load[target] + 1:
                owner[tp] = target
                load[source] -= 1
                load[target] += 1
                moved = True
    owned: dict[str, list[Partition]] = {member_id: [] for member_id in order}
    for tp, member_id in owner.items():
        owned[member_id].append(tp)
    return _result(owned)


ASSIGNORS: dict[str, Assignor] = {"uniform": assign_uniform, "range": assign_range}
"""The server assignors strom knows, by the name a client or `group.consumer.assignors`
gives."""
