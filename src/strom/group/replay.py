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
from strom.group.state import Group, GroupState, Member, TopicPartition

__all__ = ["load_group", "replay"]


def replay(
    groups: MutableMapping[str, Group],
    key: Key,
    value: Value | None,
    now_ms: int,
    *,
    loading: bool,
) -> None:
    """Apply one record to `groups` (a group metadata value only when `loading`)."""
    if isinstance(key, GroupMetadataKey):
        if value is None:
            groups.pop(key.group_id, None)
        elif loading:
            assert isinstance(value, GroupMetadataValue)
            load_group(groups, key.group_id, value, now_ms)
        return
    tp = TopicPartition(key.topic, key.partition)
    group = groups.get(key.group_id)
    if value is None:
        if group is not None:
            group.offsets.pop(tp, None)
        return
    assert isinstance(value, OffsetCommitValue)
    if group is None:
        group = Group(key.group_id, GroupState.EMPTY, now_ms)
        groups[key.group_id] = group
    group.offsets[tp] = value


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
