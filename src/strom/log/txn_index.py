"""A segment's `.txnindex` file: the aborted transactions whose ABORT marker it holds.

Entries are Kafka's (``transactions.encode_aborted``), in marker order. The file is
created with its first entry and removed when a truncation leaves it none, so most
segments have none. It is appended to without fsync, like the other indexes: it is
fsynced with its segment when the segment is rolled (or the log closed), and rebuilt
from the log whenever its segment is checked batch by batch at open; a torn or damaged
file gets its segment checked so.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from strom.log.transactions import (
    ABORTED_TXN_SIZE,
    AbortedTxn,
    TxnIndexError,
    decode_txn_index,
    encode_aborted,
)

__all__ = ["TXN_INDEX_SUFFIX", "TxnIndexFile"]

TXN_INDEX_SUFFIX = ".txnindex"
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)


class TxnIndexFile:
    """The aborted transactions of one segment, in memory and in its file."""

    # Transitions: created (nothing read) -> loaded on first use -> (append | replace |
    #   truncate_to)* -> closed. The file exists exactly while there are entries (or
    #   until a load of a file some other code left behind).
    __slots__ = ("_entries", "_fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._entries: list[AbortedTxn] | None = None
        self._fd = -1

    @property
    def fd(self) -> int:
        """The open file's descriptor, -1 while none is open."""
        return self._fd

    def load(self) -> str | None:
        """Read the file (if any); returns a problem when it cannot be trusted (then no
        entry is kept) or holds a torn last entry (then it is cut from the file). Either
        way its segment's batches must be checked and the index rebuilt, as Kafka's
        sanity check asks."""
        self._entries = []
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            self._entries = decode_txn_index(data)
        except TxnIndexError as exc:
            return f"transaction index {exc}"
        whole = len(data) - len(data) % ABORTED_TXN_SIZE
        if whole != len(data):
            os.truncate(self.path, whole)
            return f"transaction index size {len(data)} is not a multiple of {ABORTED_TXN_SIZE}"
        return None

    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self.load()
        assert self._entries is not None
        return self._entries

    def append(self, entry: AbortedTxn) -> bool:
        """Add the entry of an ABORT marker; True when this created the file."""
        entries = self.entries()
        created = self._fd < 0 and not self.path.exists()
        if self._fd < 0:
            self._fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        os.write(self._fd, encode_aborted([entry]))
        entries.append(entry)
        return created

    def replace(self, entries: Sequence[AbortedTxn]) -> None:
        """Rewrite the file with exactly these entries (none: no file)."""
        self.close()
        self._entries = list(entries)
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        self._fd = os.open(self.path, _OPEN_FLAGS, 0o644)
        os.ftruncate(self._fd, 0)
        os.write(self._fd, encode_aborted(entries))

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after `offset` (fsynced)."""
        entries = self.entries()
        kept = [entry for entry in entries if entry.last_offset < offset]
        if len(kept) != len(entries):
            self.replace(kept)
            self.sync()

    def sync(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


def overlapping_in(
    indexes: Iterable[TxnIndexFile], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions with records in [fetch_offset, upper_bound_offset), from
    the indexes of the segment holding `fetch_offset` and those after it. As Kafka does,
    the search stops at the first entry whose last stable offset reaches the upper
    bound: no transaction aborted later can have begun below it."""
    found: list[AbortedTxn] = []
    for index in indexes:
        for entry in index.entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found
    return found
