"""A strom node: controller, broker, or both, on one event loop.

    created -> start() -> serving -> stop() -> stopped

start() binds every listener first (a port in use fails before any data is opened),
then, on a controller, opens the Raft log and joins the quorum; on a broker, it follows
the committed metadata (from the local Raft log, or fetched from the controllers on a
broker-only node), registers with the active controller, and opens its partitions and
starts serving clients once the controller has unfenced it, that is once this broker
has replayed the metadata up to its own registration. fsyncs run in worker threads (see
flusher.py and metadata/stores/raft/driver.py). The metadata store is built by
metadata/stores' `build_store` and reached only through its interface and capabilities.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from strom.config import BrokerConfig, Listener
from strom.config.dynamic import shown
from strom.config.errors import ConfigError
from strom.config.node_links import NodeLinks
from strom.fetch.sessions import FetchSessionCache
from strom.metadata.image import MetadataImage
from strom.metadata.stores import (
    Advertised,
    ControllerListener,
    MetadataStore,
    StorePorts,
    build_store,
)
from strom.protocol.apis import CONTROLLER_APIS, SERVED_APIS
from strom.protocol.codec import Request
from strom.server import housekeeping, layout, wiring
from strom.server.cleaner import run_cleaner
from strom.server.clock import now_ms
from strom.server.connection import Connection
from strom.server.connection_gate import OpenConnections, peer_ip
from strom.server.contexts import handler_contexts, node_peer
from strom.server.controller import ControllerService
from strom.server.controller_link import ControllerCaller
from strom.server.flusher import Flusher
from strom.server.handlers import client_handlers, controller_handlers
from strom.server.handlers.ports import ForwardPort
from strom.server.handlers.private import PrivateSession
from strom.server.isr import IsrManager
from strom.server.lifecycle import BrokerLifecycle
from strom.server.link_security import LinkContexts
from strom.server.listener_security import JwksLoadError, ListenerSecurity, advertised_endpoints
from strom.server.metadata_fetcher import MetadataFetcher
from strom.server.metadata_state import MetadataState
from strom.server.observability import Observability
from strom.server.partition import Partition, ReplicaPorts
from strom.server.partitions import METADATA_LOG_DIR, PartitionManager
from strom.server.producer_ids import ProducerIdBlocks
from strom.server.replica_fetcher import FetcherPorts, ReplicaFetchers
from strom.server.tasks import TaskSet
from strom.server.throttling import ClientQuotaThrottle

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 3.0
CONTROLLED_SHUTDOWN_S = 5.0
SNAPSHOT_EVERY_BYTES = 16 << 20


class ListenError(RuntimeError):
    """A listener could not be bound; nothing was opened."""


class FatalError(RuntimeError):
    """The node cannot go on (e.g. its data belongs to another cluster)."""


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.static_config = config
        self._dynamic: tuple[dict[str, str], dict[str, str]] = ({}, {})
        self.node_id = config.node_id
        self.observability = Observability(self)
        """Metrics, /health and /ready (server/observability.py)."""
        self.rng = random.Random()
        slots = config.max_incremental_fetch_session_cache_slots
        self.fetch_sessions = FetchSessionCache(slots, self.rng)  # KIP-227, also followers'

        self.local_cluster_id: str | None = None
        self.links = LinkContexts(self.node_id, NodeLinks(None, None))
        """How connections to other nodes are secured; from the config in `_bind`."""
        self.metadata = MetadataState(config.node_id)
        self.store: MetadataStore | None = None
        """The metadata store (metadata/stores/): none on a broker-only Raft node."""
        self._client_serves_controller = False  # other nodes reach it on client listeners
        self.incarnation_id = uuid.uuid4()
        self.controller: ControllerService | None = None
        self.fetcher: MetadataFetcher | None = None
        self.lifecycle: BrokerLifecycle | None = None
        self.channel = wiring.controller_channel(self)
        self.to_controller = ControllerCaller(
            node_id=self.node_id, channel=self.channel, dispatch_controller=self.dispatch_controller
        )
        """How the lifecycle, ISR manager and producer ids ask the controller (controller_link)."""
        self.flusher = Flusher(
            on_flushed=Partition.on_flushed, on_round=self.observability.observe_fsync
        )
        self.fetchers = ReplicaFetchers(
            FetcherPorts(
                node_id=self.node_id,
                config=lambda: self.config,
                image=lambda: self.metadata.image,
                replicated_in=self.observability.counters.traffic.replicated_in,
                security=lambda: self.links.inter_broker(),
            )
        )
        self.isr = IsrManager(
            node_id=self.node_id,
            config=lambda: self.config,
            image=lambda: self.metadata.image,
            broker_epoch=self._broker_epoch,
            partitions=lambda: self.partitions,
            controller=self.to_controller,
        )
        self.partitions = PartitionManager(
            config,
            on_opened=self._on_partitions_opened,
            ports=ReplicaPorts(
                propose_isr=self.isr.propose,
                on_role=self.fetchers.on_role,
                durability=self.flusher,
                isr_changed=self.observability.counters.isr_changed,
            ),
        )
        self.groups, self.consumer_groups, self.share_groups = wiring.group_services(self)
        self.share_state, self.share_partitions = wiring.share_services(self)
        self.producer_ids = ProducerIdBlocks(
            node_id=self.node_id, broker_epoch=self._broker_epoch, controller=self.to_controller
        )
        self.marker_appender = wiring.marker_appender(self)  # for WriteTxnMarkers too
        self.transactions = wiring.txn_service(self)
        self.txn_verifier = wiring.txn_verifier(self)
        self.serving = False  # partitions opened; client listeners may serve
        self.fatal = asyncio.Event()
        self.fatal_reason = ""
        self._servers: list[asyncio.Server] = []
        self._client_servers: list[asyncio.Server] = []
        self.quotas = ClientQuotaThrottle(lambda: self.metadata.image, config.quota_windows)
        self.connections = OpenConnections(self.node_id, config.connection_limits, self.quotas)
        # Each background loop is part of what the node promises (fsyncs, heartbeats,
        # the metadata it serves): one that ends by surprise stops the node, loudly.
        self._background = TaskSet(
            f"[node {config.node_id}] background",
            on_failure=lambda error: self.fail(f"a background task ended: {error!r}"),
        )
        self.bound: list[tuple[Listener, int]] = []
        self.security = ListenerSecurity(self.node_id, ())  # _bind() reads the TLS settings
        self.stopping = False
        controllers = frozenset(config.controller_listener_names)
        self.forward = ForwardPort(self.node_id, self.channel, self.metadata, controllers)
        """How handlers reach the active controller (handlers/forward.py)."""
        contexts = handler_contexts(self)
        self._private = contexts.private
        self.admin_context = contexts.admin  # topic creation, adoption of hand-written topics
        self._handlers = client_handlers(contexts)
        self._controller_handlers = controller_handlers(contexts)

    def _broker_epoch(self) -> int | None:
        """This broker's epoch from its registration; None before it has one."""
        return self.lifecycle.epoch if self.lifecycle is not None else None

    @property
    def is_broker(self) -> bool:
        return self.config.is_broker

    @property
    def is_controller(self) -> bool:
        return self.config.is_controller

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        config = self.config
        await self._bind()
        try:
            await self.observability.start()
        except OSError as exc:
            for server in self._servers:
                server.close()
            raise ListenError(
                f"cannot serve metrics on metrics.listener {config.metrics_listener}: "
                f"{exc.strerror or exc}"
            ) from None
        self.local_cluster_id = layout.check_meta_properties(config.log_dir, self.node_id)
        if config.metadata_log_dir != config.log_dir:
            other = layout.check_meta_properties(config.metadata_log_dir, self.node_id)
            self.local_cluster_id = self._agree(self.local_cluster_id, other)
        self.metadata.subscribe(self._on_metadata)
        store = build_store(
            config,
            self._store_ports(),
            raft_directory=config.metadata_log_dir / METADATA_LOG_DIR,
            snapshot_every_bytes=SNAPSHOT_EVERY_BYTES,
            security=lambda: self.links.controller(),
            bound=self.bound,
        )
        if store is not None:
            await self._start_store(store)
        if store is None or store.capabilities.follows_controller:
            # A broker-only Raft node follows the controllers; a ZooKeeper node follows
            # the active controller the store names (and leads when elected).
            self.fetcher = wiring.metadata_fetcher(self)
            self._background.spawn(self.fetcher.run(), "metadata-fetcher")
        if self._client_serves_controller:
            for server in self._client_servers:  # other brokers reach the controller here
                await server.start_serving()
        if not self.is_broker:
            await self._wait_or_fail(self._cluster_formed(), "the quorum to form the cluster")
            return
        self.lifecycle = BrokerLifecycle(
            node_id=self.node_id,
            incarnation_id=self.incarnation_id,
            config=lambda: self.config,
            advertised=lambda: advertised_endpoints(self.config, self.bound),
            metadata=self.metadata,
            controller=self.to_controller,
        )
        self._background.spawn(self.lifecycle.run(), "broker-lifecycle")
        await self._wait_or_fail(self.lifecycle.unfenced.wait(), "the controller to unfence it")
        self._open_partitions()
        for server in self._client_servers:
            await server.start_serving()

    async def _start_store(self, store: MetadataStore) -> None:
        """Open the store, create the controller that leads through it, serve the
        listeners where other controllers reach this one, and join."""
        self.store = store
        store.open()
        self.controller = wiring.controller_service(self)
        listener = store.capabilities.controller_listener
        self._client_serves_controller = listener is ControllerListener.CLIENT
        if listener is ControllerListener.CONTROLLER:
            for server in self._servers:
                if server not in self._client_servers:
                    await server.start_serving()
        try:
            await store.start()
        except ConnectionError as exc:
            raise FatalError(str(exc)) from None

    def _store_ports(self) -> StorePorts:
        return StorePorts(
            node_id=self.node_id,
            metadata=self.metadata,
            on_change=self._on_store_change,
            fail=self.fail,
            watches=lambda: (
                self.controller if self.controller is not None and self.controller.active else None
            ),
            advertised=self._advertised,
            cluster_id=lambda: self.metadata.image.cluster_id or self.local_cluster_id,
            incarnation_id=self.incarnation_id,
            rack=self.config.broker_rack,
            clock_ms=now_ms,
        )

    def _agree(self, first: str | None, second: str | None) -> str | None:
        if first is not None and second is not None and first != second:
            raise layout.LayoutError(
                f"{self.config.log_dir} belongs to cluster {first} but "
                f"{self.config.metadata_log_dir} to cluster {second}"
            )
        return first or second

    async def _wait_or_fail(self, waiting: Any, what: str) -> None:
        timeout_s = self.config.initial_broker_registration_timeout_ms / 1000
        task = asyncio.ensure_future(waiting)
        fatal = asyncio.ensure_future(self.fatal.wait())
        done, _ = await asyncio.wait(
            {task, fatal}, timeout=timeout_s, return_when="FIRST_COMPLETED"
        )
        task.cancel()
        fatal.cancel()
        if self.fatal.is_set():
            raise FatalError(self.fatal_reason)
        if not done:
            self.fatal.set()
            raise FatalError(
                f"gave up after {timeout_s:.0f} s waiting for {what} "
                "(initial.broker.registration.timeout.ms); are the controllers in "
                "controller.quorum.voters running and reachable?"
            )

    async def _cluster_formed(self) -> None:
        while not self.metadata.image.cluster_id:
            await self.metadata.changed()

    def _open_partitions(self) -> None:
        image = self.metadata.image
        self.partitions.delete_stray_logs(image)
        self.partitions.sync(image, now_ms=now_ms())
        self.serving = True
        self._background.spawn(self.flusher.run(), "flusher")
        config = lambda: self.config  # noqa: E731 - dynamic changes apply at the next round
        self._background.spawn(
            housekeeping.retention_loop(self.node_id, config, self.partitions), "retention"
        )
        self._background.spawn(
            run_cleaner(self.node_id, self.config, self.partitions), "log-cleaner"
        )  # returns at once unless log.cleaner.enable
        for loop, name in (
            (housekeeping.interval_flush_loop(config, self.partitions), "interval-flush"),
            (housekeeping.checkpoint_loop(self.node_id, config, self.partitions), "hw-checkpoint"),
            (self.consumer_groups.run_timers(), "consumer-group-timers"),
            (self.share_groups.run_timers(), "share-group-timers"),
            (self.share_partitions.run_timers(), "share-partition-timers"),
            (self.share_state.coordinator.run_pruning(), "share-state-pruning"),
        ):
            self._background.spawn(loop, name)
        self.isr.start()
        wiring.follow_coordinators(self, image)
        self._background.spawn(self.groups.run_timers(), "group-timers")
        self._background.spawn(self.groups.run_expiry(), "offset-expiry")
        self._background.spawn(self.transactions.run_timers(), "txn-timers")

    async def _bind(self) -> None:
        config = self.config
        try:
            self.security = ListenerSecurity(
                self.node_id, config.listener_tls, config.listener_sasl, self.metadata
            )
            self.links = LinkContexts(self.node_id, config.node_links)
            await self.security.load_key_sets(self._background.spawn)  # OAUTHBEARER's JWKS
        except (ConfigError, JwksLoadError) as exc:
            raise ListenError(str(exc)) from None
        listeners = list(config.client_listeners) if self.is_broker else []
        controller_listeners = list(config.controller_listeners) if self.is_controller else []
        for listener in [*listeners, *controller_listeners]:
            is_client = listener in listeners
            try:
                server = await self.security.start_server(
                    listener,
                    functools.partial(
                        self._on_client_connection if is_client else self._on_controller_connection,
                        listener.name,
                    ),
                )
            except OSError as exc:
                for opened in self._servers:
                    opened.close()
                raise ListenError(
                    f"cannot listen on {listener.host}:{listener.port} "
                    f"({listener.name}): {exc.strerror or exc}"
                ) from None
            self._servers.append(server)
            if is_client:
                self._client_servers.append(server)
            self.bound.append((listener, server.sockets[0].getsockname()[1]))

    @property
    def advertised_listener(self) -> tuple[str, int]:
        """The address other brokers reach this one on (its inter-broker listener)."""
        return (advertised := self._advertised()).host, advertised.port

    def _advertised(self) -> Advertised:
        endpoints = advertised_endpoints(self.config, self.bound)
        return Advertised(endpoints[0].name, endpoints[0].host, endpoints[0].port, endpoints)

    @property
    def cluster_id(self) -> str:
        return self.metadata.image.cluster_id or self.local_cluster_id or ""

    def new_cluster_id(self) -> str:
        return layout.new_cluster_id()

    async def stop(self) -> None:
        self.stopping = True
        for server in self._client_servers:
            server.close()
        if self.lifecycle is not None and not self.fatal.is_set():
            await self.lifecycle.controlled_shutdown(CONTROLLED_SHUTDOWN_S)
        for partition in self.partitions:
            partition.wake_fetchers()
        await self.fetchers.stop()
        await self.isr.stop()
        wiring.close_coordinators(self)
        await self.txn_verifier.stop()
        await self.connections.drain(SHUTDOWN_GRACE_S)
        await self._background.stop()
        self.share_partitions.close()
        if self.store is not None:
            await self.store.stop()
        if self.controller is not None:
            self.controller.deactivate()
        for server in self._servers:
            server.close()
        for server in self._servers:
            await server.wait_closed()
        self.channel.close()
        for partition in self.partitions:
            partition.log.flush()
        self.partitions.close()
        await self.observability.stop()

    # A crash, for strom.testing: abort() -> (the caller cancels the node's tasks) ->
    # abandon_files(). Nothing a clean stop() promises happens: no controlled shutdown,
    # no leadership handed over, no last fsync, no clean-shutdown marker.

    def abort(self) -> None:
        """Stop listening and drop every client and node connection at once, as the
        kernel does when a process dies."""
        self.stopping = True
        for server in self._servers:
            server.close()
        self.connections.abort()
        self.channel.close()

    def abandon_files(self, *, lose_unflushed: bool = False) -> None:
        """Close every file as a killed process leaves it, so that the next start recovers.
        With `lose_unflushed` each partition log first drops every record it has not
        fsynced, as a power failure would; the metadata log is kept whole."""
        for partition in self.partitions:
            log_ = partition.log
            if lose_unflushed and log_.flushed_offset < log_.log_end_offset:
                log_.truncate_to(log_.flushed_offset)
            log_.close(clean=False)
        if self.store is not None:
            self.store.abandon()

    def fail(self, reason: str) -> None:
        """Stop the node: something it cannot recover from (logged once)."""
        if not self.fatal.is_set():
            log.error("[node %d] %s", self.node_id, reason)
            self.fatal_reason = reason
            self.fatal.set()

    # --- connections ------------------------------------------------------------------

    async def _on_client_connection(
        self, listener: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        ip = peer_ip(writer.get_extra_info("peername"))
        principal = self.security.principal(listener, writer)
        if principal is None or not await self.connections.gate.enter(listener, ip, ip):
            writer.close()
            return
        if self._client_serves_controller and listener == self.config.inter_broker_listener_name:
            # As in Kafka's ZooKeeper mode, brokers reach the controller on the client
            # listener they use: it serves the controller's APIs and strom's private ones.
            await self._serve_nodes(
                listener, reader, writer, self._dispatch_with_controller, principal, ip
            )
            return
        await self.connections.serve(
            listener,
            Connection(
                reader,
                writer,
                self.dispatch,
                max_request_bytes=self.config.socket_request_max_bytes,
                idle_timeout_s=self.config.connections_max_idle_ms / 1000,
                node_id=self.node_id,
                observe=self.observability.request_observer,
                listener=listener,
                principal=principal,
                sasl=self.security.sasl_gate(listener, writer),
                throttle=self.quotas,
                connection_id=self.connections.new_id(listener),
            ),
            ip,
        )

    async def _on_controller_connection(
        self, listener: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        principal = self.security.principal(listener, writer)
        if principal is None:
            writer.close()
            return
        await self._serve_nodes(listener, reader, writer, self.dispatch_controller, principal)

    async def _serve_nodes(
        self,
        listener: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        dispatch: Callable[[Request], Awaitable[Any | None]],
        principal: str = "User:ANONYMOUS",
        gated_ip: str | None = None,
    ) -> None:
        """A connection that other nodes use too: strom's private APIs and larger frames."""
        await self.connections.serve(
            listener,
            Connection(
                reader,
                writer,
                dispatch,
                max_request_bytes=max(self.config.socket_request_max_bytes, 256 << 20),
                idle_timeout_s=self.config.connections_max_idle_ms / 1000,
                node_id=self.node_id,
                private=PrivateSession(self._private).handle,
                apis=frozenset(SERVED_APIS),
                observe=self.observability.request_observer,
                listener=listener,
                principal=principal,
                sasl=self.security.sasl_gate(listener, writer),
                node_peer=functools.partial(node_peer, self),
                connection_id=self.connections.new_id(listener),
            ),
            gated_ip,
        )

    async def dispatch(self, request: Request) -> Any | None:
        return await self._handlers[request.api_key](request)

    async def _dispatch_with_controller(self, request: Request) -> Any | None:
        if request.api_key in CONTROLLER_APIS:
            return await self._controller_handlers[request.api_key](request)
        return await self._handlers[request.api_key](request)

    async def dispatch_controller(self, request: Request) -> Any | None:
        """A request for the controller: a node's own (no listener), or a client's, on the
        controller listener or forwarded with its principal: the client handlers check it."""
        handler = self._controller_handlers.get(request.api_key)
        if handler is None or (request.listener and request.api_key in self._handlers):
            return await self._handlers[request.api_key](request)
        return await handler(request)

    # --- metadata ---------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def _on_metadata(self, image: MetadataImage) -> None:
        if image.cluster_id and image.cluster_id != self.local_cluster_id:
            if self.local_cluster_id is None:
                self.local_cluster_id = image.cluster_id
                for directory in {self.config.log_dir, self.config.metadata_log_dir}:
                    layout.record_cluster_id(directory, self.node_id, image.cluster_id)
                log.info("[node %d] joined cluster %s", self.node_id, image.cluster_id)
            else:
                self.fail(
                    f"this node's data in {self.config.log_dir} belongs to cluster "
                    f"{self.local_cluster_id}, but the controller quorum runs cluster "
                    f"{image.cluster_id}: point log.dirs at an empty directory or at this "
                    "cluster's data, or fix controller.quorum.voters"
                )
                return
        self._apply_dynamic_configs(image)
        if self.controller is not None:
            self.controller.on_applied(image)
        if self.serving:
            self.partitions.sync(image, now_ms=now_ms())
            wiring.follow_coordinators(self, image)

    def _on_partitions_opened(self) -> None:
        if self.serving:
            wiring.follow_coordinators(self, self.metadata.image)

    def _apply_dynamic_configs(self, image: MetadataImage) -> None:
        """Dynamic broker configs take effect here, without a restart."""
        dynamic = (
            dict(image.cluster_default_configs()),
            dict(image.broker_configs(self.node_id)),
        )
        if dynamic == self._dynamic:
            return
        self._dynamic = dynamic
        self.config = self.static_config.with_dynamic(*dynamic)
        self.partitions.reconfigure(self.config)
        problems = [*self.config.dynamic_problems]
        problems += self.security.reconfigure(self.config.listener_tls)
        problems += self.links.reconfigure(self.config.node_links)
        self.connections.gate.reconfigure(self.config.connection_limits)
        for problem in problems:
            log.warning("[node %d] dynamic config skipped: %s", self.node_id, problem)
        log.info(
            "[node %d] dynamic broker configs now: cluster default %s, this broker %s",
            self.node_id,
            shown(dynamic[0]),
            shown(dynamic[1]),
        )

    def _on_store_change(self) -> None:
        store = self.store
        if store is None or self.controller is None or store.failure is not None:
            return
        self.controller.follow(
            is_leader=store.is_leader,
            term=store.term,
            applied_term=self.metadata.applied_term,
        )
        if self.fetcher is not None:
            self.fetcher.leader_changed()
        self.channel.leader_changed()
