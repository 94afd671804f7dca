"""TaskSet: a background task never ends unnoticed (no sockets, no sleeps)."""

from __future__ import annotations

import asyncio

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
