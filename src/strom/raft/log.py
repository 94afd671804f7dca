"""The Raft log as the core holds it in memory, and what of it the shell still has to persist.

The log is a base (the latest snapshot's index and term, or 0/0 for the empty log) and the
consecutive entries after it. Besides the entries it tracks the commit index and the
bookkeeping behind `Ready`: how far entries have been handed to the shell
(`handed_index`), how far the shell confirmed them on disk (`persisted_index`), a
truncation the disk still has to make (`truncate_from`) and a received snapshot the shell
still has to save (`unsaved_snapshot`).
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.raft.messages import Entry, Snapshot


class RaftLog:
    """Entries after a snapshot base, plus commit and persistence bookkeeping.

    Legal changes:
        append          the leader adds an entry at the end
        follow          a follower takes a leader's AppendRequest (try_append, then
                        commit_to): a conflicting suffix is truncated first, never at
                        or below the commit index
        commit_to       the commit index only moves up
        compact         the shell snapshotted its applied state: the base moves up
        install         a follower takes a leader's snapshot: base moves up, entries
                        after it stay only if the log matched at the snapshot's index
        take_unpersisted / mark_persisted  a Ready was handed out / was persisted
    Invariants: base_index <= commit_index <= last_index (after install: commit = base);
    persisted_index <= handed_index <= last_index; base_index <= handed_index.
    """

    __slots__ = (
        "_base_index",
        "_base_term",
        "_entries",
        "commit_index",
        "handed_index",
        "persisted_index",
        "snapshot",
        "truncate_from",
        "unsaved_snapshot",
    )

    def __init__(self, snapshot: Snapshot | None, entries: Sequence[Entry]) -> None:
        self.snapshot = snapshot  # the latest snapshot (saved or received), sent to laggards
        self._base_index = snapshot.index if snapshot is not None else 0
        self._base_term = snapshot.term if snapshot is not None else 0
        self._entries: list[Entry] = list(entries)
        for offset, entry in enumerate(self._entries):
            if entry.index != self._base_index + 1 + offset:
                raise ValueError(f"entry {entry.index} out of sequence after {self._base_index}")
        self.commit_index = self._base_index
        self.handed_index = self.last_index  # everything restored is on disk already
        self.persisted_index = self.last_index
        self.truncate_from: int | None = None
        self.unsaved_snapshot: Snapshot | None = None

    @property
    def snapshot_index(self) -> int:
        return self._base_index

    @property
    def snapshot_term(self) -> int:
        return self._base_term

    @property
    def last_index(self) -> int:
        return self._base_index + len(self._entries)

    @property
    def last_term(self) -> int:
        return self._entries[-1].term if self._entries else self._base_term

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index`; None if compacted away or beyond the end."""
        if index == self._base_index:
            return self._base_term
        if self._base_index < index <= self.last_index:
            return self._entries[index - self._base_index - 1].term
        return None

    def _term_known(self, index: int) -> int:
        term = self.term_at(index)
        if term is None:
            raise IndexError(f"no term for index {index} in the log")
        return term

    def entries(self, first_index: int, last_index: int) -> tuple[Entry, ...]:
        """Entries first_index..last_index (inclusive), all of them in memory."""
        if first_index > last_index:
            return ()
        if first_index <= self._base_index or last_index > self.last_index:
            raise IndexError(f"entries {first_index}..{last_index} not in the log")
        offset = first_index - self._base_index - 1
        return tuple(self._entries[offset : offset + last_index - first_index + 1])

    def entries_for_append(self, first_index: int, max_bytes: int) -> tuple[Entry, ...]:
        """Entries from first_index on, at most max_bytes of data but at least one entry."""
        offset = first_index - self._base_index - 1
        end = offset
        size_bytes = 0
        while end < len(self._entries):
            size_bytes += len(self._entries[end].data)
            if size_bytes > max_bytes and end > offset:
                break
            end += 1
        return tuple(self._entries[offset:end])

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft §5.4.1: a log ending at (last_index, last_term) is at least as new as ours."""
        return (last_term, last_index) >= (self.last_term, self.last_index)

    def append(self, entry: Entry) -> None:
        if entry.index != self.last_index + 1:
            raise ValueError(f"entry {entry.index} does not follow {self.last_index}")
        self._entries.append(entry)

    def follow(
        self, prev_index: int, prev_term: int, entries: Sequence[Entry], leader_commit: int
    ) -> tuple[bool, int]:
        """A follower takes its leader's AppendRequest: (True, the index up to which its
        log now matches the leader's) or (False, where the leader should try next)."""
        if prev_index < self.commit_index:
            # Entries up to our commit index are in every later leader's log: skip them.
            skip = self.commit_index - prev_index
            if skip >= len(entries):
                return True, self.commit_index
            entries = entries[skip:]
            prev_index = self.commit_index
            prev_term = self._term_known(prev_index)
        if not self.try_append(prev_index, prev_term, entries):
            return False, self.conflict_hint(prev_index)
        match_index = prev_index + len(entries)
        self.commit_to(min(leader_commit, match_index))
        return True, match_index

    def try_append(self, prev_index: int, prev_term: int, entries: Sequence[Entry]) -> bool:
        """A follower's AppendRequest: False if the log does not match at prev_index.

        Entries already present with the same term are kept (a duplicate or stale request
        never shortens the log); the first conflicting entry and all after it are
        replaced."""
        if self.term_at(prev_index) != prev_term:
            return False
        for position, entry in enumerate(entries):
            term = self.term_at(entry.index)
            if term == entry.term:
                continue
            if term is not None:
                self._truncate(entry.index)
            self._entries.extend(entries[position:])
            break
        return True

    def conflict_hint(self, prev_index: int) -> int:
        """Where a leader should try next after we refused prev_index: our last index + 1,
        or the first index (above the commit index) of our term at prev_index."""
        if prev_index > self.last_index:
            return self.last_index + 1
        term = self.term_at(prev_index)
        floor = max(self.commit_index, self._base_index) + 1
        index = prev_index
        while index > floor and self.term_at(index - 1) == term:
            index -= 1
        return index

    def commit_to(self, index: int) -> bool:
        """Move the commit index up to `index`; True if it moved."""
        if index <= self.commit_index:
            return False
        if index > self.last_index:
            raise ValueError(f"commit {index} beyond the last index {self.last_index}")
        self.commit_index = index
        return True

    def compact(self, snapshot: Snapshot) -> None:
        """Drop entries up to snapshot.index (the shell saved a snapshot there)."""
        if snapshot.index <= self._base_index:
            return
        if self.term_at(snapshot.index) != snapshot.term:
            raise ValueError(f"snapshot at {snapshot.index} has term {snapshot.term}, log differs")
        del self._entries[: snapshot.index - self._base_index]
        self._base_index = snapshot.index
        self._base_term = snapshot.term
        self.snapshot = snapshot

    def install(self, snapshot: Snapshot) -> None:
        """Take a leader's snapshot (newer than our commit index) as the new base."""
        if self.term_at(snapshot.index) == snapshot.term:
            del self._entries[: snapshot.index - self._base_index]
            self.handed_index = max(self.handed_index, snapshot.index)
        else:
            self._entries = []
            if self.handed_index > snapshot.index:
                self._need_truncation(snapshot.index + 1)
            self.handed_index = snapshot.index
            self.persisted_index = min(self.persisted_index, snapshot.index)
        self._base_index = snapshot.index
        self._base_term = snapshot.term
        self.snapshot = snapshot
        self.unsaved_snapshot = snapshot
        self.commit_index = snapshot.index

    def take_unpersisted(self) -> tuple[Snapshot | None, int | None, tuple[Entry, ...]]:
        """For a Ready: the snapshot to save, where to truncate, the entries to append."""
        found = (
            self.unsaved_snapshot,
            self.truncate_from,
            tuple(self._entries[self.handed_index - self._base_index :]),
        )
        self.unsaved_snapshot = None
        self.truncate_from = None
        self.handed_index = self.last_index
        return found

    def mark_persisted(self) -> None:
        """The shell persisted the Ready handed out last: all handed entries are on disk."""
        self.persisted_index = self.handed_index

    def _truncate(self, index: int) -> None:
        if index <= self.commit_index:
            raise RuntimeError(f"refusing to truncate committed entry {index}")
        del self._entries[index - self._base_index - 1 :]
        if index <= self.handed_index:
            self._need_truncation(index)
            self.handed_index = index - 1
        self.persisted_index = min(self.persisted_index, index - 1)

    def _need_truncation(self, index: int) -> None:
        if self.truncate_from is None or index < self.truncate_from:
            self.truncate_from = index
