"""Partition reassignment at the controller: start, complete, cancel, list (KIP-455)."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from cluster_harness import (
    always,
    cluster,
    commit,
    create_topic,
    fence,
    heartbeat,
    incarnation,
    never,
    partition,
    state,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.metadata import brokers, isr, reassignments
from strom.metadata.elections import UncleanPolicy
from strom.metadata.image import MetadataImage, PartitionImage
from strom.metadata.reassignments import OngoingReassignment, PartitionTarget
from strom.metadata.records import (
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    decode,
    decode_entry,
    encode,
    encode_entry,
)
from strom.metadata.snapshot import decode_snapshot, encode_snapshot


def reassign(
    image: MetadataImage,
    topic: str,
    index: int,
    target: Sequence[int] | None,
    *,
    unclean: UncleanPolicy = never,
) -> tuple[MetadataImage, reassignments.ReassignmentResult]:
    records, results = reassignments.alter_reassignments(
        image,
        [PartitionTarget(topic, index, None if target is None else tuple(target))],
        is_live=image.is_live,
        unclean=unclean,
    )
    return commit(image, records), results[0]


def started(image: MetadataImage, topic: str, index: int, target: Sequence[int]) -> MetadataImage:
    image, result = reassign(image, topic, index, target)
    assert result.error_code == ErrorCode.none, result
    return image


def leader_sets_isr(
    image: MetadataImage, topic: str, index: int, new_isr: Sequence[int]
) -> tuple[MetadataImage, isr.PartitionIsrResult]:
    p = partition(image, topic, index)
    records, result = isr.alter_partition(
        image,
        broker_id=p.leader,
        broker_epoch=image.brokers[p.leader].epoch,
        topic_id=image.topics_by_name[topic].topic_id,
        partition=index,
        leader_epoch=p.leader_epoch,
        partition_epoch=p.partition_epoch,
        new_isr=new_isr,
        is_live=image.is_live,
    )
    return commit(image, records), result


def assignment(p: PartitionImage) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(replicas, adding, removing)."""
    return p.replicas, p.adding_replicas, p.removing_replicas


# ---------------------------------------------------------------- starting


def test_adding_a_replica_makes_it_a_follower_being_added() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    before = partition(image, "t")
    image = started(image, "t", 0, (1, 2, 3))
    after = partition(image, "t")
    assert assignment(after) == ((1, 2, 3), (3,), ())
    assert (after.leader, after.isr) == (1, (1, 2))
    assert after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1


def test_a_move_lists_the_target_first_then_the_replicas_being_removed() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (2, 1)})
    image = started(image, "t", 0, (4, 3))
    assert assignment(partition(image, "t")) == ((4, 3, 2, 1), (4, 3), (2, 1))
    assert state(image, "t") == (2, (2, 1))


def test_a_target_already_in_sync_completes_at_once() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})
    before = partition(image, "t")
    image = started(image, "t", 0, (2, 1))  # a shrink
    after = partition(image, "t")
    assert assignment(after) == ((2, 1), (), ())
    assert (after.leader, after.isr) == (1, (1, 2))
    # replicas left: the leader epoch goes up (the removed replica's fetches are fenced)
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1
    reordered = started(image, "t", 0, (1, 2))
    assert assignment(partition(reordered, "t")) == ((1, 2), (), ())
    assert partition(reordered, "t").leader_epoch == after.leader_epoch  # nobody left


def test_the_current_replicas_as_target_change_nothing() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    records, results = reassignments.alter_reassignments(
        image, [PartitionTarget("t", 0, (1, 2))], is_live=image.is_live, unclean=never
    )
    assert records == [] and results[0].error_code == ErrorCode.none


@pytest.mark.parametrize(
    ("topic", "index", "target", "code"),
    [
        ("t", 0, (), ErrorCode.invalid_replica_assignment),
        ("t", 0, (1, 3, 1), ErrorCode.invalid_replica_assignment),
        ("t", 0, (1, 9), ErrorCode.invalid_replica_assignment),
        ("t", 0, (-1,), ErrorCode.invalid_replica_assignment),
        ("t", 4, (1,), ErrorCode.unknown_topic_or_partition),
        ("nope", 0, (1,), ErrorCode.unknown_topic_or_partition),
        ("t", 0, None, ErrorCode.no_reassignment_in_progress),
    ],
)
def test_refusals(topic: str, index: int, target: tuple[int, ...] | None, code: ErrorCode) -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    records, results = reassignments.alter_reassignments(
        image, [PartitionTarget(topic, index, target)], is_live=image.is_live, unclean=always
    )
    assert records == []
    assert results[0].error_code == code and results[0].message


def test_a_fenced_registered_broker_may_be_a_target() -> None:
    image = fence(create_topic(cluster(1, 2, 3), "t", {0: (1, 2)}), 3)
    image = started(image, "t", 0, (1, 3))
    assert assignment(partition(image, "t")) == ((1, 3, 2), (3,), (2,))


def test_one_request_is_one_decision_each_partition_seeing_the_ones_before() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2), 1: (2, 1)})
    records, results = reassignments.alter_reassignments(
        image,
        [
            PartitionTarget("t", 0, (1, 2, 3)),
            PartitionTarget("t", 1, (9,)),
            PartitionTarget("t", 0, None),  # cancels what the first one started
        ],
        is_live=image.is_live,
        unclean=never,
    )
    assert [r.error_code for r in results] == [
        ErrorCode.none,
        ErrorCode.invalid_replica_assignment,
        ErrorCode.none,
    ]
    image = commit(image, records)
    p = partition(image, "t")
    assert assignment(p) == ((1, 2), (), ()) and p.partition_epoch == 2


# ---------------------------------------------------------------- completing


def test_the_added_replica_joining_the_isr_completes_the_reassignment() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    image = started(image, "t", 0, (1, 2, 3))
    before = partition(image, "t")
    image, result = leader_sets_isr(image, "t", 0, (1, 2, 3))
    after = partition(image, "t")
    assert assignment(after) == ((1, 2, 3), (), ())
    assert (after.leader, after.isr) == (1, (1, 2, 3))
    assert after.leader_epoch == before.leader_epoch  # nobody left
    assert after.partition_epoch == before.partition_epoch + 1
    assert result.error_code == ErrorCode.none and result.completed_reassignment
    assert (result.isr, result.partition_epoch) == ((1, 2, 3), after.partition_epoch)


def test_a_move_completes_when_every_target_replica_is_in_sync() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 2))
    image, result = leader_sets_isr(image, "t", 0, (1, 2))  # nothing new: no change
    assert not result.changed and partition(image, "t").reassigning
    before = partition(image, "t")
    image, result = leader_sets_isr(image, "t", 0, (1, 2, 3))
    after = partition(image, "t")
    assert assignment(after) == ((3, 2), (), ())
    assert after.isr == (2, 3)  # the ISR as sent, without the removed replica
    assert after.leader == 3  # the leader was removed: the first live target ISR member
    assert after.leader_epoch == before.leader_epoch + 1
    # The requester lost leadership: Kafka's NEW_LEADER_ELECTED, the change still made.
    assert result.error_code == ErrorCode.new_leader_elected and result.changed
    assert (result.leader, result.leader_epoch) == (3, after.leader_epoch)
    assert result.completed_reassignment


def test_a_removed_leader_gives_way_to_a_live_target_replica_only() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 4))
    image, _ = leader_sets_isr(image, "t", 0, (1, 2, 3))
    image = fence(image, 3)  # 3 leaves the ISR again
    assert state(image, "t") == (1, (1, 2))
    image, _ = heartbeat(image, 3)
    image, _ = leader_sets_isr(image, "t", 0, (1, 2, 3, 4))
    p = partition(image, "t")
    assert assignment(p) == ((3, 4), (), ()) and (p.leader, p.isr) == (3, (3, 4))


def test_a_fenced_replica_being_added_stays_and_is_waited_for() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    image = started(image, "t", 0, (1, 2, 3))
    image = fence(image, 3)
    assert assignment(partition(image, "t")) == ((1, 2, 3), (3,), ())
    image, result = heartbeat(image, 3)
    assert not result.is_fenced
    assert assignment(partition(image, "t")) == ((1, 2, 3), (3,), ())  # not in sync yet
    image, _ = leader_sets_isr(image, "t", 0, (1, 2, 3))
    assert assignment(partition(image, "t")) == ((1, 2, 3), (), ())


def test_controlled_shutdown_of_a_removing_leader_moves_leadership_in_the_old_set() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3,))
    image, result = heartbeat(image, 1, want_shutdown=True)
    assert result.should_shutdown
    assert state(image, "t") == (2, (2,))
    assert assignment(partition(image, "t")) == ((3, 1, 2), (3,), (1, 2))
    image, _ = leader_sets_isr(image, "t", 0, (2, 3))
    p = partition(image, "t")
    assert assignment(p) == ((3,), (), ()) and (p.leader, p.isr) == (3, (3,))


def test_an_unclean_election_takes_a_replica_being_added_last() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 1, 2))  # 3 first in replica order, being added
    image = fence(image, 2)
    image, _ = heartbeat(image, 2)  # back, but out of sync
    image = fence(image, 1, unclean=always)
    assert state(image, "t") == (2, (2,))  # not 3: it may hold none of the log
    image = fence(image, 2, unclean=always)
    assert state(image, "t") == (3, (3,))  # nobody else is live
    assert partition(image, "t").reassigning  # 1 and 2 are not in sync


def test_an_added_replica_in_sync_may_lead_cleanly() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 4))
    image, _ = leader_sets_isr(image, "t", 0, (1, 2, 3))
    image = fence(image, 1, 2)
    assert state(image, "t") == (3, (3,))
    assert assignment(partition(image, "t")) == ((3, 4, 1, 2), (3, 4), (1, 2))


def test_an_unfenced_broker_completes_under_the_interim_rejoin_rule() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2)})
    image = fence(image, 3)
    image = started(image, "t", 0, (1, 2, 3))
    image = commit(image, brokers.unfence_broker(image, 3, unclean=never, rejoin_isr=True))
    assert assignment(partition(image, "t")) == ((1, 2, 3), (), ())


# ---------------------------------------------------------------- changing and cancelling


def test_cancelling_restores_the_original_replicas_and_drops_added_ones_from_the_isr() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (2, 1)})
    original = partition(image, "t")
    image = started(image, "t", 0, (3, 4))
    image, _ = leader_sets_isr(image, "t", 0, (2, 1, 3))
    before = partition(image, "t")
    image, result = reassign(image, "t", 0, None)
    after = partition(image, "t")
    assert result.error_code == ErrorCode.none
    assert assignment(after) == (original.replicas, (), ())
    assert (after.leader, after.isr) == (2, (2, 1))
    assert after.leader_epoch == before.leader_epoch + 1  # 3 and 4 left
    assert after.partition_epoch == before.partition_epoch + 1
    _, again = reassign(image, "t", 0, None)
    assert again.error_code == ErrorCode.no_reassignment_in_progress


def test_cancelling_when_only_added_replicas_are_in_sync_needs_unclean_election() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 4))
    image, _ = leader_sets_isr(image, "t", 0, (1, 2, 3))
    image = fence(image, 1, 2)
    image, _ = heartbeat(image, 1)
    assert state(image, "t") == (3, (3,))
    _, result = reassign(image, "t", 0, None)
    assert result.error_code == ErrorCode.invalid_replica_assignment
    assert "unclean" in (result.message or "")
    image, result = reassign(image, "t", 0, None, unclean=always)
    assert result.error_code == ErrorCode.none
    p = partition(image, "t")
    assert assignment(p) == ((1, 2), (), ()) and (p.leader, p.isr) == (1, (1,))


def test_a_new_target_is_planned_from_the_current_full_replica_list() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 4))
    image = started(image, "t", 0, (1, 3))
    # As in Kafka, 3 (added by the first target) now counts as a current replica.
    assert assignment(partition(image, "t")) == ((1, 3, 4, 2), (), (4, 2))
    image, _ = leader_sets_isr(image, "t", 0, (1, 2, 3))
    p = partition(image, "t")
    assert assignment(p) == ((1, 3), (), ()) and (p.leader, p.isr) == (1, (1, 3))


def test_going_back_to_the_original_replicas_while_they_are_in_sync_completes_at_once() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2)})
    image = started(image, "t", 0, (3, 4))
    image = started(image, "t", 0, (1, 2))
    assert assignment(partition(image, "t")) == ((1, 2), (), ())
    assert state(image, "t") == (1, (1, 2))


# ---------------------------------------------------------------- listing


def test_listing_every_pending_reassignment_or_the_asked_partitions() -> None:
    image = create_topic(cluster(1, 2, 3), "a", {0: (1,), 1: (2,)})
    image = create_topic(image, "b", {0: (1, 2)})
    image = started(image, "a", 1, (3,))
    image = started(image, "b", 0, (1, 2, 3))
    assert reassignments.list_reassignments(image, None) == [
        OngoingReassignment("a", 1, (3, 2), (3,), (2,)),
        OngoingReassignment("b", 0, (1, 2, 3), (3,), ()),
    ]
    assert reassignments.list_reassignments(image, {"a": [0, 1, 7], "zzz": [0]}) == [
        OngoingReassignment("a", 1, (3, 2), (3,), (2,))
    ]
    assert reassignments.list_reassignments(image, {"b": []}) == []


# ---------------------------------------------------------------- records and snapshots


def test_snapshots_and_records_carry_adding_and_removing() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2), 1: (2, 3)})
    image = started(image, "t", 0, (3, 4))
    restored = decode_snapshot(encode_snapshot(image))
    assert restored == image
    assert assignment(partition(restored, "t")) == ((3, 4, 1, 2), (3, 4), (1, 2))
    change = PartitionChangeRecord(
        image.topics_by_name["t"].topic_id, 0, 1, (1,), 2, 3, (1, 2), (), (2,)
    )
    assert decode(encode(change)) == change
    assert decode_entry(encode_entry([change])) == [change]


def test_records_written_before_reassignments_decode_with_defaults() -> None:
    topic_id = "00000000-0000-0000-0000-000000000009"
    old_partition = {
        "type": "PartitionRecord",
        "topic_id": topic_id,
        "partition": 0,
        "replicas": [1, 2],
        "isr": [1],
        "leader": 1,
        "leader_epoch": 3,
        "partition_epoch": 4,
    }
    record = decode(json.dumps(old_partition).encode())
    assert isinstance(record, PartitionRecord)
    assert (record.adding_replicas, record.removing_replicas) == ((), ())
    old_change = {
        "type": "PartitionChangeRecord",
        "topic_id": topic_id,
        "partition": 0,
        "leader": 2,
        "isr": [2],
        "leader_epoch": 4,
        "partition_epoch": 5,
        "replicas": None,
    }
    change = decode(json.dumps(old_change).encode())
    assert isinstance(change, PartitionChangeRecord)
    assert (change.adding_replicas, change.removing_replicas) == (None, None)


# ---------------------------------------------------------------- the model

BROKER_IDS = st.integers(1, 5)
TOPICS = st.sampled_from(["t", "u"])  # u allows unclean elections

FENCE = st.tuples(st.just("fence"), st.lists(BROKER_IDS, min_size=1, max_size=2))
HEARTBEAT = st.tuples(st.just("heartbeat"), BROKER_IDS, st.sampled_from(["", "", "shutdown"]))
ISR = st.tuples(st.just("isr"), TOPICS, st.integers(0, 1), st.integers(0, 2**16))


def _target(kind: str, valid: list[int], anything: list[int]) -> list[int] | None:
    return None if kind == "cancel" else valid if kind == "valid" else anything


TARGETS = st.builds(
    _target,
    st.sampled_from(["cancel", "valid", "valid", "valid", "anything"]),
    st.lists(st.integers(1, 5), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(0, 6), max_size=4),  # empty, repeated or unregistered brokers
)
REASSIGN = st.tuples(st.just("reassign"), TOPICS, st.integers(0, 1), TARGETS)
COMMANDS_BY_KIND: dict[str, st.SearchStrategy[tuple[Any, ...]]] = {
    "fence": FENCE,
    "heartbeat": HEARTBEAT,
    "restart": st.tuples(st.just("restart"), BROKER_IDS),
    "isr": ISR,
    "reassign": REASSIGN,
    "prefer": st.tuples(st.just("prefer")),
}
WEIGHTS = {"fence": 1, "heartbeat": 2, "restart": 1, "isr": 3, "reassign": 3, "prefer": 1}
COMMANDS = st.sampled_from([kind for kind, n in WEIGHTS.items() for _ in range(n)]).flatmap(
    COMMANDS_BY_KIND.__getitem__
)


def unclean(topic: str) -> bool:
    return topic == "u"


def decide(image: MetadataImage, command: tuple[Any, ...]) -> list[MetadataRecord]:
    match command:
        case ("fence", broker_ids):
            return brokers.fence_brokers(image, broker_ids, unclean=unclean)
        case ("heartbeat", broker_id, how):
            registered = image.brokers.get(broker_id)
            if registered is None:
                return []
            return brokers.broker_heartbeat(
                image, broker_id, registered.epoch, image.offset, False, how == "shutdown",
                unclean=unclean,
            )[0]  # fmt: skip
        case ("restart", broker_id):
            generation = image.offset + 1
            return brokers.register_broker(
                image, broker_id, incarnation(broker_id, generation), "h", 1, None,
                session_alive=False, unclean=unclean,
            )[0]  # fmt: skip
        case ("isr", topic, index, seed):
            return _isr_change(image, topic, index, random.Random(seed))
        case ("reassign", topic, index, target):
            targets = [PartitionTarget(topic, index, None if target is None else tuple(target))]
            return reassignments.alter_reassignments(
                image, targets, is_live=image.is_live, unclean=unclean
            )[0]
        case ("prefer",):
            return brokers.preferred_leader_elections(image)
    raise AssertionError(command)


def _isr_change(
    image: MetadataImage, topic: str, index: int, rng: random.Random
) -> list[MetadataRecord]:
    """Mostly what a leader would send (live replicas, current epochs); sometimes from
    another broker, with fenced, stale or unknown members, or with stale epochs."""
    p = partition(image, topic, index)
    requester = p.leader if p.leader != -1 and rng.random() < 0.8 else rng.randint(1, 5)
    if requester not in image.brokers:
        return []
    in_sync = rng.random() < 0.8  # those a leader would send: live replicas
    members = [
        r
        for r in p.replicas
        if r == requester or (image.is_live(r) if in_sync else rng.random() < 0.7)
    ]
    rng.shuffle(members)
    if rng.random() < 0.1:
        members.append(rng.randint(1, 6))
    new_isr = [
        isr.IsrMember(m, image.brokers[m].epoch - (rng.random() < 0.1) if m in image.brokers else 0)
        for m in members
    ]
    return isr.alter_partition(
        image,
        broker_id=requester,
        broker_epoch=image.brokers[requester].epoch,
        topic_id=image.topics_by_name[topic].topic_id,
        partition=index,
        leader_epoch=p.leader_epoch - (rng.random() < 0.1),
        partition_epoch=p.partition_epoch - (rng.random() < 0.1),
        new_isr=new_isr,
        is_live=image.is_live,
    )[0]


def check_invariants(before: MetadataImage, after: MetadataImage) -> None:
    for topic, p in after.partitions():
        replicas = set(p.replicas)
        assert len(replicas) == len(p.replicas), p
        assert p.isr and len(set(p.isr)) == len(p.isr) and set(p.isr) <= replicas, p
        assert p.leader == -1 or (p.leader in p.isr and after.is_live(p.leader)), p
        adding, removing = set(p.adding_replicas), set(p.removing_replicas)
        assert adding <= replicas and removing <= replicas and not adding & removing, p
        if removing:
            assert p.replicas[-len(removing) :] == p.removing_replicas, p  # target + removing
        if p.reassigning:  # never left completable: completion is checked at every change
            target = set(p.replicas) - removing
            assert not (target <= set(p.isr) and set(p.isr) - removing), p
        old = before.topics_by_id[topic.topic_id].partitions[p.partition]
        assert p.leader_epoch >= old.leader_epoch and p.partition_epoch >= old.partition_epoch
        if p != old:
            assert p.partition_epoch == old.partition_epoch + 1, (old, p)
        # The leader epoch moves with the leader, or when replicas leave; nothing else.
        bumped = p.leader != old.leader or not set(old.replicas) <= replicas
        assert p.leader_epoch == old.leader_epoch + bumped, (old, p)


PREAMBLE: list[tuple[Any, ...]] = [("heartbeat", b, "") for b in (1, 2, 3, 4, 5)]


@settings(max_examples=200, deadline=None)
@given(st.lists(COMMANDS, max_size=40), st.integers(0, 40))
def test_random_fencing_isr_changes_and_reassignments_keep_the_invariants(
    commands: list[tuple[Any, ...]], snapshot_at: int
) -> None:
    image = create_topic(cluster(1, 2, 3, 4, 5), "t", {0: (1, 2, 3), 1: (2, 3, 4)})
    image = create_topic(image, "u", {0: (3, 4), 1: (5, 1)})
    start = image
    entries: list[bytes] = []
    snapshot: tuple[bytes, int] | None = None
    for step, command in enumerate(PREAMBLE + commands):
        if step == snapshot_at:
            snapshot = (encode_snapshot(image), len(entries))
        records = decide(image, command)
        if not records:
            continue
        entries.append(encode_entry(records))
        after = image.replay(decode_entry(entries[-1]))
        check_invariants(image, after)
        image = after
    replayed = start
    for entry in entries:
        replayed = replayed.replay(decode_entry(entry))
    assert replayed == image
    assert decode_snapshot(encode_snapshot(image)) == image
    if snapshot is not None:
        restored = decode_snapshot(snapshot[0])
        for entry in entries[snapshot[1] :]:
            restored = restored.replay(decode_entry(entry))
        assert restored == image
