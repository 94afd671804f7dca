"""The broker process: metadata, partitions, listeners and background tasks.

    created -> start() -> serving -> stop() -> stopped

Everything runs on one event loop; fsyncs run in worker threads (see flusher.py). The
metadata store here is the embedded single-node store; the controller logic it runs is
the pure code in strom.metadata.controller.
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections.abc import Sequence
from typing import Any

from strom.config import BrokerConfig, Listener
from strom.metadata.image import MetadataImage
from strom.metadata.records import MetadataRecord, RegisterBrokerRecord
from strom.metadata.stores.local import LocalMetadataStore
from strom.protocol.codec import Request
from strom.server.cleaner import run_cleaner
from strom.server.clock import now_ms
from strom.server.connection import Connection
from strom.server.flusher import Flusher
from strom.server.groups import GroupService
from strom.server.handlers import HANDLERS
from strom.server.layout import ensure_meta_properties
from strom.server.partitions import Partition, PartitionManager
from strom.server.producer_ids import ProducerIdAllocator

log = logging.getLogger(__name__)

SHUTDOWN_GRACE_S = 3.0


class ListenError(RuntimeError):
    """A listener could not be bound; nothing was opened."""


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.node_id = config.node_id
        self.rng = random.Random()
        self.cluster_id = ""
        self.metadata_lock = asyncio.Lock()
        self._servers: list[asyncio.Server] = []
        self._connections: set[Connection] = set()
        self._connection_tasks: set[asyncio.Task[None]] = set()
        self._background: set[asyncio.Task[None]] = set()
        self.bound: list[tuple[Listener, int]] = []
        self.stopping = False

    # --- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        config = self.config
        # Bind first: a port in use must fail before any data is opened.
        for listener in config.client_listeners:
            try:
                server = await asyncio.start_server(
                    self._on_connection,
                    listener.host,
                    listener.port,
                    reuse_address=True,
                    limit=1 << 20,
                    start_serving=False,
                )
            except OSError as exc:
                raise ListenError(
                    f"cannot listen on {listener.host}:{listener.port} "
                    f"({listener.name}): {exc.strerror or exc}"
                ) from None
            self._servers.append(server)
            self.bound.append((listener, server.sockets[0].getsockname()[1]))
        self.cluster_id = ensure_meta_properties(config.log_dir, self.node_id)
        self.store = LocalMetadataStore(config.log_dir, now_ms=now_ms())
        self.partitions = PartitionManager(config)
        self.partitions.delete_stray_logs(self.store.image)
        self.partitions.sync(self.store.image, now_ms=now_ms())
        self.producer_ids = ProducerIdAllocator(config.log_dir)
        self.flusher = Flusher(on_flushed=Partition.wake_fetchers)
        self._spawn(self.flusher.run(), "flusher")
        self._spawn(self._retention_loop(), "retention")
        self._spawn(run_cleaner(self), "log-cleaner")  # returns at once unless log.cleaner.enable
        self._spawn(self._interval_flush_loop(), "interval-flush")
        self.groups = GroupService(self)
        self.groups.load()
        self._spawn(self.groups.run_timers(), "group-timers")
        self._spawn(self.groups.run_expiry(), "offset-expiry")
        host, port = self.advertised_listener
        await self.commit(
            [
                RegisterBrokerRecord(
                    broker_id=self.node_id,
                    incarnation_id=uuid.uuid4(),
                    host=host,
                    port=port,
                    rack=None,
                )
            ]
        )
        for server in self._servers:
            await server.start_serving()

    @property
    def advertised_listener(self) -> tuple[str, int]:
        listener = self.config.advertised_listeners[0]
        port = listener.port
        if port == 0:
            port = self.bound[0][1]
        return listener.host, port

    async def stop(self) -> None:
        self.stopping = True
        for server in self._servers:
            server.close()
        for partition in self.partitions:
            partition.wake_fetchers()
        self.groups.close()
        for connection in list(self._connections):
            connection.drain()
        if self._connection_tasks:
            _done, pending = await asyncio.wait(self._connection_tasks, timeout=SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        for partition in self.partitions:
            partition.log.flush()
        self.partitions.close()
        self.store.close()

    def _spawn(self, coro: Any, name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "[node %d] background task %s failed",
                self.node_id,
                task.get_name(),
                exc_info=task.exception(),
            )

    async def _on_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        connection = Connection(
            reader,
            writer,
            self.dispatch,
            max_request_bytes=self.config.socket_request_max_bytes,
            idle_timeout_s=self.config.connections_max_idle_ms / 1000,
            node_id=self.node_id,
        )
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(connection)
        self._connection_tasks.add(task)
        try:
            await connection.serve()
        finally:
            self._connections.discard(connection)
            self._connection_tasks.discard(task)

    async def dispatch(self, request: Request) -> Any | None:
        return await HANDLERS[request.api_key](self, request)

    # --- metadata ---------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        return self.store.image

    async def commit(self, records: Sequence[MetadataRecord]) -> MetadataImage:
        """Persist controller records and apply them here. Call under metadata_lock
        when the records were decided from the current image."""
        image = await self.store.commit(records, now_ms=now_ms())
        self.partitions.sync(image, now_ms=now_ms())
        return image

    # --- background work --------------------------------------------------------------

    async def _retention_loop(self) -> None:
        interval_s = self.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            for partition in self.partitions:
                deleted = partition.log.delete_old_segments(now_ms())
                if deleted:
                    log.info(
                        "[node %d] %s-%d: retention deleted %d segment(s); log starts at %d",
                        self.node_id,
                        partition.topic,
                        partition.index,
                        len(deleted),
                        partition.log.log_start_offset,
                    )

    async def _interval_flush_loop(self) -> None:
        interval_s = min(self.config.log_flush_scheduler_interval_ms, 60_000) / 1000
        while True:
            await asyncio.sleep(interval_s)
            current = now_ms()
            for partition in self.partitions:
                if not partition.fsync_before_ack and partition.log.needs_flush(current):
                    self.flusher.request(partition)
