"""A stand-in for the share coordinator while it is built: share-partition states kept in
this process's memory, not durable, answering the `ShareStatePort` calls with the share
coordinator's rules for epochs. Replaced by the `__share_group_state` coordinator."""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from strom.share.records import StateBatch
from strom.share.replay import DurableShareState, state_batches
from strom.share.state_port import (
    UNINITIALIZED_START_OFFSET,
    ShareStateKey,
    ShareStateRead,
    ShareStateSummary,
    ShareStateWrite,
)
from strom.share.values import RecordState

__all__ = ["MemoryShareState"]


@dataclass(slots=True)
class _Kept:
    durable: DurableShareState = field(default_factory=DurableShareState)
    delivery_complete_count: int = -1


class MemoryShareState:
    def __init__(self) -> None:
        self._kept: dict[ShareStateKey, _Kept] = {}

    async def initialize(
        self, key: ShareStateKey, state_epoch: int, start_offset: int
    ) -> tuple[ErrorCode, str | None]:
        kept = self._kept.get(key)
        if kept is not None and state_epoch < kept.durable.state_epoch:
            return ErrorCode.fenced_state_epoch, "state epoch is older than the kept one"
        self._kept[key] = _Kept(
            DurableShareState(start_offset=start_offset, state_epoch=state_epoch)
        )
        return ErrorCode.none, None

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareStateRead:
        kept = self._kept.get(key)
        if kept is None:
            # The stand-in's shortcut until share-group membership is merged: there the
            # group coordinator initializes a share-partition before it assigns it (and a
            # read of a key never initialized answers UNKNOWN_TOPIC_OR_PARTITION, as
            # Kafka's share coordinator does); here a share consumer fetches with no
            # membership, so an unknown key reads as initialized, to be placed by its
            # leader.
            kept = self._kept[key] = _Kept(
                DurableShareState(start_offset=UNINITIALIZED_START_OFFSET)
            )
        if leader_epoch < kept.durable.leader_epoch:
            return ShareStateRead(ErrorCode.fenced_leader_epoch, "leader epoch is older")
        kept.durable.leader_epoch = leader_epoch
        return ShareStateRead(
            ErrorCode.none,
            state_epoch=kept.durable.state_epoch,
            start_offset=kept.durable.start_offset,
            state_batches=state_batches(kept.durable.states),
        )

    async def write(
        self, key: ShareStateKey, write: ShareStateWrite
    ) -> tuple[ErrorCode, str | None]:
        kept = self._kept.get(key)
        if kept is None:
            return ErrorCode.unknown_topic_or_partition, "not initialized"
        durable = kept.durable
        if write.state_epoch < durable.state_epoch:
            return ErrorCode.fenced_state_epoch, "state epoch is older than the kept one"
        if write.leader_epoch < durable.leader_epoch:
            return ErrorCode.fenced_leader_epoch, "leader epoch is older"
        durable.leader_epoch = write.leader_epoch
        if write.start_offset != UNINITIALIZED_START_OFFSET:
            durable.start_offset = write.start_offset
            durable.states = {o: s for o, s in durable.states.items() if o >= write.start_offset}
        for batch in write.state_batches:
            _merge(durable, batch)
        kept.delivery_complete_count = write.delivery_complete_count
        return ErrorCode.none, None

    async def delete(self, key: ShareStateKey) -> tuple[ErrorCode, str | None]:
        self._kept.pop(key, None)
        return ErrorCode.none, None

    async def summary(self, key: ShareStateKey, leader_epoch: int) -> ShareStateSummary:
        kept = self._kept.get(key)
        if kept is None:
            return ShareStateSummary(ErrorCode.unknown_topic_or_partition, "not initialized")
        return ShareStateSummary(
            ErrorCode.none,
            state_epoch=kept.durable.state_epoch,
            leader_epoch=kept.durable.leader_epoch,
            start_offset=kept.durable.start_offset,
            delivery_complete_count=kept.delivery_complete_count,
        )


def _merge(durable: DurableShareState, batch: StateBatch) -> None:
    for offset in range(max(batch.first_offset, durable.start_offset), batch.last_offset + 1):
        state = RecordState(batch.delivery_state)
        if state is RecordState.AVAILABLE and batch.delivery_count == 0:
            durable.states.pop(offset, None)
        else:
            durable.states[offset] = (state, batch.delivery_count)
