"""Partition leadership and ISR as brokers are fenced and unfenced: pure decisions.

Each function takes the image and returns the records of one decision. A partition's
state moves only by PartitionChangeRecords carrying its new full leader and ISR; every
change bumps its partition_epoch, and a change of leader bumps its leader_epoch (once
per decision, however many brokers the decision touches).

The rules (KRaft's, before "eligible leader replicas"):

- A fenced broker leaves every ISR, except that an ISR never becomes empty: its last
  member stays, so that replica, which has every committed record, can lead again when
  it returns. Brokers fenced in one decision leave in the order given, as if fenced one
  by one.
- A partition whose leader left gets the first replica (in replica order) that is in the
  remaining ISR and unfenced. If there is none, its leader is -1 (offline), unless
  unclean.leader.election.enable holds for the topic: then the first unfenced replica
  leads with ISR = [itself], and records the others had may be lost.
- An unfenced broker that is the (kept) ISR member of an offline partition leads it.
- Interim rule, until partition replication exists: an unfenced broker rejoins the ISR of
  every partition with a live leader it is a replica of (`rejoin_isr=True`). Once followers
  fetch from leaders, the leader will add it back with AlterPartition when it has caught
  up, and callers pass `rejoin_isr=False`.
- Preferred leader election (auto.leader.rebalance.enable): a partition whose first
  replica is unfenced, in the ISR and not the leader is led by it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from strom.metadata.image import NO_LEADER, MetadataImage, PartitionImage, TopicImage
from strom.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    UnfenceBrokerRecord,
)

UncleanPolicy = Callable[[str], bool]
"""unclean(topic name) -> whether unclean.leader.election.enable holds for that topic."""


@dataclass(frozen=True, slots=True)
class _State:
    leader: int
    isr: tuple[int, ...]


def change_record(
    topic_id: uuid.UUID, old: PartitionImage, leader: int, isr: tuple[int, ...]
) -> PartitionChangeRecord | None:
    """The record moving `old` to (leader, isr), epochs bumped; None if nothing changes."""
    if leader == old.leader and isr == old.isr:
        return None
    return PartitionChangeRecord(
        topic_id,
        old.partition,
        leader,
        isr,
        old.leader_epoch + (1 if leader != old.leader else 0),
        old.partition_epoch + 1,
    )


def fence_brokers(
    image: MetadataImage, broker_ids: Iterable[int], *, unclean: UncleanPolicy
) -> list[MetadataRecord]:
    """Fence each registered, unfenced broker of `broker_ids`; move leadership and shrink
    ISRs as the module docstring says. Unknown or already fenced brokers are skipped."""
    fenced = [b for b in dict.fromkeys(broker_ids) if image.is_live(b)]
    if not fenced:
        return []
    records: list[MetadataRecord] = [
        FenceBrokerRecord(broker_id, image.brokers[broker_id].epoch) for broker_id in fenced
    ]
    live = set(image.live_broker_ids()) - set(fenced)
    gone = set(fenced)
    for topic, partition in image.partitions():
        if partition.leader not in gone and gone.isdisjoint(partition.isr):
            continue
        state = _State(partition.leader, partition.isr)
        for broker_id in fenced:
            state = _without(topic, partition, state, broker_id, live, unclean)
        record = change_record(topic.topic_id, partition, state.leader, state.isr)
        if record is not None:
            records.append(record)
    return records


def _without(
    topic: TopicImage,
    partition: PartitionImage,
    state: _State,
    broker_id: int,
    live: set[int],
    unclean: UncleanPolicy,
) -> _State:
    if broker_id != state.leader and broker_id not in state.isr:
        return state
    isr = tuple(r for r in state.isr if r != broker_id) or (broker_id,)
    leader = state.leader
    if leader in (broker_id, NO_LEADER):
        leader = next((r for r in partition.replicas if r in isr and r in live), NO_LEADER)
    if leader == NO_LEADER:
        candidate = next((r for r in partition.replicas if r in live), None)
        if candidate is not None and unclean(topic.name):
            return _State(candidate, (candidate,))
    return _State(leader, isr)


def unfence_broker(
    image: MetadataImage,
    broker_id: int,
    *,
    unclean: UncleanPolicy,
    rejoin_isr: bool = True,
) -> list[MetadataRecord]:
    """Unfence a registered, fenced broker: it leads the offline partitions whose ISR kept
    it (or, where unclean election is allowed, any offline partition it is a replica of),
    and, with `rejoin_isr` (the interim rule), rejoins the ISR of the partitions it is a
    replica of that have a live leader."""
    broker = image.brokers.get(broker_id)
    if broker is None or not broker.fenced:
        return []
    records: list[MetadataRecord] = [UnfenceBrokerRecord(broker_id, broker.epoch)]
    for topic, partition in image.partitions():
        if broker_id not in partition.replicas:
            continue
        leader, isr = partition.leader, partition.isr
        if leader == NO_LEADER:
            if broker_id in isr:
                leader = broker_id
            elif unclean(topic.name):
                leader, isr = broker_id, (broker_id,)
        elif rejoin_isr and broker_id not in isr:
            isr = tuple(r for r in partition.replicas if r in isr or r == broker_id)
        record = change_record(topic.topic_id, partition, leader, isr)
        if record is not None:
            records.append(record)
    return records


def preferred_leader_elections(image: MetadataImage) -> list[MetadataRecord]:
    """Lead every partition by its preferred (first) replica where that one is unfenced,
    in the ISR and not already the leader."""
    records: list[MetadataRecord] = []
    for topic, partition in image.partitions():
        preferred = partition.replicas[0] if partition.replicas else NO_LEADER
        if (
            preferred != partition.leader
            and preferred in partition.isr
            and image.is_live(preferred)
        ):
            record = change_record(topic.topic_id, partition, preferred, partition.isr)
            if record is not None:
                records.append(record)
    return records


def partitions_led_by(image: MetadataImage, broker_id: int) -> list[tuple[str, int]]:
    """(topic, partition) of every partition `broker_id` leads."""
    return [
        (topic.name, partition.partition)
        for topic, partition in image.partitions()
        if partition.leader == broker_id
    ]
