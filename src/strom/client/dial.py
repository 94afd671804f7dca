"""How strom opens its outgoing TCP connections: one replaceable function.

Every connection a strom node opens to another node (Raft, metadata fetches, replica
fetches, calls to the controller) and every connection of strom's own admin client goes
through `dial`. By default it is `asyncio.open_connection`. The test fixture
(strom.testing) sets another dialer for the tasks of one node, so that its network can
tell which node a connection comes from and cut links between chosen nodes without root.

The dialer lives in a context variable: tasks inherit the context they were created in,
so each node of an in-process cluster, started in a context of its own, dials with its
own dialer while sharing the process with the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

Dialer = Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
"""(host, port) -> an open stream pair; raises OSError as asyncio.open_connection does."""


async def open_tcp(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(host, port)


_DIALER: ContextVar[Dialer] = ContextVar("strom_dialer", default=open_tcp)


async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Open a connection to host:port with the current context's dialer."""
    return await _DIALER.get()(host, port)


def set_dialer(dialer: Dialer) -> None:
    """Use `dialer` in this context and in every task created from it from now on."""
    _DIALER.set(dialer)


@contextmanager
def dialing_with(dialer: Dialer) -> Iterator[None]:
    """Use `dialer` inside the block (and in tasks created inside it)."""
    token = _DIALER.set(dialer)
    try:
        yield
    finally:
        _DIALER.reset(token)
