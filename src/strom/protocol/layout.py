"""Reading and writing the fields of Kafka's schema-defined records by hand.

Internal-topic records (`__transaction_state`, and the coordinators' records to come)
have no schema in kio, so their codecs are written against these two small classes.
Both speak Kafka's two encodings of a schema version:

    classic   int16-length strings, int32-length arrays (-1 for null)
    flexible  "compact" strings and arrays (unsigned varint length + 1, 0 for null)
              and a tagged-field section after every struct

Every integer is big-endian. A reader never reads past its input: a short or malformed
record raises RecordLayoutError, which a caller turns into its own error.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TypeVar

__all__ = ["LayoutReader", "LayoutWriter", "RecordLayoutError"]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

MAX_STRING_BYTES = 0x7FFF
MAX_ARRAY_ITEMS = 1 << 20
"""No internal record holds a million of anything; a longer array is damage."""

T = TypeVar("T")


class RecordLayoutError(ValueError):
    """Bytes that do not follow the layout they are read as."""


class LayoutWriter:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def i8(self, value: int) -> None:
        self.out += _I8.pack(value)

    def i16(self, value: int) -> None:
        self.out += _I16.pack(value)

    def i32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def uvarint(self, value: int) -> None:
        if value < 0:
            raise RecordLayoutError(f"unsigned varint of {value}")
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def string(self, value: str | None, *, compact: bool) -> None:
        if value is None:
            if compact:
                self.uvarint(0)
            else:
                self.i16(-1)
            return
        data = value.encode()
        if len(data) > MAX_STRING_BYTES:
            raise RecordLayoutError(f"string of {len(data)} bytes is too long for a record")
        if compact:
            self.uvarint(len(data) + 1)
        else:
            self.i16(len(data))
        self.out += data

    def blob(self, value: bytes) -> None:
        """Classic bytes: an int32 length and the bytes."""
        self.i32(len(value))
        self.out += value

    def compact_blob(self, value: bytes) -> None:
        """Compact bytes: an unsigned varint length + 1 and the bytes."""
        self.uvarint(len(value) + 1)
        self.out += value

    def array_length(self, count: int | None, *, compact: bool) -> None:
        if compact:
            self.uvarint(0 if count is None else count + 1)
        else:
            self.i32(-1 if count is None else count)

    def tagged_fields(self, fields: dict[int, bytes]) -> None:
        """The tagged-field section of a flexible struct, in ascending tag order."""
        self.uvarint(len(fields))
        for tag in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(fields[tag]))
            self.out += fields[tag]

    def bytes(self) -> bytes:
        return bytes(self.out)


class LayoutReader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise RecordLayoutError("record ends early")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def i8(self) -> int:
        return int(_I8.unpack(self.take(1))[0])

    def i16(self) -> int:
        return int(_I16.unpack(self.take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self.take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self.take(8))[0])

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
        raise RecordLayoutError("unsigned varint longer than five bytes")

    def nullable_string(self, *, compact: bool) -> str | None:
        size = self.uvarint() - 1 if compact else self.i16()
        if size == -1:
            return None
        try:
            return self.take(size).decode()
        except UnicodeDecodeError as exc:
            raise RecordLayoutError(f"string is not UTF-8: {exc}") from None

    def string(self, *, compact: bool) -> str:
        value = self.nullable_string(compact=compact)
        if value is None:
            raise RecordLayoutError("null where a string is required")
        return value

    def blob(self) -> bytes:
        """Classic bytes: an int32 length (-1: none, read as empty) and the bytes."""
        size = self.i32()
        return b"" if size == -1 else self.take(size)

    def compact_blob(self) -> bytes:
        """Compact bytes: an unsigned varint length + 1 (0: null, read as empty)."""
        size = self.uvarint() - 1
        return b"" if size == -1 else self.take(size)

    def array_length(self, *, compact: bool) -> int | None:
        count = self.uvarint() - 1 if compact else self.i32()
        if count < -1:
            raise RecordLayoutError(f"array length {count}")
        if count > MAX_ARRAY_ITEMS or count > len(self.data) - self.pos:
            raise RecordLayoutError(f"array of {count} items in {len(self.data) - self.pos} bytes")
        return None if count == -1 else count

    def array(self, item: Callable[[LayoutReader], T], *, compact: bool) -> list[T] | None:
        count = self.array_length(compact=compact)
        return None if count is None else [item(self) for _ in range(count)]

    def tagged_fields(self) -> dict[int, bytes]:
        """A flexible struct's tagged fields by tag; unknown tags are kept, as Kafka
        keeps them, for the caller to ignore."""
        fields: dict[int, bytes] = {}
        last = -1
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if tag <= last:
                raise RecordLayoutError(f"tagged field {tag} after {last}")
            fields[tag] = self.take(self.uvarint())
            last = tag
        return fields
