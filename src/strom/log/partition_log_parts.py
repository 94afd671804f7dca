"""Two parts of ``PartitionLog`` kept apart to keep it readable: compaction (plan,
build elsewhere, swap) and the queries of its transactions. Mixins: they hold no state
of their own and work on the attributes ``PartitionLog`` declares."""

from __future__ import annotations

from bisect import bisect_right

from strom.log.cleaner import Cleanability, CleaningPlan, CleaningResult
from strom.log.cleaner_checkpoint import CleanerCheckpoint
from strom.log.cleaner_state import CleanerState
from strom.log.cleaner_swap import Step, no_step
from strom.log.config import LogConfig
from strom.log.durability import DurabilityTracker
from strom.log.producer_state import ProducerStateManager
from strom.log.segment import Segment
from strom.log.transactions import AbortedTxn, PartitionTxns
from strom.log.txn_index import overlapping_in

__all__ = ["DEFAULT_MAP_BUDGET_BYTES", "LogCompaction", "LogTransactions"]

DEFAULT_MAP_BUDGET_BYTES = 128 * 1024 * 1024


class LogCompaction:
    """Compaction of a ``PartitionLog``."""

    # Transitions: cleaning_plan -> (swap_cleaned | abandon_cleaning), see CleanerState.
    __slots__ = ()
    _bases: list[int]
    _cleaner: CleanerState
    _closed: bool
    _config: LogConfig
    _durability: DurabilityTracker
    _producers: ProducerStateManager
    _segments: list[Segment]
    _txns: PartitionTxns

    def _check_open(self) -> None:
        raise NotImplementedError

    def _cleanable_limit(self, max_offset: int | None) -> int:
        """``max_offset`` (default: the log end), and never past a transaction the log
        has open: the cleaner must know how every transaction it touches ended."""
        limit = self._segments[-1].next_offset if max_offset is None else max_offset
        return min([limit, *self._txns.open_transactions().values()])

    @property
    def cleaner_checkpoint(self) -> CleanerCheckpoint:
        return self._cleaner.checkpoint

    def cleanability(self, now_ms: int, *, max_offset: int | None = None) -> Cleanability | None:
        """How dirty the log is below ``max_offset`` (default: the log end; the last stable
        offset is the right one) and whether a cleaning pass is due; None unless
        cleanup.policy has "compact"."""
        self._check_open()
        limit = self._cleanable_limit(max_offset)
        return self._cleaner.assess(self._segments, self._config, now_ms, limit)

    def cleaning_plan(
        self,
        now_ms: int,
        *,
        max_offset: int | None = None,
        map_budget_bytes: int = DEFAULT_MAP_BUDGET_BYTES,
    ) -> CleaningPlan | None:
        """A pass over the cleanable range, due or not; None when there is nothing to
        clean or a pass is outstanding. Hand it to ``build_cleaned`` (any thread), then
        its result to ``swap_cleaned`` - or to ``abandon_cleaning``."""
        self._check_open()
        limit = self._cleanable_limit(max_offset)
        return self._cleaner.plan(
            self._segments,
            self._config,
            self._producers.last_batch_offsets(),
            now_ms=now_ms,
            max_offset=limit,
            map_budget_bytes=map_budget_bytes,
        )

    def abandon_cleaning(self, plan: CleaningPlan, result: CleaningResult | None = None) -> None:
        """Forget a pass that failed or will not be swapped in (removing its files)."""
        self._cleaner.abandon(plan, result)

    def swap_cleaned(self, result: CleaningResult, *, now_ms: int, step: Step = no_step) -> bool:
        """Put a built pass's cleaned segments in place of the old ones (see
        ``cleaner_swap``). Returns False, discarding the work, when the planned segments
        are no longer exactly the log's. ReadResults from before become invalid."""
        swapped = self._cleaner.swap(
            result,
            self._segments,
            self._config,
            self._durability,
            now_ms=now_ms,
            closed=self._closed,
            step=step,
        )
        self._bases[:] = [s.base_offset for s in self._segments]
        return swapped


class LogTransactions:
    """The transactions of a ``PartitionLog``, as readers ask about them."""

    # Transitions: none of its own; the log changes ``_txns`` as it appends and truncates.
    __slots__ = ()
    _bases: list[int]
    _segments: list[Segment]
    _txns: PartitionTxns

    def _check_open(self) -> None:
        raise NotImplementedError

    @property
    def transactions(self) -> PartitionTxns:
        """Open and unreplicated transactions: read it, change it only through this log."""
        return self._txns

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget ended transactions whose markers are below ``high_watermark``."""
        self._txns.on_high_watermark(high_watermark)

    def last_stable_offset(self, high_watermark: int) -> int:
        """Where read_committed reads stop; ended transactions whose markers are below
        ``high_watermark`` are forgotten first."""
        if self._txns.idle:
            return high_watermark
        self._txns.on_high_watermark(high_watermark)
        return self._txns.last_stable_offset(high_watermark)

    def open_transactions(self) -> dict[int, int]:
        return self._txns.open_transactions()

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [fetch_offset, upper_bound)."""
        self._check_open()
        i = max(0, bisect_right(self._bases, fetch_offset) - 1)
        return overlapping_in((s.txn_index for s in self._segments[i:]), fetch_offset, upper_bound)
