"""Group commit: one fsync round covers every append made before it started.

Produce handlers append to their logs on the event loop and then await
`Flusher.flushed(partition, offset)`. A single background task takes every log with
unflushed appends, fsyncs them together in a worker thread, and releases each waiter
whose records are now on disk. Appends that arrive while a round runs wait for the next
one, so concurrent producers share fsyncs instead of queueing for one each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from strom.durable_files import sync_fd
from strom.server.partition import Partition

log = logging.getLogger(__name__)


def _fsync_all(fds: list[int]) -> None:
    try:
        for fd in fds:
            sync_fd(fd)
    finally:
        for fd in fds:
            os.close(fd)


class PartitionGone(Exception):
    """The partition was deleted while a produce waited for its records to be flushed."""

    def __init__(self, topic: str, partition: int) -> None:
        super().__init__(f"{topic}-{partition} was deleted")
        self.topic = topic
        self.partition = partition


class Flusher:
    """Idle -> (request -> flushing round -> idle)* -> stopped."""

    def __init__(
        self,
        on_flushed: Callable[[Partition], None],
        on_round: Callable[[float], None] = lambda _seconds: None,
    ) -> None:
        """`on_round` hears how long each round's fsyncs took (metrics)."""
        self._on_round = on_round
        self._dirty: set[Partition] = set()
        self._waiters: list[tuple[Partition, int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._on_flushed = on_flushed
        self._stopping = False

    def request(self, partition: Partition) -> None:
        """Schedule `partition` for the next round without waiting for it."""
        self._dirty.add(partition)
        self._wake.set()

    async def flushed(self, partition: Partition, offset: int) -> None:
        """Return once every record of `partition` below `offset` is on disk."""
        if partition.log.flushed_offset >= offset:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((partition, offset, future))
        self.request(partition)
        await future

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            self._wake.clear()
            dirty, self._dirty = self._dirty, set()
            # A partition deleted since it was written has nothing left to make durable.
            plans = [(p, p.log.flush_plan()) for p in dirty if not p.log.closed]
            fds = [fd for _, plan in plans for fd in plan.fds]
            try:
                if fds:
                    started = time.perf_counter()
                    await loop.run_in_executor(None, _fsync_all, fds)
                    self._on_round(time.perf_counter() - started)
            except OSError:
                log.exception("fsync failed; the broker cannot promise durability and stops")
                raise
            for partition, plan in plans:
                partition.log.mark_flushed(plan)
                self._on_flushed(partition)
            self._release()
            if self._stopping and not self._dirty:
                return

    def _release(self) -> None:
        waiting = []
        for partition, offset, future in self._waiters:
            if future.done():
                continue
            if partition.log.closed:
                future.set_exception(PartitionGone(partition.topic, partition.index))
            elif partition.log.flushed_offset >= offset:
                future.set_result(None)
            else:
                waiting.append((partition, offset, future))
                self._dirty.add(partition)
                self._wake.set()
        self._waiters = waiting

    def fail_waiters(self, exc: BaseException) -> None:
        for _, _, future in self._waiters:
            if not future.done():
                future.set_exception(exc)
        self._waiters.clear()
