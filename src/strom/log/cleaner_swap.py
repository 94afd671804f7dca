"""Putting cleaned segments in place of the old ones, atomically across crashes.

The commit point is one small file, ``cleaner-swap`` (the manifest), naming the old
segments, the cleaned ones replacing them and the cleaner checkpoint to store:

1. ``build_cleaned`` wrote and fsynced every ``<base>.{log,index,timeindex,txnindex}.cleaned``
   file, then fsynced the directory. The swap deletes the producer state snapshots the
   pass made stale (see ``cleaner``). A crash now leaves only ``.cleaned`` files, which
   the next open removes: the log is as before the pass (less some snapshots, which a
   replay of the log makes up for).
2. The manifest is written to ``cleaner-swap.tmp``, fsynced, renamed into place, and
   the directory fsynced. From here on the pass is committed.
3. Each cleaned segment's files are renamed over the final names (indexes first, the
   log last; an old `.txnindex` at its base is deleted when the manifest says it has
   none), the old segments that no cleaned segment reuses the base of are deleted, the
   directory is fsynced, the cleaner checkpoint written (fsynced), the directory
   fsynced again, the manifest removed and the directory fsynced a last time.

Step 3 is idempotent: a ``.cleaned`` file still present means its rename has not
happened; a missing old file means its deletion has. ``PartitionLog.open`` therefore
finishes a committed swap by running step 3 again whenever it finds a manifest, before
the stray ``.cleaned`` files of an uncommitted pass are removed. After a crash at any
point the partition holds either all of the old segments or all of the cleaned ones.
The manifest is gone (durably) before the log changes again, so a stale one can never
be applied to later segments that happen to reuse a base offset.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from strom.durable_files import replace_file, sync_directory
from strom.log.cleaner import CleanedSegment, CleaningResult, cleaned_path
from strom.log.cleaner_checkpoint import CleanerCheckpoint, write_cleaner_checkpoint
from strom.log.config import LogConfig
from strom.log.recovery import load_segment, recover_segment
from strom.log.segment import (
    LOG_SUFFIX,
    OFFSET_INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    Segment,
    segment_path,
)

__all__ = [
    "SWAP_MANIFEST_FILE",
    "Step",
    "apply_swap",
    "commit_swap",
    "complete_interrupted_swap",
    "discard_cleaned",
    "no_step",
    "open_cleaned_segments",
]

SWAP_MANIFEST_FILE = "cleaner-swap"
_VERSION = 1

Step = Callable[[str], None]
"""Called after each step of a swap with the step's name (tests stop there)."""


def no_step(_name: str) -> None:
    """A ``Step`` that does nothing."""


def commit_swap(directory: Path, result: CleaningResult, step: Step = no_step) -> None:
    """Step 2: make the pass durable as a whole by writing its manifest."""
    manifest = {
        "version": _VERSION,
        "old": list(result.replaced),
        "new": [c.base_offset for c in result.cleaned],
        "no_txn_index": [c.base_offset for c in result.cleaned if not c.has_txn_index],
        "checkpoint": result.checkpoint.to_bytes().decode(),
    }
    replace_file(directory / SWAP_MANIFEST_FILE, json.dumps(manifest).encode(), sync_dir=False)
    step("manifest written")
    sync_directory(directory)
    step("manifest committed")


def apply_swap(
    directory: Path,
    old: Sequence[int],
    new: Sequence[int],
    checkpoint: CleanerCheckpoint,
    step: Step = no_step,
    no_txn_index: Collection[int] = (),
) -> None:
    """Step 3 (idempotent): rename the cleaned files in, delete the replaced ones (and
    the `.txnindex` of a reused base whose cleaned segment has none), store the
    checkpoint and remove the manifest."""
    for base in new:
        if base in no_txn_index:
            stale = segment_path(directory, base, TXN_INDEX_SUFFIX)
            if stale.exists():
                stale.unlink()
                step(f"deleted {stale.name}")
        for suffix in (OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
            cleaned = cleaned_path(directory, base, suffix)
            if cleaned.exists():
                os.replace(cleaned, segment_path(directory, base, suffix))
                step(f"renamed {cleaned.name}")
    reused = set(new)
    for base in old:
        if base in reused:
            continue
        for suffix in (LOG_SUFFIX, OFFSET_INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(directory, base, suffix)
            if path.exists():
                path.unlink()
                step(f"deleted {path.name}")
    sync_directory(directory)
    step("segments synced")
    write_cleaner_checkpoint(directory, checkpoint)
    sync_directory(directory)
    step("checkpoint written")
    (directory / SWAP_MANIFEST_FILE).unlink(missing_ok=True)
    sync_directory(directory)
    step("manifest removed")


def complete_interrupted_swap(directory: Path) -> tuple[int, ...] | None:
    """At open: finish a committed swap. Returns the cleaned segments' bases, or None
    when there was no manifest. An unreadable manifest (it is only ever renamed into
    place whole, so this means damage) is removed and reported as ``()``."""
    path = directory / SWAP_MANIFEST_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        manifest = json.loads(data)
        if manifest["version"] != _VERSION:
            raise ValueError(f"unknown version {manifest['version']}")
        old = [int(base) for base in manifest["old"]]
        new = [int(base) for base in manifest["new"]]
        no_txn_index = {int(base) for base in manifest.get("no_txn_index", ())}
        checkpoint = CleanerCheckpoint.from_bytes(manifest["checkpoint"].encode())
    except (ValueError, KeyError, TypeError, AttributeError):
        path.unlink(missing_ok=True)
        sync_directory(directory)
        return ()
    apply_swap(directory, old, new, checkpoint, no_txn_index=no_txn_index)
    return tuple(new)


def discard_cleaned(result: CleaningResult) -> None:
    """Remove the files of a pass that will not be swapped in."""
    for path in result.files():
        path.unlink(missing_ok=True)


def open_cleaned_segments(
    directory: Path, cleaned: Sequence[CleanedSegment], config: LogConfig, now_ms: int
) -> list[Segment]:
    """Open swapped-in segments, loading them like a clean start does."""
    segments: list[Segment] = []
    try:
        for c in cleaned:
            segment = Segment(
                directory,
                c.base_offset,
                index_interval_bytes=config.index_interval_bytes,
                now_ms=now_ms,
            )
            segments.append(segment)
            problem = load_segment(segment, eager=False, gap_limit=c.next_offset)
            if problem is not None:  # pragma: no cover - would be a bug of the cleaner
                recover_segment(segment, c.next_offset)
                segment.sync()
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments
