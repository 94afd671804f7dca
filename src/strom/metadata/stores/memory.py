"""An in-memory metadata store for tests: one process, no sockets, no disk, no clock.

Several nodes' `MemoryStore`s share one `MemoryLog`, so the controller and broker services
of a small cluster can run against each other in one test. The log commits every entry
the moment it is proposed, in order, and delivers the committed entries to every started
node's metadata (the AppliedMetadata port) in that order:

- with a running event loop, on the loop's next turn (`call_soon`), so that a proposer
  registers what it waits for before the entry is applied, as with a real store;
- or when the test calls `deliver()` (always allowed; with `auto_deliver=False` the only
  way).

Leadership is the test's to decide: `elect(node_id)` starts a new term led by that node
(its first entry is an empty one of the new term, as a Raft leader's is), `resign()` ends
it. The log's lifecycle:

    no leader -> elect(n) -> led by n (term t) -> elect(m) -> led by m (term t + 1) ...
                                               -> resign() / n stops -> no leader ...

With `liveness=Liveness.SESSIONS` the test plays ZooKeeper's sessions: `set_live(ids)`
tells the active controller (through its StoreWatches port) which brokers are alive.
"""

from __future__ import annotations

import asyncio

from strom.metadata.stores.base import (
    ControllerListener,
    Liveness,
    NotMetadataLeader,
    QuorumDescription,
    StoreCapabilities,
    StorePorts,
)
from strom.metrics.latency import CommitTimer
from strom.raft.messages import Entry

QUORUM_REFUSAL = "this cluster keeps its metadata in memory: there is no Raft quorum to describe"


class MemoryLog:
    """The committed metadata log shared by the MemoryStores of one test cluster."""

    def __init__(
        self, *, liveness: Liveness = Liveness.HEARTBEATS, auto_deliver: bool = True
    ) -> None:
        self.capabilities = StoreCapabilities(
            liveness=liveness,
            follows_controller=False,
            controller_listener=ControllerListener.CONTROLLER,
            quorum_refusal=QUORUM_REFUSAL,
        )
        self.entries: list[Entry] = []
        self.term = 0
        self.leader_id: int | None = None
        self.live_brokers: frozenset[int] = frozenset()
        self._auto_deliver = auto_deliver
        self._stores: dict[int, MemoryStore] = {}
        self._scheduled = False

    def store(self, ports: StorePorts) -> MemoryStore:
        """A node's store on this log (started with `start()`)."""
        return MemoryStore(self, ports)

    # --- leadership (the test decides) -----------------------------------------------

    def elect(self, node_id: int) -> int:
        """Make `node_id` the leader of a new term; that term's number."""
        self.term += 1
        self.leader_id = node_id
        self._append(b"")
        self._notify()
        return self.term

    def resign(self) -> None:
        self.leader_id = None
        self._notify()

    def set_live(self, broker_ids: frozenset[int]) -> None:
        """The brokers whose sessions are alive (Liveness.SESSIONS); the leader hears."""
        self.live_brokers = frozenset(broker_ids)
        leader = self._stores.get(self.leader_id) if self.leader_id is not None else None
        watches = leader.ports.watches() if leader is not None else None
        if watches is not None:
            watches.on_live_brokers(self.live_brokers, "their session ended")

    # --- entries ----------------------------------------------------------------------

    def propose(self, node_id: int, data: bytes) -> int:
        if node_id != self.leader_id:
            raise NotMetadataLeader(self.leader_id)
        return self._append(data)

    def deliver(self) -> int:
        """Apply every committed entry to every started node that lacks it; how many
        entries were applied in all."""
        self._scheduled = False
        applied = 0
        for store in list(self._stores.values()):
            missing = self.entries[store.delivered :]
            if missing:
                store.delivered = len(self.entries)
                store.ports.metadata.apply(missing)
                applied += len(missing)
        self._notify()
        return applied

    def _append(self, data: bytes) -> int:
        index = len(self.entries) + 1
        self.entries.append(Entry(index, self.term, data))
        self._schedule()
        return index

    def _schedule(self) -> None:
        if not self._auto_deliver or self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: the test calls deliver()
        self._scheduled = True
        loop.call_soon(self.deliver)

    def _notify(self) -> None:
        for store in list(self._stores.values()):
            store.ports.on_change()

    def attach(self, store: MemoryStore) -> None:
        self._stores[store.node_id] = store
        self._schedule()

    def detach(self, store: MemoryStore) -> None:
        if self._stores.get(store.node_id) is store:
            del self._stores[store.node_id]
        if self.leader_id == store.node_id:
            self.resign()


class MemoryStore:
    """One node's view of a MemoryLog, as a MetadataStore (metadata/stores/base.py)."""

    name = "memory"
    failure: BaseException | None = None

    def __init__(self, log: MemoryLog, ports: StorePorts) -> None:
        self._log = log
        self.ports = ports
        self.node_id = ports.node_id
        self.delivered = 0
        """How many of the log's entries this node's metadata has had applied."""
        self._commit_timer = CommitTimer()

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._log.capabilities

    @property
    def leader_id(self) -> int | None:
        return self._log.leader_id

    @property
    def is_leader(self) -> bool:
        return self._log.leader_id == self.node_id

    @property
    def term(self) -> int:
        return self._log.term

    @property
    def live_brokers(self) -> frozenset[int]:
        return self._log.live_brokers

    def open(self) -> None:
        pass

    async def start(self) -> None:
        self._log.attach(self)

    async def stop(self) -> None:
        self._log.detach(self)

    def abandon(self) -> None:
        self._log.detach(self)

    def propose(self, data: bytes) -> int:
        return self._log.propose(self.node_id, data)

    @property
    def commit_timer(self) -> CommitTimer:
        return self._commit_timer  # never fed: a shared log in memory commits at once

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None:
        return None  # nodes share the log: nobody is reached over a network

    def describe_quorum(self) -> QuorumDescription | None:
        return None

    def peer_stream(self) -> None:
        return None
