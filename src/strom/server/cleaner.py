"""The log cleaner: background compaction of the partitions whose topic compacts.

Every `log.cleaner.backoff.ms` the cleaner asks each compacted partition's log how dirty
it is (up to the high watermark: nothing a consumer cannot see yet is cleaned), takes the
dirtiest of those due - at most `log.cleaner.threads` at a time - and cleans them:

1. on the event loop, the log hands out a plan (a snapshot of its sealed segments);
2. in a worker thread, `build_cleaned` maps keys and writes the cleaned segments;
3. back on the event loop, the log swaps them in, unless retention, truncation or a
   topic deletion changed those segments meanwhile (then the work is dropped).

Step 2 never touches the log object, and steps 1 and 3 run on the loop that owns the
log, so the log needs no lock; a fetch reads its segment files synchronously on that same
loop, so no read can be in flight when a swap closes old segment files. At shutdown the
running builds are told to stop (they check between batches, then remove their files)
and are waited for, so no thread still reads a log while it closes. A build is pure
Python and holds the GIL while it runs; the event loop still gets its turns (every few
milliseconds), but a large pass slows produce and fetch down while it runs.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable

from strom.config import BrokerConfig
from strom.log.cleaner import CleaningAborted, CleaningPlan, CleaningResult
from strom.log.cleaner_build import build_cleaned
from strom.log.partition_log import PartitionLog
from strom.server.clock import now_ms
from strom.server.partition import Partition

log = logging.getLogger(__name__)

_MIN_MAP_BUDGET_BYTES = 1 << 20


async def run_cleaner(node_id: int, config: BrokerConfig, partitions: Iterable[Partition]) -> None:
    """The broker's cleaner task; returns at once when `log.cleaner.enable` is false."""
    if config.raw["log.cleaner.enable"] != "true":
        return
    await LogCleaner(node_id, config, partitions).run()


class LogCleaner:
    """Idle -> (round: assess every compacted log -> clean the dirtiest -> idle)* ->
    stopped (by cancellation, which stops and waits for the running builds).

    `config` is read once, when the cleaner is built; `partitions` (the partitions this
    broker holds) is iterated afresh every round."""

    def __init__(self, node_id: int, config: BrokerConfig, partitions: Iterable[Partition]) -> None:
        raw = config.raw
        self._partitions = partitions
        self._node_id = node_id
        self._backoff_s = int(raw["log.cleaner.backoff.ms"]) / 1000
        self._threads = max(1, int(raw["log.cleaner.threads"]))
        budget = int(raw["log.cleaner.dedupe.buffer.size"]) // self._threads
        self._map_budget_bytes = max(_MIN_MAP_BUDGET_BYTES, budget)
        self._stop = threading.Event()

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self._backoff_s)
                await self.clean_round()
        finally:
            self._stop.set()

    async def clean_round(self) -> int:
        """Clean the dirtiest partitions that are due; returns how many were swapped."""
        current_ms = now_ms()
        due: list[tuple[float, Partition]] = []
        for partition in self._partitions:
            if partition.log.closed or not partition.config.compact:
                continue
            state = partition.log.cleanability(current_ms, max_offset=partition.last_stable_offset)
            if state is not None and state.reason is not None:
                due.append((state.dirty_ratio, partition))
        due.sort(key=lambda item: item[0], reverse=True)
        chosen = [partition for _, partition in due[: self._threads]]
        if not chosen:
            return 0
        swapped = await asyncio.gather(*(self._clean(p) for p in chosen))
        return sum(swapped)

    async def _clean(self, partition: Partition) -> bool:
        log_ = partition.log
        label = f"{partition.topic}-{partition.index}"
        plan = log_.cleaning_plan(
            now_ms(),
            max_offset=partition.last_stable_offset,
            map_budget_bytes=self._map_budget_bytes,
        )
        if plan is None:
            return False
        started = time.perf_counter()

        def should_stop() -> bool:
            return self._stop.is_set() or log_.closed

        try:
            result = await self._build(log_, plan, should_stop)
        except Exception as exc:  # the build touched nothing of the log: drop it, go on
            log_.abandon_cleaning(plan)
            if should_stop():  # shutdown, or the partition was deleted meanwhile
                log.debug("[node %d] %s: cleaning stopped", self._node_id, label)
            elif isinstance(exc, CleaningAborted):
                log.warning("[node %d] %s: cleaning stopped: %s", self._node_id, label, exc)
            else:
                log.exception("[node %d] %s: cleaning failed", self._node_id, label)
            return False
        try:
            swapped = log_.swap_cleaned(result, now_ms=now_ms())
        except Exception:
            log.exception(
                "[node %d] %s: swapping cleaned segments in failed; the partition is "
                "neither cleaned nor trimmed by retention again until the broker restarts "
                "(which finishes the swap)",
                self._node_id,
                label,
            )
            return False
        if not swapped:
            log.debug("[node %d] %s: log changed while cleaning; retrying", self._node_id, label)
            return False
        log.info(
            "[node %d] %s: cleaned offsets %d..%d: %d segment(s) into %d, %d -> %d bytes, "
            "%d record(s) removed (%d tombstone(s)), %d marker(s) removed, %d key(s) mapped, "
            "in %.0f ms",
            self._node_id,
            label,
            plan.segments[0].base_offset,
            result.map_end,
            len(result.replaced),
            len(result.cleaned),
            result.bytes_before,
            result.bytes_after,
            result.records_removed,
            result.tombstones_removed,
            result.markers_removed,
            result.keys,
            (time.perf_counter() - started) * 1000,
        )
        return True

    async def _build(
        self, log_: PartitionLog, plan: CleaningPlan, should_stop: Callable[[], bool]
    ) -> CleaningResult:
        """`build_cleaned` in a worker thread. Cancelled, it stops the build and waits
        for the thread to finish before passing the cancellation on."""
        task = asyncio.ensure_future(asyncio.to_thread(build_cleaned, plan, should_stop))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._stop.set()
            await asyncio.wait([task])
            done = not task.cancelled() and task.exception() is None
            log_.abandon_cleaning(plan, task.result() if done else None)
            raise
