"""The way into a client listener: Kafka's connection limits carried out.

The decisions are strom.security.connection_quotas's; this module waits where they say
to wait and closes what they say to close. A new connection first waits out its
listener's creation rate (one connection of a listener at a time, as Kafka's acceptor
takes them), then waits for a slot while the broker or its listener holds
max.connections, then is refused at once if its address holds max.connections.per.ip.
An address over its `connection_creation_rate` client quota is refused too, after the
listener's rate and before a slot, as Kafka refuses it (KIP-612).
At most BACKLOG connections of a listener wait for a slot, as the kernel's backlog
bounds Kafka's; one more is closed. On an SSL listener the TLS handshake comes first
(asyncio's TLS layer runs it before the broker sees the connection), where Kafka counts
the connection before its handshake.
"""

from __future__ import annotations

import asyncio
import ipaddress
import itertools
import logging
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

from strom.security.connection_quotas import ConnectionLimits, ConnectionQuotas

__all__ = ["BACKLOG", "ConnectionGate", "Entered", "IpRate", "OpenConnections", "peer_ip"]

log = logging.getLogger(__name__)

BACKLOG = 50
"""Connections of one listener that may wait for a slot (Kafka's listen backlog default,
socket.listen.backlog.size)."""


_MAX_REFUSAL_DELAY_MS = 1000


class IpRate(Protocol):
    """The `connection_creation_rate` client quotas (server/throttling.py)."""

    def connection_ms(self, address: str) -> int:
        """Record a new connection from `address`; > 0: it is over its quota."""
        ...


class Entered(Protocol):
    """What the gate needs of an open connection to close the least recently used."""

    listener: str
    last_active_s: float

    def abort(self) -> None: ...


def peer_ip(peername: object) -> str:
    """A peer's address as the limits name it: as the socket gives it (IPv6 compressed,
    its scope left out); "" if it has none. Not parsed again: this runs per connection."""
    if not isinstance(peername, tuple) or not peername:
        return ""
    return str(peername[0]).partition("%")[0]


def resolved(limits: ConnectionLimits) -> ConnectionLimits:
    """The limits with each per-address override's host name resolved to its addresses,
    as Kafka resolves them when the config is read (a name that does not resolve is
    logged and left out)."""
    overrides: dict[str, int] = {}
    for host, count in limits.per_ip_overrides.items():
        try:
            overrides[ipaddress.ip_address(host).compressed] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as exc:
            log.warning("max.connections.per.ip.overrides: cannot resolve %r: %s", host, exc)
            continue
        for info in infos:
            overrides[ipaddress.ip_address(info[4][0]).compressed] = count
    return replace(limits, per_ip_overrides=MappingProxyType(overrides))


class ConnectionGate:
    """Every client listener's way in (see the module docstring); one per broker."""

    def __init__(
        self, node_id: int, limits: ConnectionLimits, ip_rate: IpRate | None = None
    ) -> None:
        self._node_id = node_id
        self._limits = limits
        self._ip_rate = ip_rate
        self.quotas = ConnectionQuotas(resolved(limits))
        self._slot_waiters: set[asyncio.Future[None]] = set()
        self._waiting: dict[str, int] = {}
        self._throttles: dict[str, asyncio.Lock] = {}

    def reconfigure(self, limits: ConnectionLimits) -> None:
        """New limits (dynamic configs); connections waiting for a slot look again."""
        if limits == self._limits:
            return
        self._limits = limits
        self.quotas.reconfigure(resolved(limits))
        log.info("[node %d] connection limits now %s", self._node_id, _shown(limits))
        self._wake()

    def _wake(self) -> None:
        """Every connection waiting for a slot looks again."""
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._slot_waiters.clear()

    async def _wait_for_slot(self, listener: str) -> None:
        while not self.quotas.has_slot(listener):
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.add(waiter)
            try:
                await waiter
            finally:
                self._slot_waiters.discard(waiter)

    async def enter(self, listener: str, ip: str, peer: str) -> bool:
        """Waits until a connection from `ip` may be served on `listener`; False if it
        must be closed instead. True counts it open: `leave` must follow."""
        lock = self._throttles.setdefault(listener, asyncio.Lock())
        async with lock:
            delay_ms = self.quotas.throttle_ms(listener, _now_ms())
            if delay_ms > 0:
                await asyncio.sleep(delay_ms / 1000)
        over_ms = 0 if self._ip_rate is None else self._ip_rate.connection_ms(ip)
        if over_ms > 0:
            log.info(
                "[node %d] closing a connection from %s on %s: the address is over its "
                "connection_creation_rate client quota for %d ms",
                self._node_id,
                peer,
                listener,
                over_ms,
            )
            # As Kafka, closed only once the wait is over, so the client does not come
            # straight back; at most a second, so a flood holds little.
            await asyncio.sleep(min(over_ms, _MAX_REFUSAL_DELAY_MS) / 1000)
            return False
        if not self.quotas.has_slot(listener):
            if self._waiting.get(listener, 0) >= BACKLOG:
                log.info(
                    "[node %d] closing a connection from %s on %s: the listener is full "
                    "(max.connections) and %d connections wait already",
                    self._node_id,
                    peer,
                    listener,
                    BACKLOG,
                )
                return False
            self._waiting[listener] = self._waiting.get(listener, 0) + 1
            try:
                await self._wait_for_slot(listener)
            finally:
                self._waiting[listener] -= 1
        if not self.quotas.open(listener, ip):
            log.info(
                "[node %d] closing a connection from %s on %s: the address has the most "
                "connections it may hold (%d, max.connections.per.ip)",
                self._node_id,
                peer,
                listener,
                self.quotas.limits.per_ip(ip),
            )
            return False
        return True

    def make_room(self, open_connections: Iterable[Entered]) -> None:
        """After a protected listener's connection took the broker over max.connections:
        close the least recently used connection of another listener, as Kafka does."""
        if not self.quotas.over_limit():
            return
        protected = self.quotas.limits.protected_listener
        others = [c for c in open_connections if c.listener != protected]
        if others:
            oldest = min(others, key=lambda c: c.last_active_s)
            log.info(
                "[node %d] closing the least recently used connection on %s: the broker "
                "holds more than max.connections",
                self._node_id,
                oldest.listener,
            )
            oldest.abort()

    def leave(self, listener: str, ip: str) -> None:
        """A connection `enter` let in has ended: its slot goes to one that waits."""
        self.quotas.close(listener, ip)
        self._wake()


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _shown(limits: ConnectionLimits) -> str:
    parts = [
        f"{name} {value}"
        for name, value in (
            ("max.connections", limits.max_connections),
            ("max.connections.per.ip", limits.max_connections_per_ip),
            ("max.connection.creation.rate", limits.max_creation_rate),
        )
        if value < 2**31 - 1
    ]
    if limits.per_ip_overrides:
        parts.append(f"overrides {dict(limits.per_ip_overrides)}")
    for name, values in (
        ("max.connections", limits.listener_max_connections),
        ("max.connection.creation.rate", limits.listener_max_creation_rate),
    ):
        parts += [f"{listener} {name} {value}" for listener, value in values.items()]
    return ", ".join(parts) or "unlimited"


class Served(Entered, Protocol):
    connection_id: str

    def drain(self) -> None: ...

    async def serve(self) -> None: ...


class OpenConnections:
    """The broker's open connections (client and node ones), their tasks and counts per
    listener, and the gate client listeners' connections come in through."""

    def __init__(
        self, node_id: int, limits: ConnectionLimits, ip_rate: IpRate | None = None
    ) -> None:
        self.gate = ConnectionGate(node_id, limits, ip_rate)
        self._node_id = node_id
        self.counts: dict[str, int] = {}
        """Open connections per listener name."""
        self._open: set[Served] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ids = itertools.count()
        self.on_closed: list[Callable[[str], None]] = []
        """Called with a connection's id once it has ended (its requests answered or
        dropped), e.g. to end the share sessions it opened."""

    def new_id(self, listener: str) -> str:
        """A name for a new connection, unique in this broker's life (Kafka's names the
        addresses and a sequence number)."""
        return f"{listener}-{next(self._ids)}"

    async def serve(self, listener: str, connection: Served, gated_ip: str | None) -> None:
        """Serves `connection` until it ends. `gated_ip`: the address `gate.enter` let
        in, whose slot is given back at the end; None for a node connection."""
        task = asyncio.current_task()
        assert task is not None
        self._open.add(connection)
        self._tasks.add(task)
        self.counts[listener] = self.counts.get(listener, 0) + 1
        try:
            if gated_ip is not None:
                self.gate.make_room(self._open)
            await connection.serve()
        finally:
            self.counts[listener] -= 1
            self._open.discard(connection)
            self._tasks.discard(task)
            if gated_ip is not None:
                self.gate.leave(listener, gated_ip)
            self._closed(connection.connection_id)

    def _closed(self, connection_id: str) -> None:
        for hear in self.on_closed:
            try:
                hear(connection_id)
            except Exception:
                log.exception(
                    "[node %d] bug while ending connection %s", self._node_id, connection_id
                )

    def abort(self) -> None:
        for connection in list(self._open):
            connection.abort()

    async def drain(self, grace_s: float) -> None:
        """Stops reading requests, answers those read, and waits up to `grace_s` for the
        connections to end; the others are cancelled."""
        for connection in list(self._open):
            connection.drain()
        if self._tasks:
            _done, pending = await asyncio.wait(self._tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
