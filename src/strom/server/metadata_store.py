"""The one interface between strom's controller and wherever the metadata is kept.

Two stores implement it: the built-in Raft quorum (raft_driver.RaftDriver, the default)
and ZooKeeper (zookeeper/store.ZooKeeperStore, chosen by `zookeeper.connect`). Everything
above it is the same for both: ControllerService takes pure decisions against the
MetadataImage and hands their records to `propose`; the store makes them durable, in
order, and applies each committed entry to the node's MetadataState, from which the
broker serves clients and other brokers fetch. Brokers register, heartbeat and send
AlterPartition to the active controller the same way with either store.

What a store owns:
- choosing the active controller (`is_leader`, `leader_id`) and a number that grows with
  every new controller (`term`: the Raft term, or ZooKeeper's controller epoch); after any
  change it calls the `on_change` callback it was built with, and the broker activates or
  deactivates its ControllerService;
- `propose(data)`: accept one encoded entry while leading and return its offset, or raise
  NotMetadataLeader. Offsets grow by one within a term and keep growing across terms. The entry is
  applied to MetadataState once durable; if that cannot happen the store stops leading
  (and the controller fails the waiting decisions);
- `controller_endpoint(node_id)`: where another node reaches that controller.

A third store (etcd, say) implements these members, with leadership from a lease or
an election key, `propose` as a conditional transaction on a key that fences older
controllers, and a reader that builds the image from its keys when it takes over, as
zookeeper/store.py does with metadata/znodes.py. See docs/metadata-stores.md.
"""

from __future__ import annotations

from typing import Protocol


class NotMetadataLeader(Exception):
    """`propose` on a store that is not leading; `leader_id` is the leader it knows of."""

    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"not the leader (leader: {leader_id})")
        self.leader_id = leader_id


class MetadataStore(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def term(self) -> int: ...

    @property
    def failure(self) -> BaseException | None: ...

    def propose(self, data: bytes) -> int: ...

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None: ...

    async def stop(self) -> None: ...
