"""What a broker's listeners need from their security settings: a TLS context per SSL
listener, the principal of each connection, and the endpoints the broker registers.

The TLS contexts are built once at start (a broken keystore stops the start with a
message naming the key); the handshake runs in the event loop's TLS layer, before the
connection's first request, so every request of a TLS connection carries the principal
its certificate maps to (`ssl.principal.mapping.rules`), or ANONYMOUS without one.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any

from strom.config import BrokerConfig, Listener
from strom.config.errors import ConfigError
from strom.config.listener_settings import listener_prefix
from strom.config.security_keys import SaslSettings, TlsSettings
from strom.metadata.records import BrokerEndpoint, SecurityProtocol
from strom.metadata.scram_users import credential_of
from strom.security.principal import ANONYMOUS, NoMatchingRule, PrincipalRule
from strom.security.scram import ScramCredential, ScramMechanism
from strom.security.tls import (
    peer_principal,
    principal_rules,
    reload_certificates,
    server_context,
)
from strom.server.handlers.ports import MetadataView
from strom.server.jwks_source import JwksLoadError, JwksSource
from strom.server.sasl_gate import ListenerSasl, SaslGate

__all__ = [
    "HANDSHAKE_TIMEOUT_S",
    "JwksLoadError",
    "ListenerSecurity",
    "advertised_endpoints",
]

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT_S = 10.0
"""A TLS handshake that takes longer closes the connection (a peer that connects and
says nothing holds no more than this)."""


class ListenerSecurity:
    """The TLS contexts of a broker's SSL listeners, and who a connection's peer is."""

    def __init__(
        self,
        node_id: int,
        tls: Sequence[tuple[str, TlsSettings]],
        sasl: Sequence[tuple[str, SaslSettings]] = (),
        metadata: MetadataView | None = None,
    ) -> None:
        """ConfigError naming the key if a listener's keystore or trust store is unusable,
        or a SASL listener's JAAS config does not parse. `metadata`: where SCRAM users are
        looked up (none without it)."""
        self._node_id = node_id
        self._settings = dict(tls)
        self.contexts: dict[str, ssl.SSLContext] = {}
        self._rules: dict[str, tuple[PrincipalRule, ...]] = {}
        for name, settings in tls:
            prefix = listener_prefix(name)
            self.contexts[name] = server_context(settings, key_prefix=prefix)
            self._rules[name] = principal_rules(settings, key_prefix=prefix)
        self._metadata = metadata
        self._sasl = {
            name: ListenerSasl(name, settings, self._scram_credential, node_id=node_id)
            for name, settings in sasl
        }

    @property
    def jwks_sources(self) -> list[JwksSource]:
        """The key sets of the listeners that check signed OAUTHBEARER tokens."""
        return [sasl.jwks for sasl in self._sasl.values() if sasl.jwks is not None]

    async def load_key_sets(self, spawn: Callable[[Coroutine[Any, Any, None], str], None]) -> None:
        """Read each listener's JWKS before any listener serves (JwksLoadError, naming the
        listener and the URL, if one cannot be used), then `spawn` the task keeping an
        http(s) one fresh."""
        for jwks in self.jwks_sources:
            await jwks.load()
            if jwks.refreshing:
                spawn(jwks.run(), "jwks-refresh")

    def _scram_credential(self, name: str, mechanism: ScramMechanism) -> ScramCredential | None:
        if self._metadata is None:
            return None
        record = self._metadata.image.scram_credential(name, mechanism.kafka_type)
        return None if record is None else credential_of(record)

    def reconfigure(self, tls: Sequence[tuple[str, TlsSettings]]) -> list[str]:
        """Reload the key and trust stores of each SSL listener whose settings changed
        (dynamic configs): its next handshakes use them, open connections keep theirs.
        Returns what could not be reloaded; such a listener keeps its certificates."""
        problems = []
        for name, settings in tls:
            context = self.contexts.get(name)
            if context is None or self._settings.get(name) == settings:
                continue
            try:
                reload_certificates(context, settings, key_prefix=listener_prefix(name))
            except ConfigError as exc:
                problems.append(f"listener {name} keeps its certificates: {exc}")
                continue
            self._settings[name] = settings
            log.info("[node %d] listener %s reloaded its key and trust stores", self._node_id, name)
        return problems

    async def start_server(
        self,
        listener: Listener,
        on_connection: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    ) -> asyncio.Server:
        """`listener`'s server, not yet serving; TLS on an SSL listener. OSError if its
        address cannot be bound."""
        context = self.contexts.get(listener.name)
        return await asyncio.start_server(
            on_connection,
            listener.host,
            listener.port,
            reuse_address=True,
            limit=1 << 20,
            start_serving=False,
            ssl=context,
            ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S if context is not None else None,
        )

    def sasl_gate(self, listener: str, writer: asyncio.StreamWriter) -> SaslGate | None:
        """A new connection's way through SASL on a SASL listener; None on the others."""
        sasl = self._sasl.get(listener)
        return None if sasl is None else sasl.gate(self._node_id, _peer(writer))

    def principal(self, listener: str, writer: asyncio.StreamWriter) -> str | None:
        """`User:<name>` of the peer on `listener`: from its certificate on an SSL
        listener, ANONYMOUS otherwise. None when its certificate's name matches no rule
        of `ssl.principal.mapping.rules` (Kafka refuses such a client)."""
        ssl_object = writer.get_extra_info("ssl_object")
        rules = self._rules.get(listener)
        if ssl_object is None or rules is None:
            return f"User:{ANONYMOUS}"
        try:
            return f"User:{peer_principal(ssl_object, rules)}"
        except NoMatchingRule as exc:
            log.info(
                "[node %d] refused a TLS client on %s from %s: %s",
                self._node_id,
                listener,
                _peer(writer),
                exc,
            )
            return None


def _peer(writer: asyncio.StreamWriter) -> str:
    peer = writer.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)


def check_tls_change(now: BrokerConfig, then: BrokerConfig) -> str | None:
    """What is wrong with the TLS settings `then` would give the SSL listeners that `now`
    has (a trial context is built for each changed one); None if they would work."""
    current = dict(now.listener_tls)
    for name, settings in then.listener_tls:
        if name not in current or current[name] == settings:
            continue
        try:
            server_context(settings, key_prefix=listener_prefix(name))
        except ConfigError as exc:
            return str(exc)
    return None


def advertised_endpoints(
    config: BrokerConfig, bound: Sequence[tuple[Listener, int]]
) -> tuple[BrokerEndpoint, ...]:
    """The client listeners this broker registers, the inter-broker one first; a listener
    configured with port 0 is advertised with the port it was bound to."""
    ports: Mapping[str, int] = {listener.name: port for listener, port in bound}
    protocols = dict(config.listener_protocols)
    endpoints = [
        BrokerEndpoint(
            listener.name,
            listener.host,
            listener.port or ports.get(listener.name, 0),
            SecurityProtocol[protocols[listener.name]],
        )
        for listener in config.advertised_listeners
    ]
    endpoints.sort(key=lambda endpoint: endpoint.name != config.inter_broker_listener_name)
    return tuple(endpoints)
