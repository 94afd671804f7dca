"""Producer state snapshot files: ``<20-digit offset>.snapshot`` in the partition directory.

A snapshot at offset N holds the producer state after every batch below N. One is
written at each segment roll and at a clean close; the newest two are kept (minus those
below the log start, except the very newest). The transactions open at N come with it
(each producer's open transaction's first offset); replaying the batches after N
rebuilds the rest, and the `.txnindex` of every segment that was checked batch by batch
at open (whose index may be behind its log).
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Collection, Sequence
from pathlib import Path

from strom.durable_files import replace_file
from strom.log.files import SNAPSHOT_SUFFIX, snapshot_path
from strom.log.producer_state import ProducerStateManager, SnapshotError
from strom.log.segment import Segment
from strom.log.transactions import PartitionTxns
from strom.log.txn_tracking import marker_in, track_batch

__all__ = [
    "load_newest_snapshot",
    "prune_snapshots",
    "replay_producers",
    "restore_producer_state",
    "snapshot_offsets",
    "write_snapshot",
]

KEPT_SNAPSHOTS = 2


def snapshot_offsets(directory: Path) -> list[int]:
    offsets = []
    for name in os.listdir(directory):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            offsets.append(int(stem))
    return sorted(offsets)


def write_snapshot(
    directory: Path,
    producers: ProducerStateManager,
    offset: int,
    *,
    sync: bool,
    log_start_offset: int,
) -> None:
    replace_file(
        snapshot_path(directory, offset), producers.to_snapshot(offset), sync=sync, sync_dir=False
    )
    prune_snapshots(directory, log_start_offset)


def prune_snapshots(directory: Path, log_start_offset: int) -> None:
    offsets = snapshot_offsets(directory)
    for i, offset in enumerate(offsets):
        if i == len(offsets) - 1:
            break
        if i < len(offsets) - KEPT_SNAPSHOTS or offset < log_start_offset:
            snapshot_path(directory, offset).unlink(missing_ok=True)


def remove_snapshots_after(directory: Path, offset: int) -> list[str]:
    """Delete snapshots above ``offset`` (the log end after a truncation or recovery)."""
    removed = []
    for snapshot in snapshot_offsets(directory):
        if snapshot > offset:
            path = snapshot_path(directory, snapshot)
            path.unlink(missing_ok=True)
            removed.append(path.name)
    return removed


def load_newest_snapshot(
    directory: Path, producers: ProducerStateManager, up_to_offset: int
) -> tuple[int | None, list[str]]:
    """Load the newest readable snapshot at or below ``up_to_offset`` into ``producers``.

    Unreadable snapshots are deleted. Returns (its offset or None, names removed).
    """
    removed: list[str] = []
    for offset in reversed(snapshot_offsets(directory)):
        if offset > up_to_offset:
            continue
        path = snapshot_path(directory, offset)
        try:
            if producers.load_snapshot(path.read_bytes()) == offset:
                return offset, removed
        except (OSError, SnapshotError):
            pass
        producers.clear()
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return None, removed


def replay_producers(
    segments: Sequence[Segment],
    producers: ProducerStateManager,
    offset: int,
    txns: PartitionTxns | None = None,
    rebuild: Collection[int] = (),
) -> int:
    """Rebuild producer state (and `txns`) from the batches at and after ``offset``;
    the `.txnindex` of the segments whose base offset is in ``rebuild`` is written anew
    from them. Returns how many batches of producers were replayed."""
    if txns is None:
        txns = PartitionTxns()
    for segment in segments:
        if segment.base_offset in rebuild:
            segment.txn_index.replace([])
    if not segments or offset >= segments[-1].next_offset:
        return 0
    replayed = 0
    i = max(0, bisect_right([s.base_offset for s in segments], offset) - 1)
    found = segments[i].find_batch(offset)
    position = found[0] if found is not None else segments[i].size_bytes
    for segment in segments[i:]:
        for pos, header in segment.headers(position):
            if header.producer_id < 0:
                continue
            marker = None
            if header.is_control:
                marker = marker_in(segment.read_batch(pos, header.size_bytes), header)
            aborted = track_batch(
                producers, txns, header, header.base_offset, header.max_timestamp, marker
            )
            if aborted is not None and segment.base_offset in rebuild:
                segment.txn_index.append(aborted)
            replayed += 1
        position = 0
    return replayed


def restore_producer_state(
    directory: Path,
    producers: ProducerStateManager,
    segments: Sequence[Segment],
    txns: PartitionTxns | None = None,
    rebuild: Collection[int] = (),
) -> tuple[int | None, list[str], int]:
    """Producer state (and transactions) at a log's end: the newest snapshot at or below
    it - at or below the first segment of ``rebuild`` when there are any, whose
    `.txnindex` files are rebuilt - then the batch headers after that. Returns (the
    snapshot's offset or None, names of snapshot files removed, batches replayed)."""
    start, end = segments[0].base_offset, segments[-1].next_offset
    removed = remove_snapshots_after(directory, end)
    producers.clear()
    up_to = min([end, *rebuild])
    loaded, unreadable = load_newest_snapshot(directory, producers, up_to)
    if txns is not None:
        txns.restore(producers.open_transactions())
    replay_from = start if loaded is None else max(loaded, start)
    replayed = replay_producers(segments, producers, replay_from, txns, rebuild)
    return loaded, removed + unreadable, replayed
