"""The addresses of the IP client quotas named by a host name (`ip=db.example`).

The controller takes such an entity only if its name resolves (Kafka's rule,
metadata/client_quotas.py). A broker resolves it again when the quotas change, as Kafka
resolves an IP entity's name when its config changes, and counts the connections from any
of its addresses against it (security/quota_sensors.py). The resolution runs in a worker
thread, so the event loop never waits for a name server; until it is done, and for a name
that no longer resolves (logged), the entity counts for no address. A name whose addresses
change later is resolved again only when the quotas change again, as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Iterable, Mapping

from strom.metadata.client_quotas import is_ip_address
from strom.metadata.quota_entities import IP, QuotaEntity

__all__ = ["QuotaHostNames", "resolve_host_names"]

log = logging.getLogger(__name__)


class QuotaHostNames:
    """The addresses of the host-named IP entities of the quotas last seen."""

    def __init__(self) -> None:
        self.addresses: Mapping[str, frozenset[str]] = {}
        self._seen: object = None
        self._names: frozenset[str] = frozenset()

    def refresh(self, quotas: Mapping[QuotaEntity, Mapping[str, float]]) -> None:
        """Start resolving the host names of `quotas` if they are not those last seen.
        Needs a running event loop when there is a name to resolve."""
        if quotas is self._seen:
            return
        self._seen = quotas
        names = frozenset(
            name
            for entity in quotas
            if entity.has(IP) and (name := entity.name(IP)) is not None and not is_ip_address(name)
        )
        if names == self._names:
            return
        self._names = names
        if not names:
            self.addresses = {}
            return
        loop = asyncio.get_running_loop()
        resolving = loop.run_in_executor(None, resolve_host_names, names)
        resolving.add_done_callback(lambda done: self._resolved(names, done))

    def _resolved(
        self, names: frozenset[str], done: asyncio.Future[dict[str, frozenset[str]]]
    ) -> None:
        if names == self._names and not done.cancelled():
            self.addresses = done.result()


def resolve_host_names(names: Iterable[str]) -> dict[str, frozenset[str]]:
    """Each name's addresses (none, logged, for a name that does not resolve). Blocks."""
    resolved = {}
    for name in names:
        try:
            found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:
            log.warning(
                "the IP client quota of %r counts for no address: the name does not resolve (%s)",
                name,
                exc,
            )
            found = []
        resolved[name] = frozenset(str(sockaddr[0]).partition("%")[0] for *_, sockaddr in found)
    return resolved
