"""The Raft simulation's checker: `History` holds what the whole cluster ever did and
checks election safety, log matching, leader completeness and state machine safety
(checks 1-4 of raft_sim.py) against it.
"""

from __future__ import annotations

from itertools import pairwise

from strom.raft.core import RaftNode, Role
from strom.raft.messages import Entry, HardState, Snapshot


class InvariantViolation(AssertionError):
    pass


class History:
    """What the whole cluster ever did, and the checks 1-4 of raft_sim.py against it."""

    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # term -> its leader
        self.votes: dict[tuple[int, int], int] = {}  # (node, term) -> persisted vote
        # (index, term) -> (data, the term at index - 1)
        self.facts: dict[tuple[int, int], tuple[bytes, int]] = {}
        self.committed: dict[int, int] = {}  # index -> term
        self.max_committed = 0
        self.applied: dict[int, bytes] = {}  # index -> data

    def check_leader(self, core: RaftNode) -> None:
        if core.role is Role.LEADER:
            leader = self.leaders.setdefault(core.term, core.node_id)
            if leader != core.node_id:
                raise InvariantViolation(f"term {core.term} has leaders {leader}, {core.node_id}")

    def check_hard_state(self, node_id: int, old: HardState, new: HardState) -> None:
        if new.term < old.term:
            raise InvariantViolation(f"node {node_id} stored term {new.term} after {old.term}")
        if new.voted_for is not None:
            vote = self.votes.setdefault((node_id, new.term), new.voted_for)
            if vote != new.voted_for:
                raise InvariantViolation(
                    f"node {node_id} voted for {vote} and {new.voted_for} in term {new.term}"
                )

    def check_entries(
        self, node_id: int, prev_term: int | None, entries: tuple[Entry, ...]
    ) -> None:
        """Consecutive entries a node holds; prev_term: its term at entries[0].index - 1."""
        for entry in entries:
            if prev_term is not None:
                fact = (entry.data, prev_term)
                known = self.facts.setdefault((entry.index, entry.term), fact)
                if known != fact:
                    raise InvariantViolation(
                        f"log matching: node {node_id} has ({entry.index}, term {entry.term}) "
                        f"as (data, previous term) {fact}, another node {known}"
                    )
            prev_term = entry.term

    def check_log(self, node_id: int, base_term: int, entries: tuple[Entry, ...]) -> None:
        for before, after in pairwise(entries):
            if after.index != before.index + 1:
                raise InvariantViolation(f"node {node_id}: log jumps {before.index}->{after.index}")
        self.check_entries(node_id, base_term, entries)

    def note_commit(self, core: RaftNode, seen_commit: int) -> int:
        """Record what `core` newly reports committed; returns its commit index."""
        commit_index = core.commit_index
        for index in range(max(seen_commit + 1, core.snapshot_index), commit_index + 1):
            term = core.term_at(index)
            known = self.committed.setdefault(index, term or 0)
            if known != term:
                raise InvariantViolation(
                    f"index {index} committed with term {known}, node {core.node_id} has {term}"
                )
        self.max_committed = max(self.max_committed, commit_index)
        return commit_index

    def check_new_leader(self, core: RaftNode) -> None:
        if core.last_index < self.max_committed:
            raise InvariantViolation(
                f"leader {core.node_id} (term {core.term}) ends at {core.last_index}, "
                f"{self.max_committed} is committed"
            )
        for index in range(core.snapshot_index, self.max_committed + 1):
            term = self.committed.get(index)
            if term is not None and core.term_at(index) != term:
                raise InvariantViolation(
                    f"leader {core.node_id} (term {core.term}) has term {core.term_at(index)} "
                    f"at committed index {index} (term {term})"
                )

    def check_unelectable(
        self, stored_tails: list[tuple[int, int]], lacking: list[tuple[int, str, tuple[int, int]]]
    ) -> None:
        """stored_tails: every voter's stored (last term, last index); lacking: the logs
        without the latest committed entry, as (node, which log, (last term, last index))."""
        needed = len(stored_tails) // 2 + 1
        for node_id, which, tail in lacking:
            if sum(tail >= stored for stored in stored_tails) >= needed:
                raise InvariantViolation(
                    f"node {node_id}'s {which} (last term, index {tail}) lacks committed entry "
                    f"{self.max_committed} (term {self.committed.get(self.max_committed)}) yet "
                    f"is as up-to-date as a majority of the stored logs {stored_tails}"
                )

    def check_apply(self, node_id: int, applied_index: int, entry: Entry) -> None:
        if entry.index != applied_index + 1:
            raise InvariantViolation(f"node {node_id} applied {entry.index} after {applied_index}")
        known = self.applied.setdefault(entry.index, entry.data)
        if known != entry.data:
            raise InvariantViolation(
                f"node {node_id} applied {entry.data!r} at {entry.index}, another node {known!r}"
            )

    def check_snapshot(self, node_id: int, snapshot: Snapshot, machine: list[bytes]) -> None:
        if len(machine) != snapshot.index:
            raise InvariantViolation(f"node {node_id}: snapshot at {snapshot.index} is wrong")
        for index, data in enumerate(machine, start=1):
            known = self.applied.setdefault(index, data)
            if known != data:
                raise InvariantViolation(
                    f"node {node_id}'s snapshot has {data!r} at {index}, applied was {known!r}"
                )
