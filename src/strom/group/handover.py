"""The classic coordinator's side of a group moving between the protocols (KIP-848's
online migration; the consumer side is `strom.group.consumer.migration`).

- `hand_over`: a live classic group becomes a consumer group. Its membership record is
  deleted (a GroupMetadata tombstone) and its waiting JoinGroup and SyncGroup requests
  are answered REBALANCE_IN_PROGRESS, as Kafka's convertToConsumerGroup answers them;
  the classic group as it was goes to the consumer coordinator, whose records are
  written in the same batch. What stays here is the group's committed offsets, which a
  group id keeps whatever protocol its members speak (replay keeps them through the
  tombstone too: `strom.group.replay`).
- `adopt`: a consumer group whose last consumer-protocol member left becomes a classic
  group again: its membership record is written, it keeps the offsets held here, and a
  rebalance starts so the members rejoin under the classic protocol.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strom.group.coordinator import GroupCoordinator
from strom.group.records import GroupMetadataKey
from strom.group.requests import Output
from strom.group.state import Group, GroupState, JoinResult, SyncResult

__all__ = ["adopt", "hand_over"]


def hand_over(coordinator: GroupCoordinator, group_id: str, now_ms: int) -> tuple[Group, Output]:
    """The decision that takes `group_id`'s classic membership away: the group as it was,
    and the output whose records go in one batch with the consumer group's."""
    taken: list[Group] = []

    def decision(out: Output) -> None:
        group = coordinator.store.get(group_id)
        assert group is not None, f"no classic group {group_id} to hand over"
        taken.append(group)
        for member in group.members.values():
            busy = ErrorCode.rebalance_in_progress
            out.reply(member.join_token, JoinResult(busy, member.member_id))
            out.reply(member.sync_token, SyncResult(busy))
        holder = Group(
            group_id,
            GroupState.EMPTY,
            now_ms,
            offsets=group.offsets,
            pending_offsets=group.pending_offsets,
        )
        coordinator.store.put(holder)
        out.records.append((GroupMetadataKey(group_id), None))

    out = coordinator.decide(now_ms, decision)
    return taken[0], out


def adopt(coordinator: GroupCoordinator, group: Group, now_ms: int, reason: str) -> Output:
    """The decision that makes `group` (built from a consumer group, Stable at its group
    epoch) the classic group of its id, and starts a rebalance."""

    def decision(out: Output) -> None:
        holder = coordinator.store.get(group.group_id)
        if holder is not None:
            group.offsets = holder.offsets
            group.pending_offsets = holder.pending_offsets
        coordinator.store.put(group)
        out.records.append((GroupMetadataKey(group.group_id), group.to_record()))
        coordinator.rebalancer.prepare_rebalance(group, now_ms, out, reason)

    return coordinator.decide(now_ms, decision)
