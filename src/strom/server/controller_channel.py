"""How a node reaches the active controller: in-process when it is this node, otherwise
over the active controller's controller listener (one cached connection per controller).

Who the active controller is comes from the metadata store (Raft on controller nodes,
ZooKeeper's /controller on every node of a ZooKeeper cluster) and from the metadata
fetcher's answers on broker-only nodes of a Raft cluster.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Protocol

from strom.client import ClientError, KafkaConnection
from strom.client.security import ClientSecurity
from strom.config import BrokerConfig
from strom.server.controller import NotController
from strom.server.controller_link import LocalController

log = logging.getLogger(__name__)


class ChannelStore(Protocol):
    """The metadata store's view of the active controller (metadata/stores/base.py)."""

    @property
    def leader_id(self) -> int | None: ...

    def controller_endpoint(self, node_id: int) -> tuple[str, int] | None: ...


class FetchedLeader(Protocol):
    """The active controller the metadata fetcher's answers name (metadata_fetcher.py)."""

    @property
    def leader_id(self) -> int | None: ...


class ChannelController(LocalController, Protocol):
    """This node's controller service (server/controller.py)."""

    @property
    def active(self) -> bool: ...


class ControllerChannel:
    """Ports, each read when it is used, since each is made or replaced while the node
    runs: `store`, the metadata store once opened (none on a broker-only Raft node);
    `fetcher`, the metadata fetcher once started; `controller`, this node's controller
    service (none on a node that is no controller); `config`, the broker's config now
    (the controller quorum voters' addresses)."""

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        store: Callable[[], ChannelStore | None],
        fetcher: Callable[[], FetchedLeader | None],
        controller: Callable[[], ChannelController | None],
        security: Callable[[], ClientSecurity | None] = lambda: None,
    ) -> None:
        """`security`: how connections to the controllers are secured."""
        self._node_id = node_id
        self._security = security
        self._config = config
        self._store = store
        self._fetcher = fetcher
        self._controller = controller
        self._connections: dict[int, KafkaConnection] = {}
        self._connecting = asyncio.Lock()
        """Held while connecting, so that requests arriving together share one connection."""

    @property
    def leader_id(self) -> int | None:
        store = self._store()
        if store is not None:
            return store.leader_id
        fetcher = self._fetcher()
        if fetcher is not None:
            return fetcher.leader_id
        return None

    @property
    def local_controller_active(self) -> bool:
        controller = self._controller()
        return controller is not None and controller.active

    def local_controller(self) -> ChannelController:
        """This node's controller when it is the active one; NotController otherwise."""
        controller = self._controller()
        if controller is None or not controller.active:
            raise NotController(self.leader_id)
        return controller

    def endpoint(self, node_id: int) -> tuple[str, int] | None:
        store = self._store()
        if store is not None:
            return store.controller_endpoint(node_id)
        for voter in self._config().controller_quorum_voters:
            if voter.node_id == node_id:
                return voter.host, voter.port
        return None

    async def connection(self) -> KafkaConnection:
        """A connection to the active controller; NotController when it is unknown."""
        leader = self.leader_id
        if leader is None or leader == self._node_id:
            raise NotController(leader)
        existing = self._connections.get(leader)
        if existing is not None and not existing.is_closed:
            return existing
        async with self._connecting:
            existing = self._connections.get(leader)
            if existing is not None and not existing.is_closed:
                return existing  # made while this request waited for the lock
            endpoint = self.endpoint(leader)
            if endpoint is None:
                raise NotController(None)
            try:
                connection = await KafkaConnection.connect(
                    *endpoint,
                    client_id=f"strom-broker-{self._node_id}",
                    timeout_s=2.0,
                    security=self._security(),
                )
            except (ClientError, OSError):
                raise NotController(leader) from None
            if existing is not None:
                existing.close()
            self._connections[leader] = connection
            return connection

    def leader_changed(self) -> None:
        """A new active controller: close the connections to the others, so a request
        still in flight to the old one (a heartbeat to a controller cut off from the
        network would wait out its whole timeout, and the new controller would fence the
        broker meanwhile) fails now and goes to the new one, as Kafka's channel does."""
        leader = self.leader_id
        for node_id in [n for n in self._connections if n != leader]:
            self._connections.pop(node_id).close()

    async def request(self, api_key: int, api_version: int, body: Any, timeout_s: float) -> Any:
        connection = await self.connection()
        try:
            return await connection.request(api_key, api_version, body, timeout_s=timeout_s)
        except ClientError:
            connection.close()
            raise NotController(self.leader_id) from None

    async def raw_request(
        self, api_key: int, api_version: int, payload: bytes, timeout_s: float
    ) -> bytes:
        connection = await self.connection()
        try:
            return await connection.raw_request(api_key, api_version, payload, timeout_s=timeout_s)
        except ClientError:
            connection.close()
            raise NotController(self.leader_id) from None

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
