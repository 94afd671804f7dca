"""The metrics endpoint's server: one asyncio listener, one request per connection.

    start() -> serving (each connection: read the head -> answer -> close) -> stop()

A client gets READ_TIMEOUT_S to send its head and to read the answer; at most
MAX_CONNECTIONS are served at once, and others are closed at once, so a flood of
connections costs the node little and never touches the Kafka listeners.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from strom.metrics.http_wire import (
    MAX_HEAD_BYTES,
    HttpRefusal,
    answer,
    parse_head,
    refusal,
    wants_metrics,
)

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64


class MetricsEndpoint:
    """Serves /metrics, /health and /ready on `host`:`port` (0: any free port)."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int,
        ready: Callable[[], tuple[bool, str]],
        metrics: Callable[[], Awaitable[bytes]],
    ) -> None:
        self._host = host
        self._port = port
        self._node_id = node_id
        self._ready = ready
        self._metrics = metrics
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The bound port; 0 before start()."""
        if self._server is None or not self._server.sockets:
            return 0
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        """Bind and serve; OSError if the address cannot be bound."""
        self._server = await asyncio.start_server(
            self._on_connection,
            self._host or None,
            self._port,
            reuse_address=True,
            limit=MAX_HEAD_BYTES,
        )

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._open):
            task.cancel()
        await asyncio.gather(*self._open, return_exceptions=True)
        await self._server.wait_closed()

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is None or len(self._open) >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        self._open.add(task)
        try:
            data = await self._respond(reader)
            if data:
                writer.write(data)
                async with asyncio.timeout(READ_TIMEOUT_S):  # wait_for can eat a cancel
                    await writer.drain()
        except (ConnectionError, TimeoutError):
            pass
        finally:
            self._open.discard(task)
            writer.close()

    async def _respond(self, reader: asyncio.StreamReader) -> bytes:
        """The answer to the connection's request; b"" when there is no one to answer."""
        try:
            async with asyncio.timeout(READ_TIMEOUT_S):  # wait_for can eat a cancel
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            return refusal(HttpRefusal(431, f"request head longer than {MAX_HEAD_BYTES} bytes"))
        except asyncio.IncompleteReadError:
            return b""
        except TimeoutError:
            return refusal(HttpRefusal(408, f"no request within {READ_TIMEOUT_S:g} s"))
        try:
            parsed = parse_head(head)
            return answer(
                parsed, self._ready, await self._metrics() if wants_metrics(parsed) else b""
            )
        except HttpRefusal as exc:
            return refusal(exc)
        except Exception:  # a bug: the node goes on, the scraper sees the status
            log.exception("[node %d] metrics endpoint: could not answer", self._node_id)
            return refusal(HttpRefusal(500, "internal error; see the node's log"))
