"""Transaction markers: the COMMIT and ABORT control batches that end a transaction on
a partition, in Kafka's layout.

A marker is a batch with the control and transactional attribute bits set, the
transaction's producer id and epoch, no sequence (-1), and one record:

    key    int16 version (0), int16 control type (0 ABORT, 1 COMMIT)
    value  int16 version (0), int32 coordinator epoch

Only brokers write markers (WriteTxnMarkers); a client's control batch is refused by
`records.validate_batches`. Other control types (Raft's leader change and snapshot
records) share the key layout; `marker_of` reads only the two of transactions. As
Kafka does, a newer version of either layout is read as version 0 (newer versions may
only add fields at the end); a negative one is refused.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from strom.protocol.record_codec import NewRecord, encode_batch

__all__ = ["ControlType", "EndTxnMarker", "MarkerError", "encode_marker_batch", "marker_of"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
_VERSION = 0


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class MarkerError(ValueError):
    """A control record that is not a transaction marker, or not a readable one."""


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    commit: bool
    coordinator_epoch: int


def encode_marker_batch(
    *,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
    timestamp_ms: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    """One marker batch (offset 0: the log stamps its offset when it appends it)."""
    control = ControlType.COMMIT if commit else ControlType.ABORT
    record = NewRecord(
        key=_KEY.pack(_VERSION, control), value=_VALUE.pack(_VERSION, coordinator_epoch)
    )
    return encode_batch(
        [record],
        base_timestamp_ms=timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=True,
        is_control=True,
    )


def marker_of(key: bytes | None, value: bytes | None) -> EndTxnMarker:
    """The marker a control batch's record holds. Raises MarkerError for another
    control type or a damaged record."""
    if key is None or len(key) < _KEY.size:
        raise MarkerError("control record without a readable key")
    version, control = _KEY.unpack_from(key)
    if version < 0:
        raise MarkerError(f"control record key of version {version}")
    if control not in (ControlType.ABORT, ControlType.COMMIT):
        raise MarkerError(f"control record of type {control} is not a transaction marker")
    if value is None or len(value) < _VALUE.size:
        raise MarkerError("transaction marker without a coordinator epoch")
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if value_version < 0:
        raise MarkerError(f"transaction marker value of version {value_version}")
    return EndTxnMarker(control == ControlType.COMMIT, coordinator_epoch)
