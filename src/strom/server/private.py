"""strom's private APIs between its own nodes, carried on the controller listener.

Kafka clients never send these. They use the Kafka frame (an int32 size prefix) with a
short header of their own, and an API key far above Kafka's:

    request:  int16 api_key, int16 api_version, int32 correlation_id, payload
    response: int32 correlation_id, payload          (none for one-way APIs)

    RAFT_HELLO      one-way   first frame of a Raft stream: JSON {"node_id", "cluster_id"}
    RAFT            one-way   one Raft message, encoded by strom.raft.wire
    METADATA_FETCH  request   a broker-only node pulls committed metadata entries
    FORWARD         request   a broker hands a client's admin request to the controller

FORWARD wraps a whole Kafka request frame (header and body, as a client sent it). In
version 0 the frame is the node's own request (a topic it auto-creates, say), which the
controller runs unchecked. In version 1 it is a client's, preceded by who sent it:

    int16 length, principal (UTF-8), int16 length, client host (UTF-8), frame

and the controller checks it again, against its own ACLs, as that principal from that host
(Kafka's envelope principal): the forwarding broker's image may lag behind an ACL change.
Only a peer allowed strom's node-to-node APIs (CLUSTER_ACTION) can send either.

It answers with the metadata offset the controller had committed when it answered, then the
Kafka response frame; the forwarding broker waits until its own image has reached that
offset, so a client that created a topic through any broker sees it there at once. A
node that is not the active controller (yet: it may have just won an election) answers
offset -1 and no frame instead, and the forwarding broker tries again.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum

from strom.raft.messages import Entry, Snapshot


class PrivateApi(IntEnum):
    RAFT_HELLO = 32000
    RAFT = 32001
    METADATA_FETCH = 32002
    FORWARD = 32003


ONE_WAY = frozenset({PrivateApi.RAFT_HELLO, PrivateApi.RAFT})
FIRST_PRIVATE_KEY = min(PrivateApi)


class PrivatePayloadError(ValueError):
    """A private payload that does not decode; the connection that sent it is closed."""


def encode_hello(node_id: int, cluster_id: str | None) -> bytes:
    return json.dumps({"node_id": node_id, "cluster_id": cluster_id}).encode()


def decode_hello(payload: bytes) -> tuple[int, str | None]:
    try:
        body = json.loads(payload)
        node_id = body["node_id"]
        cluster_id = body["cluster_id"]
    except (ValueError, KeyError, TypeError) as exc:
        raise PrivatePayloadError(f"bad Raft hello: {exc}") from None
    if not isinstance(node_id, int) or not (cluster_id is None or isinstance(cluster_id, str)):
        raise PrivatePayloadError("bad Raft hello: wrong field types")
    return node_id, cluster_id


# --- METADATA_FETCH -----------------------------------------------------------------

_FETCH_REQUEST = struct.Struct(">iqi")  # node_id, from_index, max_wait_ms
_FETCH_HEADER = struct.Struct(">iqqB")  # leader_id, term, commit_index, has_snapshot
_SNAPSHOT_HEADER = struct.Struct(">qqi")  # index, term, size
_ENTRY_HEADER = struct.Struct(">qqi")  # index, term, size
_COUNT = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class MetadataFetchRequest:
    node_id: int
    from_index: int  # the first index the fetcher does not have
    max_wait_ms: int


@dataclass(frozen=True, slots=True)
class MetadataFetchResponse:
    """Committed entries from `from_index`, or a snapshot first when those were compacted.

    leader_id is the active controller as the answering node knows it (-1: unknown).
    """

    leader_id: int
    term: int
    commit_index: int
    snapshot: Snapshot | None
    entries: tuple[Entry, ...]


def encode_fetch_request(request: MetadataFetchRequest) -> bytes:
    return _FETCH_REQUEST.pack(request.node_id, request.from_index, request.max_wait_ms)


def decode_fetch_request(payload: bytes) -> MetadataFetchRequest:
    if len(payload) != _FETCH_REQUEST.size:
        raise PrivatePayloadError(f"metadata fetch request of {len(payload)} bytes")
    node_id, from_index, max_wait_ms = _FETCH_REQUEST.unpack(payload)
    if from_index < 1 or max_wait_ms < 0:
        raise PrivatePayloadError("metadata fetch request out of range")
    return MetadataFetchRequest(node_id, from_index, max_wait_ms)


def encode_fetch_response(response: MetadataFetchResponse) -> bytes:
    parts = [
        _FETCH_HEADER.pack(
            response.leader_id,
            response.term,
            response.commit_index,
            response.snapshot is not None,
        )
    ]
    if response.snapshot is not None:
        snapshot = response.snapshot
        parts.append(_SNAPSHOT_HEADER.pack(snapshot.index, snapshot.term, len(snapshot.data)))
        parts.append(snapshot.data)
    parts.append(_COUNT.pack(len(response.entries)))
    for entry in response.entries:
        parts.append(_ENTRY_HEADER.pack(entry.index, entry.term, len(entry.data)))
        parts.append(entry.data)
    return b"".join(parts)


def decode_fetch_response(payload: bytes) -> MetadataFetchResponse:
    view = memoryview(payload)
    try:
        leader_id, term, commit_index, has_snapshot = _FETCH_HEADER.unpack_from(view, 0)
        position = _FETCH_HEADER.size
        if has_snapshot > 1:
            raise PrivatePayloadError(f"metadata fetch response snapshot flag {has_snapshot}")
        snapshot = None
        if has_snapshot:
            index, snap_term, size = _SNAPSHOT_HEADER.unpack_from(view, position)
            position += _SNAPSHOT_HEADER.size
            if size < 0 or position + size > len(view):
                raise PrivatePayloadError("metadata snapshot runs past the payload")
            snapshot = Snapshot(index, snap_term, bytes(view[position : position + size]))
            position += size
        (count,) = _COUNT.unpack_from(view, position)
        position += _COUNT.size
        entries = []
        for _ in range(count):
            index, entry_term, size = _ENTRY_HEADER.unpack_from(view, position)
            position += _ENTRY_HEADER.size
            if size < 0 or position + size > len(view):
                raise PrivatePayloadError("metadata entry runs past the payload")
            entries.append(Entry(index, entry_term, bytes(view[position : position + size])))
            position += size
    except struct.error as exc:
        raise PrivatePayloadError(f"truncated metadata fetch response: {exc}") from None
    if position != len(view):
        raise PrivatePayloadError(f"{len(view) - position} bytes after a metadata fetch response")
    return MetadataFetchResponse(leader_id, term, commit_index, snapshot, tuple(entries))


# --- FORWARD ------------------------------------------------------------------------

_OFFSET = struct.Struct(">q")


FORWARDED_LISTENER = "(forwarded)"
"""The listener a client's forwarded request (FORWARD v1) carries at the controller: no
listener's name can be it. The request is checked there as on a controller listener."""
FORWARD_CLIENT_VERSION = 1
"""The FORWARD version that carries a client's principal and host."""
_TEXT_LENGTH = struct.Struct(">h")


@dataclass(frozen=True, slots=True)
class ForwardedRequest:
    """A FORWARD request's payload: the request frame (without its size prefix) and, for a
    client's request (version 1), who sent it."""

    frame: bytes
    principal: str | None = None
    """None: the forwarding node's own request (version 0)."""
    client_host: str = ""

    @property
    def version(self) -> int:
        return 0 if self.principal is None else FORWARD_CLIENT_VERSION


def encode_forward_request(forwarded: ForwardedRequest) -> bytes:
    """The payload of a FORWARD request of version `forwarded.version`."""
    if forwarded.principal is None:
        return forwarded.frame
    parts = []
    for text in (forwarded.principal, forwarded.client_host):
        encoded = text.encode("utf-8", "surrogatepass")
        parts.append(_TEXT_LENGTH.pack(len(encoded)) + encoded)
    return b"".join(parts) + forwarded.frame


def decode_forward_request(api_version: int, payload: bytes) -> ForwardedRequest:
    if api_version == 0:
        return ForwardedRequest(payload)
    if api_version != FORWARD_CLIENT_VERSION:
        raise PrivatePayloadError(f"unknown FORWARD version {api_version}")
    position = 0
    texts = []
    for what in ("principal", "client host"):
        if len(payload) < position + _TEXT_LENGTH.size:
            raise PrivatePayloadError(f"forward request truncated before its {what}")
        (length,) = _TEXT_LENGTH.unpack_from(payload, position)
        position += _TEXT_LENGTH.size
        if length < 0 or len(payload) < position + length:
            raise PrivatePayloadError(f"forward request with a truncated {what}")
        try:
            texts.append(payload[position : position + length].decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            raise PrivatePayloadError(f"forward request whose {what} is not UTF-8") from None
        position += length
    principal, client_host = texts
    if not principal:
        raise PrivatePayloadError("forward request with an empty principal")
    return ForwardedRequest(payload[position:], principal, client_host)


FORWARD_NOT_CONTROLLER = -1
"""The offset of a FORWARD answer from a node that did not run the request: it is not the
active controller."""


def encode_forward_response(metadata_offset: int, response_frame: bytes) -> bytes:
    """`response_frame` without its size prefix."""
    return _OFFSET.pack(metadata_offset) + response_frame


def decode_forward_response(payload: bytes) -> tuple[int, bytes]:
    """(metadata offset, response frame); the offset is FORWARD_NOT_CONTROLLER when the
    request was not run."""
    if len(payload) < _OFFSET.size:
        raise PrivatePayloadError("forward response shorter than its header")
    (offset,) = _OFFSET.unpack_from(payload, 0)
    if offset < FORWARD_NOT_CONTROLLER:
        raise PrivatePayloadError(f"forward response with offset {offset}")
    return offset, payload[_OFFSET.size :]
