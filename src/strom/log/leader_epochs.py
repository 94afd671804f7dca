"""The leader epoch cache of one partition: ``leader-epoch-checkpoint``.

For every leader epoch that wrote to the log, the offset where it started: a list of
``(leader_epoch, start_offset)`` entries, strictly increasing in both. A follower asks
its leader for the end of an epoch (OffsetForLeaderEpoch, answered by ``end_offset_for``)
to find where their logs diverge and how far to truncate.

The file is Kafka's checkpoint text (``0``, the entry count, then ``<epoch> <offset>``
per line; see ``offset_checkpoint``), replaced atomically and durably on every change.
``PartitionLog`` keeps this invariant: the file holds every epoch found in the log's
batches, because an epoch is recorded before the first batch carrying it is written.
Only entries at or past the log end can be stale after a crash (the batches they were
written for never made it to disk); ``open_leader_epochs`` drops them. A missing file
is rebuilt from the batch headers (a log written before strom kept the file).

Written by hand: Kafka's semantics on a short sorted list; nothing to reuse.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path

from strom.durable_files import sync_directory
from strom.log.offset_checkpoint import (
    CheckpointError,
    parse_int,
    read_checkpoint_file,
    write_checkpoint_file,
)
from strom.log.segment import Segment

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "LeaderEpochCache",
    "LeaderEpochs",
    "open_leader_epochs",
    "read_leader_epochs",
]

LEADER_EPOCH_CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochs:
    """``(leader_epoch, start_offset)`` entries in memory: the pure part of the cache,
    also what the replication simulation keeps for each simulated log."""

    # Transitions: empty or loaded -> (assign | truncate_from_end | truncate_from_start
    #   | clear)*; ``_changed`` is called after every call that changed the entries.
    __slots__ = ("_epochs", "_starts")

    def __init__(self, entries: Iterable[tuple[int, int]] = ()) -> None:
        """``entries`` must be in order (strictly increasing in both columns)."""
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for epoch, start_offset in entries:
            if epoch < 0 or start_offset < 0:
                raise ValueError(f"negative leader epoch entry ({epoch}, {start_offset})")
            if self._epochs and (epoch <= self._epochs[-1] or start_offset <= self._starts[-1]):
                raise ValueError(
                    f"leader epoch entry ({epoch}, {start_offset}) does not follow "
                    f"({self._epochs[-1]}, {self._starts[-1]})"
                )
            self._epochs.append(epoch)
            self._starts.append(start_offset)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self.entries)})"

    @property
    def latest_epoch(self) -> int:
        """The newest epoch; -1 when there is none."""
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    @property
    def entries(self) -> tuple[tuple[int, int], ...]:
        return tuple(zip(self._epochs, self._starts, strict=True))

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: ``(epoch, end offset)`` for ``requested_epoch``.

        The latest epoch ends at the log end. An older one ends where the first higher
        epoch starts, and the epoch returned is the largest one at or below the request
        (the request itself when the cache has none that low). (-1, -1) for epoch -1
        and for an epoch above every epoch known.
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and requested_epoch == self._epochs[-1]:
            return requested_epoch, log_end_offset
        higher = bisect_right(self._epochs, requested_epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor_epoch = self._epochs[higher - 1] if higher > 0 else requested_epoch
        return floor_epoch, self._starts[higher]

    # ------------------------------------------------------------------ changes

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset``.

        No-op unless ``epoch`` is newer than the latest. Entries starting at or after
        ``start_offset`` are dropped first, so both columns stay strictly increasing.
        """
        if self._remember(epoch, start_offset):
            self._changed()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries starting at or after ``end_offset`` (the log was cut there,
        or a follower learned that its epochs starting there never wrote anything its
        leader kept)."""
        cut = bisect_left(self._starts, end_offset)
        if cut < len(self._starts):
            del self._epochs[cut:], self._starts[cut:]
            self._changed()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at ``start_offset``: drop the entries wholly before it; the
        latest entry starting at or before it is kept, moved to start there."""
        kept = bisect_right(self._starts, start_offset) - 1
        if kept < 0 or (kept == 0 and self._starts[0] == start_offset):
            return
        del self._epochs[:kept], self._starts[:kept]
        self._starts[0] = start_offset
        self._changed()

    def clear(self) -> None:
        """Forget every entry."""
        self._epochs.clear()
        self._starts.clear()

    def _remember(self, epoch: int, start_offset: int) -> bool:
        """``assign`` without ``_changed``; True when the entries changed."""
        if epoch <= self.latest_epoch:
            return False
        if start_offset < 0:
            raise ValueError(f"leader epoch {epoch} cannot start at offset {start_offset}")
        cut = bisect_left(self._starts, start_offset)
        del self._epochs[cut:], self._starts[cut:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        return True

    def _changed(self) -> None:
        """Called after the entries changed; the cache persists them."""


class LeaderEpochCache(LeaderEpochs):
    """``LeaderEpochs`` of one partition, mirrored to ``path`` (``leader-epoch-checkpoint``
    in the partition directory): every call that changes the entries has replaced the file
    (fsynced, directory too) before it returns; ``clear`` removes the file instead."""

    __slots__ = ("path",)

    def __init__(self, directory: Path, entries: Iterable[tuple[int, int]] = ()) -> None:
        """A cache of ``directory``, not written yet; ``entries`` must be in order."""
        super().__init__(entries)
        self.path = directory / LEADER_EPOCH_CHECKPOINT_FILE

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {list(self.entries)})"

    def clear(self) -> None:
        """Forget every entry and remove the file (directory fsynced).

        With no file, the next open rebuilds the cache from whatever batches the log
        still has, so a crash in the middle of emptying the log cannot leave a cache
        that lacks an epoch of the batches left behind.
        """
        super().clear()
        try:
            self.path.unlink()
        except FileNotFoundError:
            return
        sync_directory(self.path.parent)

    def _changed(self) -> None:
        self._persist()

    def _persist(self) -> None:
        write_checkpoint_file(self.path, self.entries)


def _epoch_entry(fields: list[str]) -> tuple[int, int]:
    if len(fields) != 2:
        raise ValueError(f"expected 2 fields, found {len(fields)}")
    epoch, start_offset = parse_int(fields[0]), parse_int(fields[1])
    if epoch < 0 or start_offset < 0:
        raise ValueError("negative epoch or offset")
    return epoch, start_offset


def read_leader_epochs(directory: Path) -> LeaderEpochCache | None:
    """The cache stored in ``directory``; None when it has no such file.

    Raises CheckpointError, naming the file and line, when it is malformed (including
    entries out of order).
    """
    path = directory / LEADER_EPOCH_CHECKPOINT_FILE
    entries = read_checkpoint_file(path, _epoch_entry)
    if entries is None:
        return None
    for number, (previous, entry) in enumerate(pairwise(entries), start=4):
        if entry[0] <= previous[0] or entry[1] <= previous[1]:
            raise CheckpointError(
                path, number, f"entry {entry} does not follow {previous} in both columns"
            )
    return LeaderEpochCache(directory, entries)


def open_leader_epochs(directory: Path, segments: Sequence[Segment]) -> LeaderEpochCache:
    """The cache of a log being opened, clipped to the log's offsets.

    A missing file is rebuilt from the batch headers (the first offset of each new
    epoch) and written, unless the log is empty. A malformed one raises CheckpointError.
    """
    try:
        cache = read_leader_epochs(directory)
    except CheckpointError as exc:
        hint = f"{exc.problem} (remove the file to have it rebuilt from the log)"
        raise CheckpointError(exc.path, exc.line, hint) from exc
    if cache is None:
        cache = LeaderEpochCache(directory)
        for segment in segments:
            for _, header in segment.headers():
                cache._remember(header.partition_leader_epoch, header.base_offset)
        if any(not segment.is_empty for segment in segments):
            cache._persist()
    cache.truncate_from_end(segments[-1].next_offset)
    cache.truncate_from_start(segments[0].base_offset)
    return cache
