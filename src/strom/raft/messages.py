"""What the Raft core exchanges with its shell: log entries, messages, and Ready.

The core (core.py) never does I/O. The shell feeds it messages (`step`), time (`tick`)
and proposals (`propose`), then takes a `Ready`: it persists the hard state, the entries
and any received snapshot, fsyncs, sends the messages, applies the committed entries, and
calls `advance(ready)`. Messages leave only after what they promise is on disk.

strom's controllers run classic push-based Raft (AppendEntries from the leader) with
pre-vote, check-quorum and leadership transfer; the messages travel over the controller
listener in strom's own encoding (wire.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. `data == b""` is the no-op a new leader appends to commit its term."""

    index: int
    term: int
    data: bytes


@dataclass(frozen=True, slots=True)
class HardState:
    """What must be fsynced before any message that depends on it leaves the node."""

    term: int
    voted_for: int | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The state machine at `index` (whose entry had `term`), as the state machine encoded it."""

    index: int
    term: int
    data: bytes


@dataclass(frozen=True, slots=True)
class VoteRequest:
    sender: int
    recipient: int
    term: int  # with pre_vote: the term the candidate would take, not yet its own
    last_log_index: int
    last_log_term: int
    pre_vote: bool
    leadership_transfer: bool  # voters ignore their leader lease for a transfer


@dataclass(frozen=True, slots=True)
class VoteResponse:
    sender: int
    recipient: int
    term: int
    granted: bool
    pre_vote: bool


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """Entries after (prev_index, prev_term); an empty tuple is a heartbeat."""

    sender: int
    recipient: int
    term: int
    prev_index: int
    prev_term: int
    entries: tuple[Entry, ...]
    commit: int


@dataclass(frozen=True, slots=True)
class AppendResponse:
    """success: the follower's log matches the leader's up to match_index.
    Otherwise hint_index is where the leader should try next (the follower's last index
    + 1, or the first index of the conflicting term)."""

    sender: int
    recipient: int
    term: int
    success: bool
    match_index: int
    hint_index: int


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """The leader's whole snapshot, for a follower whose next entry was compacted away."""

    sender: int
    recipient: int
    term: int
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class TimeoutNow:
    """Leadership transfer: the recipient starts an election at once, without pre-vote."""

    sender: int
    recipient: int
    term: int


Message = VoteRequest | VoteResponse | AppendRequest | AppendResponse | SnapshotRequest | TimeoutNow


@dataclass(frozen=True, slots=True)
class Ready:
    """Work for the shell, in this order:

    1. persist `hard_state` if not None (term and vote), fsynced;
    2. if `snapshot` is not None, save it and drop every stored entry up to its index;
    3. if `truncate_from` is not None, drop stored entries with index >= truncate_from;
    4. append `entries` (consecutive indexes) and fsync;
    5. send `messages`;
    6. if `apply_snapshot` is not None, reset the state machine to it; then apply
       `committed` in order;
    7. call `advance(ready)`.
    """

    hard_state: HardState | None = None
    snapshot: Snapshot | None = None
    truncate_from: int | None = None
    entries: tuple[Entry, ...] = ()
    messages: tuple[Message, ...] = ()
    apply_snapshot: Snapshot | None = None
    committed: tuple[Entry, ...] = ()

    @property
    def empty(self) -> bool:
        return (
            self.hard_state is None
            and self.snapshot is None
            and self.truncate_from is None
            and not self.entries
            and not self.messages
            and self.apply_snapshot is None
            and not self.committed
        )


@dataclass(frozen=True, slots=True)
class Restored:
    """What the shell read back from disk at start, handed to the core's constructor."""

    hard_state: HardState
    snapshot: Snapshot | None  # the latest saved snapshot, if any
    entries: tuple[Entry, ...]  # every stored entry after the snapshot, consecutive
