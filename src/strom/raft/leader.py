"""The Raft leader's side of replication: what to send each follower, and when.

`RaftLeaderState` lives only while its node leads a term. It keeps a `Progress` per
follower, builds AppendRequests (batched up to `max_append_bytes`, at least one entry),
falls back to the whole snapshot when the entries a follower needs were compacted away,
computes the commit index (only entries of its own term are committed by counting,
Raft §5.4.2), watches check-quorum and drives a leadership transfer. Messages go to the
node's outbox; the node hands them to the shell in its next Ready.
"""

from __future__ import annotations

from collections.abc import Sequence

from strom.raft import quorum
from strom.raft.log import RaftLog
from strom.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    Message,
    SnapshotRequest,
    TimeoutNow,
)
from strom.raft.progress import Progress, ReplicaProgress, ReplicaState


class RaftLeaderState:
    """One term of leadership.

    Transfer transitions: not transferring -> transferring (transfer_leadership) ->
    not transferring (an election timeout passed; or the node stops leading and this
    object is dropped). Per-follower transitions are listed on `Progress`.
    """

    __slots__ = (
        "_check_quorum_ms",
        "_election_timeout_ms",
        "_heartbeat_interval_ms",
        "_log",
        "_max_append_bytes",
        "_node_id",
        "_outbox",
        "_term",
        "_voters",
        "heartbeat_due_ms",
        "progress",
        "transfer_deadline_ms",
        "transfer_target",
    )

    def __init__(
        self,
        node_id: int,
        term: int,
        voters: Sequence[int],
        log: RaftLog,
        outbox: list[Message],
        election_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_append_bytes: int,
        now_ms: int,
        check_quorum_ms: int | None = None,
    ) -> None:
        self._node_id = node_id
        self._term = term
        self._voters = tuple(voters)
        self._log = log
        self._outbox = outbox
        self._election_timeout_ms = election_timeout_ms
        self._check_quorum_ms = check_quorum_ms or election_timeout_ms
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._max_append_bytes = max_append_bytes
        self.progress = {
            voter: Progress(match_index=0, next_index=log.last_index + 1, last_contact_ms=now_ms)
            for voter in voters
            if voter != node_id
        }
        self.heartbeat_due_ms = now_ms + heartbeat_interval_ms
        self.transfer_target: int | None = None
        self.transfer_deadline_ms = 0

    # -- sending ---------------------------------------------------------------------

    def send_append(
        self,
        peer: int,
        now_ms: int,
        *,
        resend_after_ms: int | None = None,
        empty_ok: bool = False,
    ) -> None:
        """Send `peer` what it needs next. Entries still unanswered are sent again only
        if they left `resend_after_ms` ago or earlier (they may have been lost with a
        connection); `empty_ok` sends an empty AppendRequest (heartbeat, commit news) when
        there are no entries to send."""
        progress = self.progress[peer]
        log = self._log
        if progress.next_index - 1 < log.snapshot_index:
            self._send_snapshot(peer, progress, now_ms, empty_ok)
            return
        if progress.state is ReplicaState.APPENDING and (
            resend_after_ms is None or now_ms - progress.sent_ms < resend_after_ms
        ):
            if not empty_ok:
                return
            entries: tuple[Entry, ...] = ()
        else:
            entries = log.entries_for_append(progress.next_index, self._max_append_bytes)
        if not entries and not empty_ok:
            return
        prev_index = progress.next_index - 1
        prev_term = log.term_at(prev_index)
        assert prev_term is not None
        self._outbox.append(
            AppendRequest(
                sender=self._node_id,
                recipient=peer,
                term=self._term,
                prev_index=prev_index,
                prev_term=prev_term,
                entries=entries,
                commit=log.commit_index,
            )
        )
        # a follower takes the commit index only as far as this request proves its log
        taught = min(log.commit_index, prev_index + len(entries))
        progress.commit_sent = max(progress.commit_sent, taught)
        if entries:
            progress.state = ReplicaState.APPENDING
            progress.sent_ms = now_ms

    def _send_snapshot(self, peer: int, progress: Progress, now_ms: int, empty_ok: bool) -> None:
        log = self._log
        snapshot = log.snapshot
        assert snapshot is not None
        waiting = (
            progress.state is ReplicaState.SNAPSHOT
            and now_ms - progress.snapshot_sent_ms < self._election_timeout_ms
        )
        if not waiting:
            self._outbox.append(
                SnapshotRequest(
                    sender=self._node_id, recipient=peer, term=self._term, snapshot=snapshot
                )
            )
            progress.state = ReplicaState.SNAPSHOT
            progress.snapshot_index = snapshot.index
            progress.snapshot_sent_ms = now_ms
        elif empty_ok:
            # A heartbeat it can check against our base; keeps its election timer quiet.
            self._outbox.append(
                AppendRequest(
                    sender=self._node_id,
                    recipient=peer,
                    term=self._term,
                    prev_index=log.snapshot_index,
                    prev_term=log.snapshot_term,
                    entries=(),
                    commit=log.commit_index,
                )
            )

    def broadcast(self, now_ms: int, *, heartbeat: bool = False, empty_ok: bool = False) -> None:
        resend_after_ms = self._election_timeout_ms // 2 if heartbeat else None
        for peer in self.progress:
            self.send_append(
                peer, now_ms, resend_after_ms=resend_after_ms, empty_ok=empty_ok or heartbeat
            )

    def send_timeout_now(self, peer: int) -> None:
        self._outbox.append(TimeoutNow(sender=self._node_id, recipient=peer, term=self._term))

    # -- answers -----------------------------------------------------------------------

    def on_append_response(self, message: AppendResponse, now_ms: int) -> bool:
        """Handle a follower's answer (of our term); True if its match index moved."""
        progress = self.progress.get(message.sender)
        if progress is None:
            return False
        progress.last_contact_ms = now_ms
        if message.success:
            moved = progress.acknowledge(message.match_index)
            if moved:
                # more entries, or news of the commit index if it missed them
                empty_ok = progress.needs_commit(self._log.commit_index)
                self.send_append(message.sender, now_ms, empty_ok=empty_ok)
            if message.sender == self.transfer_target and (
                progress.match_index == self._log.last_index
            ):
                self.send_timeout_now(message.sender)
            return moved
        # hint 0: the answer to a request of an older term, telling only the term
        if message.hint_index > 0 and progress.reject(message.hint_index):
            self.send_append(message.sender, now_ms)
        return False

    def commit_index(self) -> int | None:
        """The index a majority persisted, if it is of our term (else None)."""
        matches = [progress.match_index for progress in self.progress.values()]
        matches.append(self._log.persisted_index)
        index = quorum.quorum_index(matches)
        if index > self._log.commit_index and self._log.term_at(index) == self._term:
            return index
        return None

    # -- time ----------------------------------------------------------------------

    def heartbeat_due(self, now_ms: int) -> bool:
        if now_ms < self.heartbeat_due_ms:
            return False
        self.heartbeat_due_ms = now_ms + self._heartbeat_interval_ms
        return True

    def has_quorum(self, now_ms: int) -> bool:
        """Check-quorum: heard from a majority (us included) within check_quorum_ms."""
        active = [
            peer
            for peer, progress in self.progress.items()
            if now_ms - progress.last_contact_ms < self._check_quorum_ms
        ]
        active.append(self._node_id)
        return quorum.has_quorum(self._voters, active)

    # -- leadership transfer --------------------------------------------------------------

    def start_transfer(self, target: int, now_ms: int) -> None:
        self.transfer_target = target
        self.transfer_deadline_ms = now_ms + self._election_timeout_ms
        if self.progress[target].match_index == self._log.last_index:
            self.send_timeout_now(target)
        else:
            self.send_append(target, now_ms, resend_after_ms=0)

    def transfer_expired(self, now_ms: int) -> bool:
        if self.transfer_target is None or now_ms < self.transfer_deadline_ms:
            return False
        self.transfer_target = None
        return True

    def most_up_to_date_peer(self) -> int | None:
        if not self.progress:
            return None
        return max(self.progress, key=lambda peer: (self.progress[peer].match_index, -peer))

    def replica_progress(self, now_ms: int) -> dict[int, ReplicaProgress]:
        found = {
            peer: ReplicaProgress(progress.match_index, progress.last_contact_ms)
            for peer, progress in self.progress.items()
        }
        found[self._node_id] = ReplicaProgress(self._log.persisted_index, now_ms)
        return dict(sorted(found.items()))
