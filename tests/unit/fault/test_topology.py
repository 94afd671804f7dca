"""Topology arithmetic of the network faults: cuts, shapes, unions and which namespaces a
change touches. No sockets, no namespaces."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path
from random import Random

import pytest

sys.path.insert(0, str(Path(__file__).parents[2]))  # tests/, where the fault package is

from fault.network import choose_subnet
from fault.topology import (
    WHOLE,
    ZOOKEEPER,
    Cut,
    Topology,
    bridge,
    bridge_through,
    changed_endpoints,
    isolate,
    random_topology,
    split,
    union,
)


def test_a_cut_is_the_same_whichever_way_it_is_named() -> None:
    assert Cut.between(3, 1) == Cut.between(1, 3) == Cut(1, 3)
    assert str(Cut.between(2, ZOOKEEPER)) == "zk-2"
    with pytest.raises(ValueError, match="itself"):
        Cut.between(2, 2)


def test_isolating_a_node_cuts_it_from_every_other_endpoint_and_nothing_else() -> None:
    topology = isolate(2, [1, 3, ZOOKEEPER])
    assert topology.pairs() == ((0, 2), (1, 2), (2, 3))
    assert topology.blocked(2) == {1, 3, ZOOKEEPER}
    assert topology.blocked(1) == {2}
    assert topology.sees(1, 3) and topology.sees(1, ZOOKEEPER) and not topology.sees(3, 2)
    assert topology.describe() == "cut zk-2 1-2 2-3"


def test_a_split_cuts_every_pair_across_and_none_within_a_side() -> None:
    topology = split([2, ZOOKEEPER], [1, 3])
    assert topology.pairs() == ((0, 1), (0, 3), (1, 2), (2, 3))
    assert topology.sees(2, ZOOKEEPER) and topology.sees(1, 3)
    with pytest.raises(ValueError, match="overlap"):
        split([1, 2], [2, 3])


def test_a_bridge_cuts_only_its_ends_from_each_other() -> None:
    assert bridge(1, 2, 3) == Topology.of([(1, 3)])
    assert bridge_through(2, [3, 1]) == Topology.of([(1, 3)])
    five = bridge_through(3, [1, 2, 4, 5])
    assert five.blocked(3) == frozenset()
    assert five.pairs() == ((1, 4), (1, 5), (2, 4), (2, 5))
    with pytest.raises(ValueError, match="middle"):
        bridge(1, 1, 3)


def test_overlapping_faults_add_their_cuts_up() -> None:
    both = union([isolate(1, [2]), bridge(2, 1, 3), isolate(1, [3])])
    assert both.pairs() == ((1, 2), (1, 3), (2, 3))
    assert union([]) == WHOLE and WHOLE.is_whole and WHOLE.describe() == "whole"
    assert isolate(1, [2]).union(isolate(1, [2])) == isolate(1, [2])


def test_only_endpoints_whose_blocked_set_changes_are_rewritten() -> None:
    cut_1 = isolate(1, [2, 3])
    assert changed_endpoints(WHOLE, cut_1) == {1, 2, 3}
    assert changed_endpoints(cut_1, cut_1) == set()
    # From "1 cut from 2 and 3" to "1 cut from 2 only": nodes 1 and 3 change, 2 does not.
    assert changed_endpoints(cut_1, isolate(1, [2])) == {1, 3}
    assert changed_endpoints(cut_1, WHOLE) == {1, 2, 3}


def test_random_topologies_repeat_for_a_seed_and_cover_every_shape() -> None:
    def draw(seed: int) -> list[Topology]:
        rng = Random(seed)
        return [random_topology(rng, [1, 2, 3], zookeeper=True) for _ in range(200)]

    assert draw(5) == draw(5)
    drawn = draw(5)
    assert WHOLE in drawn
    assert isolate(1, [2, 3, ZOOKEEPER]) in drawn
    assert split([2, ZOOKEEPER], [1, 3]) in drawn
    assert bridge(1, 2, 3) in drawn
    assert all(c.a >= 0 and c.b <= 3 for t in drawn for c in t.cuts)
    raft = [random_topology(Random(1), [1, 2, 3], zookeeper=False) for _ in range(50)]
    assert all(ZOOKEEPER not in {c.a for c in t.cuts} for t in raft)


def test_the_subnet_is_one_nothing_on_the_machine_overlaps() -> None:
    used = [
        ipaddress.IPv4Network("192.0.2.0/24"),
        ipaddress.IPv4Network("10.213.30.0/24"),
        ipaddress.IPv4Network("10.213.31.7/32"),
    ]
    assert str(choose_subnet(used, start=30)) == "10.213.32.0/24"
    assert str(choose_subnet(used, start=255)) == "10.213.255.0/24"
    with pytest.raises(RuntimeError, match="no free"):
        choose_subnet([ipaddress.IPv4Network("10.0.0.0/8")], start=0)
