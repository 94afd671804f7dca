"""Transcripts of Raft log replication: commit rules, conflicts, batching, stale messages,
snapshots and restarts. The `Cluster` harness is test_core.py's."""

from __future__ import annotations

from test_core import CONFIG, Cluster, sent

from strom.raft.core import RaftConfig, RaftRole
from strom.raft.messages import (
    AppendRequest,
    AppendResponse,
    Entry,
    HardState,
    Message,
    Restored,
    Snapshot,
    SnapshotRequest,
    VoteRequest,
    VoteResponse,
)


def log_of(*terms_and_data: tuple[int, bytes]) -> tuple[Entry, ...]:
    return tuple(Entry(i, term, data) for i, (term, data) in enumerate(terms_and_data, start=1))


def test_the_leader_counts_its_own_entries_only_once_persisted() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    cluster.cut = {3}
    assert leader.propose(b"x", cluster.now_ms) == 2
    ready = leader.ready()  # handed to the shell, not yet on the leader's disk
    cluster.in_flight.extend(ready.messages)
    cluster.deliver()
    assert cluster.nodes[2].last_index == 2
    assert leader.commit_index == 1  # node 2 alone is no majority of three
    leader.advance(ready)
    assert leader.commit_index == 2


def test_an_older_terms_entry_commits_only_with_one_of_the_leaders_term() -> None:
    """Raft §5.4.2 (Figure 8): node 1 (term 4) gets its term-2 entry onto a majority,
    but node 3 (last term 3) could still win an election and overwrite it - until the
    leader's own no-op is on a majority too."""
    restored = {
        1: Restored(HardState(3, None), None, log_of((1, b"a"), (2, b"bb"))),
        2: Restored(HardState(3, None), None, log_of((1, b"a"))),
        3: Restored(HardState(3, 3), None, log_of((1, b"a"), (3, b""))),
    }
    cluster = Cluster(restored=restored, config=RaftConfig(max_append_bytes=1))
    cluster.cut = {3}
    cluster.tick(1, by_ms=2 * CONFIG.election_timeout_ms)
    cluster.deliver(lambda m: isinstance(m, (VoteRequest, VoteResponse)))
    leader = cluster.nodes[1]  # node 2 voted for it (node 3 would not: its log is newer)
    assert (leader.role, leader.term, leader.last_index, leader.term_at(3)) == (
        RaftRole.LEADER, 4, 3, 4
    )  # fmt: skip

    def no_op_node_2_could_take(m: Message) -> bool:
        to_2 = isinstance(m, AppendRequest) and m.recipient == 2 and m.prev_index == 2
        return to_2 and cluster.nodes[2].last_index == 2

    cluster.deliver(lambda m: not no_op_node_2_could_take(m))
    assert cluster.nodes[2].last_index == 2  # node 2 took entry 2 (term 2), not the no-op
    assert leader.commit_index == 0  # entry 2 is on a majority, but not of term 4

    cluster.deliver()
    assert leader.commit_index == 3


def test_a_follower_drops_its_conflicting_suffix_found_through_the_hint() -> None:
    restored = {
        1: Restored(HardState(3, None), None, log_of((1, b"a"), (1, b"b"), (3, b"c"))),
        2: Restored(
            HardState(2, None), None, log_of((1, b"a"), (1, b"b"), (2, b"x"), (2, b"y"), (2, b"z"))
        ),
        3: Restored(HardState(3, None), None, log_of((1, b"a"))),
    }
    cluster = Cluster(restored=restored)
    cluster.cut = {3}
    leader = cluster.elect(1)
    assert leader.term == 4

    answers = [m for r in cluster.readies[2] for m in sent(r, AppendResponse)]
    assert answers[0] == AppendResponse(2, 1, 4, success=False, match_index=0, hint_index=3)
    (fix,) = [r for r in cluster.readies[2] if r.truncate_from is not None]
    assert fix.truncate_from == 3
    assert fix.entries == (Entry(3, 3, b"c"), Entry(4, 4, b""))
    assert cluster.nodes[2].log_entries() == leader.log_entries()
    assert leader.commit_index == 4


def test_appends_are_batched_up_to_max_append_bytes_but_carry_at_least_one_entry() -> None:
    cluster = Cluster(config=RaftConfig(max_append_bytes=10))
    leader = cluster.elect(1)
    cluster.cut = {2, 3}
    for data in (b"1111", b"2222", b"3333", b"4444", b"this one is too big"):
        leader.propose(data, cluster.now_ms)
    cluster.flush(1)
    cluster.in_flight.clear()
    cluster.cut = set()
    cluster.tick(1, by_ms=CONFIG.election_timeout_ms // 2)  # unanswered entries go again
    cluster.deliver()
    to_2 = [
        [e.data for e in m.entries]
        for r in cluster.readies[1]
        for m in sent(r, AppendRequest)
        if m.recipient == 2 and m.entries
    ]
    assert to_2[-3:] == [[b"1111", b"2222"], [b"3333", b"4444"], [b"this one is too big"]]
    assert cluster.nodes[2].last_index == 6


def test_duplicated_and_reordered_appends_never_shorten_a_log() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    for data in (b"a", b"b", b"c"):
        leader.propose(data, cluster.now_ms)
        cluster.flush(1)
        cluster.deliver()
    follower = cluster.nodes[2]
    log_before, commit_before = follower.log_entries(), follower.commit_index
    appends = [m for r in cluster.readies[1] for m in sent(r, AppendRequest) if m.recipient == 2]
    for message in reversed(appends):  # every old append again, newest first
        follower.step(message, cluster.now_ms)
    for ready in cluster.flush(2):
        assert ready.truncate_from is None and ready.entries == ()
        assert all(m.success for m in sent(ready, AppendResponse))
    assert follower.log_entries() == log_before and follower.commit_index == commit_before


def test_a_follower_whose_entries_were_compacted_away_gets_the_snapshot() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    cluster.cut = {3}
    for data in (b"a", b"b", b"c"):
        leader.propose(data, cluster.now_ms)
    cluster.flush(1)
    cluster.deliver()
    assert leader.applied_index == 4
    snapshot = Snapshot(index=4, term=1, data=b"state after 4")
    leader.compact(snapshot)
    assert leader.log_entries() == () and leader.snapshot_index == 4

    cluster.cut = set()
    cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
    cluster.deliver()
    follower = cluster.nodes[3]
    assert [r.snapshot for r in cluster.readies[3] if r.snapshot] == [snapshot]
    assert [r.apply_snapshot for r in cluster.readies[3] if r.apply_snapshot] == [snapshot]
    answers = [m for r in cluster.readies[3] for m in sent(r, AppendResponse)]
    assert AppendResponse(3, 1, 1, success=True, match_index=4, hint_index=0) in answers
    assert (follower.commit_index, follower.applied_index, follower.last_index) == (4, 4, 4)

    leader.propose(b"d", cluster.now_ms)
    cluster.flush(1)
    cluster.deliver()
    cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
    cluster.deliver()
    assert [e.data for e in cluster.applied[3]] == [b"", b"d"]  # the no-op came before the cut


def test_a_snapshot_that_conflicts_with_the_log_replaces_all_of_it() -> None:
    cluster = Cluster(
        restored={2: Restored(HardState(2, None), None, log_of((1, b"a"), (2, b"x"), (2, b"y")))}
    )
    follower = cluster.nodes[2]
    snapshot = Snapshot(index=2, term=3, data=b"state")
    follower.step(SnapshotRequest(1, 2, 3, snapshot), 0)
    ready = follower.ready()
    assert (ready.snapshot, ready.apply_snapshot, ready.truncate_from) == (snapshot, snapshot, 3)
    assert ready.hard_state == HardState(3, None) and ready.entries == ()
    assert ready.messages == (AppendResponse(2, 1, 3, True, 2, 0),)
    assert (follower.last_index, follower.last_term, follower.leader_id) == (2, 3, 1)


def test_a_snapshot_that_matches_the_log_keeps_the_entries_after_it() -> None:
    entries = log_of((1, b"a"), (3, b"b"), (3, b"c"))
    cluster = Cluster(restored={2: Restored(HardState(3, None), None, entries)})
    follower = cluster.nodes[2]
    snapshot = Snapshot(index=2, term=3, data=b"state")
    follower.step(SnapshotRequest(1, 2, 3, snapshot), 0)
    ready = follower.ready()
    assert (ready.snapshot, ready.truncate_from, ready.entries) == (snapshot, None, ())
    assert follower.log_entries() == (Entry(3, 3, b"c"),)
    assert follower.commit_index == 2
    follower.advance(ready)
    assert follower.applied_index == 2


def test_a_snapshot_no_newer_than_the_commit_index_is_only_acknowledged() -> None:
    cluster = Cluster()
    cluster.elect(1)
    follower = cluster.nodes[2]
    follower.step(SnapshotRequest(1, 2, 1, Snapshot(1, 1, b"old")), cluster.now_ms)
    ready = follower.ready()
    assert ready.snapshot is None and ready.apply_snapshot is None
    assert ready.messages == (AppendResponse(2, 1, 1, True, 1, 0),)


def test_a_restarted_node_applies_its_entries_again_once_the_leader_tells_the_commit() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    for data in (b"a", b"b"):
        leader.propose(data, cluster.now_ms)
    cluster.flush(1)
    cluster.deliver()
    cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
    cluster.deliver()
    old = cluster.nodes[2]
    assert [e.data for e in cluster.applied[2]] == [b"", b"a", b"b"]

    # from a snapshot at 2 and the entry after it
    snapshot = Snapshot(index=2, term=1, data=b"state after 2")
    disk = Restored(HardState(old.term, old.voted_for), snapshot, old.log_entries()[2:])
    node = cluster.start(2, disk)
    assert (node.role, node.term, node.last_index) == (RaftRole.FOLLOWER, 1, 3)
    assert (node.commit_index, node.applied_index) == (2, 2)
    assert not node.has_ready()
    cluster.tick(1, by_ms=CONFIG.heartbeat_interval_ms)
    cluster.deliver()
    assert [e.data for e in cluster.applied[2]] == [b"b"]
    assert (node.commit_index, node.applied_index, node.leader_id) == (3, 3, 1)


def test_a_restarted_leader_keeps_its_term_and_vote_and_follows() -> None:
    cluster = Cluster()
    leader = cluster.elect(1)
    disk = Restored(HardState(leader.term, leader.voted_for), None, leader.log_entries())
    node = cluster.start(1, disk)
    assert (node.role, node.term, node.voted_for, node.commit_index) == (RaftRole.FOLLOWER, 1, 1, 0)
    cluster.tick(1, by_ms=2 * CONFIG.election_timeout_ms)
    cluster.deliver()
    assert node.role is RaftRole.LEADER and node.term == 2
    assert node.commit_index == 2 and [e.data for e in cluster.applied[1]] == [b"", b""]
