"""A kazoo client driven from the event loop.

kazoo runs its own connection thread and calls back from it: results of its `*_async`
calls, watches and session state changes. This module hands each of them to the event
loop (`call_soon_threadsafe`), so the store above it is plain asyncio code that never
blocks the loop and never runs on kazoo's thread.

    connecting -> CONNECTED -> SUSPENDED (connection lost; the session may live on)
                      ^             |-> CONNECTED (same session: ephemerals and watches kept)
                      |             `-> LOST (the session expired: its ephemerals are gone)
                      `------------------- a new session, once a server answers again
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from strom.config.zookeeper import ZooKeeperConnect

log = logging.getLogger(__name__)

__all__ = [
    "BadVersionError",
    "KazooException",
    "NoNodeError",
    "NodeExistsError",
    "RolledBackError",
    "SessionState",
    "ZkSession",
    "ZnodeStat",
]


class SessionState(Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"


_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}


class ZkSession:
    def __init__(
        self,
        connect: ZooKeeperConnect,
        *,
        session_timeout_ms: int,
        connection_timeout_ms: int,
        on_state: Callable[[SessionState], None],
    ) -> None:
        self._connect = connect
        self._session_timeout_s = session_timeout_ms / 1000
        self._connection_timeout_s = connection_timeout_ms / 1000
        self._on_state = on_state
        self._loop = asyncio.get_running_loop()
        self.client = self._new_client(str(connect))
        self.client.add_listener(self._kazoo_state)

    def _new_client(self, hosts: str) -> KazooClient:
        # kazoo retries a lost connection for ever; a call made meanwhile fails at once
        # (ConnectionLoss), and the store waits for the CONNECTED state before trying again.
        return KazooClient(
            hosts=hosts,
            timeout=self._session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
            logger=logging.getLogger("strom.zookeeper.kazoo"),
        )

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect (creating the chroot first); ConnectionError after the connection
        timeout, naming the servers."""
        if self._connect.chroot:
            setup = self._new_client(",".join(str(host) for host in self._connect.hosts))
            await self._start_client(setup)
            try:
                await asyncio.to_thread(setup.ensure_path, self._connect.chroot)
            finally:
                await asyncio.to_thread(_close, setup)
        await self._start_client(self.client)

    async def _start_client(self, client: KazooClient) -> None:
        try:
            await asyncio.to_thread(client.start, self._connection_timeout_s)
        except KazooTimeoutError:
            await asyncio.to_thread(_close, client)
            raise ConnectionError(
                f"no ZooKeeper server of {self._connect} answered within "
                f"{self._connection_timeout_s:.0f} s (zookeeper.connection.timeout.ms)"
            ) from None

    async def close(self) -> None:
        """End the session: ZooKeeper deletes its ephemeral znodes at once."""
        await asyncio.to_thread(_close, self.client)

    def abandon(self) -> None:
        """close(), from a node that is going down at once (blocks briefly)."""
        _close(self.client)

    @property
    def session_id(self) -> int:
        client_id = self.client.client_id
        return int(client_id[0]) if client_id else -1

    def _kazoo_state(self, state: str) -> None:
        # On kazoo's thread: hand over, never block here.
        self._loop.call_soon_threadsafe(self._on_state, _STATES[state])

    # --- calls ------------------------------------------------------------------------

    def _result(self, async_result: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = self._loop.create_future()

        def settle(value: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        def done(result: Any) -> None:
            try:
                value = result.get_nowait()
            except BaseException as exc:  # handed to the awaiting coroutine
                self._loop.call_soon_threadsafe(settle, None, exc)
            else:
                self._loop.call_soon_threadsafe(settle, value, None)

        async_result.rawlink(done)
        return future

    def _watcher(self, event: asyncio.Event | None) -> Callable[[WatchedEvent], None] | None:
        if event is None:
            return None
        loop = self._loop

        def watcher(_watched: WatchedEvent) -> None:
            loop.call_soon_threadsafe(event.set)

        return watcher

    async def get(self, path: str, watch: asyncio.Event | None = None) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._result(self.client.get_async(path, self._watcher(watch)))
        return bytes(data or b""), stat

    async def data_or_empty(self, path: str) -> bytes:
        """A znode's data; b"" when it does not exist."""
        try:
            data, _stat = await self.get(path)
        except NoNodeError:
            return b""
        return data

    async def exists(self, path: str, watch: asyncio.Event | None = None) -> ZnodeStat | None:
        stat: ZnodeStat | None = await self._result(
            self.client.exists_async(path, self._watcher(watch))
        )
        return stat

    async def children(self, path: str, watch: asyncio.Event | None = None) -> list[str]:
        names: list[str] = await self._result(
            self.client.get_children_async(path, self._watcher(watch))
        )
        return names

    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> str:
        created: str = await self._result(self.client.create_async(path, data, ephemeral=ephemeral))
        return created

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        stat: ZnodeStat = await self._result(self.client.set_async(path, data, version))
        return stat

    async def delete(self, path: str, version: int = -1) -> None:
        await self._result(self.client.delete_async(path, version))

    async def ensure_path(self, path: str) -> None:
        await asyncio.to_thread(self.client.ensure_path, path)

    async def transaction(self, ops: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """One multi-op: each op is (kind, args) with kind check, create, set_data or
        delete; returns kazoo's results, where a failed op is an exception instance."""
        request = self.client.transaction()
        for kind, args in ops:
            getattr(request, kind)(*args)
        results: list[Any] = await self._result(request.commit_async())
        return results


def _close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()
