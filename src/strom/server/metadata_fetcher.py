"""A broker-only node's copy of the metadata: committed entries pulled from the controllers.

    following (long-polling METADATA_FETCH at one controller) -> (that controller fails
    or answers slowly) -> the next controller ...

Any controller can answer, because it serves only what it has committed and applied;
the answer also names the active controller, which is how this broker finds it.

With a store whose capabilities say `follows_controller` (ZooKeeper) every node runs a
fetcher and follows the active controller the store names (`leader_id`, and where:
`controller_endpoint`); while the node leads itself it fetches nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from strom.client import ClientError, KafkaConnection
from strom.client.security import ClientSecurity
from strom.config import BrokerConfig
from strom.raft.messages import Entry, Snapshot
from strom.server.private import (
    MetadataFetchRequest,
    PrivateApi,
    PrivatePayloadError,
    decode_fetch_response,
    encode_fetch_request,
)

log = logging.getLogger(__name__)

MAX_WAIT_MS = 500
RETRY_S = 0.2


class FollowedMetadata(Protocol):
    """The node's committed metadata, which the fetched entries extend
    (server/metadata_state.py)."""

    @property
    def applied_index(self) -> int: ...

    def apply(self, entries: Sequence[Entry]) -> None: ...

    def restore(self, snapshot: Snapshot) -> None: ...


class LeaderStore(Protocol):
    """A store that names the active controller and where it listens (ZooKeeper's), as
    the fetcher follows it (metadata/stores/base.py)."""

    @property
    def leader_id(self) -> int | None: ...

    @property
    def is_leader(self) -> bool: ...

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None: ...


class MetadataFetcher:
    """Ports, each read when it is used: `config`, the broker's config now (the
    controllers' addresses); `store`, the metadata store when the node has one (then the
    fetcher follows the leader it names); `metadata`, what the fetched entries extend;
    `on_leader_changed`, told when the answers name another active controller."""

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        store: Callable[[], LeaderStore | None],
        metadata: FollowedMetadata,
        on_leader_changed: Callable[[], None],
        security: Callable[[], ClientSecurity | None] = lambda: None,
    ) -> None:
        """`security`: how connections to the controllers are secured."""
        self._node_id = node_id
        self._security = security
        self._config = config
        self._store = store
        self._metadata = metadata
        self._on_leader_changed = on_leader_changed
        self.leader_id: int | None = None
        self._leader_changed = asyncio.Event()

    def leader_changed(self) -> None:
        """The store's view of the active controller changed."""
        self._leader_changed.set()

    def _endpoints(self) -> list[tuple[int | None, str, int]]:
        config = self._config()
        endpoints: list[tuple[int | None, str, int]] = [
            (voter.node_id, voter.host, voter.port) for voter in config.controller_quorum_voters
        ]
        endpoints += [(None, e.host, e.port) for e in config.controller_quorum_bootstrap_servers]
        return endpoints

    async def run(self) -> None:
        if self._store() is not None:
            await self._follow_store_leader()
            return
        endpoints = self._endpoints()
        turn = itertools.cycle(range(len(endpoints)))
        while True:
            choice = next(turn)
            preferred = [i for i, e in enumerate(endpoints) if e[0] == self.leader_id]
            if preferred:
                choice = preferred[0]
            _node, host, port = endpoints[choice]
            if not await self._fetch_from(host, port):
                self.leader_id = None
                await asyncio.sleep(RETRY_S)

    async def _follow_store_leader(self) -> None:
        """Follow whichever node the store elected, unless it is this one (then the
        store applies what it commits itself)."""
        store = self._store()
        assert store is not None
        while True:
            self._leader_changed.clear()
            leader = store.leader_id
            endpoint = None if leader is None else store.controller_endpoint(leader)
            if store.is_leader or leader is None or endpoint is None:
                await self._leader_changed.wait()
                continue
            if not await self._fetch_from(*endpoint, leader=leader):
                await asyncio.sleep(RETRY_S)

    async def _fetch_from(self, host: str, port: int, leader: int | None = None) -> bool:
        """Follow the metadata at host:port (see _follow); False when that failed."""
        try:
            connection = await KafkaConnection.connect(
                host,
                port,
                client_id=f"strom-metadata-{self._node_id}",
                timeout_s=2.0,
                security=self._security(),
            )
        except (ClientError, OSError):
            return False
        try:
            await self._follow(connection, leader=leader)
        except (ClientError, OSError, PrivatePayloadError) as exc:
            log.debug("[node %d] metadata fetch from %s:%d: %s", self._node_id, host, port, exc)
            return False
        finally:
            connection.close()
        return True

    async def _follow(self, connection: KafkaConnection, leader: int | None = None) -> None:
        """Fetch and apply; with `leader` (the store's), only while the store names it."""
        state = self._metadata
        store = self._store()

        def still() -> bool:
            return leader is None or (store is not None and store.leader_id == leader)

        while still():
            request = MetadataFetchRequest(self._node_id, state.applied_index + 1, MAX_WAIT_MS)
            payload = await connection.raw_request(
                PrivateApi.METADATA_FETCH, 0, encode_fetch_request(request), timeout_s=5.0
            )
            response = decode_fetch_response(payload)
            if store is not None and (store.is_leader or not still()):
                return  # this node leads now, or follows another: the answer is stale
            leader_id = None if response.leader_id < 0 else response.leader_id
            if leader_id != self.leader_id:
                self.leader_id = leader_id
                self._on_leader_changed()
            if response.snapshot is not None:
                state.restore(response.snapshot)
            if response.entries:
                state.apply(response.entries)
