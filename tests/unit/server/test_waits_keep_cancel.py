"""Timed waits that keep a cancel: a task cancelled in the very turn its wait ends is
cancelled, not resumed (Python 3.11's asyncio.wait_for dropped such a cancel, bpo-42130,
and a node's stop then waited out the whole timeout), and a wait that times out still
cancels the future it waited on, so the partition drops it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from server_harness import batch, fetch_request, image_of, node, produce_request, run, turns

from strom.raft.messages import Entry
from strom.server.handlers.fetch import handle_fetch
from strom.server.handlers.produce import handle_produce
from strom.server.metadata_state import MetadataState


async def cancelled_as_it_ends(wait: Coroutine[Any, Any, Any], end: Callable[[], None]) -> bool:
    """Start `wait`, then in one turn call `end()` (which ends the wait) and cancel it:
    whether the task is cancelled a few turns later (not still waiting, not returned)."""
    task = asyncio.create_task(wait)
    await turns()
    assert not task.done()
    end()
    task.cancel()
    await turns(4)
    return task.cancelled()


def test_an_acks_all_wait_cancelled_as_the_high_watermark_passes_is_cancelled(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    partition = at.partition()
    run(handle_produce(at.produce, produce_request(batch(b"a"), acks=1)))

    async def scenario() -> bool:
        def passed() -> None:
            (_, future), *_ = partition.hw_waiters
            future.set_result(None)

        return await cancelled_as_it_ends(partition.committed(1, 60), passed)

    assert run(scenario())
    at.close()


def test_an_acks_all_wait_that_times_out_cancels_its_waiter(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    partition = at.partition()
    run(handle_produce(at.produce, produce_request(batch(b"a"), acks=1)))

    async def scenario() -> bool:
        with pytest.raises(TimeoutError):
            await partition.committed(1, 0)
        ((_, future),) = partition.hw_waiters
        return future.cancelled()  # the next release drops it

    assert run(scenario())
    at.close()


def test_a_fetch_long_poll_cancelled_as_data_arrives_is_cancelled(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    partition = at.partition()

    async def scenario() -> bool:
        polling = handle_fetch(at.fetch, fetch_request(0, max_wait_ms=60_000))
        return await cancelled_as_it_ends(polling, partition.wake_fetchers)

    assert run(scenario())
    assert not partition.waiters
    at.close()


def test_a_metadata_wait_cancelled_as_the_offset_arrives_is_cancelled() -> None:
    state = MetadataState(1)

    async def scenario() -> bool:
        def arrived() -> None:
            state.apply([Entry(index=1, term=1, data=b"")])

        return await cancelled_as_it_ends(state.wait_for(1, 60), arrived)

    assert run(scenario())
