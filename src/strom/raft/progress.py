"""What a Raft leader knows about each follower it replicates to.

`Progress` is the leader's mutable bookkeeping per follower; `ReplicaProgress` is the
read-only view the shell shows (DescribeQuorum: how far behind each voter is and when the
leader last heard from it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True, slots=True)
class ReplicaProgress:
    match_index: int  # the follower's log matches the leader's up to here
    last_contact_ms: int  # when the leader last heard from it (for the leader itself: now)


class ReplicaState(Enum):
    IDLE = "idle"  # nothing unanswered: the next AppendRequest may leave at once
    APPENDING = "appending"  # an AppendRequest with entries is unanswered
    SNAPSHOT = "snapshot"  # a SnapshotRequest is unanswered


@dataclass(slots=True)
class Progress:
    """One follower, as its leader sees it.

    State transitions (ReplicaState):
        IDLE      -> APPENDING  entries sent
        APPENDING -> IDLE       an answer moved match_index up or next_index down
        IDLE      -> SNAPSHOT   the next entry it needs was compacted away: snapshot sent
        APPENDING -> SNAPSHOT   same, found at a heartbeat
        SNAPSHOT  -> IDLE       match_index reached the snapshot's index
    Heartbeats re-send entries unanswered for half an election timeout (messages get
    lost); a snapshot is re-sent only after an election timeout without an answer.
    """

    match_index: int
    next_index: int
    last_contact_ms: int
    state: ReplicaState = ReplicaState.IDLE
    snapshot_index: int = 0  # while SNAPSHOT: the index of the snapshot sent
    snapshot_sent_ms: int = 0
    commit_sent: int = 0  # the highest commit index an AppendRequest could teach it
    sent_ms: int = 0  # while APPENDING: when the entries left

    def needs_commit(self, commit_index: int) -> bool:
        """Whether an empty AppendRequest would teach it a higher commit index."""
        return min(commit_index, self.match_index) > self.commit_sent

    def acknowledge(self, match_index: int) -> bool:
        """A success answer; True if it moved match_index (new information)."""
        if match_index <= self.match_index:
            return False
        self.match_index = match_index
        self.next_index = max(self.next_index, match_index + 1)
        if self.state is ReplicaState.APPENDING:
            self.state = ReplicaState.IDLE
        elif self.state is ReplicaState.SNAPSHOT and match_index >= self.snapshot_index:
            self.state = ReplicaState.IDLE
            self.snapshot_index = 0
        return True

    def reject(self, hint_index: int) -> bool:
        """A refusal; True if it moved next_index down (stale refusals change nothing)."""
        next_index = max(hint_index, self.match_index + 1)
        if next_index >= self.next_index:
            return False
        self.next_index = next_index
        if self.state is ReplicaState.APPENDING:
            self.state = ReplicaState.IDLE
        return True
