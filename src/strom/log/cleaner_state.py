"""A partition log's side of compaction: its checkpoint, the pass in flight, the swap.

Owned by the ``PartitionLog`` (and so by the log's owner task); ``build_cleaned`` runs
elsewhere between ``plan`` and ``swap``. Any change to the log's sealed segments
(retention, truncation, a swap) bumps ``generation``; a pass planned before such a
change is discarded at ``swap`` instead of being swapped in.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from strom.log.cleaner import Cleanability, CleaningPlan, CleaningResult, assess, make_plan
from strom.log.cleaner_checkpoint import read_cleaner_checkpoint, write_cleaner_checkpoint
from strom.log.cleaner_swap import (
    Step,
    apply_swap,
    commit_swap,
    discard_cleaned,
    open_cleaned_segments,
)
from strom.log.config import LogConfig
from strom.log.durability import DurabilityTracker
from strom.log.files import snapshot_path
from strom.log.segment import Segment
from strom.log.snapshots import snapshot_offsets

__all__ = ["CleanerState"]


class CleanerState:
    """Checkpoint and in-flight pass of one log."""

    # Transitions: idle -> plan() -> planned -> swap() | abandon() -> idle.
    # A swap that fails after its commit point -> failed: no more passes (and no
    # retention, see PartitionLog.delete_old_segments) until the log is reopened,
    # which finishes the swap on disk.
    __slots__ = ("_plan", "checkpoint", "directory", "failed", "generation")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.checkpoint = read_cleaner_checkpoint(directory)
        self.failed = False
        self.generation = 0
        self._plan: CleaningPlan | None = None

    def segments_changed(self) -> None:
        self.generation += 1

    def truncated(self, log_end_offset: int) -> None:
        self.generation += 1
        checkpoint = self.checkpoint.truncated(log_end_offset)
        if checkpoint != self.checkpoint:
            self.checkpoint = checkpoint
            write_cleaner_checkpoint(self.directory, checkpoint)

    def assess(
        self, segments: Sequence[Segment], config: LogConfig, now_ms: int, max_offset: int
    ) -> Cleanability | None:
        if not config.compact:
            return None
        return assess(segments, config, self.checkpoint, now_ms, max_offset)

    def plan(
        self,
        segments: Sequence[Segment],
        config: LogConfig,
        producer_last_offsets: frozenset[int],
        *,
        now_ms: int,
        max_offset: int,
        map_budget_bytes: int,
    ) -> CleaningPlan | None:
        cleanability = self.assess(segments, config, now_ms, max_offset)
        if cleanability is None or self._plan is not None or self.failed:
            return None
        self._plan = make_plan(
            self.directory,
            segments,
            config,
            self.checkpoint,
            cleanability,
            producer_last_offsets=producer_last_offsets,
            now_ms=now_ms,
            map_budget_bytes=map_budget_bytes,
            generation=self.generation,
        )
        return self._plan

    def abandon(self, plan: CleaningPlan, result: CleaningResult | None) -> None:
        plan.release()
        if result is not None:
            discard_cleaned(result)
        if self._plan is plan:
            self._plan = None

    def swap(
        self,
        result: CleaningResult,
        segments: list[Segment],
        config: LogConfig,
        durability: DurabilityTracker,
        *,
        now_ms: int,
        closed: bool,
        step: Step,
    ) -> bool:
        """Swap ``result`` in, replacing the first segments of ``segments`` in place."""
        plan = result.plan
        old = segments[: len(result.replaced)]
        if (
            closed
            or self._plan is not plan
            or plan.generation != self.generation
            or not config.compact
            or len(segments) <= len(old)
            or [(s.base_offset, s.size_bytes) for s in old]
            != [(p.base_offset, p.size_bytes) for p in plan.segments[: len(old)]]
        ):
            self.abandon(plan, result)
            return False
        self._plan = None
        new_bases = [c.base_offset for c in result.cleaned]
        if new_bases:
            step("cleaned files written")
            self.failed = True  # from the commit until the swap is complete in memory too
            self._delete_stale_snapshots(result.stale_snapshots_to)
            commit_swap(self.directory, result, step)
            no_txn_index = [c.base_offset for c in result.cleaned if not c.has_txn_index]
            apply_swap(
                self.directory, result.replaced, new_bases, result.checkpoint, step, no_txn_index
            )
            cleaned = open_cleaned_segments(self.directory, result.cleaned, config, now_ms)
            for segment in old:
                segment.close()
                durability.on_segment_removed(segment.base_offset)
            segments[: len(old)] = cleaned
            durability.advance_recovery_point(segments[-1].base_offset)
            self.generation += 1
            self.failed = False
        elif result.checkpoint != self.checkpoint:
            write_cleaner_checkpoint(self.directory, result.checkpoint)
        self.checkpoint = result.checkpoint
        return True

    def _delete_stale_snapshots(self, up_to: int) -> None:
        """Before the commit (made durable with it): the producer state snapshots at or
        below ``up_to`` may hold open a transaction whose marker the pass removed; a
        replay from the log start (or a later snapshot) rebuilds what they held."""
        if up_to < 0:
            return
        for offset in snapshot_offsets(self.directory):
            if offset <= up_to:
                snapshot_path(self.directory, offset).unlink(missing_ok=True)
