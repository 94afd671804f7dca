"""Rebuilding a coordinator's state from `__consumer_offsets`.

`replay` applies one record, in log order: at load, every record of the partition; while
serving, each commit record once it is durable. A group metadata record restores the
group as its last rebalance left it (Stable with its members, or Empty); the members
must then heartbeat within their session timeouts, counted from the load.
"""

from __future__ import annotations

from strom.group.coordinator import GroupCoordinator
from strom.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    Key,
    OffsetCommitValue,
    Value,
)
from strom.group.state import Group, GroupState, Member, TopicPartition


def replay(
    coordinator: GroupCoordinator, key: Key, value: Value | None, now_ms: int, *, loading: bool
) -> None:
    """Apply one record. Live group changes are already in memory, so group metadata
    records change state only when `loading`."""
    if isinstance(key, GroupMetadataKey):
        if loading:
            assert value is None or isinstance(value, GroupMetadataValue)
            load_group(coordinator, key.group_id, value, now_ms)
        return
    tp = TopicPartition(key.topic, key.partition)
    group = coordinator.groups.get(key.group_id)
    if value is None:
        if group is not None:
            group.offsets.pop(tp, None)
        return
    assert isinstance(value, OffsetCommitValue)
    if group is None:
        group = Group(key.group_id, GroupState.EMPTY, now_ms)
        coordinator.groups[key.group_id] = group
    group.offsets[tp] = value


def load_group(
    coordinator: GroupCoordinator, group_id: str, value: GroupMetadataValue | None, now_ms: int
) -> None:
    if value is None:
        coordinator.groups.pop(group_id, None)
        return
    group = coordinator.groups.get(group_id)
    if group is None:
        group = Group(group_id, GroupState.EMPTY, now_ms)
        coordinator.groups[group_id] = group
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
