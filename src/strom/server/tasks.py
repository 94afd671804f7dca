"""Background tasks owned by one component: started by name, logged if they fail, and
cancelled together when the component stops (no task is ever left unowned)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)


class TaskSet:
    def __init__(
        self,
        label: str,
        *,
        on_failure: Callable[[BaseException], None] | None = None,
        expected: tuple[type[BaseException], ...] = (),
    ) -> None:
        """`label` names the owner in log lines ("[node 1] controller"); a task that
        fails with one of `expected` ends quietly; any other failure is logged with its
        traceback and passed to `on_failure`."""
        self._label = label
        self._on_failure = on_failure
        self._expected = expected
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            if task.cancelling() == 0:
                # Nobody cancelled the task: a CancelledError reached it from a future
                # someone else cancelled. It must not end silently (a broker whose
                # heartbeat loop ends so stays fenced, without a word in its log).
                self._failed(task, asyncio.CancelledError(f"{task.get_name()}: stray cancel"))
            return
        error = task.exception()
        if error is None or isinstance(error, self._expected):
            return
        self._failed(task, error)

    def _failed(self, task: asyncio.Task[None], error: BaseException) -> None:
        log.error("%s task %s failed", self._label, task.get_name(), exc_info=error)
        if self._on_failure is not None:
            self._on_failure(error)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def stop(self) -> None:
        """Cancel every task and wait until all have ended."""
        tasks = list(self._tasks)
        self.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
