"""A tiny raw-socket Kafka client for hand-made (valid or broken) requests in tests.

Valid requests are built with kio's schema classes and strom.protocol.codec; invalid
ones are plain bytes the caller assembles with struct.
"""

from __future__ import annotations

import contextlib
import datetime
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from strom.protocol.codec import decode_response, encode_request

SIZE = struct.Struct(">i")
API_VERSIONS = 18
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class Closed(Exception):
    """The broker closed the connection."""


@contextlib.contextmanager
def connect(port: int, timeout_s: float = 10.0) -> Iterator[socket.socket]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    try:
        yield sock
    finally:
        sock.close()


def header(api_key: int, api_version: int, correlation_id: int, client_id: bytes = b"t") -> bytes:
    """A v1 request header (non-flexible): key, version, correlation id, client id."""
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        try:
            chunk = sock.recv(min(size, 1 << 20))
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise Closed
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket) -> bytes:
    """One response frame without its size prefix; raises Closed at end of stream."""
    (size,) = SIZE.unpack(_recv_exactly(sock, 4))
    return _recv_exactly(sock, size)


def wait_closed(sock: socket.socket, timeout_s: float = 5.0) -> bool:
    """True if the peer closes within `timeout_s` (any data it sends first is discarded)."""
    deadline = time.monotonic() + timeout_s
    while (remaining := deadline - time.monotonic()) > 0:
        sock.settimeout(remaining)
        try:
            if not sock.recv(65536):
                return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False
    return False


def send_body(sock: socket.socket, body: Any, correlation_id: int = 1) -> None:
    sock.sendall(encode_request(body.__api_key__, body.__version__, correlation_id, body))


def call(sock: socket.socket, body: Any, correlation_id: int = 1) -> Any:
    """Send a kio request and decode its response (of the same API and version)."""
    send_body(sock, body, correlation_id)
    got_id, response = decode_response(body.__api_key__, body.__version__, read_frame(sock))
    assert got_id == correlation_id
    return response


def api_versions(port: int) -> Any:
    """A normal ApiVersions v3 exchange on a fresh connection."""
    with connect(port) as sock:
        return call(
            sock,
            ApiVersionsRequest(client_software_name="strom-tests", client_software_version="1"),
        )


def produce_request(
    topic: str, partition: int, records: bytes | None, *, acks: int = -1
) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout=datetime.timedelta(seconds=10),
        topic_data=(
            TopicProduceData(
                name=topic,
                partition_data=(PartitionProduceData(index=partition, records=records),),
            ),
        ),
    )


def produce(port: int, topic: str, partition: int, records: bytes | None, *, acks: int = -1) -> Any:
    """The partition response of one Produce v9 to (topic, partition)."""
    with connect(port) as sock:
        response = call(sock, produce_request(topic, partition, records, acks=acks))
    return response.responses[0].partition_responses[0]


def list_offset(port: int, topic: str, partition: int, timestamp: int) -> int:
    request = ListOffsetsRequest(
        replica_id=-1,  # type: ignore[arg-type]
        isolation_level=0,  # type: ignore[arg-type]
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=(
                    ListOffsetsPartition(partition_index=partition, timestamp=timestamp),  # type: ignore[arg-type]
                ),
            ),
        ),
    )
    with connect(port) as sock:
        response = call(sock, request)
    result = response.topics[0].partitions[0]
    assert int(result.error_code) == 0, result
    return int(result.offset)


def error_codes(response: Any) -> list[int]:
    """Every error_code in a response, however deeply nested."""
    found: list[int] = []
    stack = [response]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(item)
        elif hasattr(item, "__dataclass_fields__"):
            for name in item.__dataclass_fields__:
                value = getattr(item, name)
                if name == "error_code":
                    found.append(int(value))
                else:
                    stack.append(value)
    return found
