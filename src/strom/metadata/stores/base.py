"""The one interface between strom's server and wherever the metadata is kept.

Three stores implement it (built by `strom.metadata.stores.build_store`): the built-in
Raft quorum (`raft/`, the default), ZooKeeper (`zookeeper/`, chosen by
`zookeeper.connect`) and an in-memory log for tests (`memory.py`). Everything above it is
the same for all: ControllerService takes pure decisions against the MetadataImage and
hands their records to `propose`; the store makes them durable, in order, and applies each
committed entry to the node's metadata (the `AppliedMetadata` port), from which the broker
serves clients and other brokers fetch. Brokers register, heartbeat and send
AlterPartition to the active controller the same way with any store.

What a store owns:
- choosing the active controller (`is_leader`, `leader_id`) and a number that grows with
  every new controller (`term`: the Raft term, or ZooKeeper's controller epoch); after any
  change it calls the `on_change` port, and the broker activates or deactivates its
  ControllerService;
- `propose(data)`: accept one encoded entry while leading and return its offset, or raise
  NotMetadataLeader. Offsets grow by one within a term and keep growing across terms. The
  entry is applied to the metadata once durable; if that cannot happen the store stops
  leading (and the controller fails the waiting decisions);
- `controller_endpoint(node_id)`: where another node reaches that controller;
- `capabilities`: what differs between stores, so that no code outside the stores ever
  asks which store it has (see StoreCapabilities).

A store never sees the Broker: it gets the narrow ports of StorePorts (the metadata it
applies to, the callbacks it reports to, this node's advertised address) and the config
values it needs. See docs/metadata-stores.md.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from strom.metadata.acl_records import ResourcePattern
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import BrokerEndpoint, ConfigResourceType, UserScramCredentialRecord
from strom.metrics.latency import CommitTimer
from strom.raft.messages import Entry, Snapshot
from strom.security.acls import AclBinding


class NotMetadataLeader(Exception):
    """`propose` on a store that is not leading; `leader_id` is the leader it knows of."""

    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"not the leader (leader: {leader_id})")
        self.leader_id = leader_id


# --- capabilities ------------------------------------------------------------------------


class Liveness(Enum):
    """How the active controller learns that a broker is alive."""

    HEARTBEATS = "heartbeats"
    """A broker silent for broker.session.timeout.ms is fenced (Raft, memory)."""
    SESSIONS = "sessions"
    """The store's sessions say (`live_brokers`); heartbeats only unfence (ZooKeeper)."""


class ControllerListener(Enum):
    """Where other nodes reach the active controller's APIs on this node."""

    CONTROLLER = "controller"
    """The CONTROLLER listeners (controller.listener.names), as in KRaft."""
    CLIENT = "client"
    """The client listeners, which then serve the controller's APIs too (ZooKeeper mode)."""


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    liveness: Liveness
    follows_controller: bool
    """True: this node follows the metadata by fetching it from the active controller the
    store names (`leader_id`, `controller_endpoint`), except while it leads itself. False:
    the store applies every committed entry on this node itself (the Raft log)."""
    controller_listener: ControllerListener
    quorum_refusal: str | None
    """Why DescribeQuorum is refused (there is no quorum to describe), or None when
    `describe_quorum` answers it."""


# --- what a store reports -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VoterProgress:
    """One voter as the leader sees it, in DescribeQuorum's terms."""

    node_id: int
    log_end_offset: int  # one past its last entry, as Kafka reports it; -1 when unknown
    last_fetch_timestamp: int  # ms; -1 when unknown
    last_caught_up_timestamp: int  # ms; -1 when unknown or behind


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    """The quorum as its leader sees it (DescribeQuorum)."""

    leader_epoch: int
    high_watermark: int
    voters: tuple[VoterProgress, ...]
    endpoints: tuple[tuple[int, str, int], ...]  # (node id, host, port) of every voter


class PeerStream(Protocol):
    """One inbound stream of another node of the store (Raft's messages)."""

    def receive(self, api_key: int, payload: bytes) -> None:
        """One frame; PrivatePayloadError when it is not acceptable."""
        ...


# --- ports: what a store gets from the node it runs in ----------------------------------


class AppliedMetadata(Protocol):
    """The node's committed metadata (server/metadata_state.py): what a store drives."""

    def apply(self, entries: Sequence[Entry]) -> None: ...

    def restore(self, snapshot: Snapshot) -> None: ...

    def reset(self, image: MetadataImage, *, index: int, term: int) -> None: ...

    def take_snapshot(self) -> Snapshot | None:
        """The applied state as a snapshot, or None when nothing was applied yet."""
        ...


class StoreWatches(Protocol):
    """The active controller's callbacks for what a store watches (ZooKeeper's znodes)."""

    def on_live_brokers(self, live: frozenset[int], reason: str) -> None:
        """The brokers alive now; `reason` says why the others are gone (for the log)."""
        ...

    async def adopt_topic(
        self, name: str, assignment: Mapping[int, Sequence[int]], source: str
    ) -> None:
        """A topic written into the store by hand; `source` names it for the log."""
        ...

    async def apply_stored_config(
        self, kind: ConfigResourceType, name: str, config: Mapping[str, str], source: str
    ) -> None:
        """A config written into the store; `source` names it for the log."""
        ...

    async def apply_stored_scram(
        self, name: str, credentials: Sequence[UserScramCredentialRecord], source: str
    ) -> None:
        """A user's SCRAM credentials written into the store (all it has now)."""
        ...

    async def apply_stored_quotas(
        self, entity: QuotaEntity, quotas: Mapping[str, float], source: str
    ) -> None:
        """A client quota entity's quotas written into the store (all it has now)."""
        ...

    async def apply_stored_acls(
        self, resource: ResourcePattern, bindings: Sequence[AclBinding], source: str
    ) -> None:
        """A resource pattern's ACL bindings written into the store (all it has now)."""
        ...


@dataclass(frozen=True, slots=True)
class Advertised:
    """This node's inter-broker listener, as other nodes reach it, and every client
    listener it advertises (the inter-broker one first)."""

    listener_name: str
    host: str
    port: int
    endpoints: tuple[BrokerEndpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class StorePorts:
    node_id: int
    metadata: AppliedMetadata
    on_change: Callable[[], None]
    """Called after every change of leadership (and of what was applied)."""
    fail: Callable[[str], None]
    """Stops the node: the store cannot go on (logged once by the node)."""
    watches: Callable[[], StoreWatches | None]
    """The active controller on this node, or None while it is not active."""
    advertised: Callable[[], Advertised]
    """Known once the listeners are bound."""
    cluster_id: Callable[[], str | None]
    incarnation_id: uuid.UUID
    rack: str | None
    clock_ms: Callable[[], int]


# --- the interface ------------------------------------------------------------------------


class MetadataStore(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> StoreCapabilities: ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def is_leader(self) -> bool: ...

    @property
    def term(self) -> int: ...

    @property
    def failure(self) -> BaseException | None: ...

    @property
    def live_brokers(self) -> frozenset[int]:
        """With Liveness.SESSIONS, the brokers whose session is alive, as the active
        controller last saw them; empty otherwise."""
        ...

    def open(self) -> None:
        """Read what is on disk back (before any listener serves); no I/O to peers yet."""
        ...

    async def start(self) -> None:
        """Join: connect, elect, follow. ConnectionError when the store cannot be reached."""
        ...

    async def stop(self) -> None:
        """Stop, releasing leadership."""
        ...

    def abandon(self) -> None:
        """Let go at once, as a process that dies does (strom.testing's crash): no
        leadership handed over, files closed without a last fsync. Called after the
        node's tasks were cancelled."""
        ...

    def propose(self, data: bytes) -> int: ...

    @property
    def commit_timer(self) -> CommitTimer:
        """How long this node's proposals took to commit while it led (the metrics)."""
        ...

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None: ...

    def describe_quorum(self) -> QuorumDescription | None:
        """The quorum while this node leads it; None otherwise (or with no quorum)."""
        ...

    def peer_stream(self) -> PeerStream | None:
        """A stream for another node's store messages, or None when this store takes none."""
        ...
