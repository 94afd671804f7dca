"""Leaders and ISRs as brokers are fenced and come back (see metadata/elections.py)."""

from __future__ import annotations

from cluster_harness import (
    always,
    cluster,
    commit,
    create_topic,
    fence,
    heartbeat,
    never,
    partition,
    rejoin,
    state,
)

from strom.metadata import brokers
from strom.metadata.image import MetadataImage
from strom.metadata.records import PartitionChangeRecord


def three_brokers_one_topic() -> MetadataImage:
    return create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)})


def test_a_new_leader_comes_from_the_isr_earliest_in_replica_order() -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 4, 3, 2)})
    before = partition(image, "t")
    image = fence(image, 1)
    after = partition(image, "t")
    assert (after.leader, after.isr) == (4, (4, 3, 2))
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch == before.partition_epoch + 1


def test_a_fenced_follower_leaves_the_isr_without_a_leader_change() -> None:
    image = three_brokers_one_topic()
    before = partition(image, "t", 0)
    image = fence(image, 3)
    after = partition(image, "t", 0)
    assert (after.leader, after.isr) == (1, (1, 2))
    assert after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1
    assert state(image, "t", 2) == (1, (1, 2))  # broker 3 led partition 2


def test_the_last_isr_member_stays_in_the_isr_when_it_is_fenced() -> None:
    image = three_brokers_one_topic()
    image = fence(image, 1)
    image = fence(image, 2)
    assert state(image, "t", 0) == (3, (3,))
    image = fence(image, 3)
    assert [state(image, "t", p) for p in range(3)] == [(-1, (3,))] * 3


def test_brokers_fenced_together_leave_in_the_order_given() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    assert state(fence(image, 1, 2), "t") == (-1, (2,))
    assert state(fence(image, 2, 1), "t") == (-1, (1,))
    records = brokers.fence_brokers(image, [2, 1], unclean=never)
    changes = [r for r in records if isinstance(r, PartitionChangeRecord)]
    assert len(changes) == 1 and changes[0].leader_epoch == 1  # one bump per decision


def test_unclean_election_picks_a_live_replica_outside_the_isr() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    image = fence(image, 2)  # ISR [1]
    assert state(image, "t") == (1, (1,))
    image = commit(image, brokers.unfence_broker(image, 2, unclean=never, rejoin_isr=False))
    assert state(image, "t") == (1, (1,))  # 2 is back but not in sync
    assert state(fence(image, 1), "t") == (-1, (1,))
    assert state(fence(image, 1, unclean=lambda topic: topic == "t"), "t") == (2, (2,))
    assert state(fence(image, 1, unclean=lambda topic: topic == "other"), "t") == (-1, (1,))


def test_unclean_election_needs_a_live_replica() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1,)})
    assert state(fence(image, 1, unclean=always), "t") == (-1, (1,))


def test_a_returning_last_isr_member_leads_its_offline_partitions_again() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    image = fence(image, 2, 1)  # ISR kept [1]
    image, result = heartbeat(image, 2)
    assert not result.is_fenced
    assert state(image, "t") == (-1, (1,))  # 2 may not lead: it was not in sync
    image, _ = heartbeat(image, 1)
    leader_epoch = partition(image, "t").leader_epoch
    assert state(image, "t") == (1, (1,))
    assert leader_epoch == 2  # -1 then 1


def test_a_returning_broker_takes_an_offline_partition_when_unclean_is_allowed() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    image = fence(image, 2, 1)
    image, _ = heartbeat(image, 2, unclean=always)
    assert state(image, "t") == (2, (2,))


def test_a_returning_broker_stays_out_of_the_isrs_until_leaders_add_it() -> None:
    image = three_brokers_one_topic()
    image = fence(image, 3)
    image, result = heartbeat(image, 3)
    assert not result.is_fenced
    assert [state(image, "t", p) for p in range(3)] == [(1, (1, 2)), (2, (2, 1)), (1, (1, 2))]
    assert brokers.unfence_broker(image, 3, unclean=never) == []  # already unfenced


def test_rejoin_isr_keeps_the_interim_rule_from_before_replication() -> None:
    image = three_brokers_one_topic()
    image = fence(image, 3)
    image = commit(image, brokers.unfence_broker(image, 3, unclean=never, rejoin_isr=True))
    assert state(image, "t", 0) == (1, (1, 2, 3))
    assert state(image, "t", 1) == (2, (2, 3, 1))  # replica order
    assert state(image, "t", 2) == (1, (3, 1, 2))  # leader unchanged until preference


def test_preferred_leaders_are_restored_when_in_sync_and_live() -> None:
    image = three_brokers_one_topic()
    image = fence(image, 3)
    assert state(image, "t", 2) == (1, (1, 2))
    assert brokers.preferred_leader_elections(image) == []  # 3 is fenced
    image, _ = heartbeat(image, 3)
    assert brokers.preferred_leader_elections(image) == []  # 3 is not in sync yet
    image = rejoin(image, "t", 2, 3)  # its leader adds it back once it has caught up
    before = partition(image, "t", 2)
    records = brokers.preferred_leader_elections(image)
    assert len(records) == 1
    image = commit(image, records)
    after = partition(image, "t", 2)
    assert (after.leader, after.isr) == (3, (1, 2, 3))  # the ISR as the leader sent it
    assert after.leader_epoch == before.leader_epoch + 1
    assert brokers.preferred_leader_elections(image) == []


def test_a_preferred_replica_out_of_sync_does_not_take_leadership() -> None:
    image = three_brokers_one_topic()
    image = fence(image, 3)
    image = commit(image, brokers.unfence_broker(image, 3, unclean=never, rejoin_isr=False))
    assert state(image, "t", 2) == (1, (1, 2))
    assert brokers.preferred_leader_elections(image) == []


def test_preferred_leaders_return_only_to_settled_brokers() -> None:
    """Broker 3 is back, in sync and preferred for t-2, but has not stayed up long
    enough (not in `settled`): it does not take the leadership back yet."""
    image = three_brokers_one_topic()
    image = fence(image, 3)
    image, _ = heartbeat(image, 3)
    image = rejoin(image, "t", 2, 3)
    assert brokers.preferred_leader_elections(image, settled={1, 2}) == []
    records = brokers.preferred_leader_elections(image, settled={1, 2, 3})
    assert len(records) == 1
    assert partition(commit(image, records), "t", 2).leader == 3


def test_preferred_leaders_return_only_past_the_imbalance_percentage() -> None:
    """Broker 3 is preferred for one partition of three (t-2), led elsewhere: 100% of its
    preferred partitions, over any percentage below 100."""
    image = three_brokers_one_topic()
    image = fence(image, 3)
    image, _ = heartbeat(image, 3)
    image = rejoin(image, "t", 2, 3)
    assert len(brokers.preferred_leader_elections(image, imbalance_percentage=10)) == 1
    assert brokers.preferred_leader_elections(image, imbalance_percentage=100) == []
