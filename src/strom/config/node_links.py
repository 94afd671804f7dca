"""How a node secures the connections it makes to other nodes, from Kafka's keys.

A broker reaches the other brokers (replication, transaction markers and checks) on the
inter-broker listener, and the controllers (registration, heartbeats, the metadata, the
Raft quorum) on the first listener of `controller.listener.names`; on ZooKeeper the
controller is a broker reached on the inter-broker listener. Each link speaks its
listener's security protocol from `listener.security.protocol.map`:

- TLS with the listener's `ssl.*` settings (its `listener.name.<l>.` overrides first):
  the trust store checks the other node's certificate, the key store (when set) is this
  node's client certificate, and `ssl.endpoint.identification.algorithm=https` (the
  default) also checks the host name the other node advertises;
- SASL with `sasl.mechanism.inter.broker.protocol` or `sasl.mechanism.controller.protocol`
  (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512), logging in as the `username` and `password`
  options of the listener's JAAS config for that mechanism, as Kafka's brokers do.

Pure: the TLS contexts are built from these settings by the node when it starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.config.errors import ConfigError
from strom.config.listener_setup import ListenerSetup
from strom.config.node_keys import SASL_PROTOCOLS
from strom.config.schema import invalid_value
from strom.config.security_keys import NODE_LOGIN_MECHANISMS, SaslSettings, TlsSettings
from strom.config.typed_values import TypedValues
from strom.security.jaas import parse_jaas_config

__all__ = ["LinkLogin", "LinkSecurity", "NodeLinks", "node_links"]

_HOSTNAME_CHECKS = {"https": True, "": False}


@dataclass(frozen=True, slots=True)
class LinkLogin:
    """The SASL login of a node on another node's listener."""

    mechanism: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class LinkSecurity:
    """How to secure the connections of one link: the listener they go to, its
    protocol, TLS settings (None: plaintext) and SASL login (None: none)."""

    listener: str
    protocol: str
    tls: TlsSettings | None = None
    check_hostname: bool = True
    login: LinkLogin | None = None

    @property
    def plaintext(self) -> bool:
        return self.tls is None and self.login is None


@dataclass(frozen=True, slots=True)
class NodeLinks:
    """A node's two links: to the brokers (None on a controller-only node) and to the
    controllers (None when there is no controller listener to reach: a single node)."""

    inter_broker: LinkSecurity | None
    controller: LinkSecurity | None


def node_links(
    listeners: ListenerSetup,
    v: TypedValues,
    overrides: Mapping[str, Mapping[str, str]],
    tls: Mapping[str, TlsSettings],
    sasl: Mapping[str, SaslSettings],
    *,
    zookeeper: bool,
) -> NodeLinks:
    """The links of a node. `tls`: the TLS settings of every SSL listener and SSL
    controller listener; `sasl`: the SASL settings of the SASL listeners this node
    serves (its mechanism must be one of them). ConfigError naming the key for a
    mechanism strom cannot log in with or a JAAS config without the node's login."""
    inter_broker = None
    if listeners.inter_broker_name is not None:
        inter_broker = _link(
            listeners.inter_broker_name,
            listeners,
            v,
            overrides,
            tls,
            sasl,
            mechanism_key="sasl.mechanism.inter.broker.protocol",
        )
    if zookeeper:  # the controller is a broker, reached on the inter-broker listener
        return NodeLinks(inter_broker, inter_broker)
    controller = None
    if listeners.controller_names and listeners.controller_names[0] in dict(listeners.protocols):
        controller = _link(
            listeners.controller_names[0],
            listeners,
            v,
            overrides,
            tls,
            sasl,
            mechanism_key="sasl.mechanism.controller.protocol",
        )
    return NodeLinks(inter_broker, controller)


def _link(
    listener: str,
    listeners: ListenerSetup,
    v: TypedValues,
    overrides: Mapping[str, Mapping[str, str]],
    tls: Mapping[str, TlsSettings],
    sasl: Mapping[str, SaslSettings],
    *,
    mechanism_key: str,
) -> LinkSecurity:
    protocol = listeners.protocol(listener)
    own = overrides.get(listener, {})
    settings = tls.get(listener)  # only TLS listeners have settings there
    check_key = "ssl.endpoint.identification.algorithm"
    check_text = own.get(check_key, v.string(check_key)).strip().lower()
    if check_text not in _HOSTNAME_CHECKS:
        raise invalid_value(check_key, check_text, "expected https, or empty for no check")
    login = None
    if protocol in SASL_PROTOCOLS:
        login = _login(listener, protocol, v, own, sasl.get(listener), mechanism_key)
    return LinkSecurity(listener, protocol, settings, _HOSTNAME_CHECKS[check_text], login)


def _login(
    listener: str,
    protocol: str,
    v: TypedValues,
    own: Mapping[str, str],
    served: SaslSettings | None,
    mechanism_key: str,
) -> LinkLogin:
    mechanism = v.string(mechanism_key).strip().upper()
    if mechanism == "OAUTHBEARER":
        raise invalid_value(
            mechanism_key,
            mechanism,
            f"listener {listener!r} uses {protocol}: strom's nodes log in to each other "
            f"with {', '.join(NODE_LOGIN_MECHANISMS)}, not OAUTHBEARER (a node has no token "
            "provider); the listener may still offer OAUTHBEARER to clients beside one of them",
        )
    if mechanism not in NODE_LOGIN_MECHANISMS:
        raise invalid_value(
            mechanism_key,
            mechanism,
            f"listener {listener!r} uses {protocol}: strom's nodes log in to each other "
            f"with {', '.join(NODE_LOGIN_MECHANISMS)} (Kafka's default, GSSAPI, needs "
            "Kerberos)",
        )
    if served is not None and mechanism not in served.mechanisms:
        raise invalid_value(
            mechanism_key,
            mechanism,
            f"listener {listener!r} does not offer it (sasl.enabled.mechanisms: "
            f"{', '.join(served.mechanisms)})",
        )
    jaas_key = f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"
    text = own.get(f"{mechanism.lower()}.sasl.jaas.config", "").strip()
    options: Mapping[str, str] = {}
    if text:
        entries = parse_jaas_config(text, key=jaas_key)
        options = entries[0].options if entries else {}
    username, password = options.get("username"), options.get("password")
    if not username or password is None:
        raise ConfigError(
            f"listener {listener!r} uses {protocol} between nodes: set the username and "
            f"password this node logs in with in '{jaas_key}', e.g. "
            f'... required username="broker" password="..." (beside the users it accepts)',
            key=jaas_key,
        )
    return LinkLogin(mechanism, username, password)
