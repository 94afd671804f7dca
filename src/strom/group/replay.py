"""Rebuilding a coordinator's state from `__consumer_offsets` records.

`replay` applies one record, in log order, to a dict of groups: at load, every record of
the partition into the committed groups; while serving, the records of each decision
into that decision's own copies of its groups (`layers.py`), which become the committed
groups once the records are durable. So committed offsets, deleted offsets and deleted
groups change in one way only, live and at load: by replaying their records.

A group metadata record restores a group as its last rebalance left it (Stable with its
members, or Empty); the members must then heartbeat within their session timeouts,
counted from the load. Live, the decision that wrote the record has already shaped its
copy of the group (members with all their protocols, waiting requests, timers: state
the record does not carry), so there only a tombstone changes anything.

An offset record of a transactional batch (a TxnOffsetCommit's) becomes a pending offset
of the batch's producer; `end_transaction` applies that producer's COMMIT or ABORT
marker: committed, each pending offset becomes the group's committed offset unless a
commit of the same partition written after it took effect first; aborted, it is dropped.
A plain commit of a partition supersedes the pending offsets written before it; a
tombstone removes the partition's committed and pending offsets alike (Kafka's
OffsetMetadataManager.replay and replayEndTransactionMarker).
"""

from __future__ import annotations

from collections.abc import MutableMapping

from strom.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    Key,
    OffsetCommitValue,
    Value,
)
from strom.group.state import Group, GroupState, Member, PendingOffset, TopicPartition

__all__ = ["end_transaction", "load_group", "replay"]

NO_PRODUCER_ID = -1


def replay(
    groups: MutableMapping[str, Group],
    key: Key,
    value: Value | None,
    now_ms: int,
    *,
    loading: bool,
    producer_id: int = NO_PRODUCER_ID,
) -> None:
    """Apply one record to `groups` (a group metadata value only when `loading`);
    `producer_id` is that of the record's batch when the batch is transactional."""
    if isinstance(key, GroupMetadataKey):
        if value is None:
            _drop_membership(groups, key.group_id, now_ms)
        elif loading:
            assert isinstance(value, GroupMetadataValue)
            load_group(groups, key.group_id, value, now_ms)
        return
    tp = TopicPartition(key.topic, key.partition)
    group = groups.get(key.group_id)
    if value is None:
        if group is not None:
            group.offsets.pop(tp, None)
            group.pending_offsets.pop(tp, None)
        return
    assert isinstance(value, OffsetCommitValue)
    if group is None:
        group = Group(key.group_id, GroupState.EMPTY, now_ms)
        groups[key.group_id] = group
    pending = group.pending_offsets.get(tp)
    if producer_id != NO_PRODUCER_ID:
        if pending is None:
            pending = group.pending_offsets[tp] = {}
        pending.pop(producer_id, None)  # written again: now the newest of the partition
        pending[producer_id] = PendingOffset(value)
        return
    group.offsets[tp] = value
    if pending is not None:
        for each, offset in pending.items():
            pending[each] = PendingOffset(offset.value, superseded=True)


def _drop_membership(groups: MutableMapping[str, Group], group_id: str, now_ms: int) -> None:
    """A group metadata tombstone: the classic membership is gone. The group goes too,
    unless it still has offsets: deleting a group writes their tombstones first, and a
    group moving to the consumer protocol keeps them (`strom.group.handover`)."""
    old = groups.pop(group_id, None)
    if old is not None and (old.offsets or old.pending_offsets):
        groups[group_id] = Group(
            group_id,
            GroupState.EMPTY,
            now_ms,
            offsets=old.offsets,
            pending_offsets=old.pending_offsets,
        )


def end_transaction(group: Group, producer_id: int, *, commit: bool) -> bool:
    """Apply the COMMIT (or ABORT) marker of `producer_id` to the group's pending offsets;
    False when it has none there. The group gets its own offsets first (`own_offsets`):
    other versions of it may share them."""
    if not any(producer_id in by_producer for by_producer in group.pending_offsets.values()):
        return False
    group.own_offsets()
    ended = [tp for tp, by_producer in group.pending_offsets.items() if producer_id in by_producer]
    for tp in ended:
        by_producer = group.pending_offsets[tp]
        older = list(by_producer)[: list(by_producer).index(producer_id)]
        mine = by_producer.pop(producer_id)
        if commit and not mine.superseded:
            group.offsets[tp] = mine.value
            for each in older:  # written before the offset committed now
                by_producer[each] = PendingOffset(by_producer[each].value, superseded=True)
        if not by_producer:
            del group.pending_offsets[tp]
    return True


def load_group(
    groups: MutableMapping[str, Group], group_id: str, value: GroupMetadataValue, now_ms: int
) -> None:
    group = groups.get(group_id)
    if group is None:
        group = Group(group_id, GroupState.EMPTY, now_ms)
        groups[group_id] = group
    group.generation_id = value.generation_id
    group.protocol_type = value.protocol_type or None
    group.protocol_name = value.protocol_name
    group.leader_id = value.leader_id
    group.members.clear()
    group.static_members.clear()
    for record in value.members:
        group.members[record.member_id] = Member(
            member_id=record.member_id,
            group_instance_id=record.group_instance_id,
            client_id=record.client_id,
            client_host=record.client_host,
            rebalance_timeout_ms=record.rebalance_timeout_ms,
            session_timeout_ms=record.session_timeout_ms,
            protocol_type=value.protocol_type,
            protocols=((value.protocol_name or "", record.subscription),),
            heartbeat_deadline_ms=now_ms + record.session_timeout_ms,
            assignment=record.assignment,
        )
        if record.group_instance_id is not None:
            group.static_members[record.group_instance_id] = record.member_id
    group.state = GroupState.STABLE if group.members else GroupState.EMPTY
    stamp_ms = value.current_state_timestamp_ms
    group.state_timestamp_ms = stamp_ms if stamp_ms >= 0 else now_ms
