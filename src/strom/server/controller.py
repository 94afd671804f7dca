"""The active controller: decisions against the latest image, committed through Raft.

    inactive -> activate(term) (this node leads the quorum and has applied its own term's
    first entry) -> active -> deactivate() (leadership lost or stopping) -> inactive ...

While active, `decide(fn)` runs a pure decision `fn(image) -> (records, result)` against
the *speculative* image (the committed image plus every record proposed and not yet
committed), proposes the records as one Raft entry, and returns the result once that
entry is committed and applied. Decisions therefore see each other's effects at once and
pipeline through Raft, as KRaft's controller does; when leadership is lost, every waiting
decision fails with NotController and the speculative image is thrown away.

The controller also owns broker liveness: the time of each broker's last heartbeat (in
memory only; a new controller gives every broker a full session from its activation),
fencing brokers whose session expired, and restoring preferred leaders.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from random import Random
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.metadata import brokers as broker_decisions
from strom.metadata import elect_leaders, isr, reassignments
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    BrokerEndpoint,
    ClusterRecord,
    MetadataRecord,
    encode_entry,
)
from strom.metadata.stores import Liveness, NotMetadataLeader, StoreCapabilities
from strom.server.clock import now_ms
from strom.server.controller_watches import CreateTopicsHere, StoredMetadataWatches
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)

T = TypeVar("T")

LIVENESS_CHECK_S = 0.25


class NotController(Exception):
    """This node is not the active controller; `leader_id` is who is, if known."""

    def __init__(self, leader_id: int | None) -> None:
        super().__init__(f"not the active controller (the active controller is {leader_id})")
        self.leader_id = leader_id


class ControllerMetadata(Protocol):
    """The committed metadata this node has applied (server/metadata_state.py)."""

    @property
    def image(self) -> MetadataImage: ...

    def term_of_applied(self, index: int) -> int | None: ...


class ControllerStore(Protocol):
    """The metadata store the controller commits through (metadata/stores/base.py)."""

    @property
    def capabilities(self) -> StoreCapabilities: ...

    @property
    def leader_id(self) -> int | None: ...

    @property
    def live_brokers(self) -> frozenset[int]: ...

    def propose(self, data: bytes) -> int: ...


class ControllerService(StoredMetadataWatches):
    """Ports, each read when it is used: `config`, the broker's config now (session
    timeout, unclean election, cluster name, leader imbalance checks); `metadata`, the
    committed image and the terms of its entries; `store`, the metadata store (None
    before the node has one); `leader_id`, the active controller as the node knows it;
    `cluster_id_to_form`, the id of the cluster this controller forms when there is none
    (this node's data's, else a new one); `create_topics_here`, how a topic written into
    the store by hand is adopted."""

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        metadata: ControllerMetadata,
        store: Callable[[], ControllerStore | None],
        leader_id: Callable[[], int | None],
        cluster_id_to_form: Callable[[], str],
        create_topics_here: CreateTopicsHere,
    ) -> None:
        self._config = config
        self._metadata = metadata
        self._store = store
        self._leader_id = leader_id
        self._cluster_id_to_form = cluster_id_to_form
        self._create_topics_here = create_topics_here
        self.node_id = node_id
        self.rng = Random()
        self.term: int | None = None
        self._speculative = MetadataImage.empty()
        self._pending: dict[int, tuple[int, asyncio.Future[None]]] = {}  # index -> (term, f)
        self._last_heartbeat_ms: dict[int, int] = {}
        self._heard_this_term: set[int] = set()
        self._live_since_ms: dict[int, int] = {}
        """When each unfenced broker was last seen unfenced after being fenced (or when
        this controller first saw it live): how long it has stayed up."""
        self._tasks = TaskSet(f"[node {self.node_id}] controller", expected=(NotController,))
        self.activated_ms = 0

    @property
    def active(self) -> bool:
        return self.term is not None

    # --- leadership -----------------------------------------------------------------------

    def follow(self, *, is_leader: bool, term: int, applied_term: int) -> None:
        """Called after every Raft state change: become or stop being the controller."""
        should = is_leader and applied_term == term
        if should and self.term != term:
            if self.term is not None:
                self.deactivate()
            self._activate(term)
        elif not should and self.term is not None and not (is_leader and self.term == term):
            self.deactivate()

    def _activate(self, term: int) -> None:
        self.term = term
        self._speculative = self._metadata.image
        current = now_ms()
        self.activated_ms = current
        self._last_heartbeat_ms = dict.fromkeys(self._speculative.brokers, current)
        self._heard_this_term = set()
        self._live_since_ms = {}
        log.info("[node %d] active controller for term %d", self.node_id, term)
        self._tasks.spawn(self._bootstrap(), "controller-bootstrap")
        if not self._sessions:
            # With sessions (ZooKeeper's), a broker is alive while its session is: the
            # store calls on_live_brokers.
            self._tasks.spawn(self._liveness_loop(), "controller-liveness")
        self._tasks.spawn(self._preferred_leader_loop(), "controller-preferred-leaders")

    def deactivate(self) -> None:
        if self.term is None:
            return
        log.info("[node %d] no longer the active controller (term %d)", self.node_id, self.term)
        self.term = None
        self._tasks.cancel()
        store = self._store()
        leader = store.leader_id if store is not None else None
        for _term, future in self._pending.values():
            if not future.done():
                future.set_exception(NotController(leader))
        self._pending.clear()

    # --- commits ----------------------------------------------------------------------

    def on_applied(self, image: MetadataImage) -> None:
        """The committed image moved: wake the decisions it covers."""
        for index in [i for i in self._pending if i <= image.offset]:
            term, future = self._pending.pop(index)
            if not future.done():
                if self._metadata.term_of_applied(index) == term:
                    future.set_result(None)
                else:
                    future.set_exception(NotController(self._leader_id()))
        if not self._pending:
            self._speculative = image

    async def decide(self, fn: Callable[[MetadataImage], tuple[Sequence[MetadataRecord], T]]) -> T:
        """Run `fn` on the latest image; commit its records; return its result."""
        term = self.term
        store = self._store()
        if term is None or store is None:
            raise NotController(store.leader_id if store is not None else None)
        records, result = fn(self._speculative)
        if not records:
            # The answer may rest on records proposed and not yet committed (a topic
            # another request is creating): it is given only once they are.
            if self._pending:
                await asyncio.shield(self._pending[max(self._pending)][1])
            return result
        try:
            index = store.propose(encode_entry(records))
        except NotMetadataLeader as exc:
            raise NotController(exc.leader_id) from None
        self._speculative = self._speculative.replay(records, offset=index)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending[index] = (term, future)
        # Shielded: other decisions wait on this entry too, and a caller that gives up
        # (a timeout, the controller's own tasks cancelled as it steps down) must not
        # cancel it under them. Only on_applied and deactivate settle it.
        await asyncio.shield(future)
        return result

    async def commit(self, records: Sequence[MetadataRecord]) -> None:
        await self.decide(lambda _image: (records, None))

    @property
    def image(self) -> MetadataImage:
        """The speculative image: what the next decision will see."""
        return self._speculative

    # --- liveness ---------------------------------------------------------------------

    def heard_from(self, broker_id: int) -> None:
        self._last_heartbeat_ms[broker_id] = now_ms()
        self._heard_this_term.add(broker_id)

    def session_alive(self, broker_id: int) -> bool:
        """Whether the broker's registered process is known to be alive: this controller
        heard from it within the session timeout. A controller that has not heard from it
        since it took over does not know, and lets a restarted process register at once
        (every broker is still given a full session before it is fenced for silence)."""
        if self._sessions:
            return False  # the store let the new process register: the old session is over
        last = self._last_heartbeat_ms.get(broker_id)
        return (
            broker_id in self._heard_this_term
            and last is not None
            and now_ms() - last < self._config().broker_session_timeout_ms
        )

    def unclean(self, topic: str) -> bool:
        value = self._speculative.topic_configs(topic).get("unclean.leader.election.enable")
        if value is None:
            return self._config().unclean_leader_election_enable
        return value.strip().lower() == "true"

    async def _bootstrap(self) -> None:
        image = self._speculative
        if not image.cluster_id:
            cluster_id = self._cluster_id_to_form()
            await self.commit([ClusterRecord(cluster_id, self._config().cluster_name)])
            log.info(
                "[node %d] formed cluster %s (%s)",
                self.node_id,
                cluster_id,
                self._config().cluster_name,
            )

    async def _liveness_loop(self) -> None:
        timeout_ms = self._config().broker_session_timeout_ms
        while True:
            await asyncio.sleep(LIVENESS_CHECK_S)
            current = now_ms()
            expired = sorted(
                broker.broker_id
                for broker in self._speculative.brokers.values()
                if not broker.fenced
                and current - self._last_heartbeat_ms.get(broker.broker_id, current) >= timeout_ms
            )
            if not expired:
                continue
            for broker_id in expired:
                log.info(
                    "[node %d] fencing broker %d: no heartbeat for %d ms "
                    "(broker.session.timeout.ms)",
                    self.node_id,
                    broker_id,
                    current - self._last_heartbeat_ms.get(broker_id, current),
                )
            await self.fence(expired)

    async def fence(self, broker_ids: Sequence[int]) -> None:
        await self.decide(
            lambda image: (
                broker_decisions.fence_brokers(image, broker_ids, unclean=self.unclean),
                None,
            )
        )

    async def _preferred_leader_loop(self) -> None:
        """Every leader.imbalance.check.interval.seconds, as Kafka; and, beyond Kafka, only
        to brokers that have stayed unfenced for a whole interval: a broker that just came
        back does not take its leaderships back at once, so a broker flapping in and out
        of the network does not drag leadership (and its clients, which must reconnect to
        it) with it."""
        while True:
            await asyncio.sleep(self._config().leader_imbalance_check_interval_seconds)
            await self.restore_preferred_leaders()

    def settled_brokers(self, image: MetadataImage, current_ms: int, interval_ms: int) -> set[int]:
        """The live brokers that have been unfenced for at least `interval_ms`; a live
        broker first seen now starts counting now."""
        live = {b for b in image.brokers if image.is_live(b)}
        for gone in set(self._live_since_ms) - live:
            del self._live_since_ms[gone]
        for broker in live:
            self._live_since_ms.setdefault(broker, current_ms)
        return {b for b in live if current_ms - self._live_since_ms[b] >= interval_ms}

    async def restore_preferred_leaders(self) -> None:
        config = self._config()
        if not config.auto_leader_rebalance_enable:
            return
        percentage = config.leader_imbalance_per_broker_percentage
        settled = self.settled_brokers(
            self._speculative, now_ms(), config.leader_imbalance_check_interval_seconds * 1000
        )
        await self.decide(
            lambda image: (
                broker_decisions.preferred_leader_elections(
                    image, imbalance_percentage=percentage, settled=settled
                ),
                None,
            )
        )

    # --- broker registration and heartbeats ---------------------------------------------

    async def register_broker(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        host: str,
        port: int,
        rack: str | None,
        endpoints: tuple[BrokerEndpoint, ...] = (),
    ) -> tuple[ErrorCode, str | None, int]:
        """(error, message, broker epoch) for a BrokerRegistration."""
        if cluster_id != self._speculative.cluster_id:
            return (
                ErrorCode.inconsistent_cluster_id,
                f"broker {broker_id} belongs to cluster {cluster_id!r}, this controller to "
                f"{self._speculative.cluster_id!r}",
                -1,
            )
        alive = self.session_alive(broker_id)
        result = await self.decide(
            lambda image: broker_decisions.register_broker(
                image,
                broker_id,
                incarnation_id,
                host,
                port,
                rack,
                session_alive=alive,
                endpoints=endpoints,
            )
        )
        if result.error_code != ErrorCode.none:
            return result.error_code, result.message, -1
        self.heard_from(broker_id)
        registered = self._speculative.brokers[broker_id]
        return ErrorCode.none, None, registered.epoch

    async def broker_heartbeat(
        self,
        *,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shutdown: bool,
    ) -> broker_decisions.HeartbeatResult:
        was_fenced = self._fenced(broker_id)
        store = self._store()
        if self._sessions and store is not None and broker_id not in store.live_brokers:
            want_fence = True  # its session ended: it stays fenced until it registers again
        result = await self.decide(
            lambda image: broker_decisions.broker_heartbeat(
                image,
                broker_id,
                broker_epoch,
                current_metadata_offset,
                want_fence,
                want_shutdown,
                unclean=self.unclean,
            )
        )
        if result.error_code == ErrorCode.none:
            self.heard_from(broker_id)
            if was_fenced and not self._fenced(broker_id):
                log.info("[node %d] unfenced broker %d", self.node_id, broker_id)
                self._live_since_ms[broker_id] = now_ms()
        return result

    async def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> broker_decisions.ProducerIdsResult:
        return await self.decide(
            lambda image: broker_decisions.allocate_producer_ids(image, broker_id, broker_epoch)
        )

    # --- ISR changes and reassignments ------------------------------------------------

    async def alter_partition(
        self, *, broker_id: int, broker_epoch: int, changes: Sequence[isr.IsrChange]
    ) -> isr.AlterPartitionResult:
        """An AlterPartition from a partition leader (metadata/isr.py). Live brokers are
        the unfenced ones of the speculative image."""
        result = await self.decide(
            lambda image: isr.alter_partitions(
                image,
                broker_id=broker_id,
                broker_epoch=broker_epoch,
                changes=changes,
                is_live=image.is_live,
            )
        )
        for done in result.partitions:
            if done.changed:
                topic = self._speculative.topics_by_id.get(done.topic_id)
                log.info(
                    "[node %d] %s-%d: ISR changed by leader %d to %s (partition epoch %d)%s",
                    self.node_id,
                    topic.name if topic is not None else done.topic_id,
                    done.partition,
                    broker_id,
                    list(done.isr),
                    done.partition_epoch,
                    ", completing its reassignment" if done.completed_reassignment else "",
                )
        return result

    async def alter_reassignments(
        self, targets: Sequence[reassignments.PartitionTarget]
    ) -> list[reassignments.ReassignmentResult]:
        """AlterPartitionReassignments (metadata/reassignments.py), one decision."""
        results = await self.decide(
            lambda image: reassignments.alter_reassignments(
                image, targets, is_live=image.is_live, unclean=self.unclean
            )
        )
        for target, result in zip(targets, results, strict=True):
            if result.error_code == ErrorCode.none:
                log.info(
                    "[node %d] %s-%d: %s",
                    self.node_id,
                    target.topic,
                    target.partition,
                    "reassignment cancelled"
                    if target.replicas is None
                    else f"reassigning to {list(target.replicas)}",
                )
        return results

    async def list_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None
    ) -> list[reassignments.OngoingReassignment]:
        """ListPartitionReassignments, answered once what it read is committed."""
        return await self.decide(
            lambda image: ([], reassignments.list_reassignments(image, topics))
        )

    async def elect_leaders(
        self,
        election_type: elect_leaders.ElectionType,
        requested: Sequence[elect_leaders.TopicPartitions] | None,
    ) -> list[elect_leaders.TopicElections]:
        """ElectLeaders (metadata/elect_leaders.py), one decision. Live brokers are the
        unfenced ones of the speculative image."""
        answers = await self.decide(
            lambda image: elect_leaders.elect_leaders(
                image, election_type, requested, is_live=image.is_live
            )
        )
        for answer in answers:
            for done in answer.partitions:
                if done.error_code == ErrorCode.none:
                    log.info(
                        "[node %d] %s-%d: leader %d elected (ElectLeaders, %s)",
                        self.node_id,
                        answer.topic,
                        done.partition,
                        done.leader,
                        election_type.name.lower(),
                    )
        return answers

    async def unregister_broker(self, broker_id: int) -> broker_decisions.BrokerResult:
        """UnregisterBroker: the broker is fenced (its leaderships move) and its registration
        removed, one decision. With ZooKeeper a broker is registered for as long as its
        session lives, so the request is refused there."""
        if self._sessions:
            return broker_decisions.BrokerResult(
                ErrorCode.invalid_request,
                "brokers are registered by their ZooKeeper sessions here: a broker is "
                "unregistered when it stops",
            )
        result = await self.decide(
            lambda image: broker_decisions.unregister_broker(image, broker_id, unclean=self.unclean)
        )
        if result.error_code == ErrorCode.none:
            log.info("[node %d] broker %d unregistered (UnregisterBroker)", self.node_id, broker_id)
        return result

    # --- what the store watches (StoreWatches, metadata/stores/base.py) ---------------------

    @property
    def _sessions(self) -> bool:
        """Whether the store's sessions, not heartbeats, say which brokers are alive."""
        store = self._store()
        return store is not None and store.capabilities.liveness is Liveness.SESSIONS

    def on_live_brokers(self, live: frozenset[int], reason: str) -> None:
        """The live brokers changed (`reason`: why the others are gone): fence the
        registered brokers not in `live`."""
        gone = sorted(
            b.broker_id
            for b in self._speculative.brokers.values()
            if not b.fenced and b.broker_id not in live
        )
        if gone:
            log.info("[node %d] fencing broker(s) %s: %s", self.node_id, gone, reason)
            self._tasks.spawn(self.fence(gone), "fence-gone-brokers")

    def _fenced(self, broker_id: int) -> bool:
        registered = self._speculative.brokers.get(broker_id)
        return registered is None or registered.fenced
