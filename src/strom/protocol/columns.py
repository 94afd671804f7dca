"""Kafka v2 records decoded straight into Arrow column buffers, compiled and in Python.

Written by hand: kio decodes no record batches into columns, and pyarrow knows nothing
of Kafka's varint records. ``decode_columns`` walks the records section of one record
batch (already decompressed; see ``record_codec`` for the layout) and appends each record
to 14 growing bytearrays, laid out as Arrow buffers, so a reader can wrap them with
``pa.Array.from_buffers`` without a per-record Python object:

     0  offsets                int64 LE per row: base_offset + offsetDelta
     1  timestamps             int64 LE per row, ms: max_timestamp with log-append
                               time, else first_timestamp + timestampDelta
     2  key_offsets            int32 LE end offsets into key_data, after a first 0
     3  key_data               the keys' bytes (nothing for a null key)
     4  key_validity           bitmap, LSB first: bit r set iff row r has a key
     5  value_offsets          } the same for values
     6  value_data             }
     7  value_validity         }
     8  header_list_offsets    int32 LE list offsets into the header rows, after a 0
     9  header_key_offsets     } header keys: never null, bytes (not checked as utf-8)
    10  header_key_data        }
    11  header_value_offsets   } header values, with their validity bitmap
    12  header_value_data      }
    13  header_value_validity  }

Columns 8 to 13 are written only ``with_headers``. Rows continue from what ``out``
already holds (``len(offsets) // 8`` rows, ``len(header_value_offsets) // 4 - 1``
header rows), so the batches of a fetch can be appended one after another. Bad input
(or an int32 offset past 2**31 - 1) raises ValueError and leaves ``out`` as it was.
Arrow buffers made from these bytearrays without a copy pin them: appending then
raises BufferError, again leaving ``out`` as it was.

``decode_columns`` is the compiled one (``strom.protocol._walk``) unless
STROM_PURE_PYTHON=1 asks for Python or the install had no C compiler; both decode the
same bytes alike and refuse the same inputs. Nothing here does I/O.
"""

from __future__ import annotations

import operator
import os
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from strom.protocol.batch_header import Buffer

__all__ = [
    "COLUMN_COUNT",
    "COMPILED_COLUMNS",
    "ColumnBuffers",
    "DecodeColumns",
    "decode_columns",
    "decode_columns_py",
]

COLUMN_COUNT = 14
(
    OFFSETS,
    TIMESTAMPS,
    KEY_OFFSETS,
    KEY_DATA,
    KEY_VALIDITY,
    VALUE_OFFSETS,
    VALUE_DATA,
    VALUE_VALIDITY,
    HEADER_LIST_OFFSETS,
    HEADER_KEY_OFFSETS,
    HEADER_KEY_DATA,
    HEADER_VALUE_OFFSETS,
    HEADER_VALUE_DATA,
    HEADER_VALUE_VALIDITY,
) = range(COLUMN_COUNT)

INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

DecodeColumns: TypeAlias = Callable[
    [Buffer, int, int, int, int, int, int, bool, bool, tuple[bytearray, ...]], None
]


def _offsets_start() -> bytearray:
    return bytearray(4)  # one int32 0


@dataclass(slots=True)
class ColumnBuffers:
    """The 14 column buffers ``decode_columns`` appends to, offsets started with a 0.

    Use one either always or never ``with_headers``: the header columns count rows only
    while they are written.
    """

    # Transitions: every buffer only grows, and only through decode_columns(..., out).
    offsets: bytearray = field(default_factory=bytearray)
    timestamps: bytearray = field(default_factory=bytearray)
    key_offsets: bytearray = field(default_factory=_offsets_start)
    key_data: bytearray = field(default_factory=bytearray)
    key_validity: bytearray = field(default_factory=bytearray)
    value_offsets: bytearray = field(default_factory=_offsets_start)
    value_data: bytearray = field(default_factory=bytearray)
    value_validity: bytearray = field(default_factory=bytearray)
    header_list_offsets: bytearray = field(default_factory=_offsets_start)
    header_key_offsets: bytearray = field(default_factory=_offsets_start)
    header_key_data: bytearray = field(default_factory=bytearray)
    header_value_offsets: bytearray = field(default_factory=_offsets_start)
    header_value_data: bytearray = field(default_factory=bytearray)
    header_value_validity: bytearray = field(default_factory=bytearray)

    @property
    def rows(self) -> int:
        """Records decoded so far."""
        return len(self.offsets) // 8

    @property
    def header_rows(self) -> int:
        """Headers decoded so far (with_headers)."""
        return len(self.header_value_offsets) // 4 - 1

    @property
    def out(self) -> tuple[bytearray, ...]:
        """The buffers in decode_columns' order, to pass as its ``out``."""
        return (
            self.offsets,
            self.timestamps,
            self.key_offsets,
            self.key_data,
            self.key_validity,
            self.value_offsets,
            self.value_data,
            self.value_validity,
            self.header_list_offsets,
            self.header_key_offsets,
            self.header_key_data,
            self.header_value_offsets,
            self.header_value_data,
            self.header_value_validity,
        )


def _zigzag(view: memoryview, pos: int, end: int, max_bytes: int, last_max: int) -> tuple[int, int]:
    """A zigzag varint of at most ``max_bytes`` from view[pos:end], whose last byte may be
    at most ``last_max`` (so that it fits its int32 or int64); (value, next pos)."""
    value = shift = 0
    for i in range(max_bytes):
        if pos >= end:
            raise ValueError("a varint runs past its record")
        b = view[pos]
        pos += 1
        if i == max_bytes - 1 and b > last_max:
            raise ValueError(f"a varint is longer than {max_bytes} bytes or overflows")
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
    raise AssertionError("unreachable: the last byte has no continuation bit")


def _varint(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    return _zigzag(view, pos, end, 5, 0x0F)


def _varlong(view: memoryview, pos: int, end: int) -> tuple[int, int]:
    return _zigzag(view, pos, end, 10, 0x01)


def _field(view: memoryview, pos: int, end: int, nullable: bool) -> tuple[memoryview | None, int]:
    """A varint length and that many bytes from view[pos:end]; None for a null field."""
    size, pos = _varint(view, pos, end)
    if size == -1 and nullable:
        return None, pos
    if size < 0:
        raise ValueError(f"a field has a negative length {size}")
    if size > end - pos:
        raise ValueError("a field runs past its record")
    return view[pos : pos + size], pos + size


class _Column:
    """One Arrow binary column being decoded: its bytes, end offsets and validity."""

    __slots__ = ("data", "ends", "valid")

    def __init__(self) -> None:
        self.data = bytearray()
        self.ends: list[int] = []
        self.valid: list[bool] = []

    def add(self, value: memoryview | None) -> None:
        if value is not None:
            self.data += value
        self.ends.append(len(self.data))
        self.valid.append(value is not None)


@dataclass(slots=True)
class _Decoded:
    """The records of one call, decoded and checked, before any of ``out`` changes."""

    # Transitions: filled record by record by _decode, then read once by _write.
    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    keys: _Column = field(default_factory=_Column)
    values: _Column = field(default_factory=_Column)
    header_ends: list[int] = field(default_factory=list)
    header_keys: _Column = field(default_factory=_Column)
    header_values: _Column = field(default_factory=_Column)


def _check_out(out: tuple[bytearray, ...], with_headers: bool) -> None:
    if (
        not isinstance(out, tuple)
        or len(out) != COLUMN_COUNT
        or not all(isinstance(column, bytearray) for column in out)
    ):
        raise ValueError("out must be a tuple of 14 bytearrays")
    if len({id(column) for column in out}) != COLUMN_COUNT:
        raise ValueError("out holds the same bytearray twice")
    started = [KEY_OFFSETS, VALUE_OFFSETS]
    if with_headers:
        started += [HEADER_LIST_OFFSETS, HEADER_KEY_OFFSETS, HEADER_VALUE_OFFSETS]
    if any(len(out[k]) < 4 for k in started):
        raise ValueError("an offsets column must start with an int32 0")


def _int(value: int, low: int, high: int) -> int:
    """An integer argument, refused as the C argument parser refuses it."""
    value = operator.index(value)
    if not low <= value <= high:
        raise OverflowError(f"{value} does not fit its C type")
    return value


def decode_columns_py(
    data: Buffer,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    first_timestamp: int,
    max_timestamp: int,
    log_append_time: bool,
    with_headers: bool,
    out: tuple[bytearray, ...],
    /,
) -> None:
    """Append the ``count`` records of ``data[pos:end]`` to the columns of ``out``: the
    Python twin of the compiled ``strom.protocol._walk.decode_columns``."""
    with memoryview(data) as raw, raw.cast("B") as view:
        pos, end, count = (_int(n, -sys.maxsize - 1, sys.maxsize) for n in (pos, end, count))
        base_offset, first_timestamp, max_timestamp = (
            _int(n, INT64_MIN, INT64_MAX) for n in (base_offset, first_timestamp, max_timestamp)
        )
        _check_out(out, bool(with_headers))
        if count < 0 or pos < 0 or end < pos or end > len(view):
            raise ValueError("count, pos or end is out of range")
        timestamp = max_timestamp if log_append_time else None
        decoded = _decode(view, pos, end, count, base_offset, first_timestamp, timestamp)
        _write(out, decoded, bool(with_headers))  # while data is exported, as in C


def _decode(
    view: memoryview,
    pos: int,
    end: int,
    count: int,
    base_offset: int,
    first_timestamp: int,
    log_append_timestamp: int | None,
) -> _Decoded:
    decoded = _Decoded()
    for _ in range(count):
        length, pos = _varint(view, pos, end)
        if length < 0:
            raise ValueError(f"a record has a negative length {length}")
        if length > end - pos:
            raise ValueError("a record runs past the end of its records")
        record_end = pos + length
        if pos == record_end:
            raise ValueError("a record ends before its attributes")
        timestamp_delta, pos = _varlong(view, pos + 1, record_end)  # + attributes
        offset_delta, pos = _varint(view, pos, record_end)
        key, pos = _field(view, pos, record_end, nullable=True)
        value, pos = _field(view, pos, record_end, nullable=True)
        header_count, pos = _varint(view, pos, record_end)
        if header_count < 0:
            raise ValueError(f"a record has a negative header count {header_count}")
        for _ in range(header_count):
            header_key, pos = _field(view, pos, record_end, nullable=False)
            header_value, pos = _field(view, pos, record_end, nullable=True)
            decoded.header_keys.add(header_key)
            decoded.header_values.add(header_value)
        if pos != record_end:
            raise ValueError("a record's fields do not fill its length")
        offset = base_offset + offset_delta
        if not INT64_MIN <= offset <= INT64_MAX:
            raise ValueError("a record's offset overflows an int64")
        timestamp = log_append_timestamp
        if timestamp is None:
            timestamp = first_timestamp + timestamp_delta
            if not INT64_MIN <= timestamp <= INT64_MAX:
                raise ValueError("a record's timestamp overflows an int64")
        decoded.offsets.append(offset)
        decoded.timestamps.append(timestamp)
        decoded.keys.add(key)
        decoded.values.add(value)
        decoded.header_ends.append(len(decoded.header_keys.ends))
    if pos != end:
        raise ValueError("the records do not fill their section exactly")
    return decoded


def _int32s(values: list[int]) -> bytes:
    if values and values[-1] > INT32_MAX:  # offsets only grow
        raise ValueError("an int32 offset would overflow")
    return struct.pack(f"<{len(values)}i", *values)


def _bitmap_growth(bitmap: bytearray, first: int, added: int) -> bytes:
    needed = (first + added + 7) // 8 if added else 0
    return bytes(max(needed - len(bitmap), 0))


def _write(out: tuple[bytearray, ...], decoded: _Decoded, with_headers: bool) -> None:
    """Check the int32 offsets, then grow every column, then set the validity bits."""
    row = len(out[OFFSETS]) // 8
    rows = len(decoded.offsets)
    keys, values = decoded.keys, decoded.values
    blobs = {
        OFFSETS: struct.pack(f"<{rows}q", *decoded.offsets),
        TIMESTAMPS: struct.pack(f"<{rows}q", *decoded.timestamps),
        KEY_OFFSETS: _int32s([len(out[KEY_DATA]) + end for end in keys.ends]),
        KEY_DATA: bytes(keys.data),
        KEY_VALIDITY: _bitmap_growth(out[KEY_VALIDITY], row, rows),
        VALUE_OFFSETS: _int32s([len(out[VALUE_DATA]) + end for end in values.ends]),
        VALUE_DATA: bytes(values.data),
        VALUE_VALIDITY: _bitmap_growth(out[VALUE_VALIDITY], row, rows),
    }
    header_row = len(out[HEADER_VALUE_OFFSETS]) // 4 - 1
    if with_headers:
        header_keys, header_values = decoded.header_keys, decoded.header_values
        headers = len(header_values.ends)
        blobs |= {
            HEADER_LIST_OFFSETS: _int32s([header_row + end for end in decoded.header_ends]),
            HEADER_KEY_OFFSETS: _int32s(
                [len(out[HEADER_KEY_DATA]) + end for end in header_keys.ends]
            ),
            HEADER_KEY_DATA: bytes(header_keys.data),
            HEADER_VALUE_OFFSETS: _int32s(
                [len(out[HEADER_VALUE_DATA]) + end for end in header_values.ends]
            ),
            HEADER_VALUE_DATA: bytes(header_values.data),
            HEADER_VALUE_VALIDITY: _bitmap_growth(out[HEADER_VALUE_VALIDITY], header_row, headers),
        }
    _grow(out, blobs)
    _set_bits(out[KEY_VALIDITY], row, keys.valid)
    _set_bits(out[VALUE_VALIDITY], row, values.valid)
    if with_headers:
        _set_bits(out[HEADER_VALUE_VALIDITY], header_row, decoded.header_values.valid)


def _grow(out: tuple[bytearray, ...], blobs: dict[int, bytes]) -> None:
    """Append to the columns in order; if one refuses (BufferError while exported),
    shrink those already grown back, as the compiled version does."""
    entry = [len(column) for column in out]
    try:
        for k in sorted(blobs):
            if blobs[k]:
                out[k].extend(blobs[k])
    except BaseException:
        for column, length in zip(out, entry, strict=True):
            del column[length:]
        raise


def _set_bits(bitmap: bytearray, first: int, valid: list[bool]) -> None:
    for index, is_valid in enumerate(valid, first):
        if is_valid:
            bitmap[index >> 3] |= 1 << (index & 7)
        else:
            bitmap[index >> 3] &= ~(1 << (index & 7)) & 0xFF


def _load_compiled() -> DecodeColumns | None:
    """The compiled decoder, unless STROM_PURE_PYTHON=1 asks for the Python one or the
    install had no C compiler to build it (or built it before it had decode_columns)."""
    if os.environ.get("STROM_PURE_PYTHON") == "1":
        return None
    try:
        from strom.protocol._walk import decode_columns as compiled
    except ImportError:
        return None
    return compiled


decode_columns: DecodeColumns = _load_compiled() or decode_columns_py
"""Append the ``count`` records of ``data[pos:end]`` to ``out``: compiled when it can be."""
COMPILED_COLUMNS = decode_columns is not decode_columns_py
"""Whether decode_columns runs compiled in this process."""
