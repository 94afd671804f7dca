"""Log compaction: which part of a log to clean, and what a cleaning pass decides.

A pass has three steps, split so that the expensive one can run in a worker thread:

1. ``assess`` and ``make_plan`` run on the log's owner. The cleanable range is the
   sealed segments from the log start up to the first uncleanable offset: the active
   segment's base, the first segment reaching past ``max_offset`` (the last stable
   offset) and the first dirty segment newer than ``min.compaction.lag.ms``. Its dirty part
   starts at the checkpoint's ``cleaned_offset``. The plan snapshots the segments
   (duplicated descriptors, sizes) and what the pass needs to decide, nothing more.
2. ``cleaner_build.build_cleaned`` (any thread; it touches no object of the log) maps
   each key of the dirty part to its latest offset, then copies every planned segment
   into ``<base>.log.cleaned`` (plus indexes), keeping a record unless a later record of
   its key exists in the mapped range, it is a tombstone past its delete horizon or it
   belongs to an aborted transaction, and a marker unless its transaction is gone and
   its delete horizon has passed.
   Consecutive segments are merged into one while their original sizes fit
   ``segment.bytes`` and their offsets fit the indexes' 32-bit relative offsets.
3. The owner swaps the cleaned segments in (``cleaner_swap``), after checking that the
   planned segments are still exactly those of the log; otherwise the work is dropped.

What survives, for a record at offset o with key k, cleaned in a pass over the mapped
dirty range [dirty_start, map_end):

* o >= map_end (past what was mapped): kept, untouched;
* a record of an aborted transaction: dropped (such records are never mapped, so they
  never remove an older value of their key);
* a later record of k in the mapped range (plain, or of a committed transaction): dropped;
* a tombstone (null value) first cleaned by this pass (o >= dirty_start): kept;
* an older tombstone: dropped once ``now >= first_cleaned_ms(o) + delete.retention.ms``
  (the delete horizon: ``delete.retention.ms`` after the pass that removed the older
  records of its key), kept until then;
* a record without a key (written before the topic was compacted): kept.

Records of committed transactions are cleaned as any other. The cleanable range ends
below the last stable offset (``max_offset``, and the first offset of any transaction
the log has open), so every transaction with a batch in it has ended: the aborted ones
are the `.txnindex` entries of the log's segments (``cleaner_txns``).

A marker (COMMIT or ABORT control batch) stays while a batch of its transaction does.
The first pass that finds its transaction without a batch stamps a delete horizon on
it, ``now + delete.retention.ms``, the way Kafka does (KIP-534: attribute bit 6, the
horizon in the base timestamp); the first pass past the horizon removes it - unless it
is its producer's last batch in the log, which carries the producer's epoch and
coordinator epoch for a replay of the log. Since a producer-state snapshot taken
between the transaction's first batch and its marker holds the transaction as open, a
pass that removes a marker deletes the snapshots at or below it before its swap.

A cleaned segment's `.txnindex` keeps the entries of the aborted transactions that
still have a batch in the log (as Kafka's does, and as a replay of the cleaned log
rebuilds it); the others have no record left to hide.

A batch whose records all go is dropped, except the last batch of a producer, which
stays as an empty batch (same offsets, producer id, epoch and sequences, no records) so
that producers' state can be rebuilt from the log (its transaction keeps its marker),
and the last batch of a cleaned segment, which stays as a placeholder (its offsets, no
producer, not transactional) so that every segment ends where the next begins. Batches
that lose no record are copied byte for byte.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from strom.log.cleaner_checkpoint import CleanerCheckpoint
from strom.log.config import LogConfig
from strom.log.segment import (
    LOG_SUFFIX,
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    Segment,
    segment_path,
)
from strom.log.transactions import AbortedTxn

__all__ = [
    "CLEANED_SUFFIX",
    "MAX_RELATIVE_OFFSET",
    "Cleanability",
    "CleanedSegment",
    "CleaningAborted",
    "CleaningPlan",
    "CleaningResult",
    "PlannedSegment",
    "assess",
    "cleaned_path",
    "make_plan",
]

CLEANED_SUFFIX = ".cleaned"
MAX_RELATIVE_OFFSET = 2**31 - 1


class CleaningAborted(Exception):
    """The pass was stopped (shutdown, the log closed) or found data it cannot clean."""


def cleaned_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return segment_path(directory, base_offset, suffix + CLEANED_SUFFIX)


# ---------------------------------------------------------------------------- assessing


@dataclass(frozen=True, slots=True)
class Cleanability:
    """How dirty a compacted log is, and whether a pass is due (``reason``)."""

    clean_bytes: int
    dirty_bytes: int
    dirty_start: int
    end_offset: int
    """First uncleanable offset: nothing at or after it is touched."""
    reason: str | None

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _first_uncleanable(
    segments: Sequence[Segment], config: LogConfig, dirty_from: int, now_ms: int, max_offset: int
) -> int:
    end = segments[-1].base_offset
    for segment in segments[:-1]:
        if segment.next_offset > max_offset:
            return min(end, segment.base_offset)
        if (
            config.min_compaction_lag_ms > 0
            and segment.next_offset > dirty_from
            and segment.largest_timestamp > now_ms - config.min_compaction_lag_ms
        ):
            return min(end, segment.base_offset)
    return end


def assess(
    segments: Sequence[Segment],
    config: LogConfig,
    checkpoint: CleanerCheckpoint,
    now_ms: int,
    max_offset: int,
) -> Cleanability:
    """Clean and dirty bytes of the cleanable range and whether a pass is due: the dirty
    ratio reached ``min.cleanable.dirty.ratio``, dirty data is older than
    ``max.compaction.lag.ms``, or a kept tombstone or marker has passed its delete
    horizon."""
    start = segments[0].base_offset
    dirty_from = max(checkpoint.cleaned_offset, start)
    end = _first_uncleanable(segments, config, dirty_from, now_ms, max_offset)
    dirty_start = min(dirty_from, end)
    clean = dirty = 0
    first_dirty_ts = -1
    for segment in segments:
        if segment.base_offset >= end:
            break
        if segment.next_offset <= dirty_start:
            clean += segment.size_bytes
            continue
        position = 0
        if segment.base_offset < dirty_start:
            found = segment.find_batch(dirty_start)
            position = found[0] if found is not None else segment.size_bytes
        clean += position
        dirty += segment.size_bytes - position
        if first_dirty_ts < 0 and position < segment.size_bytes:
            header = segment.read_header(position)
            first_dirty_ts = header.max_timestamp if header is not None else -1
    result = Cleanability(clean, dirty, dirty_start, end, None)
    reason = None
    if dirty and result.dirty_ratio >= config.min_cleanable_dirty_ratio:
        reason = f"dirty ratio {result.dirty_ratio:.2f}"
    elif dirty and first_dirty_ts >= 0 and now_ms - first_dirty_ts > config.max_compaction_lag_ms:
        reason = "dirty data older than max.compaction.lag.ms"
    elif (
        end > start
        and checkpoint.tombstones_since_ms >= 0
        and now_ms >= checkpoint.tombstones_since_ms + config.delete_retention_ms
    ):
        reason = "tombstones or markers past delete.retention.ms"
    if reason is None:
        return result
    return Cleanability(clean, dirty, dirty_start, end, reason)


# ---------------------------------------------------------------------------- planning


@dataclass(frozen=True, slots=True)
class PlannedSegment:
    base_offset: int
    next_offset: int
    size_bytes: int


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    """A snapshot of what one pass cleans. Owns ``fds`` (duplicated descriptors of the
    planned segments' log files) until ``release``; ``build_cleaned`` releases them."""

    directory: Path
    segments: tuple[PlannedSegment, ...]
    dirty_start: int
    end_offset: int
    checkpoint: CleanerCheckpoint
    producer_last_offsets: frozenset[int]
    """Last offsets of each producer's last data batch (kept even if emptied) and of its
    last marker when that is its last word in the log (kept whole)."""
    aborted: tuple[AbortedTxn, ...]
    """The `.txnindex` entries of every segment (not only the planned ones) whose
    transaction began below ``end_offset``."""
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    index_interval_bytes: int
    map_budget_bytes: int
    generation: int
    fds: list[int] = field(default_factory=list, compare=False)

    def release(self) -> None:
        while self.fds:
            os.close(self.fds.pop())


def make_plan(
    directory: Path,
    segments: Sequence[Segment],
    config: LogConfig,
    checkpoint: CleanerCheckpoint,
    cleanability: Cleanability,
    *,
    producer_last_offsets: frozenset[int],
    now_ms: int,
    map_budget_bytes: int,
    generation: int,
) -> CleaningPlan | None:
    """The plan for ``cleanability``'s range, or None if it holds no segment."""
    planned = [s for s in segments[:-1] if s.base_offset < cleanability.end_offset]
    if not planned or any(s.is_empty for s in planned):
        return None
    plan = CleaningPlan(
        directory=directory,
        segments=tuple(PlannedSegment(s.base_offset, s.next_offset, s.size_bytes) for s in planned),
        dirty_start=cleanability.dirty_start,
        end_offset=cleanability.end_offset,
        checkpoint=checkpoint,
        producer_last_offsets=producer_last_offsets,
        aborted=tuple(
            entry
            for s in segments
            for entry in s.txn_index.entries()
            if entry.first_offset < cleanability.end_offset
        ),
        now_ms=now_ms,
        delete_retention_ms=config.delete_retention_ms,
        segment_bytes=config.segment_bytes,
        index_interval_bytes=config.index_interval_bytes,
        map_budget_bytes=map_budget_bytes,
        generation=generation,
    )
    try:
        for segment in planned:
            plan.fds.append(os.dup(segment.fd))
    except BaseException:
        plan.release()
        raise
    return plan


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    base_offset: int
    next_offset: int
    """Where the next segment starts (its last batch ends there)."""
    replaces: tuple[int, ...]
    """Base offsets of the old segments it replaces (its own base first)."""
    size_bytes: int
    has_txn_index: bool = False
    """Whether it has a `.txnindex` (aborted transactions keep batches in it)."""


@dataclass(frozen=True, slots=True)
class CleaningResult:
    plan: CleaningPlan
    cleaned: tuple[CleanedSegment, ...]
    checkpoint: CleanerCheckpoint
    """The checkpoint to store once the cleaned segments are in place."""
    map_end: int
    keys: int
    bytes_before: int
    bytes_after: int
    records_removed: int
    """Records removed: shadowed, of aborted transactions, tombstones past their horizon."""
    tombstones_removed: int
    markers_removed: int = 0
    stale_snapshots_to: int = -1
    """Producer state snapshots at or below this offset are to be deleted before the swap:
    they may hold a transaction open whose marker the pass removed (-1: none)."""

    @property
    def replaced(self) -> tuple[int, ...]:
        return tuple(base for c in self.cleaned for base in c.replaces)

    def files(self) -> list[Path]:
        return [
            cleaned_path(self.plan.directory, c.base_offset, suffix)
            for c in self.cleaned
            for suffix in (LOG_SUFFIX, OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX)
            + ((TXN_INDEX_SUFFIX,) if c.has_txn_index else ())
        ]
