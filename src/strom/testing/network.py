"""The test cluster's network: a proxy in front of every listener of every node.

Nodes listen on private ports; clients and the other nodes reach them only through the
public ports served here, which is what the nodes advertise and what
controller.quorum.voters names. Each proxied connection knows its two ends: the node it
reaches, and the node it comes from (a node's dialer, strom.client.dial, opens each of
its connections to a public port with a short preamble naming itself) or CLIENTS for
anything else. So a link can be cut without root and without the kernel: while
`LinkRules` says it is cut, bytes wait in the proxy in both directions (connections
stay open and hang, as over a dead switch port) and flow again when it heals.

Client connections are also read frame by frame, so that `RequestFaults` can answer a
request with an error (strom.testing.error_responses) or hold it back for a while.
Answers leave in request order, as the protocol requires: an injected one waits behind
the broker's answers to the requests before it.

Everything here runs on one event loop, the cluster's control loop; the rules are read
and changed only there, so they need no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

from strom.client.codec import expects_response
from strom.client.dial import Dialer
from strom.protocol.apis import ApiKey
from strom.protocol.codec import RequestError, decode_request, encode_response, peek_header
from strom.testing.error_responses import error_response
from strom.testing.faults import RequestFaults
from strom.testing.frames import FrameSplitter
from strom.testing.links import CLIENTS, LinkRules

log = logging.getLogger(__name__)

PREAMBLE_MAGIC: Final = b"\xffstrom\x00\x01"
"""A node's first bytes on a proxied connection, then its id (int32). No Kafka frame
starts so: its first four bytes would be a negative size."""
_NODE_ID = struct.Struct(">i")
_SIZE = struct.Struct(">i")
_CHUNK_BYTES = 1 << 16
_MAX_PARSED_FRAME_BYTES = 200 << 20
"""Client frames larger than this are passed on unparsed (the broker refuses them)."""


@dataclass(slots=True)
class Route:
    """A public port (0 until served) and the node listener behind it: `private_port()`
    is where the node listens now, None while it is down."""

    node_id: int
    host: str
    private_port: Callable[[], int | None]
    public_port: int = 0


def node_dialer(
    node_id: int,
    public: frozenset[tuple[str, int]],
    on_open: Callable[[asyncio.StreamWriter], None] | None = None,
) -> Dialer:
    """A dialer for node `node_id`: to a public port, it opens with the preamble naming
    the node; `on_open` sees every connection it opens."""
    preamble = PREAMBLE_MAGIC + _NODE_ID.pack(node_id)

    async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(host, port)
        if on_open is not None:
            on_open(writer)
        if (host, port) in public:
            writer.write(preamble)
        return reader, writer

    return dial


class _Passing:
    """From here on the client's bytes are not frames the network reads: the broker's
    answers pass as they come."""


PASSING: Final = _Passing()


class _Answers:
    """What the client is owed, in request order: b"" for the broker's answer to a
    request passed on, a frame for a request answered here, PASSING, or None at the end."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[bytes | _Passing | None] = asyncio.Queue()


async def _read_preamble(reader: asyncio.StreamReader) -> bytes:
    """The first bytes of a connection: the node preamble's magic, or as soon as they
    differ from it (a client's first byte already does), what came."""
    head = b""
    while len(head) < len(PREAMBLE_MAGIC) and PREAMBLE_MAGIC.startswith(head):
        chunk = await reader.read(len(PREAMBLE_MAGIC) - len(head))
        if not chunk:
            break
        head += chunk
    return head


class Network:
    """created -> serve(routes) -> serving -> close()."""

    def __init__(self) -> None:
        self.rules = LinkRules()
        self.faults = RequestFaults()
        self._changed = asyncio.Condition()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._routes: list[Route] = []

    # --- set-up -----------------------------------------------------------------------

    async def serve(self, routes: list[Route]) -> None:
        """Listen on a free port for each route (its `public_port` is set)."""
        for route in routes:
            server = await asyncio.start_server(
                partial(self._accept, route=route),
                route.host,
                route.public_port,
                reuse_address=True,
            )
            self._servers.append(server)
            route.public_port = int(server.sockets[0].getsockname()[1])
            self._routes.append(route)

    def dialer(self, node_id: int, on_open: Callable[[asyncio.StreamWriter], None]) -> Dialer:
        """How node `node_id` opens its connections (on its own loop)."""
        return node_dialer(node_id, self.public, on_open)

    @property
    def public(self) -> frozenset[tuple[str, int]]:
        """Every public (host, port)."""
        return frozenset((route.host, route.public_port) for route in self._routes)

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    # --- changes (on the control loop) ------------------------------------------------

    async def changed(self) -> None:
        """Wake every connection waiting on a cut link, to look again."""
        async with self._changed:
            self._changed.notify_all()

    async def _wait_open(self, a: int, b: int) -> None:
        if not self.rules.is_cut(a, b):
            return
        async with self._changed:
            await self._changed.wait_for(lambda: not self.rules.is_cut(a, b))

    # --- connections ------------------------------------------------------------------

    async def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, route: Route
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._writers.add(writer)
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await _read_preamble(reader)
            if not head:
                return
            source = CLIENTS
            if head == PREAMBLE_MAGIC:
                source = _NODE_ID.unpack(await reader.readexactly(_NODE_ID.size))[0]
                head = b""
            private_port = route.private_port()
            if private_port is None:
                return  # the node is down: the connection is refused, as by the kernel
            up_reader, upstream = await asyncio.open_connection(route.host, private_port)
            self._writers.add(upstream)
            name = f"{'clients' if source == CLIENTS else f'node {source}'}->node {route.node_id}"
            if source == CLIENTS:
                answers = _Answers()
                inbound = self._requests(head, reader, upstream, source, route.node_id, answers)
                outbound = self._answers(up_reader, writer, source, route.node_id, answers)
            else:
                inbound = self._pump(head, reader, upstream, source, route.node_id)
                outbound = self._pump(b"", up_reader, writer, route.node_id, source)
            await asyncio.gather(
                asyncio.create_task(inbound, name=f"{name} requests"),
                asyncio.create_task(outbound, name=f"{name} answers"),
            )
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() ends every connection. Not re-raising keeps Python 3.11's stream
            # callback from logging the cancelled task as an error.
            pass
        finally:
            for end in (writer, upstream):
                if end is not None:
                    self._writers.discard(end)
                    end.transport.abort()

    async def _pump(
        self,
        head: bytes,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        source: int,
        target: int,
    ) -> None:
        """Bytes from `source` to `target`, held while their link is cut."""
        data = head
        try:
            while True:
                if data:
                    await self._wait_open(source, target)
                    writer.write(data)
                    await writer.drain()
                data = await reader.read(_CHUNK_BYTES)
                if not data:
                    break
        finally:
            self._close_both(reader, writer)

    @staticmethod
    def _close_both(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # One direction ended: the connection is over for both (a Kafka connection is
        # never half-closed on purpose), so the other pump ends too.
        writer.transport.abort()
        reader.feed_eof()

    async def _requests(
        self,
        head: bytes,
        reader: asyncio.StreamReader,
        upstream: asyncio.StreamWriter,
        source: int,
        node_id: int,
        answers: _Answers,
    ) -> None:
        """A client's requests, frame by frame: passed on, held back or answered here."""
        splitter = FrameSplitter(_MAX_PARSED_FRAME_BYTES)
        try:
            data = head
            while True:
                for frame in splitter.feed(data):
                    await self._request(frame, upstream, source, node_id, answers)
                if splitter.passing:
                    answers.queue.put_nowait(PASSING)
                    await self._pump(splitter.take_rest(), reader, upstream, source, node_id)
                    return
                data = await reader.read(_CHUNK_BYTES)
                if not data:
                    return
        finally:
            answers.queue.put_nowait(None)
            self._close_both(reader, upstream)

    async def _request(
        self,
        frame: bytes,
        upstream: asyncio.StreamWriter,
        source: int,
        node_id: int,
        answers: _Answers,
    ) -> None:
        api_key, _version, correlation_id = peek_header(frame[_SIZE.size :])
        injection = self.faults.take(node_id, api_key)
        answered = True
        if injection is not None or api_key == ApiKey.PRODUCE:
            try:
                request = decode_request(frame[_SIZE.size :])
            except RequestError:
                injection = None  # the broker says what is wrong with it
            else:
                answered = expects_response(api_key, request.body)
                if injection is not None and injection.error is not None:
                    log.info(
                        "test network: answering %s v%d to node %d with %s",
                        request.api_key.name,
                        request.api_version,
                        node_id,
                        injection.error.name,
                    )
                    if answered:
                        body = error_response(request, injection.error)
                        answers.queue.put_nowait(encode_response(correlation_id, body))
                    return
        if answered:
            # the answer side reads the node's answer from now on, so a node that dies
            # while this request is held drops the client's connection at once
            answers.queue.put_nowait(b"")
        if injection is not None and injection.delay_s > 0:
            await asyncio.sleep(injection.delay_s)
        await self._wait_open(source, node_id)
        upstream.write(frame)
        await upstream.drain()

    async def _answers(
        self,
        up_reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        source: int,
        node_id: int,
        answers: _Answers,
    ) -> None:
        """The broker's answers and the injected ones, in the order of the requests."""
        try:
            while True:
                owed = await answers.queue.get()
                if owed is None:
                    return
                if isinstance(owed, _Passing):
                    await self._pump(b"", up_reader, writer, node_id, source)
                    return
                if owed:
                    frame = owed
                else:
                    size_bytes = await up_reader.readexactly(_SIZE.size)
                    frame = size_bytes + await up_reader.readexactly(_SIZE.unpack(size_bytes)[0])
                await self._wait_open(node_id, source)
                writer.write(frame)
                await writer.drain()
        except asyncio.IncompleteReadError:
            return
        finally:
            with contextlib.suppress(Exception):
                writer.transport.abort()
