"""One node of a test cluster: in this process on a thread of its own, or a child process.

Both kinds offer the same calls, made from the test's thread:

    stopped -> start() -> running -> stop() | crash() -> stopped -> start() ...
               running -> pause() -> paused -> resume() -> running

An in-process node runs a `Broker` on its own event loop in its own thread, so pausing
it (its loop blocks, as a process under SIGSTOP does) leaves the other nodes running.
Its connections to the other nodes are opened by its own dialer (strom.client.dial), set
in the thread's context before the loop starts. A crash drops every connection, cancels
every task of the node and closes its files as a killed process leaves them; it can also
drop what the partition logs have not fsynced, as a power failure would.

A child node is `strom serve` in a process of its own (`python -m strom.testing.child`,
which sets the same dialer): stop is SIGTERM, crash is SIGKILL, pause is SIGSTOP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Protocol, TypeVar
from weakref import WeakSet

from strom.client.dial import Dialer, set_dialer
from strom.config import BrokerConfig
from strom.server.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")


class NodeError(RuntimeError):
    """A node did not start, stop or answer as asked; the message says why."""


class TestNode(Protocol):
    node_id: int

    @property
    def is_running(self) -> bool: ...

    @property
    def paused(self) -> bool: ...

    def start(self, timeout_s: float) -> None: ...

    def stop(self, timeout_s: float) -> None: ...

    def crash(self, *, lose_unflushed: bool, timeout_s: float) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class InProcessNode:
    """A Broker on a thread and an event loop of its own."""

    __test__ = False

    def __init__(
        self,
        node_id: int,
        config: BrokerConfig,
        dialer: Callable[[Callable[[asyncio.StreamWriter], None]], Dialer],
    ) -> None:
        """`dialer(on_open)` makes the node's dialer; `on_open` tracks what it opens."""
        self.node_id = node_id
        self.config = config
        self._make_dialer = dialer
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broker: Broker | None = None
        self._end: asyncio.Event | None = None
        self._crash: bool | None = None  # None: stop cleanly; else lose_unflushed
        self._resume: threading.Event | None = None
        self._opened: WeakSet[asyncio.StreamWriter] = WeakSet()
        self.exit_reason = "not started"

    @property
    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def paused(self) -> bool:
        return self._resume is not None

    @property
    def broker(self) -> Broker:
        if self._broker is None or not self.is_running:
            raise NodeError(f"node {self.node_id} is not running")
        return self._broker

    def start(self, timeout_s: float) -> None:
        if self.is_running:
            raise NodeError(f"node {self.node_id} is already running")
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._crash = None
        self._thread = threading.Thread(
            target=self._run, args=(ready,), name=f"strom-node-{self.node_id}", daemon=True
        )
        self._thread.start()
        try:
            ready.result(timeout_s)
        except concurrent.futures.TimeoutError:
            self.crash(lose_unflushed=False, timeout_s=timeout_s)
            raise NodeError(f"node {self.node_id} did not start within {timeout_s:g} s") from None

    def _run(self, ready: concurrent.futures.Future[None]) -> None:
        set_dialer(self._make_dialer(self._opened.add))
        loop = _new_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main(ready))
        except BaseException as exc:  # reported to whoever waits
            self.exit_reason = f"failed: {exc!r}"
            if not ready.done():
                ready.set_exception(exc)
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _main(self, ready: concurrent.futures.Future[None]) -> None:
        self._end = asyncio.Event()
        broker = self._broker = Broker(self.config)
        try:
            await broker.start()
        except BaseException:
            await broker.stop()
            raise
        self.exit_reason = "running"
        ready.set_result(None)
        ended = asyncio.ensure_future(self._end.wait())
        fatal = asyncio.ensure_future(broker.fatal.wait())
        await asyncio.wait({ended, fatal}, return_when=asyncio.FIRST_COMPLETED)
        ended.cancel()
        fatal.cancel()
        try:
            if broker.fatal.is_set():
                self.exit_reason = f"failed: {broker.fatal_reason}"
                await broker.stop()
            elif self._crash is None:
                await broker.stop()
                self.exit_reason = "stopped"
            else:
                await self._crashed(broker, lose_unflushed=self._crash)
                self.exit_reason = "crashed"
        finally:  # also when stopping raised (`_run` reports it as the exit reason)
            await _cancel_the_rest()

    async def _crashed(self, broker: Broker, *, lose_unflushed: bool) -> None:
        broker.abort()
        for writer in list(self._opened):
            writer.transport.abort()
        await _cancel_the_rest()
        broker.abandon_files(lose_unflushed=lose_unflushed)

    def _end_with(self, crash: bool | None, timeout_s: float) -> None:
        if not self.is_running:
            return
        self.resume()
        loop, end, thread = self._loop, self._end, self._thread
        assert loop is not None and end is not None and thread is not None
        self._crash = crash
        loop.call_soon_threadsafe(end.set)
        thread.join(timeout_s)
        if thread.is_alive():
            raise NodeError(
                f"node {self.node_id} did not stop within {timeout_s:g} s; where it is:\n"
                + _where_stuck(thread, loop)
            )

    def stop(self, timeout_s: float) -> None:
        """Stop cleanly; NodeError if the node failed instead (as `strom serve` then
        exits with a nonzero code), also if it had failed on its own before."""
        self._end_with(None, timeout_s)
        if self.exit_reason.startswith("failed"):
            raise NodeError(f"node {self.node_id} did not stop cleanly: {self.exit_reason}")

    def crash(self, *, lose_unflushed: bool, timeout_s: float) -> None:
        self._end_with(lose_unflushed, timeout_s)

    def pause(self) -> None:
        if self._resume is not None:
            return
        loop = self._loop
        if loop is None or not self.is_running:
            raise NodeError(f"node {self.node_id} is not running")
        self._resume = resume = threading.Event()
        blocked = threading.Event()

        def block() -> None:
            blocked.set()
            resume.wait()

        loop.call_soon_threadsafe(block)
        blocked.wait()

    def resume(self) -> None:
        if self._resume is not None:
            self._resume.set()
            self._resume = None

    def call(self, make: Callable[[Broker], Coroutine[Any, Any, T]], timeout_s: float) -> T:
        """Run `make(broker)` on the node's loop; its result."""
        loop = self._loop
        if loop is None or not self.is_running:
            raise NodeError(f"node {self.node_id} is not running")
        if self._resume is not None:
            raise NodeError(f"node {self.node_id} is paused")
        broker = self.broker
        future = asyncio.run_coroutine_threadsafe(make(broker), loop)
        return future.result(timeout_s)


async def _cancel_the_rest() -> None:
    """Cancel every other task of this loop until none is left (cancelling one may
    start another), so that the loop closes with nothing pending."""
    current = asyncio.current_task()
    while tasks := [t for t in asyncio.all_tasks() if t is not current and not t.done()]:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _where_stuck(thread: threading.Thread, loop: asyncio.AbstractEventLoop) -> str:
    """The stacks of a node that does not stop: its thread, the worker threads of its
    loop's executor, and its loop's tasks, so that a rare hang says where it hangs."""
    out = io.StringIO()
    frames = sys._current_frames()
    workers = [t for t in threading.enumerate() if t.name.startswith("asyncio_")]
    for each in [thread, *workers]:
        frame = frames.get(each.ident or -1)
        if frame is not None:
            out.write(f"thread {each.name}:\n")
            out.writelines(traceback.format_stack(frame, limit=12))
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the loop changed its set of tasks meanwhile
        tasks = []
    for task in tasks:
        out.write(f"task {task.get_name()} ({task!r}):\n")
        out.writelines(f"  {line}\n" for line in _await_chain(task.get_coro()))
    return out.getvalue()


def _await_chain(awaitable: object, depth: int = 24) -> list[str]:
    """Where a coroutine waits, from its outermost frame through every coroutine it
    awaits down to the future at the bottom (a task's own stack shows one frame)."""
    lines: list[str] = []
    while awaitable is not None and len(lines) < depth:
        frame = getattr(awaitable, "cr_frame", None) or getattr(awaitable, "gi_frame", None)
        if frame is None:
            lines.append(f"awaits {awaitable!r}"[:300])
            break
        lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}")
        awaitable = getattr(awaitable, "cr_await", None) or getattr(awaitable, "gi_yieldfrom", None)
    return lines


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class ChildNode:
    """`strom serve` in a child process, with the test network's dialer."""

    __test__ = False

    def __init__(self, node_id: int, config_path: Path, log_path: Path, env: dict[str, str]):
        self.node_id = node_id
        self.config_path = config_path
        self.log_path = log_path
        self._env = env
        self.process: subprocess.Popen[bytes] | None = None
        self._paused = False

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    def start(self, timeout_s: float) -> None:
        if self.is_running:
            raise NodeError(f"node {self.node_id} is already running")
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "strom.testing.child", str(self.config_path)],
                stdout=subprocess.PIPE,
                stderr=log_file,
                env={**os.environ, **self._env, "PYTHONUNBUFFERED": "1"},
            )
        self._wait_ready(timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        process = self.process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + timeout_s
        fd = process.stdout.fileno()
        while time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([fd], [], [], 0.1)
            if ready and b"\n" in os.read(fd, 4096):
                return
        self._kill()
        tail = self.log_path.read_text(errors="replace")[-4000:]
        raise NodeError(f"node {self.node_id} did not become ready; its log ends:\n{tail}")

    def stop(self, timeout_s: float) -> None:
        """SIGTERM; NodeError unless the process exits with 0 (also if it had exited
        with an error on its own before)."""
        if self.is_running:
            assert self.process is not None
            self.resume()
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._kill()
                raise NodeError(
                    f"node {self.node_id} did not stop within {timeout_s:g} s"
                ) from None
            self._close()
        code = None if self.process is None else self.process.returncode
        if code not in (None, 0, -signal.SIGKILL):  # SIGKILL: crashed on purpose
            tail = self.log_path.read_text(errors="replace")[-4000:]
            raise NodeError(
                f"node {self.node_id} did not stop cleanly (exit code {code}); its log "
                f"ends:\n{tail}"
            )

    def crash(self, *, lose_unflushed: bool, timeout_s: float) -> None:
        if lose_unflushed:
            raise NodeError(
                "a child process's unflushed writes survive its kill (they are in the "
                "kernel's page cache): losing them needs an in-process node"
            )
        self._kill()

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._paused = False
        self._close()

    def _close(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()

    def pause(self) -> None:
        if self.is_running and not self._paused:
            assert self.process is not None
            self.process.send_signal(signal.SIGSTOP)
            self._paused = True

    def resume(self) -> None:
        if self.is_running and self._paused:
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
        self._paused = False
