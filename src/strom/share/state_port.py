"""The share-state port: how a share-partition's leader and the group coordinator reach
the share coordinator that keeps share-partitions' state in `__share_group_state`.

Kafka calls this the persister. Its five calls are the five inter-broker RPCs of
KIP-932, one share-partition each:

    initialize   InitializeShareGroupState (83)  the group coordinator, before it assigns
                                                 a partition to a share group's members
    read         ReadShareGroupState (84)        a partition leader loading its share-partition
    write        WriteShareGroupState (85)       a partition leader after each decision
    delete       DeleteShareGroupState (86)      DeleteGroups, DeleteShareGroupOffsets
    summary      ReadShareGroupStateSummary (87) DescribeShareGroupOffsets

The implementation answers from this broker when it leads the `__share_group_state`
partition of the key (`strom.share.placement.share_state_partition`) and sends the RPC
to the broker that does otherwise; callers do not know which. Every call answers with an
error code (Kafka's: NONE, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS, FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH,
UNKNOWN_TOPIC_OR_PARTITION for a topic the metadata does not have, INVALID_REQUEST for
a read or write of a key that was never initialized (Kafka's answer, with the message
"Read operation on uninitialized share partition not allowed."), ...) and never raises
for a refusal. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
COORDINATOR_LOAD_IN_PROGRESS are retried inside the implementation for up to 30 s; a
caller seeing one of them may try again later.

A read of a share-partition that was initialized but never written answers
`start_offset == UNINITIALIZED_START_OFFSET` (-1): its leader places it by
`share.auto.offset.reset` and writes the result.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol

from kio.schema.errors import ErrorCode

from strom.share.records import StateBatch

__all__ = [
    "UNINITIALIZED_START_OFFSET",
    "ShareStateKey",
    "ShareStatePort",
    "ShareStateRead",
    "ShareStateSummary",
    "ShareStateWrite",
]

UNINITIALIZED_START_OFFSET = -1


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareStateWrite:
    """WriteShareGroupState's partition: `state_batches` are merged onto the kept state
    as Kafka merges them (where batches overlap the highest delivery count wins, then the
    highest state; a leader only moves an offset up that order, so its newest batch
    wins); `start_offset` -1 or one below the kept start leaves the start where it was, a
    higher one forgets every offset below it."""

    state_epoch: int
    leader_epoch: int
    start_offset: int
    state_batches: tuple[StateBatch, ...]
    delivery_complete_count: int = -1


@dataclass(frozen=True, slots=True)
class ShareStateRead:
    """ReadShareGroupState's answer: the whole state, batches in offset order."""

    error: ErrorCode
    message: str | None = None
    state_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    state_batches: tuple[StateBatch, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareStateSummary:
    """ReadShareGroupStateSummary's answer."""

    error: ErrorCode
    message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = -1


class ShareStatePort(Protocol):
    async def initialize(
        self, key: ShareStateKey, state_epoch: int, start_offset: int
    ) -> tuple[ErrorCode, str | None]:
        """Start (or restart, with a higher `state_epoch`) the share-partition's state at
        `start_offset` (UNINITIALIZED_START_OFFSET: placed by its leader on first read)."""
        ...

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareStateRead:
        """The share-partition's state, fencing leaders with an older `leader_epoch`."""
        ...

    async def write(
        self, key: ShareStateKey, write: ShareStateWrite
    ) -> tuple[ErrorCode, str | None]:
        """Durable (acknowledged by the `__share_group_state` partition as acks=all would
        be) before it answers NONE."""
        ...

    async def delete(self, key: ShareStateKey) -> tuple[ErrorCode, str | None]: ...

    async def summary(self, key: ShareStateKey, leader_epoch: int) -> ShareStateSummary: ...
