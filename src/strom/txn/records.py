"""The records of `__transaction_state`, in Kafka's byte layout.

One kind of record: the key is a transactional id, the value the whole state of that
id after a change. A null value (a tombstone) removes an expired id.

    key    int16 version (0), string transactional_id
    value  int16 version, then
             int64  producer_id
             int16  producer_epoch
             int32  transaction_timeout_ms
             int8   transaction_status          (TxnState)
             array  partitions, nullable: {string topic, array int32 partition ids}
             int64  last_update_timestamp_ms
             int64  start_timestamp_ms
           version 1 is flexible (compact strings and arrays, tagged fields) and adds
           three tagged fields, each written only when it is not its default:
             tag 0  int64  previous_producer_id      (default -1)
             tag 1  int64  next_producer_id          (default -1)
             tag 2  int16  client_transaction_version (default 0)

Version 0 is what a transaction version 0 cluster writes, version 1 what transaction
versions 1 and 2 write; both are read. The partitions are null while the id is EMPTY.
docs/transactions.md lists the same layout.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from strom.protocol.layout import LayoutReader, LayoutWriter, RecordLayoutError
from strom.txn.state import TxnState

__all__ = [
    "KEY_VERSION",
    "NO_PRODUCER_ID",
    "TxnLogValue",
    "TxnRecordError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]

KEY_VERSION = 0
NO_PRODUCER_ID = -1
NO_TIMESTAMP = -1

_TAG_PREVIOUS_PRODUCER_ID = 0
_TAG_NEXT_PRODUCER_ID = 1
_TAG_CLIENT_TRANSACTION_VERSION = 2
_I16 = struct.Struct(">h")
_I64 = struct.Struct(">q")


class TxnRecordError(ValueError):
    """A `__transaction_state` record that does not parse."""


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    """What the coordinator knows of one transactional id, as the log holds it."""

    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    """(topic, partition) pairs in the transaction; empty unless one is open."""
    last_update_ms: int
    start_ms: int
    """When the first partition was added; -1 while no transaction is open."""
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = 0


def encode_key(transactional_id: str) -> bytes:
    w = LayoutWriter()
    w.i16(KEY_VERSION)
    try:
        w.string(transactional_id, compact=False)
    except RecordLayoutError as exc:
        raise TxnRecordError(str(exc)) from None
    return w.bytes()


def decode_key(data: bytes) -> str:
    r = LayoutReader(data)
    try:
        version = r.i16()
        if version != KEY_VERSION:
            raise TxnRecordError(f"unknown transaction log key version {version}")
        return r.string(compact=False)
    except RecordLayoutError as exc:
        raise TxnRecordError(f"transaction log key: {exc}") from None


def encode_value(value: TxnLogValue, *, version: int) -> bytes:
    """`value` in layout `version` (0 or 1). Version 0 has no room for the previous and
    next producer ids or the client's transaction version; they are dropped."""
    if version not in (0, 1):
        raise ValueError(f"no transaction log value version {version}")
    if value.state is TxnState.EMPTY and value.partitions:
        raise ValueError(f"an EMPTY transaction has no partitions, not {sorted(value.partitions)}")
    flexible = version == 1
    w = LayoutWriter()
    w.i16(version)
    w.i64(value.producer_id)
    w.i16(value.producer_epoch)
    w.i32(value.timeout_ms)
    w.i8(value.state)
    if value.state is TxnState.EMPTY:
        w.array_length(None, compact=flexible)
    else:
        _write_partitions(w, value.partitions, flexible=flexible)
    w.i64(value.last_update_ms)
    w.i64(value.start_ms)
    if flexible:
        tagged: dict[int, bytes] = {}
        if value.previous_producer_id != NO_PRODUCER_ID:
            tagged[_TAG_PREVIOUS_PRODUCER_ID] = _I64.pack(value.previous_producer_id)
        if value.next_producer_id != NO_PRODUCER_ID:
            tagged[_TAG_NEXT_PRODUCER_ID] = _I64.pack(value.next_producer_id)
        if value.client_transaction_version != 0:
            tagged[_TAG_CLIENT_TRANSACTION_VERSION] = _I16.pack(value.client_transaction_version)
        w.tagged_fields(tagged)
    return w.bytes()


def _write_partitions(
    w: LayoutWriter, partitions: frozenset[tuple[str, int]], *, flexible: bool
) -> None:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    try:
        w.array_length(len(by_topic), compact=flexible)
        for topic, ids in by_topic.items():
            w.string(topic, compact=flexible)
            w.array_length(len(ids), compact=flexible)
            for partition in ids:
                w.i32(partition)
            if flexible:
                w.tagged_fields({})
    except RecordLayoutError as exc:
        raise TxnRecordError(str(exc)) from None


def decode_value(data: bytes) -> TxnLogValue:
    r = LayoutReader(data)
    try:
        return _read_value(r)
    except RecordLayoutError as exc:
        raise TxnRecordError(f"transaction log value: {exc}") from None


def _read_value(r: LayoutReader) -> TxnLogValue:
    version = r.i16()
    if version not in (0, 1):
        raise TxnRecordError(f"unknown transaction log value version {version}")
    flexible = version == 1
    producer_id = r.i64()
    producer_epoch = r.i16()
    timeout_ms = r.i32()
    status = r.i8()
    try:
        state = TxnState(status)
    except ValueError:
        raise TxnRecordError(f"unknown transaction status {status}") from None
    topics = r.array(lambda item: _read_topic(item, flexible=flexible), compact=flexible)
    last_update_ms = r.i64()
    start_ms = r.i64()
    tagged = r.tagged_fields() if flexible else {}
    partitions: frozenset[tuple[str, int]] = frozenset()
    if state is not TxnState.EMPTY and topics is not None:
        partitions = frozenset((topic, p) for topic, ids in topics for p in ids)
    return TxnLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=partitions,
        last_update_ms=last_update_ms,
        start_ms=start_ms,
        previous_producer_id=_tagged(tagged, _TAG_PREVIOUS_PRODUCER_ID, _I64, NO_PRODUCER_ID),
        next_producer_id=_tagged(tagged, _TAG_NEXT_PRODUCER_ID, _I64, NO_PRODUCER_ID),
        client_transaction_version=_tagged(tagged, _TAG_CLIENT_TRANSACTION_VERSION, _I16, 0),
    )


def _read_topic(r: LayoutReader, *, flexible: bool) -> tuple[str, list[int]]:
    topic = r.string(compact=flexible)
    ids = r.array(LayoutReader.i32, compact=flexible)
    if ids is None:
        raise TxnRecordError(f"null partition list for topic {topic!r}")
    if flexible:
        r.tagged_fields()
    return topic, ids


def _tagged(fields: dict[int, bytes], tag: int, layout: struct.Struct, default: int) -> int:
    data = fields.get(tag)
    if data is None:
        return default
    if len(data) != layout.size:
        raise TxnRecordError(f"tagged field {tag} has {len(data)} bytes, not {layout.size}")
    return int(layout.unpack(data)[0])
