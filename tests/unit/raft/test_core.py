"""Transcripts of the Raft core: elections with pre-vote, the leader lease, check-quorum,
leadership transfer, a single voter, and the Ready contract.

`Cluster` plays the shell for every node: it persists nothing (the cores keep their logs),
collects each Ready's messages and delivers them only when the test says so, with a
manual clock. Replication, snapshots and restarts are in test_core_log.py.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from random import Random

import pytest

from strom.raft.core import RaftConfig, RaftNode, RaftRole
from strom.raft.messages import (
    AppendResponse,
    Entry,
    HardState,
    Message,
    Ready,
    Restored,
    TimeoutNow,
    VoteRequest,
    VoteResponse,
)
from strom.raft.progress import ReplicaProgress

TIMEOUT_MS = 1000
CONFIG = RaftConfig(election_timeout_ms=TIMEOUT_MS, heartbeat_interval_ms=100)
EMPTY = Restored(HardState(term=0, voted_for=None), None, ())


class Cluster:
    def __init__(
        self,
        voters: Iterable[int] = (1, 2, 3),
        *,
        restored: dict[int, Restored] | None = None,
        config: RaftConfig = CONFIG,
    ) -> None:
        self.voters = tuple(voters)
        self.config = config
        self.now_ms = 0
        self.nodes: dict[int, RaftNode] = {}
        self.applied: dict[int, list[Entry]] = {}
        self.readies: dict[int, list[Ready]] = {}
        for node_id in self.voters:
            self.start(node_id, (restored or {}).get(node_id, EMPTY))
        self.in_flight: list[Message] = []
        self.cut: set[int] = set()  # nodes whose messages are dropped, both ways

    def start(self, node_id: int, restored: Restored) -> RaftNode:
        node = RaftNode(node_id, self.voters, restored, self.config, Random(node_id), self.now_ms)
        self.nodes[node_id] = node
        self.applied[node_id] = []
        self.readies[node_id] = []
        return node

    def flush(self, node_id: int) -> list[Ready]:
        """The shell's loop for one node: take, 'persist', send, apply, advance."""
        node = self.nodes[node_id]
        handled = []
        while node.has_ready():
            ready = node.ready()
            self.in_flight.extend(ready.messages)
            self.applied[node_id].extend(ready.committed)
            node.advance(ready)
            handled.append(ready)
        self.readies[node_id].extend(handled)
        return handled

    def take(self, accept: Callable[[Message], bool] = lambda m: True) -> list[Message]:
        """Remove the messages in flight that `accept` picks, and return them."""
        taken = [m for m in self.in_flight if accept(m)]
        self.in_flight = [m for m in self.in_flight if not accept(m)]
        return taken

    def deliver(self, accept: Callable[[Message], bool] = lambda m: True) -> None:
        """Deliver messages (and the answers they cause) until none is left that
        `accept` picks; messages from or to a cut node are dropped."""
        while True:
            batch = self.take(accept)
            if not batch:
                return
            for message in batch:
                if message.sender in self.cut or message.recipient in self.cut:
                    continue
                self.nodes[message.recipient].step(message, self.now_ms)
                self.flush(message.recipient)

    def tick(self, node_id: int, by_ms: int = 0) -> None:
        self.now_ms += by_ms
        self.nodes[node_id].tick(self.now_ms)
        self.flush(node_id)

    def elect(self, node_id: int) -> RaftNode:
        self.tick(node_id, by_ms=2 * TIMEOUT_MS)
        self.deliver()
        node = self.nodes[node_id]
        assert node.role is RaftRole.LEADER
        return node


def sent(ready: Ready, kind: type) -> list[Message]:
    return [m for m in ready.messages if isinstance(m, kind)]


# -- elections ------------------------------------------------------------------------


def test_an_election_starts_with_a_pre_vote_that_moves_no_term() -> None:
    cluster = Cluster()
    cluster.tick(1, by_ms=2 * TIMEOUT_MS)
    node1 = cluster.nodes[1]
    assert (node1.role, node1.term, node1.voted_for) == (RaftRole.PRE_CANDIDATE, 0, None)
    (ready,) = cluster.readies[1]
    assert ready.hard_state is None  # a pre-vote persists nothing
    assert sent(ready, VoteRequest) == [
        VoteRequest(1, peer, term=1, last_log_index=0, last_log_term=0, pre_vote=True,
                    leadership_transfer=False)
        for peer in (2, 3)
    ]  # fmt: skip

    cluster.deliver(lambda m: isinstance(m, VoteRequest))
    for peer in (2, 3):  # granting a pre-vote changes neither term nor vote
        assert (cluster.nodes[peer].term, cluster.nodes[peer].voted_for) == (0, None)
    assert cluster.take() == [VoteResponse(2, 1, 1, True, True), VoteResponse(3, 1, 1, True, True)]


def test_a_majority_of_pre_votes_starts_the_real_election_and_a_leader_appends_a_no_op() -> None:
    cluster = Cluster()
    cluster.tick(1, by_ms=2 * TIMEOUT_MS)
    cluster.deliver(lambda m: isinstance(m, VoteRequest) and m.pre_vote)
    cluster.deliver(lambda m: isinstance(m, VoteResponse) and m.recipient == 1 and m.sender == 2)
    node1 = cluster.nodes[1]
    assert (node1.role, node1.term, node1.voted_for) == (RaftRole.CANDIDATE, 1, 1)
    assert cluster.readies[1][-1].hard_state == HardState(term=1, voted_for=1)

    cluster.deliver()
    assert (node1.role, node1.leader_id) == (RaftRole.LEADER, 1)
    assert node1.last_index == 1 and node1.last_term == 1
    assert [e for r in cluster.readies[1] for e in r.entries] == [Entry(1, 1, b"")]
    for node in cluster.nodes.values():  # the no-op commits and everyone applies it
        assert (node.term, node.leader_id, node.commit_index) == (1, 1, 1)
    cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
    cluster.deliver()
    assert all(cluster.applied[n] == [Entry(1, 1, b"")] for n in (1, 2, 3))


def test_a_voter_refuses_a_candidate_whose_log_is_behind() -> None:
    behind = Restored(HardState(1, None), None, (Entry(1, 1, b"a"),))
    ahead = Restored(HardState(1, None), None, (Entry(1, 1, b"a"), Entry(2, 1, b"b")))
    cluster = Cluster(restored={1: behind, 2: ahead, 3: ahead})
    cluster.tick(1, by_ms=2 * TIMEOUT_MS)
    cluster.deliver()
    assert cluster.nodes[1].role is RaftRole.FOLLOWER  # both refused: the pre-vote was lost
    assert cluster.nodes[1].term == 1
    cluster.tick(2, by_ms=2 * TIMEOUT_MS)
    cluster.deliver()
    assert cluster.nodes[2].role is RaftRole.LEADER  # an up-to-date node wins


def test_a_pre_vote_refused_from_a_newer_term_brings_the_pre_candidate_to_that_term() -> None:
    cluster = Cluster(restored={2: Restored(HardState(5, None), None, ())})
    cluster.tick(1, by_ms=2 * TIMEOUT_MS)
    cluster.deliver(lambda m: m.sender == 1 and m.recipient == 2)
    assert cluster.take(lambda m: m.recipient == 1) == [VoteResponse(2, 1, 5, False, True)]
    cluster.nodes[1].step(VoteResponse(2, 1, 5, False, True), cluster.now_ms)
    (ready,) = cluster.flush(1)
    assert (cluster.nodes[1].role, cluster.nodes[1].term) == (RaftRole.FOLLOWER, 5)
    assert ready.hard_state == HardState(term=5, voted_for=None)


def test_a_voter_that_hears_from_its_leader_ignores_pre_votes() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.cut = {3}  # node 3 stops hearing the leader; node 2 still does
    for _ in range(25):
        cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
        cluster.deliver()
    cluster.tick(3)
    cluster.cut = set()
    cluster.deliver(lambda m: isinstance(m, VoteRequest))
    assert cluster.nodes[3].role is RaftRole.PRE_CANDIDATE
    assert cluster.take(lambda m: isinstance(m, VoteResponse)) == []  # ignored, no answer
    assert [(n.role, n.term) for n in cluster.nodes.values()] == [
        (RaftRole.LEADER, 1), (RaftRole.FOLLOWER, 1), (RaftRole.PRE_CANDIDATE, 1)
    ]  # fmt: skip


def test_a_stale_leader_learns_the_new_term_from_an_append_answer() -> None:
    cluster = Cluster()
    cluster.elect(1)
    cluster.cut = {1}
    cluster.elect(2)  # after node 2's timer ran out, node 3 no longer holds a lease
    cluster.cut = set()
    cluster.nodes[1].propose(b"x", cluster.now_ms)  # node 1 still believes it leads
    cluster.flush(1)
    cluster.deliver(lambda m: m.sender == 1 and m.recipient == 3)
    assert cluster.take(lambda m: isinstance(m, AppendResponse) and m.recipient == 1) == [
        AppendResponse(3, 1, term=2, success=False, match_index=0, hint_index=0)
    ]
    cluster.nodes[1].step(AppendResponse(3, 1, 2, False, 0, 0), cluster.now_ms)
    assert (cluster.nodes[1].role, cluster.nodes[1].term) == (RaftRole.FOLLOWER, 2)


def test_check_quorum_a_leader_that_hears_from_no_majority_steps_down() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    cluster.cut = {2, 3}
    cluster.tick(1, by_ms=TIMEOUT_MS - 1)
    assert leader.role is RaftRole.LEADER
    cluster.tick(1, by_ms=1)
    assert (leader.role, leader.term, leader.leader_id) == (RaftRole.FOLLOWER, 1, None)
    assert leader.propose(b"x", cluster.now_ms) is None


def test_a_longer_check_quorum_keeps_a_leader_through_a_pause_of_its_followers() -> None:
    config = RaftConfig(
        election_timeout_ms=TIMEOUT_MS, heartbeat_interval_ms=100, check_quorum_ms=3 * TIMEOUT_MS
    )
    cluster = Cluster(config=config)
    leader = cluster.elect(1)
    cluster.cut = {2, 3}  # both followers silent, as on a saturated event loop
    cluster.tick(1, by_ms=3 * TIMEOUT_MS - 1)
    assert leader.role is RaftRole.LEADER
    cluster.tick(1, by_ms=1)
    assert (leader.role, leader.term, leader.leader_id) == (RaftRole.FOLLOWER, 1, None)


def test_check_quorum_shorter_than_an_election_is_refused() -> None:
    with pytest.raises(ValueError, match="check_quorum_ms must be at least"):
        RaftConfig(election_timeout_ms=1000, heartbeat_interval_ms=100, check_quorum_ms=999)


def test_one_follower_answering_keeps_the_leader_of_three() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    cluster.cut = {3}
    for _ in range(30):
        cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
        cluster.deliver()
    assert leader.role is RaftRole.LEADER
    progress = leader.replica_progress()
    assert progress[1] == ReplicaProgress(match_index=1, last_contact_ms=cluster.now_ms)
    assert progress[2].last_contact_ms == cluster.now_ms
    assert progress[3].last_contact_ms == 2 * TIMEOUT_MS  # the election
    assert cluster.nodes[2].replica_progress() == {}


def test_nodes_outside_the_voters_never_campaign_and_are_not_heard() -> None:
    observer = RaftNode(9, (1, 2, 3), EMPTY, CONFIG, Random(9), 0)
    observer.tick(10 * TIMEOUT_MS)
    assert observer.role is RaftRole.FOLLOWER and not observer.has_ready()
    cluster = Cluster()
    cluster.nodes[1].step(VoteRequest(9, 1, 5, 0, 0, False, False), 0)
    assert cluster.nodes[1].term == 0 and not cluster.nodes[1].has_ready()


# -- leadership transfer ------------------------------------------------------------------


def test_transfer_brings_the_target_up_to_date_then_it_wins_despite_the_lease() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    cluster.cut = {2}
    assert leader.propose(b"a", cluster.now_ms) == 2
    cluster.flush(1)
    cluster.deliver()
    cluster.cut = set()
    assert leader.transfer_leadership(2, cluster.now_ms)
    assert leader.transferring_to == 2
    assert leader.propose(b"refused", cluster.now_ms) is None
    cluster.flush(1)
    cluster.deliver(lambda m: not isinstance(m, TimeoutNow))
    assert cluster.take(lambda m: isinstance(m, TimeoutNow)) == [TimeoutNow(1, 2, 1)]

    cluster.nodes[2].step(TimeoutNow(1, 2, 1), cluster.now_ms)
    (ready,) = cluster.flush(2)
    assert ready.hard_state == HardState(term=2, voted_for=2)  # no pre-vote
    assert all(m.leadership_transfer for m in sent(ready, VoteRequest))
    cluster.deliver()
    assert [(n.role, n.term) for n in cluster.nodes.values()] == [
        (RaftRole.FOLLOWER, 2), (RaftRole.LEADER, 2), (RaftRole.FOLLOWER, 2)
    ]  # fmt: skip
    assert [e.data for e in cluster.applied[2]] == [b"", b"a", b""]  # with its own no-op


def test_transfer_picks_the_most_up_to_date_voter_and_gives_up_after_a_timeout() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    cluster.cut = {2}
    leader.propose(b"a", cluster.now_ms)
    cluster.flush(1)
    cluster.deliver()
    assert leader.transfer_leadership(None, cluster.now_ms)
    assert leader.transferring_to == 3  # it has entry 2, node 2 has not
    cluster.cut = {3}  # the TimeoutNow is lost, and so is node 3
    for _ in range(9):
        cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
        cluster.deliver()
    assert leader.transferring_to == 3 and leader.propose(b"b", cluster.now_ms) is None
    cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
    assert leader.transferring_to is None and leader.role is RaftRole.LEADER
    assert leader.propose(b"b", cluster.now_ms) == 3


def test_only_a_leader_with_another_voter_can_transfer() -> None:
    cluster = Cluster()
    assert not cluster.nodes[1].transfer_leadership(None, 0)
    alone = Cluster(voters=(1,))
    leader = alone.elect(1)
    assert not leader.transfer_leadership(None, 0)
    assert not leader.transfer_leadership(1, 0)


# -- a single voter -----------------------------------------------------------------------


def test_a_single_voter_elects_itself_at_its_first_tick_and_commits_once_persisted() -> None:
    node = RaftNode(1, (1,), EMPTY, CONFIG, Random(1), 0)
    node.tick(0)
    assert (node.role, node.term, node.leader_id) == (RaftRole.LEADER, 1, 1)
    ready = node.ready()
    assert ready.hard_state == HardState(term=1, voted_for=1)
    assert ready.entries == (Entry(1, 1, b""),) and ready.committed == ()
    assert node.commit_index == 0  # not on disk yet
    node.advance(ready)
    assert node.commit_index == 1
    assert node.ready().committed == (Entry(1, 1, b""),)


def test_a_single_voter_commits_proposals() -> None:
    cluster = Cluster(voters=(1,))
    node = cluster.elect(1)
    assert node.propose(b"x", cluster.now_ms) == 2
    cluster.flush(1)
    assert [e.data for e in cluster.applied[1]] == [b"", b"x"]
    assert node.applied_index == node.commit_index == 2


# -- the Ready contract ----------------------------------------------------------------


def test_ready_must_be_advanced_before_the_next() -> None:
    node = RaftNode(1, (1,), EMPTY, CONFIG, Random(1), 0)
    node.tick(0)
    ready = node.ready()
    assert not node.has_ready()
    with pytest.raises(RuntimeError):
        node.ready()
    with pytest.raises(RuntimeError):
        node.advance(Ready(entries=(Entry(1, 1, b""),)))
    node.propose(b"meanwhile", 0)  # inputs between ready() and advance() wait for the next
    node.advance(ready)
    assert node.ready().entries == (Entry(2, 1, b"meanwhile"),)


def test_proposals_need_data_and_a_leader() -> None:
    cluster = Cluster()
    assert cluster.nodes[1].propose(b"x", 0) is None
    leader = cluster.elect(1)
    with pytest.raises(ValueError):
        leader.propose(b"", cluster.now_ms)


def test_role_changes_are_logged_with_the_node_id(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="strom.raft.core"):
        Cluster().elect(1)
    lines = [r.getMessage() for r in caplog.records]
    assert "[node 1] became pre-candidate in term 0" in lines
    assert "[node 1] became candidate in term 1" in lines
    assert "[node 1] became leader in term 1" in lines
    assert "[node 2] became follower in term 1 (leader 1)" in lines
