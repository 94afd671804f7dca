"""Fill a kio message class with an error in every error code and neutral values elsewhere.

`fill(entity_type, data, error)` builds `entity_type` (a kio response or nested entity)
from a mapping holding only the fields a caller cares about, like
`strom.protocol.codec.build`, and completes the rest the way Kafka's generated message
classes do when a field is never set:

- every `error_code` field is `error`, whatever `data` says;
- a field the schema gives a default keeps it (kio carries Kafka's schema defaults:
  `leader_id` -1, `log_start_offset` -1, `authorized_operations` INT32_MIN, ...);
- otherwise ints are 0, floats 0.0, booleans false, strings null where nullable (so an
  error message is null: clients then show the error's own text) and "" elsewhere, bytes
  empty, UUIDs the zero UUID (null in kio, which reads the zero UUID as None), durations
  0 (so `throttle_time` is 0), instants null where nullable, arrays empty, record sets
  null where nullable, and a nested entity is filled the same way.

Keys of `data` the version lacks are ignored, so one mapping serves every version. In
`data`, nested entities are mappings (or kio objects), arrays sequences, durations
milliseconds and instants epoch milliseconds (-1 for none). Written by hand: kio reads
and writes its classes but has no builder for partial values.
"""

from __future__ import annotations

import datetime
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields, is_dataclass
from enum import Enum
from types import NoneType, UnionType
from typing import Any, Union

from kio.schema.errors import ErrorCode
from kio.static.constants import uuid_zero

__all__ = ["fill"]


class _Kind(Enum):
    ERROR = "error"
    ENTITY = "entity"
    ENTITIES = "entities"
    PRIMITIVES = "primitives"
    TIMEDELTA = "timedelta"
    DATETIME = "datetime"
    STRING = "string"
    VALUE = "value"


@dataclass(frozen=True, slots=True)
class _Slot:
    name: str
    kind: _Kind
    nested: type[Any] | None
    nullable: bool
    neutral: Any
    """The value when `data` lacks the field (unused for errors and single entities)."""


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)

_IMPLICIT: dict[str, Any] = {
    "bool": False,
    "float64": 0.0,
    "bytes": b"",
    "uuid": uuid_zero,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
}
"""Kafka's implicit default per type; every integer type (int8 .. uint64) is 0."""


def _optional_args(annotation: Any) -> tuple[Any, bool]:
    """(the annotation without None, whether None was allowed)."""
    if typing.get_origin(annotation) in (UnionType, Union):
        args = [a for a in typing.get_args(annotation) if a is not NoneType]
        nullable = len(args) < len(typing.get_args(annotation))
        if len(args) == 1:
            return args[0], nullable
    return annotation, False


def _entity(annotation: Any) -> type[Any] | None:
    return annotation if isinstance(annotation, type) and is_dataclass(annotation) else None


_SLOTS: dict[type[Any], tuple[_Slot, ...]] = {}


def _slots(entity_type: type[Any]) -> tuple[_Slot, ...]:
    cached = _SLOTS.get(entity_type)
    if cached is None:
        cached = _SLOTS[entity_type] = tuple(_make_slots(entity_type))
    return cached


def _make_slots(entity_type: type[Any]) -> list[_Slot]:
    hints = typing.get_type_hints(entity_type)
    slots = []
    for f in fields(entity_type):
        annotation, nullable = _optional_args(hints[f.name])
        kafka_type = str(f.metadata.get("kafka_type", ""))
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        default = f.default if f.default is not MISSING else None
        if f.default_factory is not MISSING:
            default = f.default_factory()
        nested: type[Any] | None = None
        if typing.get_origin(annotation) is tuple:
            nested = _entity(_optional_args(typing.get_args(annotation)[0])[0])
            kind = _Kind.ENTITIES if nested is not None else _Kind.PRIMITIVES
            neutral: Any = ()
        elif _entity(annotation) is not None:
            nested, kind, neutral = annotation, _Kind.ENTITY, None
        elif kafka_type == "error_code":
            kind, neutral = _Kind.ERROR, None
        elif kafka_type.startswith("timedelta"):
            kind, neutral = _Kind.TIMEDELTA, _IMPLICIT[kafka_type]
        elif kafka_type.startswith("datetime"):
            kind, neutral = _Kind.DATETIME, None if nullable else _EPOCH
        elif kafka_type == "string":
            kind, neutral = _Kind.STRING, None if nullable else ""
        elif kafka_type in ("records", "uuid") and nullable:
            kind, neutral = _Kind.VALUE, None
        else:
            kind, neutral = _Kind.VALUE, _IMPLICIT.get(kafka_type, 0)
        if has_default and kind is not _Kind.ERROR:
            neutral = default
        slots.append(_Slot(f.name, kind, nested, nullable, neutral))
    return slots


def fill(entity_type: type[Any], data: Mapping[str, Any], error: ErrorCode) -> Any:
    """`entity_type` with `data`'s fields, `error` in every error code, the rest neutral."""
    kwargs: dict[str, Any] = {}
    for slot in _slots(entity_type):
        if slot.kind is _Kind.ERROR:
            kwargs[slot.name] = error
        elif slot.kind is _Kind.ENTITY:
            assert slot.nested is not None
            kwargs[slot.name] = _nested(slot.nested, data.get(slot.name, {}), error)
        elif slot.name not in data:
            kwargs[slot.name] = slot.neutral
        else:
            kwargs[slot.name] = _convert(slot, data[slot.name], error)
    return entity_type(**kwargs)


def _nested(entity_type: type[Any], value: Any, error: ErrorCode) -> Any:
    return fill(entity_type, value, error) if isinstance(value, Mapping) else value


def _convert(slot: _Slot, value: Any, error: ErrorCode) -> Any:
    if value is None:
        return None if slot.nullable else slot.neutral
    if slot.kind is _Kind.ENTITIES:
        assert slot.nested is not None
        return tuple(_nested(slot.nested, item, error) for item in value)
    if slot.kind is _Kind.PRIMITIVES:
        return tuple(value)
    if slot.kind is _Kind.TIMEDELTA and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if slot.kind is _Kind.DATETIME and isinstance(value, int):
        if value < 0:
            return None if slot.nullable else _EPOCH
        return datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
    return value
