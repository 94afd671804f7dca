"""Partition leadership and ISR as brokers are fenced and unfenced: pure decisions.

Each function takes the image and returns the records of one decision. A partition's
state moves only by PartitionChangeRecords carrying its new full leader and ISR; every
change bumps its partition_epoch, and its leader_epoch goes up (once per decision,
however many brokers the decision touches) when the leader changes or when replicas
leave its replica list (KRaft's rule: the removed replicas' fetches are then fenced).

The rules (KRaft's, before "eligible leader replicas"):

- A fenced broker leaves every ISR, except that an ISR never becomes empty: its last
  member stays, so that replica, which has every committed record, can lead again when
  it returns. Brokers fenced in one decision leave in the order given, as if fenced one
  by one. Controlled shutdown fences the broker the same way.
- A partition whose leader left gets the first replica (in replica order) that is in the
  remaining ISR and unfenced. If there is none, its leader is -1 (offline), unless
  unclean.leader.election.enable holds for the topic: then the first unfenced replica
  leads with ISR = [itself], and records the others had may be lost. Replicas a pending
  reassignment is adding come last in that choice: they may not hold any of the log yet.
- An unfenced broker that is the (kept) ISR member of an offline partition leads it.
- A returning broker does not rejoin ISRs by being unfenced: its followers fetch from the
  leaders, and each leader adds it back with AlterPartition (isr.py) once it has caught
  up. `rejoin_isr=True` keeps the rule strom used before partition replication existed
  (an unfenced broker rejoins the ISR of every partition with a live leader it is a
  replica of); nothing passes it any more.
- Preferred leader election (auto.leader.rebalance.enable): a partition whose first
  replica is unfenced, in the ISR and not the leader is led by it again. Elections an
  operator asks for (ElectLeaders, preferred or unclean) are in elect_leaders.py.

Replicas a reassignment adds or removes (reassignments.py) are replicas like the others
here: fenced, unfenced and elected by these rules, and a fenced one simply stays in the
replica list. Every change passes through `partition_change`, which also completes a
reassignment that the change made complete (every target replica in the ISR).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, replace

from strom.metadata.image import NO_LEADER, MetadataImage, PartitionImage, TopicImage
from strom.metadata.records import (
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    UnfenceBrokerRecord,
)

UncleanPolicy = Callable[[str], bool]
"""unclean(topic name) -> whether unclean.leader.election.enable holds for that topic."""

Liveness = Callable[[int], bool]
"""is_live(broker id) -> whether that broker may lead (registered and unfenced)."""


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What a decision makes of one partition: the fields of a PartitionImage it decides."""

    leader: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @staticmethod
    def of(partition: PartitionImage) -> PartitionState:
        return PartitionState(
            partition.leader,
            partition.isr,
            partition.replicas,
            partition.adding_replicas,
            partition.removing_replicas,
        )


def change_record(
    topic_id: uuid.UUID, old: PartitionImage, new: PartitionState
) -> PartitionChangeRecord | None:
    """The record moving `old` to `new`, epochs bumped; None if nothing changes."""
    if PartitionState.of(old) == new:
        return None
    lost_replicas = not set(old.replicas) <= set(new.replicas)
    return PartitionChangeRecord(
        topic_id,
        old.partition,
        new.leader,
        new.isr,
        old.leader_epoch + (1 if new.leader != old.leader or lost_replicas else 0),
        old.partition_epoch + 1,
        replicas=None if new.replicas == old.replicas else new.replicas,
        adding_replicas=None if new.adding_replicas == old.adding_replicas else new.adding_replicas,
        removing_replicas=None
        if new.removing_replicas == old.removing_replicas
        else new.removing_replicas,
    )


def partition_change(
    topic_id: uuid.UUID, old: PartitionImage, new: PartitionState, is_live: Liveness
) -> PartitionChangeRecord | None:
    """`change_record` for `new`, with the pending reassignment completed if `new`
    completes it (see complete_reassignment)."""
    return change_record(topic_id, old, complete_reassignment(new, is_live))


def complete_reassignment(state: PartitionState, is_live: Liveness) -> PartitionState:
    """`state` with its reassignment completed, if one is pending and every replica it
    keeps is in the ISR: replicas = the target (those not being removed), ISR = the ISR
    without the removed ones, nothing adding or removing; a leader that was removed (or
    is not live) gives way to the first live ISR member of the target, or -1."""
    if not state.adding_replicas and not state.removing_replicas:
        return state
    removing = set(state.removing_replicas)
    target = tuple(r for r in state.replicas if r not in removing)
    isr = tuple(r for r in state.isr if r not in removing)
    if not target or not isr or not set(target) <= set(isr):
        return state
    return elect_leader(PartitionState(state.leader, isr, target), is_live, unclean=False)


def elect_leader(state: PartitionState, is_live: Liveness, *, unclean: bool) -> PartitionState:
    """Keep a live leader that is in the ISR; otherwise the first live ISR member in
    replica order leads; otherwise, if `unclean`, the unclean candidate leads alone in
    the ISR; otherwise nobody (-1), the ISR unchanged."""
    if state.leader in state.isr and is_live(state.leader):
        return state
    leader = next((r for r in state.replicas if r in state.isr and is_live(r)), NO_LEADER)
    if leader == NO_LEADER and unclean:
        candidate = unclean_candidate(state, is_live)
        if candidate is not None:
            return replace(state, leader=candidate, isr=(candidate,))
    return replace(state, leader=leader)


def unclean_candidate(state: PartitionState, is_live: Liveness) -> int | None:
    """The replica an unclean election picks: the first live one in replica order,
    replicas being added (which may hold none of the log) after the others."""
    adding = set(state.adding_replicas)
    ordered = [r for r in state.replicas if r not in adding] + [
        r for r in state.replicas if r in adding
    ]
    return next((r for r in ordered if is_live(r)), None)


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
        state = PartitionState.of(partition)
        for broker_id in fenced:
            state = _without(topic, state, broker_id, live, unclean)
        record = partition_change(topic.topic_id, partition, state, live.__contains__)
        if record is not None:
            records.append(record)
    return records


def _without(
    topic: TopicImage,
    state: PartitionState,
    broker_id: int,
    live: set[int],
    unclean: UncleanPolicy,
) -> PartitionState:
    if broker_id != state.leader and broker_id not in state.isr:
        return state
    isr = tuple(r for r in state.isr if r != broker_id) or (broker_id,)
    leader = state.leader
    if leader in (broker_id, NO_LEADER):
        leader = next((r for r in state.replicas if r in isr and r in live), NO_LEADER)
    if leader == NO_LEADER and unclean(topic.name):
        candidate = unclean_candidate(state, live.__contains__)
        if candidate is not None:
            return replace(state, leader=candidate, isr=(candidate,))
    return replace(state, leader=leader, isr=isr)


def unfence_broker(
    image: MetadataImage,
    broker_id: int,
    *,
    unclean: UncleanPolicy,
    rejoin_isr: bool = False,
) -> list[MetadataRecord]:
    """Unfence a registered, fenced broker: it leads the offline partitions whose ISR kept
    it (where unclean election is allowed, an offline partition it is a replica of gets
    its unclean candidate, normally this broker). It rejoins no ISR: the partitions'
    leaders add it back with AlterPartition once it has caught up. `rejoin_isr=True`
    restores the rule from before replication: it rejoins the ISR of the partitions it is
    a replica of that have a live leader."""
    broker = image.brokers.get(broker_id)
    if broker is None or not broker.fenced:
        return []
    records: list[MetadataRecord] = [UnfenceBrokerRecord(broker_id, broker.epoch)]

    def is_live(candidate: int) -> bool:
        return candidate == broker_id or image.is_live(candidate)

    for topic, partition in image.partitions():
        if broker_id not in partition.replicas:
            continue
        state = PartitionState.of(partition)
        if state.leader == NO_LEADER:
            if broker_id in state.isr:
                state = replace(state, leader=broker_id)
            elif unclean(topic.name):
                candidate = unclean_candidate(state, is_live)
                if candidate is not None:
                    state = replace(state, leader=candidate, isr=(candidate,))
        elif rejoin_isr and broker_id not in state.isr:
            isr = tuple(r for r in state.replicas if r in state.isr or r == broker_id)
            state = replace(state, isr=isr)
        record = partition_change(topic.topic_id, partition, state, is_live)
        if record is not None:
            records.append(record)
    return records


def preferred_leader_elections(
    image: MetadataImage,
    *,
    imbalance_percentage: int = 0,
    settled: Collection[int] | None = None,
) -> list[MetadataRecord]:
    """Lead every partition by its preferred (first) replica where that one is unfenced,
    in the ISR and not already the leader — for the preferred brokers whose share of
    partitions led by another exceeds `imbalance_percentage` (Kafka's
    leader.imbalance.per.broker.percentage; 0: any imbalance) and, when `settled` is
    given, that are in it: a broker that has only just come back does not take its
    leaderships (and their clients) back before it has stayed up for a while."""
    preferred_of: dict[int, int] = {}
    imbalanced: dict[int, int] = {}
    for _, partition in image.partitions():
        if partition.replicas:
            preferred = partition.replicas[0]
            preferred_of[preferred] = preferred_of.get(preferred, 0) + 1
            if partition.leader != preferred:
                imbalanced[preferred] = imbalanced.get(preferred, 0) + 1
    due = {
        broker
        for broker, count in imbalanced.items()
        if count * 100 > imbalance_percentage * preferred_of[broker]
        and (settled is None or broker in settled)
    }
    records: list[MetadataRecord] = []
    for topic, partition in image.partitions():
        preferred = partition.replicas[0] if partition.replicas else NO_LEADER
        if (
            preferred in due
            and preferred != partition.leader
            and preferred in partition.isr
            and image.is_live(preferred)
        ):
            state = replace(PartitionState.of(partition), leader=preferred)
            record = partition_change(topic.topic_id, partition, state, image.is_live)
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
