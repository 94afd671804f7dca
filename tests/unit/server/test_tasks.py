"""TaskSet: a background task never ends unnoticed (no sockets, no sleeps)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from strom.config import load_config
from strom.server.broker import Broker
from strom.server.tasks import TaskSet


def test_a_task_ended_by_a_cancel_meant_for_someone_else_is_reported() -> None:
    failures: list[BaseException] = []

    async def scenario() -> None:
        tasks = TaskSet("test", on_failure=failures.append)
        shared: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def waits_on_shared() -> None:
            await asyncio.shield(shared)

        tasks.spawn(waits_on_shared(), "bystander")
        await asyncio.sleep(0)
        shared.cancel()  # someone else's cancel reaches the bystander as CancelledError
        for _ in range(3):
            await asyncio.sleep(0)

    asyncio.run(scenario())
    assert len(failures) == 1 and isinstance(failures[0], asyncio.CancelledError)
    assert "bystander" in str(failures[0])


def test_tasks_cancelled_by_their_owner_end_quietly() -> None:
    failures: list[BaseException] = []

    async def scenario() -> None:
        tasks = TaskSet("test", on_failure=failures.append)
        tasks.spawn(asyncio.Event().wait(), "waiting")
        await asyncio.sleep(0)
        await tasks.stop()

    asyncio.run(scenario())
    assert failures == []


def test_a_broker_whose_background_loop_ends_stops(tmp_path: Path) -> None:
    """The flusher ending on an fsync error, or the heartbeat loop ending, must stop the
    node: it cannot keep its promises without them."""
    broker = Broker(load_config(overrides=["node.id=1", f"log.dirs={tmp_path}"]))

    async def fsync_fails() -> None:
        raise OSError(5, "Input/output error")

    async def scenario() -> None:
        broker._background.spawn(fsync_fails(), "flusher")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert broker.fatal.is_set()
    assert "Input/output error" in broker.fatal_reason
