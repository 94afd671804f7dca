"""What each group of handlers reaches: the ports the broker hands them, never itself.

A handler is `async (context, request) -> response body | None`, where the context is a
frozen dataclass of the few services its APIs use. The broker builds each context once,
at construction (handlers/__init__.py binds them into the dispatch tables), so a test can
build one around real partition logs and a replayed metadata image, without a broker or a
socket. Values that change while the broker runs (the metadata image, whether it is
stopping) are read through a port at each request, never copied into the context.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.fetch.sessions import FetchSessionCache
from strom.group.consumer.heartbeat import ConsumerHeartbeatRequest, ConsumerHeartbeatResult
from strom.group.consumer.state import ConsumerGroup
from strom.group.offsets import CommitRequest
from strom.group.records import OffsetCommitValue
from strom.group.requests import JoinRequest, LeavingMember, Output, SyncRequest
from strom.group.share.heartbeat import (
    ShareDescribedGroup,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
)
from strom.group.state import GroupDescription, JoinResult, SyncResult, TopicPartition
from strom.group.txn_offsets import StableOffsets, TxnCommitRequest
from strom.metadata.brokers import BrokerResult
from strom.metadata.elect_leaders import ElectionType, TopicElections, TopicPartitions
from strom.metadata.image import MetadataImage
from strom.metadata.isr import AlterPartitionResult, IsrChange
from strom.metadata.reassignments import OngoingReassignment, PartitionTarget, ReassignmentResult
from strom.metadata.records import MetadataRecord
from strom.metadata.stores.base import PeerStream, QuorumDescription, StoreCapabilities
from strom.metrics.traffic import Tally, TopicTraffic
from strom.protocol.codec import Request
from strom.raft.messages import Entry, Snapshot
from strom.security.authorizer import Authorizer
from strom.server.controller import NotController
from strom.server.controller_link import LocalController
from strom.server.partitions import PartitionManager
from strom.server.txn_verifier import VerificationGuard, VerifyOperation
from strom.txn.coordinator import TxnResult
from strom.txn.metadata import TxnEntry

T = TypeVar("T")


class MetadataView(Protocol):
    """The committed metadata this node serves from (server/metadata_state.py)."""

    @property
    def image(self) -> MetadataImage: ...


class ProducerIds(Protocol):
    """Producer ids for InitProducerId (server/producer_ids.py)."""

    async def next_id(self) -> int:
        """A new producer id; ProducerIdsUnavailable when none can be had now."""
        ...


class TxnCoordination(Protocol):
    """The transaction coordinator's shell (server/transactions.py: TxnService) as the
    transactional handlers use it.

    Each request method raises TxnUnavailable (server/transactions.py) unless this broker
    coordinates `txn_id` now, with the error code the client gets; otherwise it answers
    with the core's TxnResult (strom/txn/coordinator.py) once its record, if any, is
    durable."""

    @property
    def num_partitions(self) -> int:
        """How many partitions `__transaction_state` has (or will have once created)."""
        ...

    async def ensure_topic(self) -> None:
        """Create `__transaction_state` unless it exists (TxnUnavailable when it cannot)."""
        ...

    def leader_of(self, index: int) -> int:
        """The leader of partition `index` of `__transaction_state` now; -1 for none."""
        ...

    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> TxnResult: ...

    async def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        *,
        transaction_version: int,
    ) -> TxnResult: ...

    async def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> TxnResult: ...

    async def end_txn(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, *, transaction_version: int
    ) -> TxnResult: ...

    def entry(self, txn_id: str) -> TxnEntry | None:
        """The committed state of `txn_id`; None when there is no such id here."""
        ...

    def entries(self) -> list[TxnEntry]:
        """Every transactional id this broker coordinates."""
        ...


class TxnVerification(Protocol):
    """KIP-890's check before a transactional write (server/txn_verifier.py:
    TxnVerifier): whether the coordinator of `txn_id` has the partitions in the open
    transaction of (producer_id, producer_epoch), asked here or of the coordinator's
    broker."""

    async def verify(
        self,
        txn_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[tuple[str, int]],
        operation: VerifyOperation,
    ) -> dict[tuple[str, int], ErrorCode]:
        """The partitions that failed, each with its error (as Kafka's
        AddPartitionsToTxnManager maps them); an empty dict: all verified (or added)."""
        ...

    def guard(self, topic: str, index: int, producer_id: int) -> VerificationGuard:
        """Watch for a marker of `producer_id` on the partition while its verification is
        on the way: the append must not follow one (the transaction it verified ended)."""
        ...

    def release(self, guard: VerificationGuard) -> None:
        """The append the guard watched for is done (or given up)."""
        ...


@dataclass(frozen=True, slots=True)
class ProduceContext:
    """Produce and InitProducerId."""

    node_id: int
    metadata: MetadataView
    partitions: PartitionManager
    producer_ids: ProducerIds
    txns: TxnCoordination
    """InitProducerId with a transactional id."""
    verifier: TxnVerification
    """Transactional produces: is the partition in the producer's transaction?"""
    produced: Tally = field(default_factory=Tally)
    """Bytes and records appended, per topic (metrics)."""
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now; None: no authorizer configured."""


@dataclass(frozen=True, slots=True)
class FetchContext:
    """Fetch, ListOffsets and OffsetForLeaderEpoch."""

    metadata: MetadataView
    partitions: PartitionManager
    stopping: Callable[[], bool]
    """The broker is shutting down: long polls answer at once."""
    sessions: FetchSessionCache
    """The fetch sessions (KIP-227) of this broker."""
    traffic: TopicTraffic = field(default_factory=TopicTraffic)
    """Bytes and records sent to consumers and followers, per topic (metrics)."""
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now; None: no authorizer configured."""


# --- groups and offsets ---


class GroupCoordination(Protocol):
    """The group coordinator's shell (server/groups.py: GroupService) as the group,
    offset and FindCoordinator handlers use it.

    A decision of the core (heartbeat, leave, delete_groups, commit_offsets,
    delete_offsets) is made on what this broker coordinates now: the handler asks
    `coordinate` first, then hands the decision's output to `apply`, which returns once
    its records are durable. `coordinate`, `apply`, `join` and `sync` raise
    CoordinatorUnavailable (server/groups.py) with the error code the client gets."""

    @property
    def num_partitions(self) -> int:
        """How many partitions `__consumer_offsets` has (or will have once created)."""
        ...

    def leader_of(self, index: int) -> int:
        """The leader of partition `index` of `__consumer_offsets` now; -1 for none."""
        ...

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` unless it exists."""
        ...

    async def coordinate(self, group_id: str) -> None:
        """Return only if this broker coordinates `group_id` now."""
        ...

    async def apply(self, out: Output) -> None:
        """Carry out a decision: write its records and wait until they are durable."""
        ...

    async def join(self, join: JoinRequest) -> JoinResult: ...

    async def sync(self, sync: SyncRequest) -> SyncResult: ...

    async def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """Heartbeat, answered once the state it read is durable."""
        ...

    async def leave(
        self, group_id: str, leaving: list[LeavingMember]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """LeaveGroup: the group's error and one per member, once durable."""
        ...

    def describe(self, group_id: str) -> GroupDescription | None:
        """The committed state of `group_id`; None when there is no such group here."""
        ...

    def describe_all(self) -> list[GroupDescription]:
        """Every committed group this broker coordinates."""
        ...

    def delete_groups(self, group_ids: list[str]) -> tuple[list[ErrorCode], Output]: ...

    def commit_offsets(self, commit: CommitRequest) -> tuple[list[ErrorCode], Output]: ...

    def committed_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> list[tuple[TopicPartition, OffsetCommitValue | None]]: ...

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, list[ErrorCode], Output]: ...

    def stable_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[StableOffsets, Output]:
        """OffsetFetch with require_stable: answer once `apply(out)` returns."""
        ...

    def txn_offset_commit(self, commit: TxnCommitRequest) -> tuple[list[ErrorCode], Output]: ...


class ConsumerCoordination(Protocol):
    """KIP-848 consumer groups (server/consumer_groups.py: ConsumerGroupService)."""

    async def heartbeat(self, req: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat, answered once its records are durable; raises
        CoordinatorUnavailable (server/groups.py)."""
        ...

    def describe(self, group_id: str) -> ConsumerGroup | None:
        """The committed state of a KIP-848 group here; None when it is not one."""
        ...

    async def delete(self, group_id: str) -> ErrorCode:
        """Delete an empty KIP-848 group (its records; its offsets are the classic
        core's): NONE, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND or the coordinator error."""
        ...

    def check_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode:
        """OffsetFetch v9 by a member of a KIP-848 group: NONE, UNKNOWN_MEMBER_ID or
        STALE_MEMBER_EPOCH (NONE for a group of no member, or not a KIP-848 one)."""
        ...

    def assignor(self, group_id: str) -> str:
        """The server assignor the group uses (its members' choice, else the default)."""
        ...

    def group_ids(self) -> list[str]:
        """The KIP-848 groups this broker coordinates."""
        ...


class ShareCoordination(Protocol):
    """KIP-932 share groups' membership (server/share_groups.py: ShareGroupService)."""

    enabled: Callable[[], bool]
    """group.share.enable: when False the share-group APIs answer UNSUPPORTED_VERSION."""

    async def heartbeat(self, req: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        """ShareGroupHeartbeat, answered once its records are durable (and the state of
        share-partitions it asked for initialized); raises CoordinatorUnavailable."""
        ...

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareDescribedGroup | None]:
        """ShareGroupDescribe of a group coordinated here: its error and message, or
        its view (GROUP_ID_NOT_FOUND also for a group of another type)."""
        ...

    async def delete(self, group_id: str) -> ErrorCode:
        """Delete an empty share group and its share-partitions' state: NONE,
        NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND or an error."""
        ...

    def group_ids(self) -> list[str]:
        """The share groups this broker coordinates."""
        ...


@dataclass(frozen=True, slots=True)
class GroupContext:
    """FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
    DescribeGroups, DeleteGroups, OffsetCommit, OffsetFetch, OffsetDelete and
    TxnOffsetCommit."""

    metadata: MetadataView
    """The brokers (FindCoordinator's answer) and the topics (OffsetCommit's check)."""
    groups: GroupCoordination
    verifier: TxnVerification
    """TxnOffsetCommit: is the group's partition in the producer's transaction?"""
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now; None: no authorizer configured."""
    consumer: ConsumerCoordination | None = None
    """KIP-848 consumer groups; None where they are not served (some unit tests)."""
    share: ShareCoordination | None = None
    """KIP-932 share groups; None where they are not served (some unit tests)."""


class ShareStateLookup(Protocol):
    """Which broker is a share-partition's share coordinator (server/share_coordinator.py)."""

    @property
    def num_partitions(self) -> int: ...

    def leader_of(self, index: int) -> int: ...

    async def ensure_topic(self) -> None:
        """Create `__share_group_state` unless it exists; raises
        ShareCoordinatorUnavailable."""
        ...


@dataclass(frozen=True, slots=True)
class TxnContext:
    """FindCoordinator (groups and transactional ids), AddPartitionsToTxn,
    AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions and
    DescribeProducers (handlers/coordinator.py, transactions.py, txn_admin.py)."""

    node_id: int
    metadata: MetadataView
    """The brokers (FindCoordinator's answer) and the topics (AddPartitionsToTxn's check)."""
    partitions: PartitionManager
    """DescribeProducers: the producers of the partitions held here."""
    groups: GroupCoordination
    """Where a group lives (FindCoordinator, AddOffsetsToTxn)."""
    txns: TxnCoordination
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now; None: no authorizer configured."""
    shares: ShareStateLookup | None = None
    """Where a share-partition's state lives (FindCoordinator's share keys)."""


# --- controller quorum, forwarding, admin, private ---


class ControllerLink(Protocol):
    """How this node reaches the active controller (server/controller_channel.py). Who
    that is changes with every election: each property is read when it is needed."""

    @property
    def leader_id(self) -> int | None:
        """The active controller as this node knows it; None while unknown."""
        ...

    @property
    def local_controller_active(self) -> bool:
        """Whether this node is the active controller now."""
        ...

    async def raw_request(
        self, api_key: int, api_version: int, payload: bytes, timeout_s: float
    ) -> bytes:
        """One of strom's private requests to the active controller; NotController when
        none can be reached."""
        ...


class MetadataProgress(Protocol):
    """How far this node has applied the committed metadata (server/metadata_state.py)."""

    @property
    def applied_index(self) -> int: ...

    async def wait_for(self, offset: int, timeout_s: float) -> bool:
        """True once the applied metadata reaches `offset`, False after `timeout_s`."""
        ...


class MetadataLog(MetadataProgress, Protocol):
    """The committed metadata entries this node can hand to another (METADATA_FETCH)."""

    def entries_from(self, index: int, max_bytes: int) -> tuple[Snapshot | None, list[Entry]]:
        """The committed entries from `index` on, or a snapshot when they are gone."""
        ...


@dataclass(frozen=True, slots=True)
class ForwardPort:
    """What handlers/forward.py needs to run a request at the active controller, here or
    through a FORWARD to it. One per node, shared by every context that forwards."""

    node_id: int
    channel: ControllerLink
    metadata: MetadataProgress
    controller_listeners: frozenset[str] = frozenset()
    """This node's controller listeners: a client's request on one is this controller's
    to answer, NOT_CONTROLLER unless it is the active one (as Kafka's controllers do)."""


class Forwarding(Protocol):
    """A context whose requests run at the active controller (handlers/forward.py)."""

    @property
    def forward(self) -> ForwardPort: ...


class QuorumController(LocalController, Protocol):
    """The controller service's decisions the quorum handlers ask for
    (server/controller.py): registration, heartbeats and producer id blocks as the
    broker's own services ask them in process (controller_link.LocalController), and
    more; each raises NotController when leadership is lost."""

    @property
    def active(self) -> bool: ...

    async def alter_partition(
        self, *, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> AlterPartitionResult: ...


class QuorumSource(Protocol):
    """The metadata store's side of DescribeQuorum (metadata/stores/base.py)."""

    @property
    def capabilities(self) -> StoreCapabilities: ...

    def describe_quorum(self) -> QuorumDescription | None:
        """The quorum while this node leads it; None otherwise."""
        ...


@dataclass(frozen=True, slots=True)
class QuorumContext:
    """DescribeQuorum, and at the controller BrokerRegistration, BrokerHeartbeat,
    AllocateProducerIds and AlterPartition."""

    node_id: int
    controller: Callable[[], QuorumController | None]
    """This node's controller service (None on a node that is no controller); whether it
    is the active one is asked at each request."""
    store: Callable[[], QuorumSource | None]
    """The metadata store, once the node has opened one (None before, and on a
    broker-only Raft node)."""
    listener_name: str
    """The controller listener's name, as DescribeQuorum lists the voters' endpoints."""
    forward: ForwardPort
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now; None: no authorizer configured."""


class AdminController(Protocol):
    """The controller service's decisions the admin handlers ask for
    (server/controller.py); each raises NotController when leadership is lost."""

    @property
    def active(self) -> bool: ...

    async def decide(self, fn: Callable[[MetadataImage], tuple[Sequence[MetadataRecord], T]]) -> T:
        """`fn`'s result on the latest image, once its records are committed."""
        ...

    async def alter_reassignments(
        self, targets: Sequence[PartitionTarget]
    ) -> list[ReassignmentResult]: ...

    async def list_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None
    ) -> list[OngoingReassignment]: ...

    async def elect_leaders(
        self, election_type: ElectionType, requested: Sequence[TopicPartitions] | None
    ) -> list[TopicElections]: ...

    async def unregister_broker(self, broker_id: int) -> BrokerResult: ...


@dataclass(frozen=True, slots=True)
class AdminContext:
    """CreateTopics, DeleteTopics and CreatePartitions (handlers/admin.py, also Metadata's
    and the group coordinator's topic creation), DescribeConfigs, AlterConfigs and
    IncrementalAlterConfigs (configs.py), AlterPartitionReassignments and
    ListPartitionReassignments (reassignments.py), ElectLeaders and UnregisterBroker
    (elections.py)."""

    node_id: int
    config: Callable[[], BrokerConfig]
    """The broker's config now: dynamic broker configs change it while the broker runs."""
    metadata: MetadataView
    controller: Callable[[], AdminController | None]
    """This node's controller service (None on a node that is no controller); whether it
    is the active one is asked at each request (`active_controller`)."""
    rng: Random
    """Where new replicas go (placement of created topics and partitions)."""
    forward: ForwardPort
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now (the image's bindings); None: no authorizer configured."""
    mutation_quota: MutationQuota | None = None
    """`controller_mutation_rate`, counted where the changes are decided."""

    def active_controller(self) -> AdminController:
        """This node's controller while it is the active one; NotController otherwise."""
        controller = self.controller()
        if controller is None or not controller.active:
            raise NotController(self.forward.channel.leader_id)
        return controller


class MutationQuota(Protocol):
    """The `controller_mutation_rate` client quotas (server/throttling.py)."""

    def active(self) -> bool:
        """Whether any client has the quota now."""
        ...

    def admit(self, request: Request, permits: Sequence[int | None]) -> list[bool]:
        """Whether each change of the request (its partitions) may go ahead."""
        ...

    def throttle_ms(self, request: Request) -> int:
        """How long the request's client should wait before its next change."""
        ...


@dataclass(frozen=True, slots=True)
class ClusterContext:
    """ApiVersions, Metadata and DescribeCluster (handlers/cluster.py)."""

    node_id: int
    metadata: MetadataView
    cluster_id: Callable[[], str]
    """The cluster's id, known once the metadata store is open."""
    channel: ControllerLink
    """Who the active controller is (the controller id clients are given)."""
    admin: AdminContext
    """Metadata's topic auto-creation, and `auto.create.topics.enable` in its config."""
    stopping: Callable[[], bool] = lambda: False
    """Whether this broker is shutting down (Metadata's broker list then keeps it)."""


class PrivateStore(Protocol):
    """The metadata store's side of strom's private APIs (metadata/stores/base.py)."""

    @property
    def leader_id(self) -> int | None: ...

    @property
    def term(self) -> int: ...

    def peer_stream(self) -> PeerStream | None:
        """A stream for another node's store messages, or None when the store takes none."""
        ...


@dataclass(frozen=True, slots=True)
class PrivateContext:
    """strom's node-to-node APIs on the controller listener (handlers/private.py)."""

    node_id: int
    metadata: MetadataLog
    store: Callable[[], PrivateStore | None]
    """The metadata store, once the node has opened one."""
    channel: ControllerLink
    dispatch_controller: Callable[[Request], Awaitable[Any | None]]
    """The controller listener's dispatch: how a forwarded request is answered here."""
