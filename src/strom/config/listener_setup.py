"""The listener keys of a broker config, checked against each other and the node's roles.

`ListenerSetup.build` splits `listeners` into client and controller listeners (by
`controller.listener.names`), finds each listener's security protocol (a broker-only
node's controller listener's too: it connects to it), fills in the advertised address
of every client listener and picks the inter-broker listener.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from strom.config.errors import ConfigError
from strom.config.listeners import WILDCARD_HOSTS, Listener
from strom.config.node_keys import SECURITY_PROTOCOLS
from strom.config.schema import invalid_value
from strom.config.typed_values import TypedValues

__all__ = ["ListenerSetup"]


@dataclass(frozen=True, slots=True)
class ListenerSetup:
    listeners: tuple[Listener, ...]
    client: tuple[Listener, ...]
    controller: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    controller_names: tuple[str, ...]
    inter_broker_name: str | None
    protocols: tuple[tuple[str, str], ...]
    """(listener name, security protocol) for every listener and controller listener."""

    def protocol(self, name: str) -> str:
        return dict(self.protocols)[name]

    @classmethod
    def build(
        cls,
        v: TypedValues,
        given: Mapping[str, str],
        *,
        is_broker: bool,
        is_controller: bool,
        single_node: bool,
    ) -> ListenerSetup:
        listeners = _parse_listeners(v.strings("listeners"))
        names = [listener.name for listener in listeners]
        protocol_map = _protocol_map(v.strings("listener.security.protocol.map"))
        protocols = {
            listener.name: _protocol_of(listener.name, protocol_map) for listener in listeners
        }
        controller_names = tuple(
            dict.fromkeys(name.upper() for name in v.strings("controller.listener.names"))
        )
        controller = tuple(item for item in listeners if item.name in controller_names)
        client = tuple(item for item in listeners if item.name not in controller_names)
        if is_broker and not client:
            raise ConfigError(
                "'listeners' needs a client listener (one not named in "
                "'controller.listener.names') because process.roles includes broker",
                key="listeners",
            )
        if not is_broker and client:
            raise ConfigError(
                f"'listeners' has client listener {client[0].name!r}, but process.roles is "
                f"controller only: list only the controller listeners "
                f"({', '.join(controller_names) or 'controller.listener.names is empty'})",
                key="listeners",
            )
        if is_broker and not is_controller:
            if controller:
                raise ConfigError(
                    f"'listeners' must not include controller listener {controller[0].name!r} "
                    "when process.roles is broker only",
                    key="listeners",
                )
            if not controller_names:
                raise invalid_value(
                    "controller.listener.names",
                    "",
                    "must name the controllers' listener when process.roles is broker only",
                )
        if is_controller and (controller or not single_node):
            if not controller_names:
                raise invalid_value(
                    "controller.listener.names", "", "must name this controller's listener"
                )
            for name in controller_names:
                if name not in names:
                    raise ConfigError(
                        f"controller listener {name!r} of 'controller.listener.names' is not "
                        f"in 'listeners'; add one, e.g. {name}://:9093",
                        key="controller.listener.names",
                    )
        advertised = _advertised(v, listeners, client)
        inter_broker_name = _inter_broker_name(v, given, client) if is_broker else None
        if is_broker and not is_controller:
            for name in controller_names:  # it reaches them: how to speak to them
                protocols[name] = _protocol_of(name, protocol_map)
        return cls(
            listeners,
            client,
            controller,
            advertised,
            controller_names,
            inter_broker_name,
            tuple(protocols.items()),
        )


def _parse_listeners(texts: Sequence[str]) -> tuple[Listener, ...]:
    listeners = tuple(Listener.parse(text, key="listeners") for text in texts)
    by_name: dict[str, Listener] = {}
    by_port: dict[int, Listener] = {}
    for listener in listeners:
        if listener.name in by_name:
            raise invalid_value(
                "listeners", ",".join(texts), f"listener name {listener.name!r} is used twice"
            )
        by_name[listener.name] = listener
        other = by_port.get(listener.port)
        if other is not None:
            raise invalid_value(
                "listeners",
                ",".join(texts),
                f"listeners {other.name!r} and {listener.name!r} both use port {listener.port}",
            )
        if listener.port != 0:
            by_port[listener.port] = listener
    return listeners


def _protocol_map(entries: Sequence[str]) -> dict[str, str]:
    key = "listener.security.protocol.map"
    result: dict[str, str] = {}
    for entry in entries:
        name, colon, protocol = (part.strip().upper() for part in entry.partition(":"))
        if not colon or not name or protocol not in SECURITY_PROTOCOLS:
            raise invalid_value(
                key,
                entry,
                f"expected NAME:PROTOCOL entries, PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}",
            )
        if name in result:
            raise invalid_value(key, entry, f"listener {name!r} is mapped twice")
        result[name] = protocol
    return result


def _protocol_of(name: str, protocols: Mapping[str, str]) -> str:
    protocol = protocols.get(name)
    if protocol is None and name in SECURITY_PROTOCOLS:
        protocol = name
    if protocol is None:
        raise ConfigError(
            f"listener {name!r} has no security protocol: add {name}:PLAINTEXT (or SSL, "
            "SASL_PLAINTEXT, SASL_SSL) to 'listener.security.protocol.map'",
            key="listener.security.protocol.map",
        )
    return protocol


def _advertised(
    v: TypedValues, listeners: Sequence[Listener], client: Sequence[Listener]
) -> tuple[Listener, ...]:
    key = "advertised.listeners"
    names = {listener.name for listener in listeners}
    explicit: dict[str, Listener] = {}
    for text in v.strings(key):
        listener = Listener.parse(text, key=key, empty_host="localhost")
        if listener.host in WILDCARD_HOSTS:
            raise invalid_value(
                key, text, f"{listener.host} is not an address a client can connect to"
            )
        if listener.name not in names:
            raise invalid_value(key, text, f"listener {listener.name!r} is not in 'listeners'")
        if listener.name in explicit:
            raise invalid_value(key, text, f"listener {listener.name!r} is advertised twice")
        explicit[listener.name] = listener
    return tuple(
        explicit.get(item.name)
        or Listener(item.name, "localhost" if item.host in WILDCARD_HOSTS else item.host, item.port)
        for item in client
    )


def _inter_broker_name(v: TypedValues, given: Mapping[str, str], client: Sequence[Listener]) -> str:
    """Kafka's choice: `inter.broker.listener.name`, else the listener named as
    `security.inter.broker.protocol` says; strom falls back on the first client listener
    when neither is set and there is no PLAINTEXT one."""
    name = v.optional_string("inter.broker.listener.name")
    protocol_given = "security.inter.broker.protocol" in given
    if name and protocol_given:
        raise ConfigError(
            "set only one of 'inter.broker.listener.name' and 'security.inter.broker.protocol'",
            key="inter.broker.listener.name",
        )
    client_names = [listener.name for listener in client]
    key = "inter.broker.listener.name" if name else "security.inter.broker.protocol"
    chosen = name or (v.string("security.inter.broker.protocol") if protocol_given else None)
    if chosen:
        if chosen.upper() not in client_names:
            raise invalid_value(
                key,
                chosen,
                f"must name a client listener in 'listeners' ({', '.join(client_names)})",
            )
        return chosen.upper()
    return "PLAINTEXT" if "PLAINTEXT" in client_names else client_names[0]
