"""A request's array counts checked against its size before kio decodes it.

kio's native reader makes room for an array's items from the count on the wire before it
reads the first one. A 40-byte JoinGroup v9 whose protocols count says 2^32 makes it ask
for 34 GB; the allocation fails, and Rust's handler aborts the whole broker: there is
no exception to catch. An item takes at least some bytes (its fixed fields, its length
prefixes), so a count of more items than the bytes left can hold is malformed whatever
follows. `check_array_counts` walks a request body as its kio schema lays it out, reading
only lengths and counts (nothing is built), and raises OversizedArray at the first count
too large. Written by hand: kio has no reader that bounds what it allocates.

The walk knows no more than the layout: anything else that is wrong (a length past the
end, a varint too long) ends the walk quietly, and kio's reader reports it.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

__all__ = ["OversizedArray", "check_array_counts"]

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = {"string": 2, "bytes": 4, "records": 4}
"""Length-prefixed kinds and their legacy prefix size (compact: an unsigned varint)."""


class OversizedArray(ValueError):
    """An array whose count is more items than the rest of the request can hold."""


class _Stop(Exception):
    """The bytes do not follow the layout: kio's reader will say how."""


@dataclass(frozen=True, slots=True)
class _Step:
    kind: str  # "fixed", "string", "bytes", "entity", "nullable_entity", "array"
    size: int = 0  # fixed: its size
    entity: type[Any] | None = None
    item: _Step | None = None


@dataclass(frozen=True, slots=True)
class _Plan:
    flexible: bool
    steps: tuple[_Step, ...]
    tagged: dict[int, _Step]


_PLANS: dict[type[Any], _Plan] = {}


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _value_step(tp: Any, kafka_type: str) -> _Step:
    """The step of one value (a field, or an array's item) of Python type `tp`."""
    tp, nullable = _unwrap_optional(tp)
    if get_origin(tp) is tuple:
        return _Step("array", item=_value_step(get_args(tp)[0], kafka_type))
    if is_dataclass(tp) and isinstance(tp, type):
        return _Step("nullable_entity" if nullable else "entity", entity=tp)
    if kafka_type in _FIXED_SIZES:
        return _Step("fixed", size=_FIXED_SIZES[kafka_type])
    if kafka_type in _LENGTH_PREFIXED:
        return _Step("bytes" if kafka_type != "string" else "string")
    if tp is uuid.UUID:
        return _Step("fixed", size=16)
    raise LookupError(f"no layout for a field of type {tp!r} ({kafka_type!r})")


def _plan(entity_type: type[Any]) -> _Plan:
    plan = _PLANS.get(entity_type)
    if plan is None:
        steps: list[_Step] = []
        tagged: dict[int, _Step] = {}
        for f in fields(entity_type):
            step = _value_step(f.type, f.metadata.get("kafka_type", ""))
            if "tag" in f.metadata:
                tagged[int(f.metadata["tag"])] = step
            elif step.kind == "fixed" and steps and steps[-1].kind == "fixed":
                steps[-1] = _Step("fixed", size=steps[-1].size + step.size)  # one step
            else:
                steps.append(step)
        flexible = bool(getattr(entity_type, "__flexible__", False))
        plan = _PLANS[entity_type] = _Plan(flexible, tuple(steps), tagged)
    return plan


_MIN_SIZES: dict[tuple[_Step, bool], int] = {}


def _min_size(step: _Step, flexible: bool) -> int:
    """The fewest bytes a value of this step takes (worked out once per step)."""
    key = (step, flexible)
    size = _MIN_SIZES.get(key)
    if size is None:
        size = _MIN_SIZES[key] = max(_least_bytes(step, flexible), 1)
    return size


def _least_bytes(step: _Step, flexible: bool) -> int:
    if step.kind == "fixed":
        return step.size
    if step.kind in ("string", "bytes", "array"):
        return 1 if flexible else (2 if step.kind == "string" else 4)
    if step.kind == "nullable_entity":
        return 1
    assert step.entity is not None
    plan = _plan(step.entity)
    return sum(_min_size(s, plan.flexible) for s in plan.steps) + (1 if plan.flexible else 0)


class _Walk:
    __slots__ = ("data",)

    def __init__(self, data: bytes | memoryview) -> None:
        self.data = data

    def uvarint(self, pos: int, end: int) -> tuple[int, int]:
        if pos < end and self.data[pos] < 0x80:  # most are one byte
            return self.data[pos], pos + 1
        value = shift = 0
        for _ in range(5):
            if pos >= end:
                raise _Stop
            byte = self.data[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
        raise _Stop

    def fixed(self, fmt: struct.Struct, pos: int, end: int) -> int:
        if pos + fmt.size > end:
            raise _Stop
        return int(fmt.unpack_from(self.data, pos)[0])

    def entity(self, entity_type: type[Any], pos: int, end: int) -> int:
        plan = _plan(entity_type)
        for step in plan.steps:
            pos = self.value(step, plan.flexible, pos, end)
        if plan.flexible:
            pos = self.tagged(plan.tagged, pos, end)
        return pos

    def tagged(self, tagged: dict[int, _Step], pos: int, end: int) -> int:
        count, pos = self.uvarint(pos, end)
        for _ in range(count):
            tag, pos = self.uvarint(pos, end)
            size, pos = self.uvarint(pos, end)
            if pos + size > end:
                raise _Stop
            step = tagged.get(tag)
            if step is not None:
                self.value(step, True, pos, pos + size)
            pos += size
        return pos

    def items(self, item: _Step, count: int, flexible: bool, pos: int, end: int) -> int:
        """Past `count` items of an array. Two shapes are stepped over without a call per
        item: fixed-size values, and entities of fixed-size fields whose tagged-field
        section is empty (a partition's fields in Fetch, ListOffsets, OffsetCommit...)."""
        if item.kind == "fixed":
            return pos + count * item.size
        if item.kind == "entity":
            assert item.entity is not None
            plan = _plan(item.entity)
            if plan.flexible and len(plan.steps) == 1 and plan.steps[0].kind == "fixed":
                size, data = plan.steps[0].size, self.data
                for _ in range(count):
                    pos += size
                    if pos < end and data[pos] == 0:  # no tagged fields
                        pos += 1
                    else:
                        pos = self.tagged(plan.tagged, pos, end)
                return pos
        for _ in range(count):
            pos = self.value(item, flexible, pos, end)
        return pos

    def value(self, step: _Step, flexible: bool, pos: int, end: int) -> int:
        kind = step.kind
        if kind == "fixed":
            pos += step.size
        elif kind in ("string", "bytes"):
            if flexible:
                length, pos = self.uvarint(pos, end)
                length -= 1
            else:
                fmt = _I16 if kind == "string" else _I32
                length = self.fixed(fmt, pos, end)
                pos += fmt.size
            pos += max(length, 0)
        elif kind == "entity":
            assert step.entity is not None
            pos = self.entity(step.entity, pos, end)
        elif kind == "nullable_entity":
            assert step.entity is not None
            marker = self.fixed(_I8, pos, end)
            pos = pos + 1 if marker < 0 else self.entity(step.entity, pos + 1, end)
        else:
            assert step.item is not None
            if flexible:
                count, pos = self.uvarint(pos, end)
                count -= 1
            else:
                count = self.fixed(_I32, pos, end)
                pos += 4
            if count > 0 and count * _min_size(step.item, flexible) > end - pos:
                raise OversizedArray(f"an array of {count} items in {end - pos} bytes")
            pos = self.items(step.item, max(count, 0), flexible, pos, end)
        if pos > end:
            raise _Stop
        return pos


def check_array_counts(frame: bytes | memoryview, offset: int, body_type: type[Any]) -> int | None:
    """Raise OversizedArray if an array of the request body at `offset` counts more
    items than the rest of the frame can hold. Returns where the body ends (None when
    its bytes do not follow the layout)."""
    try:
        return _Walk(frame).entity(body_type, offset, len(frame))
    except _Stop:
        return None
