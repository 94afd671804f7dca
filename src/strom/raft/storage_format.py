"""The byte formats of the Raft storage: log records, ``quorum-state`` and snapshot files.

Layouts (all integers big-endian; see ``storage`` for the files and crash rules):

- a log record: ``[length u32][crc32c u32][index i64][term i64][data]``; length counts
  index, term and data, and the CRC-32C covers the same bytes;
- ``quorum-state``: ``[magic "SRQS"][version u8 = 1][term i64][voted_for i64, -1 = none]
  [crc32c u32 of the bytes before it]``;
- a snapshot file: ``[magic "SRSN"][version u8 = 1][index i64][term i64][data length u64]
  [data][crc32c u32 of everything before it]``.

Pure functions over bytes: the caller reads and writes the files.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import crc32c

from strom.raft.messages import Entry, HardState, Snapshot

__all__ = [
    "RaftStorageError",
    "RecordScan",
    "decode_hard_state",
    "decode_snapshot",
    "encode_hard_state",
    "encode_records",
    "encode_snapshot",
    "scan_records",
    "valid_record_after",
]

_RECORD = struct.Struct(">IIqq")  # length, crc32c, index, term
_RECORD_HEADER_BYTES = _RECORD.size  # 24
_RECORD_MIN_LENGTH = 16  # index + term
_LENGTH_AND_CRC_BYTES = 8
_CRC = struct.Struct(">I")
_QUORUM = struct.Struct(">4sBqq")
_QUORUM_MAGIC = b"SRQS"
_SNAPSHOT = struct.Struct(">4sBqqQ")
_SNAPSHOT_MAGIC = b"SRSN"
_VERSION = 1
_HOLE_BYTES = 512
_ZEROS = bytes(_HOLE_BYTES)


class RaftStorageError(Exception):
    """The stored Raft state is damaged in a way a crash cannot explain, or unreadable."""


@dataclass(slots=True)
class RecordScan:
    positions: array[int]
    entries: list[Entry]  # those with index >= the scan's keep_from
    end: int  # byte position after the last good record
    problem: str | None  # why the scan stopped before the end of the data


def encode_records(
    entries: Sequence[Entry], first_index: int, start: int, positions: array[int]
) -> bytearray:
    """Frame `entries` (which must be consecutive from `first_index`); record positions."""
    out = bytearray(_RECORD_HEADER_BYTES * len(entries) + sum(len(e.data) for e in entries))
    view = memoryview(out)
    pack_header = _RECORD.pack_into
    pack_crc = _CRC.pack_into
    checksum = crc32c.crc32c
    append = positions.append
    position = 0
    expected = first_index
    try:
        for entry in entries:
            if entry.index != expected:
                raise ValueError(f"entry index {entry.index} where {expected} was expected")
            data = entry.data
            end = position + _RECORD_HEADER_BYTES + len(data)
            pack_header(out, position, _RECORD_MIN_LENGTH + len(data), 0, expected, entry.term)
            out[position + _RECORD_HEADER_BYTES : end] = data
            pack_crc(out, position + 4, checksum(view[position + _LENGTH_AND_CRC_BYTES : end]))
            append(start + position)
            position = end
            expected += 1
    except BaseException:
        del positions[len(positions) - (expected - first_index) :]
        raise
    finally:
        view.release()
    return out


def scan_records(path: Path, data: bytes, base_index: int, *, keep_from: int) -> RecordScan:
    """Read the records of `data` (the first with `base_index`) up to the first bad one."""
    positions: array[int] = array("Q")
    entries: list[Entry] = []
    view = memoryview(data)
    unpack = _RECORD.unpack_from
    checksum = crc32c.crc32c
    size = len(data)
    position = 0
    index = base_index
    problem: str | None = None
    while position < size:
        if size - position < _RECORD_HEADER_BYTES:
            problem = "a torn record header"
            break
        length, crc, stored_index, term = unpack(data, position)
        end = position + _LENGTH_AND_CRC_BYTES + length
        if length < _RECORD_MIN_LENGTH or end > size:
            problem = f"a record of impossible or torn length {length}"
            break
        if checksum(view[position + _LENGTH_AND_CRC_BYTES : end]) != crc:
            problem = "a record with a CRC-32C mismatch"
            break
        if stored_index != index:
            view.release()
            raise RaftStorageError(
                f"{path}: a record with index {stored_index} where {index} was expected, "
                f"at byte {position}"
            )
        positions.append(position)
        if index >= keep_from:
            entries.append(Entry(index, term, data[position + _RECORD_HEADER_BYTES : end]))
        position = end
        index += 1
    view.release()
    return RecordScan(positions, entries, position, problem)


def valid_record_after(data: bytes, bad: int, index: int) -> int | None:
    """Where a valid record (index >= `index`) follows the bad one at byte `bad`, when that
    means damage; None when the rest is the torn end of an interrupted write: no valid
    record follows, or a zeroed block (a hole a crash left) lies before the next one."""
    view = memoryview(data)
    unpack = _RECORD.unpack_from
    size = len(data)
    try:
        for position in range(bad + 1, size - _RECORD_HEADER_BYTES + 1):
            length, crc, stored_index, _ = unpack(data, position)
            end = position + _LENGTH_AND_CRC_BYTES + length
            if length < _RECORD_MIN_LENGTH or end > size or stored_index < index:
                continue
            if crc32c.crc32c(view[position + _LENGTH_AND_CRC_BYTES : end]) == crc:
                return None if _has_hole(data, bad, position) else position
        return None
    finally:
        view.release()


def _has_hole(data: bytes, start: int, end: int) -> bool:
    block = -(-start // _HOLE_BYTES) * _HOLE_BYTES
    while block + _HOLE_BYTES <= end:
        if data[block : block + _HOLE_BYTES] == _ZEROS:
            return True
        block += _HOLE_BYTES
    return False


def encode_hard_state(state: HardState) -> bytes:
    voted_for = -1 if state.voted_for is None else state.voted_for
    body = _QUORUM.pack(_QUORUM_MAGIC, _VERSION, state.term, voted_for)
    return body + _CRC.pack(crc32c.crc32c(body))


def decode_hard_state(path: Path, data: bytes) -> HardState:
    """The hard state in ``data``, read from ``path`` (named in errors)."""
    if len(data) != _QUORUM.size + _CRC.size:
        raise RaftStorageError(f"{path}: {len(data)} bytes, not {_QUORUM.size + _CRC.size}")
    magic, version, term, voted_for = _QUORUM.unpack_from(data)
    (crc,) = _CRC.unpack_from(data, _QUORUM.size)
    if magic != _QUORUM_MAGIC or version != _VERSION:
        raise RaftStorageError(f"{path}: not a version {_VERSION} quorum-state file")
    if crc32c.crc32c(data[: _QUORUM.size]) != crc:
        raise RaftStorageError(f"{path}: CRC-32C mismatch")
    if term < 0 or voted_for < -1:
        raise RaftStorageError(f"{path}: impossible term {term} or vote {voted_for}")
    return HardState(term, None if voted_for == -1 else voted_for)


def encode_snapshot(snapshot: Snapshot) -> bytes:
    header = _SNAPSHOT.pack(
        _SNAPSHOT_MAGIC, _VERSION, snapshot.index, snapshot.term, len(snapshot.data)
    )
    crc = crc32c.crc32c(snapshot.data, crc32c.crc32c(header))
    return b"".join((header, snapshot.data, _CRC.pack(crc)))


def decode_snapshot(path: Path, data: bytes, index: int, term: int) -> Snapshot:
    """The snapshot in ``data``, read from ``path`` (whose name says ``index`` and ``term``)."""
    if len(data) < _SNAPSHOT.size + _CRC.size:
        raise RaftStorageError(f"{path}: only {len(data)} bytes")
    magic, version, stored_index, stored_term, length = _SNAPSHOT.unpack_from(data)
    if magic != _SNAPSHOT_MAGIC or version != _VERSION:
        raise RaftStorageError(f"{path}: not a version {_VERSION} snapshot file")
    if (stored_index, stored_term) != (index, term):
        raise RaftStorageError(f"{path}: holds index {stored_index} term {stored_term}")
    if len(data) != _SNAPSHOT.size + length + _CRC.size:
        raise RaftStorageError(f"{path}: {len(data)} bytes for {length} bytes of data")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if crc32c.crc32c(memoryview(data)[: -_CRC.size]) != crc:
        raise RaftStorageError(f"{path}: CRC-32C mismatch")
    return Snapshot(index, term, data[_SNAPSHOT.size : -_CRC.size])
