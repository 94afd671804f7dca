"""Clients of the other brokers, one per broker, for a service that sends them requests
(transaction markers, dead-letter copies): each is made where the metadata image says the
broker listens, with the inter-broker link security of the moment, and made again when
either changed (the broker moved, or a dynamic config changed how brokers connect)."""

from __future__ import annotations

from collections.abc import Callable

from strom.client import NodeClient
from strom.client.security import ClientSecurity
from strom.metadata.image import MetadataImage

__all__ = ["BrokerClients"]


class BrokerClients:
    def __init__(
        self,
        client_id: str,
        image: Callable[[], MetadataImage],
        security: Callable[[], ClientSecurity | None],
    ) -> None:
        self._client_id = client_id
        self._image = image
        self._security = security
        self._clients: dict[int, NodeClient] = {}

    def get(self, broker_id: int) -> NodeClient | None:
        """The client of `broker_id`; None while it is unregistered or fenced."""
        broker = self._image().brokers.get(broker_id)
        client = self._clients.get(broker_id)
        if broker is None or broker.fenced:
            return None
        security = self._security()
        if (
            client is not None
            and (client.host, client.port) == (broker.host, broker.port)
            and client.security is security
        ):
            return client
        if client is not None:
            client.close()
        client = self._clients[broker_id] = NodeClient(
            broker.host,
            broker.port,
            client_id=self._client_id,
            node_id=broker_id,
            security=security,
        )
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()
