"""Network topologies of a fault run as values: which pairs of endpoints are cut. No I/O.

An endpoint is a node id (1..N) or ZOOKEEPER (0), the ZooKeeper server of a run on the
ZooKeeper store. A Cut between A and B drops every packet between them, both ways; the
clients (in the root network namespace) reach every endpoint whatever is cut. A Topology
is a set of cuts; the whole network is the empty set. Faults that overlap in time add
their cuts up (`union`); network.py moves the real network from one topology to the
next, rewriting only the endpoints whose blocked set changed (`changed_endpoints`).

The shapes the schedules use:

    isolate(2, [1, 3, 0])        2 | 1 3 zk         a node cut from everything else
    split([2, 0], [1, 3])        2 zk | 1 3         two sides, each whole inside
    bridge(1, 2, 3)              1 - 2 - 3          2 sees both, 1 and 3 not each other
    random_topology(rng, ...)    one of the above, the whole network, or random pairs
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, product
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from random import Random

ZOOKEEPER = 0
"""The endpoint of the ZooKeeper server (node ids start at 1)."""


def endpoint_name(endpoint: int) -> str:
    return "zk" if endpoint == ZOOKEEPER else str(endpoint)


@dataclass(frozen=True, slots=True, order=True)
class Cut:
    """No packet between `a` and `b`, either way; always a < b."""

    a: int
    b: int

    @classmethod
    def between(cls, x: int, y: int) -> Cut:
        if x == y:
            raise ValueError(f"an endpoint cannot be cut from itself ({x})")
        return cls(min(x, y), max(x, y))

    def other(self, endpoint: int) -> int:
        return self.b if endpoint == self.a else self.a

    def __str__(self) -> str:
        return f"{endpoint_name(self.a)}-{endpoint_name(self.b)}"


@dataclass(frozen=True, slots=True)
class Topology:
    cuts: frozenset[Cut] = frozenset()

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> Topology:
        return cls(frozenset(Cut.between(a, b) for a, b in pairs))

    @property
    def is_whole(self) -> bool:
        return not self.cuts

    def union(self, other: Topology) -> Topology:
        return Topology(self.cuts | other.cuts)

    def sees(self, x: int, y: int) -> bool:
        return x == y or Cut.between(x, y) not in self.cuts

    def blocked(self, endpoint: int) -> frozenset[int]:
        """The endpoints `endpoint` can neither send to nor hear from."""
        return frozenset(c.other(endpoint) for c in self.cuts if endpoint in (c.a, c.b))

    def pairs(self) -> tuple[tuple[int, int], ...]:
        """The cuts as sorted (a, b) pairs, for the history."""
        return tuple((c.a, c.b) for c in sorted(self.cuts))

    def describe(self) -> str:
        if not self.cuts:
            return "whole"
        return "cut " + " ".join(str(c) for c in sorted(self.cuts))


WHOLE = Topology()


def union(topologies: Iterable[Topology]) -> Topology:
    cuts: frozenset[Cut] = frozenset()
    for topology in topologies:
        cuts |= topology.cuts
    return Topology(cuts)


def isolate(endpoint: int, others: Iterable[int]) -> Topology:
    """`endpoint` cut from each of `others`."""
    return Topology(frozenset(Cut.between(endpoint, o) for o in others if o != endpoint))


def split(side_a: Iterable[int], side_b: Iterable[int]) -> Topology:
    """Every endpoint of one side cut from every endpoint of the other."""
    a, b = set(side_a), set(side_b)
    if a & b:
        raise ValueError(f"the sides of a split overlap: {sorted(a & b)}")
    return Topology(frozenset(Cut.between(x, y) for x, y in product(a, b)))


def bridge(end_a: int, middle: int, end_b: int) -> Topology:
    """`middle` sees both ends; the ends do not see each other."""
    if middle in (end_a, end_b):
        raise ValueError(f"the middle of a bridge ({middle}) cannot be one of its ends")
    return Topology(frozenset({Cut.between(end_a, end_b)}))


def bridge_through(middle: int, nodes: Sequence[int]) -> Topology:
    """The nodes other than `middle` in two halves (in the order given), each half cut
    from the other; `middle` sees every node. With three nodes: bridge(a, middle, b)."""
    others = [n for n in nodes if n != middle]
    half = (len(others) + 1) // 2
    return split(others[:half], others[half:])


def changed_endpoints(old: Topology, new: Topology) -> set[int]:
    """The endpoints whose blocked set differs between `old` and `new`: the only ones
    whose rules must be rewritten."""
    touched = {e for c in old.cuts ^ new.cuts for e in (c.a, c.b)}
    return {e for e in touched if old.blocked(e) != new.blocked(e)}


def random_topology(rng: Random, nodes: Sequence[int], *, zookeeper: bool) -> Topology:
    """One topology drawn from `rng`: the whole network, a node isolated (from the others
    and, with `zookeeper`, from ZooKeeper too), a split of one node from the rest with
    ZooKeeper on a random side, a bridge through a random node, or each pair of endpoints
    cut with probability 1/3."""
    endpoints = [*nodes, *([ZOOKEEPER] if zookeeper else [])]
    shape = rng.randrange(5)
    lone = rng.choice(list(nodes))
    rest = [n for n in nodes if n != lone]
    if shape == 0:
        return WHOLE
    if shape == 1:
        return isolate(lone, [e for e in endpoints if e != lone])
    if shape == 2:
        side = [lone]
        if zookeeper and rng.random() < 0.5:
            side.append(ZOOKEEPER)
        return split(side, [e for e in endpoints if e not in side])
    if shape == 3:
        order = rest[:]
        rng.shuffle(order)
        return bridge_through(lone, order)
    pairs = [pair for pair in combinations(endpoints, 2) if rng.random() < 1 / 3]
    return Topology.of(pairs)
