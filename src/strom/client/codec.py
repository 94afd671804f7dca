"""The client's side of the wire: encode requests, decode responses. No I/O.

kio (generated from Kafka's JSON message definitions) writes each request body and reads
each response body, and each of its classes names the header it travels with: request
header v2 for flexible versions and v1 otherwise, response header v1 for flexible
versions and v0 otherwise, except ApiVersions, whose response header is always v0 so a
client can read it whatever version it asked for. This module adds the int32 size prefix,
the correlation id bookkeeping helpers, and Kafka's ApiVersions fallback: a broker that
does not serve the version asked for answers with a v0 body carrying UNSUPPORTED_VERSION,
which is decoded as v0 (as Kafka's ApiVersionsResponse.parse does).

strom's private node-to-node frames (strom.server.private) are written by hand here, as
no library knows them: request = int16 api_key, int16 api_version, int32 correlation_id,
payload; response = int32 correlation_id, payload.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from strom.client.errors import MalformedResponseError, UnsupportedVersionError
from strom.client.lenient import LENIENT_RESPONSES
from strom.protocol.codec import build

API_VERSIONS_KEY = 18
PRODUCE_KEY = 0

_SIZE = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_PRIVATE_HEADER = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_MAX_CORRELATION_ID = 2**31 - 1


@cache
def request_class(api_key: int, api_version: int) -> type[Any]:
    """kio's request class of this API version; UnsupportedVersionError if kio has none."""
    try:
        return load_request_schema(api_key, api_version)
    except KioIndexError:
        raise UnsupportedVersionError(
            f"no request schema for API {api_key} v{api_version}"
        ) from None


@cache
def response_class(api_key: int, api_version: int) -> type[Any]:
    """kio's response class of this API version; UnsupportedVersionError if kio has none."""
    try:
        return load_response_schema(api_key, api_version)
    except KioIndexError:
        raise UnsupportedVersionError(
            f"no response schema for API {api_key} v{api_version}"
        ) from None


def request_header_version(api_key: int, api_version: int) -> int:
    return int(request_class(api_key, api_version).__header_schema__.__version__)


def response_header_version(api_key: int, api_version: int) -> int:
    return int(response_class(api_key, api_version).__header_schema__.__version__)


@cache
def client_versions(api_key: int) -> tuple[int, int] | None:
    """(min, max) version of the API this client can encode, None for an unknown API."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name]
    return min(versions), max(versions)


def build_request(api_key: int, api_version: int, fields: Mapping[str, Any]) -> Any:
    """The kio request of this API version built from a plain mapping.

    As strom.protocol.codec.build: keys this version lacks are ignored (one mapping can
    serve every version), durations are ms, nested entities are mappings; a required
    field that is missing raises KeyError.
    """
    return build(request_class(api_key, api_version), fields)


def expects_response(api_key: int, body: Any) -> bool:
    """False only for Produce with acks=0, which a broker never answers."""
    return not (api_key == PRODUCE_KEY and int(getattr(body, "acks", -1)) == 0)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, body: Any, *, client_id: str | None
) -> bytes:
    """A request frame, size prefix included, with the header kio's class calls for."""
    body_type = type(body)
    if (
        getattr(body_type, "__type__", None) is not EntityType.request
        or body_type.__api_key__ != api_key
        or body_type.__version__ != api_version
    ):
        raise ValueError(
            f"{body_type.__qualname__} is not a request of API {api_key} v{api_version}"
        )
    header_type = body_type.__header_schema__
    header = header_type(
        request_api_key=api_key,
        request_api_version=api_version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    try:
        entity_writer(header_type)(buffer, header)
        entity_writer(body_type)(buffer, body)
    except Exception as exc:  # kio checks field types only while writing
        raise ValueError(f"cannot encode {body_type.__qualname__}: {exc!r}") from exc
    frame = buffer.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - 4)
    del frame
    return buffer.getvalue()


def correlation_id_of(frame: bytes) -> int:
    """The correlation id every response frame (Kafka's or strom's private) starts with."""
    if len(frame) < _SIZE.size:
        raise MalformedResponseError(f"response of {len(frame)} bytes has no correlation id")
    return int(_SIZE.unpack_from(frame, 0)[0])


def decode_response(api_key: int, api_version: int, frame: bytes) -> Any:
    """The kio response body of a response frame (without size prefix); lenient.py's twin
    where kio's class cannot read what Kafka writes."""
    response_type = LENIENT_RESPONSES.get((api_key, api_version)) or response_class(
        api_key, api_version
    )
    header_type = response_type.__header_schema__
    try:
        _, offset = entity_reader(header_type)(frame, 0)
        if api_key == API_VERSIONS_KEY and api_version > 0 and _is_unsupported(frame, offset):
            response_type = response_class(API_VERSIONS_KEY, 0)
        body, _ = entity_reader(response_type)(frame, offset)
    except Exception as exc:  # kio raises several types for malformed input
        raise MalformedResponseError(
            f"malformed response to API {api_key} v{api_version}: {exc!r}"
        ) from None
    return body


def _is_unsupported(frame: bytes, offset: int) -> bool:
    if len(frame) < offset + _INT16.size:
        return False
    (error_code,) = _INT16.unpack_from(frame, offset)
    return bool(error_code == ErrorCode.unsupported_version)


def encode_private_request(
    api_key: int, api_version: int, correlation_id: int, payload: bytes
) -> bytes:
    """A strom private request frame, size prefix included."""
    if not (-(2**15) <= api_key < 2**15 and -(2**15) <= api_version < 2**15):
        raise ValueError(f"API key {api_key} or version {api_version} is not an int16")
    size = _PRIVATE_HEADER.size - _SIZE.size + len(payload)
    return _PRIVATE_HEADER.pack(size, api_key, api_version, correlation_id) + payload


def private_response_payload(frame: bytes) -> bytes:
    """The payload of a strom private response frame (without size prefix)."""
    return frame[_SIZE.size :]


def next_correlation_id(correlation_id: int) -> int:
    """The id after this one: int32, wrapping to 0 as Kafka's clients do."""
    return 0 if correlation_id >= _MAX_CORRELATION_ID else correlation_id + 1
