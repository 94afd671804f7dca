"""A client for one remote node that connects on demand and reconnects after failures.

Every call first makes sure there is an open KafkaConnection, connecting if there is
none (callers arriving meanwhile share the attempt). Consecutive failed attempts are
spaced by a capped exponential backoff counted from the previous attempt, as Kafka's
NetworkClient does with reconnect.backoff.ms; the wait, the connect and the call all fit
in the call's own timeout. A call that fails leaves the connection closed (the
KafkaConnection does that) and the next call reconnects; nothing is retried behind the
caller's back. The versions the node serves are asked once per connection.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from random import Random
from typing import Any

from strom.client.backoff import ReconnectBackoff
from strom.client.connection import DEFAULT_MAX_FRAME_BYTES, KafkaConnection
from strom.client.errors import ClientConnectionError
from strom.client.security import ClientSecurity
from strom.client.versions import pick_version

log = logging.getLogger(__name__)


class NodeClient:
    """Disconnected -> connecting -> connected -> disconnected ...; any -> closed (final).

    A failed connect counts toward the backoff; a successful one resets it.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "strom",
        node_id: int | None = None,
        connect_timeout_s: float = 5.0,
        backoff: ReconnectBackoff | None = None,
        rng: Random | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        security: ClientSecurity | None = None,
    ) -> None:
        """`security`: TLS and a SASL login for each connection (None: plaintext)."""
        self.host = host
        self.port = port
        self.name = f"{host}:{port}" if node_id is None else f"node {node_id} at {host}:{port}"
        self._client_id = client_id
        self._connect_timeout_s = connect_timeout_s
        self._backoff = backoff or ReconnectBackoff()
        self._rng = rng or Random()
        self._max_frame_bytes = max_frame_bytes
        self._security = security
        self._connection: KafkaConnection | None = None
        self._connect_lock = asyncio.Lock()
        self._failures = 0
        self._next_attempt_at = 0.0  # event loop time
        self._closed = False

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def security(self) -> ClientSecurity | None:
        """What each of its connections is secured with."""
        return self._security

    @property
    def is_connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed

    @property
    def failures(self) -> int:
        """Connect attempts that failed since the last one that succeeded."""
        return self._failures

    def next_attempt_in_s(self) -> float:
        """Seconds before a new connect attempt may start (0: now)."""
        return max(self._next_attempt_at - asyncio.get_running_loop().time(), 0.0)

    def close(self) -> None:
        """Close the connection, if any; later calls raise ClientConnectionError."""
        self._closed = True
        if self._connection is not None:
            self._connection.close()

    async def wait_closed(self) -> None:
        if self._connection is not None:
            await self._connection.wait_closed()

    # --- calls -------------------------------------------------------------------------

    async def connection(self, *, timeout_s: float | None = None) -> KafkaConnection:
        """The open connection, made now if there is none (waiting out the backoff)."""
        loop = asyncio.get_running_loop()
        timeout_s = self._connect_timeout_s if timeout_s is None else timeout_s
        return await self._connected(loop.time() + timeout_s)

    async def request(
        self,
        api_key: int,
        body: Any,
        *,
        api_version: int | None = None,
        min_version: int | None = None,
        max_version: int | None = None,
        timeout_s: float = 30.0,
    ) -> Any:
        """Send a Kafka request; its decoded kio response.

        `body` is a kio request (its class fixes the version) or a mapping of fields, sent
        at `api_version` if given, else at the highest version this client and the node
        both speak within [min_version, max_version]. The version used is the
        response's `__version__`.
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        connection = await self._connected(deadline)
        if not isinstance(body, Mapping):
            version = int(type(body).__version__)
        elif api_version is not None:
            version = api_version
        else:
            served = await connection.api_versions(timeout_s=self._remaining_s(deadline))
            version = pick_version(
                api_key, served, min_version=min_version, max_version=max_version
            )
        return await connection.request(
            api_key, version, body, timeout_s=self._remaining_s(deadline)
        )

    async def api_versions(self, *, timeout_s: float = 30.0) -> dict[int, tuple[int, int]]:
        """{api_key: (min, max)} the node serves, as asked on the current connection."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        connection = await self._connected(deadline)
        return await connection.api_versions(timeout_s=self._remaining_s(deadline))

    async def raw_request(
        self, api_key: int, api_version: int, payload: bytes, *, timeout_s: float = 30.0
    ) -> bytes:
        deadline = asyncio.get_running_loop().time() + timeout_s
        connection = await self._connected(deadline)
        return await connection.raw_request(
            api_key, api_version, payload, timeout_s=self._remaining_s(deadline)
        )

    async def send_oneway(
        self, api_key: int, api_version: int, payload: bytes, *, timeout_s: float = 30.0
    ) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        connection = await self._connected(deadline)
        await connection.send_oneway(
            api_key, api_version, payload, timeout_s=self._remaining_s(deadline)
        )

    # --- connecting --------------------------------------------------------------------

    def _remaining_s(self, deadline: float) -> float:
        remaining = deadline - asyncio.get_running_loop().time()
        if remaining <= 0:
            raise ClientConnectionError(f"timed out before sending to {self.name}")
        return remaining

    def _open_connection(self) -> KafkaConnection | None:
        if self._closed:
            raise ClientConnectionError(f"the client of {self.name} is closed")
        connection = self._connection
        return connection if connection is not None and not connection.is_closed else None

    async def _connected(self, deadline: float) -> KafkaConnection:
        connection = self._open_connection()
        if connection is not None:
            return connection
        try:
            async with asyncio.timeout_at(deadline), self._connect_lock:
                connection = self._open_connection()  # made while we waited for the lock
                if connection is not None:
                    return connection
                return await self._reconnect(deadline)
        except TimeoutError:
            raise ClientConnectionError(
                f"no connection to {self.name} in time ({self._failures} failed attempts)"
            ) from None

    async def _reconnect(self, deadline: float) -> KafkaConnection:
        loop = asyncio.get_running_loop()
        if self._connection is not None:
            log.info(
                "reconnecting to %s (%s)", self.name, self._connection.close_reason or "closed"
            )
            self._connection = None
        delay_s = self._next_attempt_at - loop.time()
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        attempt_at = loop.time()
        try:
            connection = await KafkaConnection.connect(
                self.host,
                self.port,
                client_id=self._client_id,
                timeout_s=min(self._connect_timeout_s, max(deadline - attempt_at, 0.0)),
                max_frame_bytes=self._max_frame_bytes,
                security=self._security,
            )
        except ClientConnectionError as exc:
            self._failures += 1
            delay_s = self._backoff.delay_s(self._failures - 1, self._rng)
            self._next_attempt_at = attempt_at + delay_s
            level = logging.INFO if self._failures == 1 else logging.DEBUG
            log.log(level, "%s unreachable (attempt %d): %s", self.name, self._failures, exc)
            raise
        if self._failures:
            log.info("connected to %s after %d failed attempts", self.name, self._failures)
        self._failures = 0
        self._next_attempt_at = attempt_at + self._backoff.delay_s(0, self._rng)
        if self._closed:  # closed while connecting
            connection.close()
            raise ClientConnectionError(f"the client of {self.name} is closed")
        self._connection = connection
        return connection
