"""Request and response framing on top of kio's generated Kafka message classes.

kio (generated from Kafka's own JSON message definitions) reads and writes each message
body; this module adds what sits around it: the size prefix, the request header whose
version depends on the API and version, and a builder that turns a plain nested mapping
into the kio class of whichever version the client asked for, so handlers describe a
response once instead of once per version.
"""

from __future__ import annotations

import datetime
import io
import struct
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from strom.protocol.apis import SERVED_APIS, ApiKey
from strom.protocol.bounds import check_array_counts

_HEADER_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")


class RequestError(Exception):
    """A request that cannot be answered; the connection that sent it is closed."""


class UnsupportedVersion(RequestError):
    """A known API at a version strom does not serve."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported version {api_version} of API {api_key}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


@dataclass(frozen=True, slots=True)
class Request:
    api_key: ApiKey
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    client_host: str = ""
    """The peer's address, set by the connection (groups report it per member)."""
    listener: str = ""
    """The name of the listener the request arrived on; "" when not on a listener."""
    principal: str = "User:ANONYMOUS"
    """Who the peer is: from its TLS certificate, or ANONYMOUS."""
    connection_id: str = ""
    """Which of the broker's connections the request came on, as the broker named it
    (never from the request's bytes); "" when not on a connection (e.g. forwarded)."""


def peek_header(frame: bytes | memoryview) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a request frame (without size prefix)."""
    if len(frame) < _HEADER_PREFIX.size:
        raise RequestError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _HEADER_PREFIX.unpack_from(frame, 0)
    return int(api_key), int(api_version), int(correlation_id)


@cache
def _request_reader(api_key: int, api_version: int) -> tuple[Callable[..., Any], ...]:
    module = load_payload_module(api_key, api_version, EntityType.request)
    body_type = _payload_class(module, "Request")
    return entity_reader(body_type.__header_schema__), entity_reader(body_type)


@cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    module = load_payload_module(api_key, api_version, EntityType.request)
    return _payload_class(module, "Request")


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    module = load_payload_module(api_key, api_version, EntityType.response)
    return _payload_class(module, "Response")


def _payload_class(module: Any, suffix: str) -> type[Any]:
    for name in dir(module):
        value = getattr(module, name)
        marker: Any = getattr(value, "__type__", None)
        if (
            isinstance(value, type)
            and name.endswith(suffix)
            and marker is not None
            and value.__module__ == module.__name__
            and marker.name in ("request", "response")
        ):
            return value
    raise LookupError(f"no {suffix} class in {module.__name__}")


def decode_request(
    frame: bytes,
    *,
    client_host: str = "",
    listener: str = "",
    principal: str = "User:ANONYMOUS",
    connection_id: str = "",
) -> Request:
    """Decode one request frame (without its size prefix).

    Raises UnsupportedVersion for a known API at an unserved version and RequestError for
    anything else that is not a well-formed request of a served API.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    try:
        key = ApiKey(api_key)
    except ValueError:
        raise RequestError(f"unknown API key {api_key}") from None
    if key not in SERVED_APIS:
        raise RequestError(f"API {key.name} is not served")
    if api_version not in SERVED_APIS[key]:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    read_header, read_body = _request_reader(api_key, api_version)
    try:
        header, header_size = read_header(frame, 0)
        # Before kio sizes an array from its count: a huge one aborts the process.
        check_array_counts(frame, header_size, request_class(api_key, api_version))
        body, _ = read_body(frame, header_size)
    except Exception as exc:  # kio raises several types for malformed input
        raise RequestError(f"malformed {key.name} v{api_version} request: {exc!r}") from None
    # Bytes after the body are ignored, as Kafka does: librdkafka leaves three
    # placeholder bytes after a null topic array in Metadata requests.
    return Request(
        key,
        api_version,
        correlation_id,
        header.client_id,
        body,
        client_host,
        listener,
        principal,
        connection_id,
    )


_WRITERS: dict[type[Any], tuple[Callable[..., None], Callable[..., None]]] = {}


def _writers(response_type: type[Any]) -> tuple[Callable[..., None], Callable[..., None]]:
    writers = _WRITERS.get(response_type)
    if writers is None:
        header_type = response_type.__header_schema__
        writers = _WRITERS[response_type] = (
            entity_writer(header_type),
            entity_writer(response_type),
        )
    return writers


def encode_response(correlation_id: int, body: Any) -> bytes:
    """A response frame, size prefix included."""
    header_type = type(body).__header_schema__
    write_header, write_body = _writers(type(body))
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    write_header(buffer, header_type(correlation_id=correlation_id))
    write_body(buffer, body)
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame
    return buffer.getvalue()


def encode_request(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A request frame with size prefix: used by tests and broker-to-broker calls."""
    header_type = type(body).__header_schema__
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_fields = {
        "request_api_key": api_key,
        "request_api_version": api_version,
        "correlation_id": correlation_id,
        "client_id": "strom",
    }
    entity_writer(header_type)(buffer, build(header_type, header_fields))
    entity_writer(type(body))(buffer, body)
    data = bytearray(buffer.getvalue())
    _SIZE.pack_into(data, 0, len(data) - 4)
    return bytes(data)


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation_id, body) of a response frame without size prefix."""
    body_type = response_class(api_key, api_version)
    header, offset = entity_reader(body_type.__header_schema__)(frame, 0)
    body, _ = entity_reader(body_type)(frame, offset)
    return int(header.correlation_id), body


# --- building kio entities from plain mappings --------------------------------------


@dataclass(frozen=True, slots=True)
class _FieldPlan:
    name: str
    kind: str  # "entity", "entities", "timedelta", "datetime", "error", "string", "plain"
    nested: type[Any] | None
    required: bool
    nullable: bool = True


def _unwrap_optional(tp: Any) -> Any:
    if get_origin(tp) in (UnionType, Union):
        args = [a for a in get_args(tp) if a is not NoneType]
        if len(args) == 1:
            return args[0]
    return tp


_PLANS: dict[type[Any], tuple[_FieldPlan, ...]] = {}


def _plan(entity_type: type[Any]) -> tuple[_FieldPlan, ...]:
    cached = _PLANS.get(entity_type)
    if cached is None:
        cached = _PLANS[entity_type] = _make_plan(entity_type)
    return cached


def _make_plan(entity_type: type[Any]) -> tuple[_FieldPlan, ...]:
    plans = []
    for f in fields(entity_type):
        tp = _unwrap_optional(f.type)
        kafka_type = f.metadata.get("kafka_type", "")
        required = f.default is MISSING and f.default_factory is MISSING
        if get_origin(tp) is tuple:
            inner = _unwrap_optional(get_args(tp)[0])
            if is_dataclass(inner) and isinstance(inner, type):
                plans.append(_FieldPlan(f.name, "entities", inner, required))
                continue
        if is_dataclass(tp) and isinstance(tp, type):
            plans.append(_FieldPlan(f.name, "entity", tp, required))
        elif kafka_type.startswith("timedelta"):
            plans.append(_FieldPlan(f.name, "timedelta", None, required))
        elif kafka_type.startswith("datetime"):
            nullable = tp is not f.type
            plans.append(_FieldPlan(f.name, "datetime", None, required, nullable))
        elif kafka_type == "error_code":
            plans.append(_FieldPlan(f.name, "error", None, required))
        elif kafka_type == "string" and f.type in (str, "str"):
            plans.append(_FieldPlan(f.name, "string", None, required))
        else:
            plans.append(_FieldPlan(f.name, "plain", None, required))
    return tuple(plans)


def build(entity_type: type[Any], data: Mapping[str, Any]) -> Any:
    """Build `entity_type` from a mapping holding (at least) the fields it needs.

    Keys the version does not have are ignored, so one mapping can describe a response
    for every version. Durations are given in milliseconds, instants in epoch ms (-1 for
    none), error codes as ints, nested entities as mappings or sequences of mappings.
    None in a string field that this version cannot make null is sent as "".
    """
    kwargs: dict[str, Any] = {}
    for plan in _plan(entity_type):
        if plan.name not in data:
            if plan.required:
                raise KeyError(
                    f"{entity_type.__qualname__} v{entity_type.__version__} "
                    f"needs field {plan.name!r}"
                )
            continue
        value = data[plan.name]
        if plan.kind == "entities":
            assert plan.nested is not None
            if value is not None:
                value = tuple(_as_entity(plan.nested, v) for v in value)
        elif plan.kind == "entity":
            assert plan.nested is not None
            value = None if value is None else _as_entity(plan.nested, value)
        elif plan.kind == "timedelta":
            if isinstance(value, int):
                value = datetime.timedelta(milliseconds=value)
        elif plan.kind == "datetime":
            if isinstance(value, int):
                # -1 ("none") is null where the field may be null, else the instant that
                # kio writes as -1 (DescribeTransactions' start time of no transaction)
                value = (
                    None
                    if value < 0 and plan.nullable
                    else datetime.datetime.fromtimestamp(value / 1000, tz=datetime.UTC)
                )
        elif plan.kind == "error":
            value = ErrorCode(int(value))
        elif plan.kind == "string" and value is None:
            value = ""  # a field that is nullable only in later versions
        kwargs[plan.name] = value
    return entity_type(**kwargs)


def _as_entity(entity_type: type[Any], value: Any) -> Any:
    if isinstance(value, Mapping):
        return build(entity_type, value)
    return value


def build_response(api_key: int, api_version: int, data: Mapping[str, Any]) -> Any:
    return build(response_class(api_key, api_version), data)


def ms(value: datetime.timedelta | int) -> int:
    """Milliseconds of a kio duration field."""
    if isinstance(value, datetime.timedelta):
        return value.days * 86_400_000 + value.seconds * 1000 + value.microseconds // 1000
    return int(value)


def epoch_ms(value: datetime.datetime | int | None) -> int:
    """Epoch milliseconds of a kio instant field (-1 for none)."""
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


def names(items: Sequence[Any] | None) -> list[str]:
    return [] if items is None else [str(item.name) for item in items]
