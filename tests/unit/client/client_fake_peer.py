"""An in-memory broker side for client tests: a socketpair, read and answered by hand.

The fake peer decodes what the client wrote with kio's readers (the same schemas a real
broker uses) and writes whatever frames the test asks for, well-formed or not, in any
order. Nothing here sleeps.
"""

from __future__ import annotations

import asyncio
import functools
import io
import socket
import struct
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.serial import entity_reader, entity_writer

from strom.client import KafkaConnection

SIZE = struct.Struct(">i")
PRIVATE_HEADER = struct.Struct(">hhi")


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    """Run an async test function in a fresh event loop."""

    @functools.wraps(test)
    def wrapper() -> None:
        asyncio.run(test())

    return wrapper


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_version: int
    body: Any


@dataclass(frozen=True, slots=True)
class ReceivedPrivate:
    api_key: int
    api_version: int
    correlation_id: int
    payload: bytes


class FakePeer:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def read_frame(self) -> bytes:
        (size,) = SIZE.unpack(await self.reader.readexactly(4))
        return await self.reader.readexactly(size)

    async def read_request(self) -> ReceivedRequest:
        frame = await self.read_frame()
        # Every request header starts like v1; the version tells which one it really is.
        prefix, _ = entity_reader(RequestHeaderV1)(frame, 0)
        body_type = load_request_schema(prefix.request_api_key, prefix.request_api_version)
        header_type = body_type.__header_schema__
        # kio's readers return (value, bytes read), not the offset after the value.
        header, header_size = entity_reader(header_type)(frame, 0)
        body, body_size = entity_reader(body_type)(frame, header_size)
        assert header_size + body_size == len(frame), "bytes left after the request body"
        return ReceivedRequest(
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
            header.client_id,
            header_type.__version__,
            body,
        )

    async def read_private(self) -> ReceivedPrivate:
        frame = await self.read_frame()
        api_key, api_version, correlation_id = PRIVATE_HEADER.unpack_from(frame, 0)
        return ReceivedPrivate(api_key, api_version, correlation_id, frame[PRIVATE_HEADER.size :])

    def respond(self, correlation_id: int, body: Any) -> None:
        self.writer.write(response_frame(correlation_id, body))

    def respond_private(self, correlation_id: int, payload: bytes) -> None:
        self.writer.write(SIZE.pack(4 + len(payload)) + SIZE.pack(correlation_id) + payload)

    def write(self, data: bytes) -> None:
        self.writer.write(data)

    def close(self) -> None:
        self.writer.close()


def response_frame(correlation_id: int, body: Any) -> bytes:
    header_type = type(body).__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_type)(buffer, header_type(correlation_id=correlation_id))
    entity_writer(type(body))(buffer, body)
    payload = buffer.getvalue()
    return SIZE.pack(len(payload)) + payload


def response(api_key: int, api_version: int, **fields: Any) -> Any:
    return load_response_schema(api_key, api_version)(**fields)


async def connected_pair(**kwargs: Any) -> tuple[KafkaConnection, FakePeer]:
    """A KafkaConnection and the fake broker at the other end of a socketpair."""
    client_sock, peer_sock = socket.socketpair()
    client_reader, client_writer = await asyncio.open_connection(sock=client_sock)
    peer_reader, peer_writer = await asyncio.open_connection(sock=peer_sock)
    connection = KafkaConnection(client_reader, client_writer, peer="fake-peer", **kwargs)
    return connection, FakePeer(peer_reader, peer_writer)


class FakeBroker:
    """An in-process listener on loopback; each connection is served by `serve(peer)`.

    `port` may be given to listen where a client was already pointed (e.g. to come up
    after it failed to connect).
    """

    def __init__(
        self, serve: Callable[[FakePeer], Coroutine[Any, Any, None]], port: int = 0
    ) -> None:
        self._serve = serve
        self._port = port
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections = 0

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve(FakePeer(reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            pass  # the end of the test; re-raising makes 3.11's stream callback log it
        finally:
            writer.close()
            self._tasks.discard(task)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
