"""The security of a node's own connections to other nodes, ready for strom's client.

strom.config.node_links says, from the config, how each link is secured; this module
builds the TLS client contexts (reading the key and trust store files) and keeps one
`ClientSecurity` per link, rebuilt when a dynamic config changes the link's settings.
Connections made afterwards use the new one; open connections keep theirs.
"""

from __future__ import annotations

import logging

from strom.client.security import ClientSecurity, SaslLogin
from strom.config.errors import ConfigError
from strom.config.listener_settings import listener_prefix
from strom.config.node_links import LinkSecurity, NodeLinks
from strom.security.tls import client_context

__all__ = ["LinkContexts", "client_security"]

log = logging.getLogger(__name__)


def client_security(link: LinkSecurity | None) -> ClientSecurity | None:
    """The client security of `link`; None for plaintext. ConfigError naming the key
    when its key or trust store cannot be read."""
    if link is None or link.plaintext:
        return None
    tls = None
    if link.tls is not None:
        tls = client_context(
            link.tls, key_prefix=listener_prefix(link.listener), check_hostname=link.check_hostname
        )
    login = None
    if link.login is not None:
        login = SaslLogin(link.login.mechanism, link.login.username, link.login.password)
    return ClientSecurity(tls, login)


class LinkContexts:
    """The client security of a node's links to the brokers and to the controllers."""

    def __init__(self, node_id: int, links: NodeLinks) -> None:
        """ConfigError naming the key when a link's key or trust store is unusable."""
        self._node_id = node_id
        self._links = links
        self._inter_broker, self._controller = _both(links)

    def inter_broker(self) -> ClientSecurity | None:
        """For connections to other brokers (replication, transactions)."""
        return self._inter_broker

    def controller(self) -> ClientSecurity | None:
        """For connections to the controllers (on ZooKeeper: to the controller broker)."""
        return self._controller

    def reconfigure(self, links: NodeLinks) -> list[str]:
        """Take changed settings (dynamic configs); what could not be used, whose link
        keeps its settings."""
        if links == self._links:
            return []
        try:
            both = _both(links)
        except ConfigError as exc:
            return [f"connections to other nodes keep their settings: {exc}"]
        self._links = links
        self._inter_broker, self._controller = both
        log.info("[node %d] connections to other nodes now use the new settings", self._node_id)
        return []


def _both(links: NodeLinks) -> tuple[ClientSecurity | None, ClientSecurity | None]:
    """The client security of the inter-broker and the controller link (one context for
    both when they are one link, as on ZooKeeper)."""
    inter_broker = client_security(links.inter_broker)
    if links.controller == links.inter_broker:
        return inter_broker, inter_broker
    return inter_broker, client_security(links.controller)
