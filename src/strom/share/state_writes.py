"""Between a share-partition's core and the share-state port (`strom.share.state_port`):
a decision's `__share_group_state` records as WriteShareGroupState calls, a
ReadShareGroupState answer as the snapshot the core loads, and the port's error codes
as the ones a share consumer sees. Pure: no I/O.

A ShareUpdateValue becomes a write of its start offset (-1: unmoved) and its batches. A
ShareSnapshotValue becomes a write of its start offset and all its batches: merged onto
the kept state that equals replacing it, because an offset the snapshot leaves out is
(AVAILABLE, 0), never delivered, and a delivered record never returns to that pair.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from strom.share.records import ShareSnapshotValue, ShareUpdateValue
from strom.share.state_port import ShareStateRead, ShareStateWrite

__all__ = ["consumer_error", "snapshot_of_read", "state_write"]

_COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)
_PASSED_ON = frozenset({ErrorCode.group_id_not_found, ErrorCode.unknown_topic_or_partition})


def state_write(record: ShareSnapshotValue | ShareUpdateValue, state_epoch: int) -> ShareStateWrite:
    """The WriteShareGroupState call that makes `record` durable."""
    return ShareStateWrite(
        state_epoch=state_epoch,
        leader_epoch=record.leader_epoch,
        start_offset=record.start_offset,
        state_batches=record.state_batches,
        delivery_complete_count=record.delivery_complete_count,
    )


def snapshot_of_read(read: ShareStateRead, leader_epoch: int, now_ms: int) -> ShareSnapshotValue:
    """What a ReadShareGroupState answered, as the one snapshot `SharePartitionState.load`
    replays (the read must not answer UNINITIALIZED_START_OFFSET: that partition is
    initialized instead)."""
    return ShareSnapshotValue(
        snapshot_epoch=0,
        state_epoch=read.state_epoch,
        leader_epoch=leader_epoch,
        start_offset=read.start_offset,
        create_timestamp_ms=now_ms,
        write_timestamp_ms=now_ms,
        state_batches=read.state_batches,
    )


def consumer_error(port_error: ErrorCode) -> ErrorCode:
    """The error a ShareFetch or ShareAcknowledge answers for a failed read or write of
    the share-partition's state (Kafka's SharePartition.fetchPersisterError)."""
    if port_error in _COORDINATOR_ERRORS:
        return ErrorCode.coordinator_not_available
    if port_error in _PASSED_ON:
        return port_error
    if port_error in (ErrorCode.fenced_leader_epoch, ErrorCode.fenced_state_epoch):
        return ErrorCode.not_leader_or_follower
    if port_error is ErrorCode.invalid_request:
        # The share coordinator's answer for a share-partition never initialized: the
        # group coordinator assigned it to no member, so no member should fetch it.
        # Kafka answers UNKNOWN_SERVER_ERROR; INVALID_REQUEST says what is wrong.
        return ErrorCode.invalid_request
    return ErrorCode.unknown_server_error
