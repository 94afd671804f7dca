"""The in-memory metadata store (metadata/stores/memory.py): several nodes share one log
that commits at once, in order; leadership is the test's; no sockets, no sleeps."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from strom.metadata.records import ClusterRecord, encode_entry
from strom.metadata.stores import (
    Advertised,
    ControllerListener,
    Liveness,
    MetadataStore,
    NotMetadataLeader,
    StorePorts,
)
from strom.metadata.stores.memory import MemoryLog, MemoryStore
from strom.server.metadata_state import MetadataState


class Node:
    """One node's side of the ports: its metadata, and what the store told it."""

    def __init__(self, log: MemoryLog, node_id: int) -> None:
        self.metadata = MetadataState(node_id)
        self.changes = 0
        self.failures: list[str] = []
        self.live: list[tuple[frozenset[int], str]] = []
        self.watching = False
        self.store = log.store(
            StorePorts(
                node_id=node_id,
                metadata=self.metadata,
                on_change=self._changed,
                fail=self.failures.append,
                watches=lambda: self if self.watching else None,
                advertised=lambda: Advertised("PLAINTEXT", "localhost", 9092),
                cluster_id=lambda: None,
                incarnation_id=uuid.UUID(int=node_id),
                rack=None,
                clock_ms=lambda: 0,
            )
        )

    def _changed(self) -> None:
        self.changes += 1

    def on_live_brokers(self, live: frozenset[int], reason: str) -> None:
        self.live.append((live, reason))

    async def adopt_topic(self, name: str, assignment: object, source: str) -> None:
        raise AssertionError("the memory store adopts nothing")

    async def apply_stored_config(self, *args: object) -> None:
        raise AssertionError("the memory store stores no configs by hand")


def started(log: MemoryLog, *node_ids: int) -> list[Node]:
    nodes = [Node(log, node_id) for node_id in node_ids]
    for node in nodes:
        asyncio.run(node.store.start())  # attaching needs no loop; start() is a coroutine
    return nodes


def entry(cluster_id: str) -> bytes:
    return encode_entry([ClusterRecord(cluster_id, "test")])


def test_it_is_a_metadata_store_with_heartbeat_liveness_and_no_quorum() -> None:
    log = MemoryLog(auto_deliver=False)
    (node,) = started(log, 1)
    store: MetadataStore = node.store  # the interface, checked by mypy on use
    caps = store.capabilities
    assert caps.liveness is Liveness.HEARTBEATS
    assert not caps.follows_controller
    assert caps.controller_listener is ControllerListener.CONTROLLER
    assert caps.quorum_refusal is not None and "no Raft quorum" in caps.quorum_refusal
    assert store.name == "memory"
    assert store.describe_quorum() is None
    assert store.peer_stream() is None
    assert store.controller_endpoint(1) is None
    assert store.failure is None
    assert store.live_brokers == frozenset()


def test_nothing_is_accepted_without_a_leader() -> None:
    log = MemoryLog(auto_deliver=False)
    (node,) = started(log, 1)
    with pytest.raises(NotMetadataLeader) as refused:
        node.store.propose(entry("c"))
    assert refused.value.leader_id is None
    assert (node.store.leader_id, node.store.is_leader, node.store.term) == (None, False, 0)


def test_an_elected_node_commits_in_order_and_every_node_applies_the_same_entries() -> None:
    log = MemoryLog(auto_deliver=False)
    one, two = started(log, 1, 2)
    assert log.elect(1) == 1
    assert one.store.is_leader and not two.store.is_leader
    assert (one.store.leader_id, two.store.leader_id, two.store.term) == (1, 1, 1)
    assert [one.store.propose(entry("a")), one.store.propose(entry("b"))] == [2, 3]
    assert one.metadata.applied_index == 0  # committed, not yet delivered
    assert log.deliver() == 6  # three entries (the term's empty first one too), two nodes
    for node in (one, two):
        assert (node.metadata.applied_index, node.metadata.applied_term) == (3, 1)
        assert node.metadata.image.cluster_id == "b"
        assert node.metadata.entries_from(1, 1 << 20)[1] == log.entries
    assert log.entries[0].data == b""
    assert log.deliver() == 0  # nothing new: delivered once


def test_offsets_keep_growing_across_terms_and_an_old_leader_is_refused() -> None:
    log = MemoryLog(auto_deliver=False)
    one, two = started(log, 1, 2)
    log.elect(1)
    one.store.propose(entry("a"))
    changes = two.changes
    assert log.elect(2) == 2
    assert two.changes > changes  # every node hears of the new leader
    with pytest.raises(NotMetadataLeader) as refused:
        one.store.propose(entry("late"))
    assert refused.value.leader_id == 2
    assert two.store.propose(entry("b")) == 4  # after 1 (term 1), 2, 3 (term 2's first)
    log.deliver()
    assert [(e.index, e.term) for e in log.entries] == [(1, 1), (2, 1), (3, 2), (4, 2)]
    assert one.metadata.applied_term == two.metadata.applied_term == 2


def test_a_node_started_late_catches_up_and_a_stopped_leader_leaves_no_leader() -> None:
    log = MemoryLog(auto_deliver=False)
    (one,) = started(log, 1)
    log.elect(1)
    one.store.propose(entry("a"))
    log.deliver()
    (late,) = started(log, 3)
    log.deliver()
    assert late.metadata.image.cluster_id == "a"
    asyncio.run(one.store.stop())
    assert (late.store.leader_id, log.leader_id) == (None, None)
    log.elect(3)
    late.store.propose(entry("b"))
    log.deliver()
    assert late.metadata.applied_index == 4
    assert one.metadata.applied_index == 2  # stopped: it hears no more


def test_with_sessions_the_leader_s_controller_hears_who_is_alive() -> None:
    log = MemoryLog(liveness=Liveness.SESSIONS, auto_deliver=False)
    one, two = started(log, 1, 2)
    assert one.store.capabilities.liveness is Liveness.SESSIONS
    log.set_live(frozenset({1, 2}))
    assert one.live == []  # no leader yet
    log.elect(1)
    one.watching = two.watching = True
    log.set_live(frozenset({1}))
    assert one.live == [(frozenset({1}), "their session ended")]
    assert two.live == []  # only the leader's controller
    assert two.store.live_brokers == frozenset({1})


def test_on_a_loop_entries_are_delivered_on_the_next_turn_in_order() -> None:
    async def scenario() -> list[tuple[int, str]]:
        log = MemoryLog()
        (one,) = started_here = [Node(log, 1)]
        await one.store.start()
        log.elect(1)
        seen: list[tuple[int, str]] = []
        one.metadata.subscribe(lambda image: seen.append((image.offset, image.cluster_id)))
        indexes = [one.store.propose(entry(name)) for name in "abc"]
        assert one.metadata.applied_index == 0  # the proposer may still register its waiter
        assert indexes == [2, 3, 4]
        assert await one.metadata.wait_for(4, timeout_s=5)
        assert started_here[0].metadata.image.cluster_id == "c"
        return seen

    seen = asyncio.run(scenario())
    assert seen[-1] == (4, "c")
    assert [offset for offset, _ in seen] == sorted(offset for offset, _ in seen)


def test_stores_of_one_log_are_distinct_per_node() -> None:
    log = MemoryLog(auto_deliver=False)
    one, two = started(log, 1, 2)
    assert isinstance(one.store, MemoryStore) and one.store is not two.store
    assert (one.store.node_id, two.store.node_id) == (1, 2)
