"""Rebuilding a share-partition's durable state from its `__share_group_state` records.

A snapshot replaces everything; an update moves the start offset (unless it is -1) and
then sets the state and delivery count of every offset in its batches. Offsets below
the start offset are forgotten. An offset no record mentions is AVAILABLE and has never
been delivered, so that pair is the default and is not kept.

ARCHIVING (3, KIP-1191) is kept as it is: archived, with the copy to its dead-letter
topic still owed; the loaded share-partition makes that copy again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from strom.share.records import (
    NO_START_OFFSET,
    ShareSnapshotValue,
    ShareUpdateValue,
    StateBatch,
)
from strom.share.values import RecordState

__all__ = ["DurableShareState", "DurableView", "ShareReplayError", "state_batches"]

DurableView = tuple[int, tuple[tuple[int, RecordState, int], ...]]
"""The start offset and every offset at or above it that is not (AVAILABLE, 0), with
its state and delivery count, in offset order."""

_DURABLE_STATES = frozenset(
    {
        RecordState.AVAILABLE,
        RecordState.ACKNOWLEDGED,
        RecordState.ARCHIVING,
        RecordState.ARCHIVED,
    }
)


class ShareReplayError(ValueError):
    """Records that do not make a share-partition state (an update before any snapshot,
    a batch with an unknown state)."""


@dataclass(slots=True)
class DurableShareState:
    start_offset: int = 0
    states: dict[int, tuple[RecordState, int]] = field(default_factory=dict)
    snapshot_epoch: int = -1
    state_epoch: int = 0
    leader_epoch: int = 0
    created_ms: int = 0
    updates_since_snapshot: int = 0

    @classmethod
    def from_records(cls, values: list[ShareSnapshotValue | ShareUpdateValue]) -> DurableShareState:
        state = cls()
        for value in values:
            state.apply(value)
        if state.snapshot_epoch < 0:
            raise ShareReplayError("no snapshot among the share-partition's records")
        return state

    def apply(self, value: ShareSnapshotValue | ShareUpdateValue) -> None:
        if isinstance(value, ShareSnapshotValue):
            self.start_offset = value.start_offset
            self.states = {}
            self.snapshot_epoch = value.snapshot_epoch
            self.state_epoch = value.state_epoch
            self.leader_epoch = value.leader_epoch
            self.created_ms = value.create_timestamp_ms
            self.updates_since_snapshot = 0
        else:
            if self.snapshot_epoch < 0:
                raise ShareReplayError("a share update before any snapshot")
            self.leader_epoch = value.leader_epoch
            self.updates_since_snapshot += 1
            if value.start_offset != NO_START_OFFSET:
                self._move_start(value.start_offset)
        for batch in value.state_batches:
            self._set(batch)

    def _move_start(self, start_offset: int) -> None:
        self.start_offset = start_offset
        self.states = {o: s for o, s in self.states.items() if o >= start_offset}

    def _set(self, batch: StateBatch) -> None:
        try:
            state = RecordState(batch.delivery_state)
        except ValueError:
            raise ShareReplayError(f"unknown delivery state {batch.delivery_state}") from None
        if state not in _DURABLE_STATES or batch.first_offset > batch.last_offset:
            raise ShareReplayError(f"state batch {batch} cannot be durable")
        for offset in range(max(batch.first_offset, self.start_offset), batch.last_offset + 1):
            if state is RecordState.AVAILABLE and batch.delivery_count == 0:
                self.states.pop(offset, None)
            else:
                self.states[offset] = (state, batch.delivery_count)

    def view(self) -> DurableView:
        return (
            self.start_offset,
            tuple((o, s, c) for o, (s, c) in sorted(self.states.items())),
        )


def state_batches(states: dict[int, tuple[RecordState, int]]) -> tuple[StateBatch, ...]:
    """Offsets with their durable state, coalesced into batches of consecutive offsets
    that share a state and a delivery count."""
    batches: list[StateBatch] = []
    for offset in sorted(states):
        state, count = states[offset]
        last = batches[-1] if batches else None
        if (
            last is not None
            and last.last_offset == offset - 1
            and last.delivery_state == state
            and last.delivery_count == count
        ):
            batches[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            batches.append(StateBatch(offset, offset, int(state), count))
    return tuple(batches)
