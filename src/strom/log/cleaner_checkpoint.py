"""What the cleaner has done to one partition: ``cleaner-offset-checkpoint``.

The file (JSON, written atomically and fsynced) holds:

* ``cleaned_offset``: every offset below it has been through at least one cleaning
  pass; the log from there on is the dirty part;
* ``passes``: ``[end offset, time ms]`` of the recent passes that moved
  ``cleaned_offset`` forward, in increasing order. The pass at index i first cleaned
  the offsets from the previous entry's end to its own end. When a tombstone was first
  cleaned is looked up here (see ``first_cleaned_ms``). At most ``MAX_PASSES`` are kept:
  the two oldest are merged into the later one, which only makes tombstones that old
  live longer, never shorter;
* ``tombstones_since_ms``: the earliest first-cleaning time of a tombstone still in the
  cleaned part, or the time a kept marker of a transaction without batches got its
  delete horizon (the horizon minus ``delete.retention.ms``); -1 if none. So the
  cleaner knows when a pass would remove one even if nothing new was written.

A missing or unreadable file means nothing is cleaned: the next pass treats the whole
log as dirty, which is correct, only slower, and keeps every tombstone for a full
``delete.retention.ms`` from then on.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path

from strom.durable_files import replace_file

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "MAX_PASSES",
    "CleanerCheckpoint",
    "read_cleaner_checkpoint",
    "write_cleaner_checkpoint",
]

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
MAX_PASSES = 32
_VERSION = 1


@dataclass(frozen=True, slots=True)
class CleanerCheckpoint:
    cleaned_offset: int = 0
    passes: tuple[tuple[int, int], ...] = ()
    tombstones_since_ms: int = -1

    def first_cleaned_ms(self, offset: int, default_ms: int) -> int:
        """When ``offset`` was first cleaned; ``default_ms`` if it never was (or the
        record of it is gone)."""
        i = bisect_right([end for end, _ in self.passes], offset)
        if i == len(self.passes) or offset >= self.cleaned_offset:
            return default_ms
        return self.passes[i][1]

    def after_pass(
        self, cleaned_offset: int, now_ms: int, tombstones_since_ms: int
    ) -> CleanerCheckpoint:
        passes = list(self.passes)
        if cleaned_offset > self.cleaned_offset:
            passes.append((cleaned_offset, now_ms))
        while len(passes) > MAX_PASSES:
            passes.pop(0)  # its offsets now count as first cleaned by the next, later pass
        return CleanerCheckpoint(
            max(cleaned_offset, self.cleaned_offset), tuple(passes), tombstones_since_ms
        )

    def truncated(self, log_end_offset: int) -> CleanerCheckpoint:
        """After the log was cut at ``log_end_offset``: nothing past it is cleaned."""
        if self.cleaned_offset <= log_end_offset:
            return self
        kept = [(end, ms) for end, ms in self.passes if end < log_end_offset]
        cut = [ms for end, ms in self.passes if end >= log_end_offset]
        if cut:
            kept.append((log_end_offset, cut[0]))
        return CleanerCheckpoint(log_end_offset, tuple(kept), self.tombstones_since_ms)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "version": _VERSION,
                "cleaned_offset": self.cleaned_offset,
                "passes": [list(p) for p in self.passes],
                "tombstones_since_ms": self.tombstones_since_ms,
            }
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> CleanerCheckpoint:
        """Raises ValueError when ``data`` is not a checkpoint."""
        try:
            obj = json.loads(data)
            if obj["version"] != _VERSION:
                raise ValueError(f"unknown version {obj['version']}")
            passes = tuple((int(end), int(ms)) for end, ms in obj["passes"])
            checkpoint = cls(int(obj["cleaned_offset"]), passes, int(obj["tombstones_since_ms"]))
        except (KeyError, TypeError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a cleaner checkpoint: {exc}") from exc
        ends = [end for end, _ in passes]
        if ends != sorted(set(ends)) or checkpoint.cleaned_offset < 0:
            raise ValueError("cleaner checkpoint passes are not increasing")
        return checkpoint


def read_cleaner_checkpoint(directory: Path) -> CleanerCheckpoint:
    """The stored checkpoint; an empty one (nothing cleaned) if missing or unreadable."""
    try:
        return CleanerCheckpoint.from_bytes((directory / CLEANER_CHECKPOINT_FILE).read_bytes())
    except (OSError, ValueError):
        return CleanerCheckpoint()


def write_cleaner_checkpoint(directory: Path, checkpoint: CleanerCheckpoint) -> None:
    replace_file(directory / CLEANER_CHECKPOINT_FILE, checkpoint.to_bytes(), sync_dir=False)
