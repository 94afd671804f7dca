"""Raft as a pure state machine (after etcd's raft): no I/O, no clock, no threads.

The shell drives a `RaftNode` with `tick(now_ms)`, `step(message, now_ms)` and
`propose(data, now_ms)`, then takes a `Ready` (see messages.py for the order in which
the shell must persist, send and apply it) and acknowledges it with `advance(ready)`.

Contract for Ready: `ready()` hands out everything pending and the shell must call
`advance(ready)` with that same object before the next `ready()` (a second `ready()`
raises). An empty Ready needs no `advance`. `step`, `tick` and `propose` may be called
between `ready()` and `advance()`; what they produce goes into the next Ready.

Classic push-based Raft with the thesis' extensions: pre-vote (§9.6), the sticky leader
lease (a voter that heard from a leader within the election timeout ignores
(pre-)votes), check-quorum (a leader that does not hear from a majority within an
election timeout steps down), leadership transfer (TimeoutNow), a no-op at the start of
each term, commit by counting only entries of the leader's term (§5.4.2), and snapshots
for followers whose entries were compacted away. The leader's side of replication is in
leader.py, the in-memory log in log.py, the majority arithmetic in quorum.py, the roles
and their legal changes in roles.py, the settings in config.py.

After a restart the commit and applied index are the snapshot's (the shell rebuilds its
state machine from the snapshot itself); the entries after it are applied again once a
leader tells the commit index. `Ready.apply_snapshot` is only for snapshots received
from a leader.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from random import Random

from strom.raft.config import RaftConfig
from strom.raft.leader import RaftLeaderState
from strom.raft.log import RaftLog
from strom.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    HardState,
    Message,
    Ready,
    Restored,
    Snapshot,
    SnapshotRequest,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from strom.raft.progress import ReplicaProgress
from strom.raft.quorum import VoteResult, vote_result
from strom.raft.roles import TRANSITIONS, RaftRole

__all__ = ["RaftConfig", "RaftNode", "RaftRole", "ReplicaProgress", "Role"]

log = logging.getLogger(__name__)

Role = RaftRole
"""The former name of `RaftRole`, kept only while tests/sim still imports it."""


class RaftNode:
    """One Raft member.

    Roles: FOLLOWER -> PRE_CANDIDATE -> CANDIDATE -> LEADER, and back to FOLLOWER on a
    newer term or a lost vote; every change goes through `_set_role`, which refuses what
    `roles.TRANSITIONS` (the full table, with the reason for each change) does not list.
    """

    def __init__(
        self,
        node_id: int,
        voters: Sequence[int],
        restored: Restored,
        config: RaftConfig,
        rng: Random,
        now_ms: int,
    ) -> None:
        if not voters:
            raise ValueError("a Raft group needs at least one voter")
        self._id = node_id
        self._voters = tuple(sorted(set(voters)))
        self._config = config
        self._rng = rng
        self._now_ms = now_ms
        self._log = RaftLog(restored.snapshot, restored.entries)
        self._term = restored.hard_state.term
        self._voted_for = restored.hard_state.voted_for
        self._handed_hard_state = restored.hard_state
        self._role = RaftRole.FOLLOWER
        self._leader_id: int | None = None
        self._leader_contact_ms: int | None = None  # last message from the current leader
        self._votes: dict[int, bool] = {}
        self._leader: RaftLeaderState | None = None
        self._messages: list[Message] = []
        self._apply_snapshot: Snapshot | None = None
        self._applied_index = self._log.snapshot_index
        self._outstanding: Ready | None = None
        self._election_deadline_ms = 0
        self._reset_election_timer(now_ms)

    # -- read-only view -------------------------------------------------------------

    @property
    def node_id(self) -> int:
        return self._id

    @property
    def role(self) -> RaftRole:
        return self._role

    @property
    def term(self) -> int:
        return self._term

    @property
    def leader_id(self) -> int | None:
        return self._leader_id

    @property
    def voted_for(self) -> int | None:
        return self._voted_for

    @property
    def commit_index(self) -> int:
        return self._log.commit_index

    @property
    def applied_index(self) -> int:
        """The last index the shell applied (as acknowledged by `advance`)."""
        return self._applied_index

    @property
    def last_index(self) -> int:
        return self._log.last_index

    @property
    def last_term(self) -> int:
        return self._log.last_term

    @property
    def snapshot_index(self) -> int:
        """Entries up to here are compacted (or were received as a snapshot)."""
        return self._log.snapshot_index

    @property
    def voters(self) -> tuple[int, ...]:
        return self._voters

    @property
    def transferring_to(self) -> int | None:
        """The target of a leadership transfer in progress, if any."""
        return self._leader.transfer_target if self._leader is not None else None

    def term_at(self, index: int) -> int | None:
        """The term of the entry at `index` (None if compacted away or beyond the end)."""
        return self._log.term_at(index)

    def log_entries(self) -> tuple[Entry, ...]:
        """The entries held in memory, after `snapshot_index` (for tests and tools)."""
        return self._log.entries(self._log.snapshot_index + 1, self._log.last_index)

    def replica_progress(self) -> dict[int, ReplicaProgress]:
        """On the leader: every voter's match index and last contact; {} otherwise."""
        if self._leader is None:
            return {}
        return self._leader.replica_progress(self._now_ms)

    # -- inputs ---------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Time moved on: elections, heartbeats, check-quorum, transfer timeout."""
        self._now_ms = now_ms
        if self._leader is not None:
            self._tick_leader(self._leader, now_ms)
        elif self._id in self._voters and (
            len(self._voters) == 1 or now_ms >= self._election_deadline_ms
        ):
            self._campaign(now_ms, pre_vote=len(self._voters) > 1, transfer=False)

    def propose(self, data: bytes, now_ms: int) -> int | None:
        """Append `data` (non-empty) on the leader; its index, or None if not leading or
        a leadership transfer is in progress."""
        if not data:
            raise ValueError("b'' is reserved for the leader's no-op entry")
        self._now_ms = now_ms
        leader = self._leader
        if leader is None or leader.transfer_target is not None:
            return None
        entry = Entry(index=self._log.last_index + 1, term=self._term, data=data)
        self._log.append(entry)
        leader.broadcast(now_ms)
        return entry.index

    def transfer_leadership(self, target: int | None, now_ms: int) -> bool:
        """Hand leadership to `target` (None: the most up-to-date other voter)."""
        self._now_ms = now_ms
        leader = self._leader
        if leader is None:
            return False
        if target is None:
            target = leader.most_up_to_date_peer()
        if target is None or target == self._id or target not in leader.progress:
            return False
        log.info("[node %d] transferring leadership to %d in term %d", self._id, target, self._term)
        leader.start_transfer(target, now_ms)
        return True

    def step(self, message: Message, now_ms: int) -> None:
        """A message from a peer. Stale, duplicated and reordered messages are harmless."""
        self._now_ms = now_ms
        if (
            message.recipient != self._id
            or message.sender == self._id
            or message.sender not in self._voters
        ):
            return
        if message.term > self._term:
            if not self._step_higher_term(message, now_ms):
                return
        elif message.term < self._term:
            self._step_lower_term(message)
            return
        if isinstance(message, VoteRequest):
            self._on_vote_request(message, now_ms)
        elif isinstance(message, VoteResponse):
            self._on_vote_response(message, now_ms)
        elif isinstance(message, AppendRequest):
            if self._follow(message.sender, now_ms):
                self._on_append_request(message)
        elif isinstance(message, SnapshotRequest):
            if self._follow(message.sender, now_ms):
                self._on_snapshot_request(message)
        elif isinstance(message, AppendResponse):
            self._on_append_response(message, now_ms)
        elif isinstance(message, TimeoutNow):
            self._on_timeout_now(message, now_ms)

    def compact(self, snapshot: Snapshot) -> None:
        """The shell saved a snapshot of its applied state at snapshot.index: drop the
        entries up to it; the snapshot is what laggards get from now on."""
        if snapshot.index > self._applied_index:
            raise ValueError(
                f"snapshot at {snapshot.index} beyond the applied index {self._applied_index}"
            )
        self._log.compact(snapshot)

    # -- Ready ----------------------------------------------------------------------

    def has_ready(self) -> bool:
        """Whether `ready()` would hand out anything (and no Ready is outstanding)."""
        if self._outstanding is not None:
            return False
        log_ = self._log
        if self._messages or log_.handed_index < log_.last_index:
            return True
        if self._apply_snapshot is not None:
            return True
        hard_state = self._handed_hard_state
        return (
            log_.commit_index > self._applied_index
            or log_.unsaved_snapshot is not None
            or log_.truncate_from is not None
            or self._term != hard_state.term
            or self._voted_for != hard_state.voted_for
        )

    def ready(self) -> Ready:
        """Everything pending. Call `advance(ready)` before the next `ready()`."""
        if self._outstanding is not None:
            raise RuntimeError("advance() the previous Ready before asking for another")
        hard_state = self._hard_state()
        snapshot, truncate_from, entries = self._log.take_unpersisted()
        apply_snapshot = self._apply_snapshot
        applied = apply_snapshot.index if apply_snapshot is not None else self._applied_index
        ready = Ready(
            hard_state=hard_state if hard_state != self._handed_hard_state else None,
            snapshot=snapshot,
            truncate_from=truncate_from,
            entries=entries,
            messages=tuple(self._messages),
            apply_snapshot=apply_snapshot,
            committed=self._log.entries(applied + 1, self._log.commit_index),
        )
        self._messages.clear()
        self._apply_snapshot = None
        self._handed_hard_state = hard_state
        if not ready.empty:
            self._outstanding = ready
        return ready

    def advance(self, ready: Ready) -> None:
        """The shell persisted, sent and applied `ready`."""
        if ready is not self._outstanding:
            if ready.empty:
                return
            raise RuntimeError("advance() with a Ready this node did not hand out last")
        self._outstanding = None
        self._log.mark_persisted()
        if ready.apply_snapshot is not None:
            self._applied_index = max(self._applied_index, ready.apply_snapshot.index)
        if ready.committed:
            self._applied_index = max(self._applied_index, ready.committed[-1].index)
        if self._leader is not None:
            self._maybe_commit(self._leader, self._now_ms)

    # -- terms ----------------------------------------------------------------------

    def _step_higher_term(self, message: Message, now_ms: int) -> bool:
        """A message of a newer term; False if it is to be dropped."""
        if isinstance(message, VoteRequest):
            if not message.leadership_transfer and self._in_lease(now_ms):
                log.debug(
                    "[node %d] ignoring %s from %d: leader %s is alive",
                    self._id,
                    "pre-vote" if message.pre_vote else "vote",
                    message.sender,
                    self._leader_id,
                )
                return False
            if message.pre_vote:
                return True  # a pre-vote moves no term
            self._become_follower(message.term, None, now_ms)
            return True
        if isinstance(message, VoteResponse) and message.pre_vote and message.granted:
            return True  # granted for the term we would take; counted if still wanted
        leader = message.sender if isinstance(message, (AppendRequest, SnapshotRequest)) else None
        self._become_follower(message.term, leader, now_ms)
        return True

    def _step_lower_term(self, message: Message) -> None:
        """A message of an older term: tell its sender our term so it catches up."""
        if isinstance(message, (AppendRequest, SnapshotRequest)):
            # A leader cut off from us while we moved on (check-quorum keeps our term
            # from spreading through votes): our term makes it step down.
            self._reply_append(message.sender, False, 0)
        elif isinstance(message, VoteRequest):
            self._reply_vote(message, self._term, granted=False)

    def _in_lease(self, now_ms: int) -> bool:
        if self._role is RaftRole.LEADER:
            return True
        return (
            self._leader_id is not None
            and self._leader_contact_ms is not None
            and now_ms - self._leader_contact_ms < self._config.election_timeout_ms
        )

    # -- elections ------------------------------------------------------------------

    def _campaign(self, now_ms: int, *, pre_vote: bool, transfer: bool) -> None:
        if pre_vote:
            self._set_role(RaftRole.PRE_CANDIDATE, self._term, None)
            vote_term = self._term + 1
        else:
            self._voted_for = self._id
            self._set_role(RaftRole.CANDIDATE, self._term + 1, None)
            vote_term = self._term
        self._votes = {self._id: True}
        self._reset_election_timer(now_ms)
        if vote_result(self._voters, self._votes) is VoteResult.WON:
            self._won(now_ms)
            return
        for voter in self._voters:
            if voter != self._id:
                self._send(
                    VoteRequest(
                        sender=self._id,
                        recipient=voter,
                        term=vote_term,
                        last_log_index=self._log.last_index,
                        last_log_term=self._log.last_term,
                        pre_vote=pre_vote,
                        leadership_transfer=transfer,
                    )
                )

    def _won(self, now_ms: int) -> None:
        if self._role is RaftRole.PRE_CANDIDATE:
            self._campaign(now_ms, pre_vote=False, transfer=False)
        else:
            self._become_leader(now_ms)

    def _on_vote_request(self, message: VoteRequest, now_ms: int) -> None:
        # Here message.term >= our term (a pre-vote may ask for our term + 1).
        can_vote = (
            self._voted_for == message.sender
            or (self._voted_for is None and self._leader_id is None)
            or (message.pre_vote and message.term > self._term)
        )
        granted = (
            self._id in self._voters
            and can_vote
            and self._log.is_up_to_date(message.last_log_index, message.last_log_term)
        )
        if granted and not message.pre_vote:
            self._voted_for = message.sender
            self._reset_election_timer(now_ms)
        log.debug(
            "[node %d] %s %s of %d for term %d",
            self._id,
            "granted" if granted else "refused",
            "pre-vote" if message.pre_vote else "vote",
            message.sender,
            message.term,
        )
        self._reply_vote(message, message.term if granted else self._term, granted=granted)

    def _reply_vote(self, message: VoteRequest, term: int, *, granted: bool) -> None:
        self._send(
            VoteResponse(
                sender=self._id,
                recipient=message.sender,
                term=term,
                granted=granted,
                pre_vote=message.pre_vote,
            )
        )

    def _on_vote_response(self, message: VoteResponse, now_ms: int) -> None:
        if self._role is RaftRole.PRE_CANDIDATE:
            expected_term = self._term + 1 if message.granted else self._term
            if not message.pre_vote or message.term != expected_term:
                return
        elif self._role is RaftRole.CANDIDATE:
            if message.pre_vote:
                return
        else:
            return
        self._votes[message.sender] = message.granted
        result = vote_result(self._voters, self._votes)
        if result is VoteResult.WON:
            self._won(now_ms)
        elif result is VoteResult.LOST:
            self._become_follower(self._term, None, now_ms)

    def _on_timeout_now(self, message: TimeoutNow, now_ms: int) -> None:
        if self._role is RaftRole.FOLLOWER and self._id in self._voters:
            log.info("[node %d] told to campaign by leader %d", self._id, message.sender)
            self._campaign(now_ms, pre_vote=False, transfer=True)

    # -- following ------------------------------------------------------------------

    def _follow(self, leader_id: int, now_ms: int) -> bool:
        """An AppendRequest or SnapshotRequest of our term; False if we lead it (a bug)."""
        if self._role is RaftRole.LEADER:
            log.error("[node %d] another leader %d in my term %d", self._id, leader_id, self._term)
            return False
        if self._role is not RaftRole.FOLLOWER or self._leader_id != leader_id:
            self._become_follower(self._term, leader_id, now_ms)
        self._leader_contact_ms = now_ms
        self._reset_election_timer(now_ms)
        return True

    def _on_append_request(self, message: AppendRequest) -> None:
        success, index = self._log.follow(
            message.prev_index, message.prev_term, message.entries, message.commit
        )
        if success:
            self._reply_append(message.sender, True, index)
        else:
            log.debug("[node %d] refused entries after %d", self._id, message.prev_index)
            self._reply_append(message.sender, False, 0, hint_index=index)

    def _on_snapshot_request(self, message: SnapshotRequest) -> None:
        snapshot = message.snapshot
        if snapshot.index <= self._log.commit_index:
            self._reply_append(message.sender, True, self._log.commit_index)
            return
        log.info(
            "[node %d] installing snapshot at %d (term %d) from leader %d",
            self._id,
            snapshot.index,
            snapshot.term,
            message.sender,
        )
        self._log.install(snapshot)
        self._apply_snapshot = snapshot
        self._reply_append(message.sender, True, snapshot.index)

    def _reply_append(
        self, leader_id: int, success: bool, match_index: int, hint_index: int = 0
    ) -> None:
        self._send(
            AppendResponse(
                sender=self._id,
                recipient=leader_id,
                term=self._term,
                success=success,
                match_index=match_index,
                hint_index=hint_index,
            )
        )

    # -- leading --------------------------------------------------------------------

    def _become_leader(self, now_ms: int) -> None:
        self._set_role(RaftRole.LEADER, self._term, self._id)
        self._votes = {}
        leader = RaftLeaderState(
            node_id=self._id,
            term=self._term,
            voters=self._voters,
            log=self._log,
            outbox=self._messages,
            election_timeout_ms=self._config.election_timeout_ms,
            heartbeat_interval_ms=self._config.heartbeat_interval_ms,
            max_append_bytes=self._config.max_append_bytes,
            now_ms=now_ms,
            check_quorum_ms=self._config.check_quorum_ms,
        )
        self._leader = leader
        self._log.append(Entry(index=self._log.last_index + 1, term=self._term, data=b""))
        leader.broadcast(now_ms, empty_ok=True)

    def _tick_leader(self, leader: RaftLeaderState, now_ms: int) -> None:
        if not leader.has_quorum(now_ms):
            log.info(
                "[node %d] lost contact with a majority in term %d: stepping down",
                self._id,
                self._term,
            )
            self._become_follower(self._term, None, now_ms)
            return
        if leader.transfer_expired(now_ms):
            log.info("[node %d] leadership transfer timed out in term %d", self._id, self._term)
        if leader.heartbeat_due(now_ms):
            leader.broadcast(now_ms, heartbeat=True)

    def _on_append_response(self, message: AppendResponse, now_ms: int) -> None:
        leader = self._leader
        if leader is None:
            return
        if leader.on_append_response(message, now_ms):
            self._maybe_commit(leader, now_ms)

    def _maybe_commit(self, leader: RaftLeaderState, now_ms: int) -> None:
        index = leader.commit_index()
        if index is not None and self._log.commit_to(index):
            leader.broadcast(now_ms, empty_ok=True)

    # -- state changes --------------------------------------------------------------

    def _become_follower(self, term: int, leader_id: int | None, now_ms: int) -> None:
        if term > self._term:
            self._voted_for = None
        self._set_role(RaftRole.FOLLOWER, term, leader_id)
        self._votes = {}
        if leader_id is not None:
            self._leader_contact_ms = now_ms
        self._reset_election_timer(now_ms)

    def _set_role(self, role: RaftRole, term: int, leader_id: int | None) -> None:
        if role not in TRANSITIONS[self._role]:
            raise RuntimeError(f"illegal Raft transition {self._role.name} -> {role.name}")
        changed = (role, term, leader_id) != (self._role, self._term, self._leader_id)
        if role is not RaftRole.LEADER:
            self._leader = None
        self._role = role
        self._term = term
        self._leader_id = leader_id
        if not changed:
            return
        if role is RaftRole.LEADER:
            log.info("[node %d] became leader in term %d", self._id, term)
        elif role is RaftRole.FOLLOWER:
            log.info("[node %d] became follower in term %d (leader %s)", self._id, term, leader_id)
        else:
            log.info("[node %d] became %s in term %d", self._id, role.value, term)

    def _reset_election_timer(self, now_ms: int) -> None:
        timeout_ms = self._config.election_timeout_ms
        self._election_deadline_ms = now_ms + self._rng.randrange(timeout_ms, 2 * timeout_ms)

    def _hard_state(self) -> HardState:
        return HardState(term=self._term, voted_for=self._voted_for)

    def _send(self, message: Message) -> None:
        self._messages.append(message)
