"""Replica placement: live brokers only, racks spread, leaders balanced, assignments honoured."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from cluster_harness import DEFAULTS, cluster, commit, fence
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.metadata import controller
from strom.metadata.controller import NewTopic, PartitionIncrease, TopicResult
from strom.metadata.placement import place_replicas
from strom.metadata.refused import Refused

RACKS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


def test_each_partition_spans_distinct_racks_and_leaders_are_balanced() -> None:
    placement = place_replicas(60, 3, sorted(RACKS), random.Random(3), racks=RACKS)
    for replicas in placement.values():
        assert len({RACKS[b] for b in replicas}) == 3, replicas
    leaders = Counter(replicas[0] for replicas in placement.values())
    assert set(leaders.values()) == {10}
    replicas_per_broker = Counter(b for replicas in placement.values() for b in replicas)
    assert set(replicas_per_broker.values()) == {30}


def test_with_fewer_racks_than_replicas_every_rack_is_used_first() -> None:
    racks = {1: "a", 2: "a", 3: "a", 4: "b"}
    placement = place_replicas(8, 3, [1, 2, 3, 4], random.Random(1), racks=racks)
    for replicas in placement.values():
        assert len(set(replicas)) == 3 and {racks[b] for b in replicas} == {"a", "b"}


def test_without_racks_it_is_round_robin() -> None:
    placement = place_replicas(12, 3, [1, 2, 3, 4], random.Random(1))
    assert set(Counter(r[0] for r in placement.values()).values()) == {3}
    assert all(len(set(r)) == 3 for r in placement.values())


@given(
    brokers=st.dictionaries(
        st.integers(0, 30), st.one_of(st.none(), st.sampled_from("xyz")), min_size=1, max_size=9
    ),
    partitions=st.integers(1, 40),
    factor=st.integers(1, 5),
    seed=st.integers(0, 1000),
    first=st.integers(0, 5),
)
def test_placement_always_ends_with_distinct_live_replicas(
    brokers: dict[int, str | None], partitions: int, factor: int, seed: int, first: int
) -> None:
    ids = sorted(brokers)
    if factor > len(ids):
        with pytest.raises(Refused):
            place_replicas(partitions, factor, ids, random.Random(seed), racks=brokers)
        return
    placement = place_replicas(
        partitions, factor, ids, random.Random(seed), first_partition=first, racks=brokers
    )
    assert sorted(placement) == list(range(first, first + partitions))
    rack_count = len(set(brokers.values()))
    for replicas in placement.values():
        assert len(set(replicas)) == factor and set(replicas) <= set(ids)
        assert len({brokers[b] for b in replicas}) == min(factor, rack_count)


def test_create_topics_places_only_on_live_brokers_and_by_rack() -> None:
    image = fence(cluster(1, 2, 3, 4, 5, 6, racks=RACKS), 6)
    records, results = controller.create_topics(
        image,
        [NewTopic("t", 10, 3)],
        defaults=DEFAULTS,
        brokers=image.live_broker_ids(),
        rng=random.Random(5),
    )
    assert results[0].error_code == ErrorCode.none
    topic = commit(image, records).topics_by_name["t"]
    for p in topic.partitions.values():
        assert 6 not in p.replicas
        assert len({RACKS[b] for b in p.replicas}) == 3
        assert p.isr == p.replicas and p.leader == p.replicas[0]


def test_explicit_assignments_may_name_fenced_brokers_which_start_outside_the_isr() -> None:
    image = fence(cluster(1, 2, 3), 2, 3)

    def create(assignments: dict[int, tuple[int, ...]]) -> tuple[list[Any], list[TopicResult]]:
        return controller.create_topics(
            image,
            [NewTopic("t", -1, -1, assignments=assignments)],
            defaults=DEFAULTS,
            brokers=image.live_broker_ids(),
            rng=random.Random(5),
        )

    records, results = create({0: (3, 1), 1: (2, 3)})
    assert results[0].error_code == ErrorCode.invalid_replica_assignment
    assert "every replica of partition 1 ([2, 3]) is on a fenced broker" in (
        results[0].error_message or ""
    )
    records, results = create({0: (3, 1), 1: (2, 1)})
    assert results[0].error_code == ErrorCode.none
    topic = commit(image, records).topics_by_name["t"]
    assert (topic.partitions[0].replicas, topic.partitions[0].isr) == ((3, 1), (1,))
    assert topic.partitions[0].leader == 1
    assert (topic.partitions[1].leader, topic.partitions[1].isr) == (1, (1,))


def test_create_partitions_is_rack_aware_too() -> None:
    image = cluster(1, 2, 3, 4, racks={1: "a", 2: "a", 3: "b", 4: "b"})
    records, _ = controller.create_topics(
        image, [NewTopic("t", 1, 2)], defaults=DEFAULTS, brokers=[1, 2, 3, 4], rng=random.Random()
    )
    image = commit(image, records)
    records, results = controller.create_partitions(
        image, [PartitionIncrease("t", 9)], brokers=[1, 2, 3, 4], rng=random.Random(2)
    )
    assert results[0].error_code == ErrorCode.none
    topic = commit(image, records).topics_by_name["t"]
    assert sorted(topic.partitions) == list(range(9))
    for p in topic.partitions.values():
        assert len({b <= 2 for b in p.replicas}) == 2  # one replica on each rack
