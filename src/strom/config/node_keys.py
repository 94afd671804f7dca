"""The broker keys of a node itself: its id and roles, its listeners, how it finds the
controller quorum (or ZooKeeper), and limits on client requests and connections.

Kafka's names and (unless noted) Kafka's defaults; `keys` assembles every key.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.config.schema import AtLeast, ConfigKey, ConfigType, ConfigValue, NonEmpty, OneOf

__all__ = [
    "CONNECTION_KEYS",
    "DEFAULT_PROTOCOL_MAP",
    "NODE_KEYS",
    "SECURITY_PROTOCOLS",
    "parse_ip_overrides",
]

INT = ConfigType.INT
LONG = ConfigType.LONG
STRING = ConfigType.STRING
LIST = ConfigType.LIST

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = (
    "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,"
    "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
)

NODE_KEYS: tuple[ConfigKey, ...] = (
    # --- node and roles
    ConfigKey(
        "node.id",
        INT,
        "1",
        "This node's id; -1 means 1 on a single node (Kafka: required).",
        AtLeast(-1),
    ),
    ConfigKey(
        "broker.id",
        INT,
        None,
        "Kafka's older name for node.id; must agree if both are set.",
        AtLeast(-1),
    ),
    ConfigKey(
        "process.roles",
        LIST,
        "broker,controller",
        "Roles of this node: broker, controller or both (Kafka: no default).",
        OneOf(("broker", "controller")),
    ),
    ConfigKey(
        "cluster.name", STRING, "strom", "strom: a human-readable name for the cluster.", NonEmpty()
    ),
    ConfigKey(
        "broker.rack", STRING, None, "Rack of this broker, for rack-aware replica placement."
    ),
    ConfigKey(
        "metrics.listener",
        STRING,
        None,
        "strom: HOST:PORT serving /metrics (Prometheus), /health and /ready over HTTP; unset: off.",
    ),
    # --- listeners
    ConfigKey(
        "listeners",
        LIST,
        "PLAINTEXT://127.0.0.1:9092",
        "Listeners as NAME://HOST:PORT; empty host = all interfaces (Kafka: PLAINTEXT://:9092).",
    ),
    ConfigKey(
        "advertised.listeners",
        LIST,
        None,
        "Addresses given to clients, NAME://HOST:PORT; default: from listeners.",
    ),
    ConfigKey(
        "controller.listener.names",
        LIST,
        "CONTROLLER",
        "Names of the listeners used by the controller quorum (Kafka: no default).",
    ),
    ConfigKey(
        "listener.security.protocol.map",
        LIST,
        DEFAULT_PROTOCOL_MAP,
        "NAME:PROTOCOL per listener; strom speaks PLAINTEXT only.",
    ),
    ConfigKey(
        "inter.broker.listener.name",
        STRING,
        None,
        "Listener brokers use to reach each other; default: PLAINTEXT or the first.",
    ),
    ConfigKey(
        "security.inter.broker.protocol",
        STRING,
        "PLAINTEXT",
        "The inter-broker listener, by name, when inter.broker.listener.name is not set.",
        OneOf(SECURITY_PROTOCOLS),
    ),
    # --- controller quorum
    ConfigKey(
        "controller.quorum.voters", LIST, "", "Static controller quorum as ID@HOST:PORT entries."
    ),
    ConfigKey(
        "controller.quorum.bootstrap.servers",
        LIST,
        "",
        "HOST:PORT of controllers to discover the quorum from.",
    ),
    ConfigKey(
        "controller.quorum.election.timeout.ms",
        INT,
        "1000",
        "Time without a leader before a voter starts an election.",
        AtLeast(1),
    ),
    ConfigKey(
        "controller.quorum.election.backoff.max.ms",
        INT,
        "1000",
        "Most time a voter waits before retrying a failed election.",
        AtLeast(1),
    ),
    ConfigKey(
        "controller.quorum.fetch.timeout.ms",
        INT,
        "2000",
        "A Raft leader that hears from no majority for 1.5 times this steps down.",
        AtLeast(1),
    ),
    ConfigKey(
        "broker.heartbeat.interval.ms",
        INT,
        "2000",
        "Time between a broker's heartbeats to the controller.",
        AtLeast(1),
    ),
    ConfigKey(
        "broker.session.timeout.ms",
        INT,
        "9000",
        "A broker without heartbeats for this long is fenced.",
        AtLeast(1),
    ),
    ConfigKey(
        "zookeeper.connect",
        STRING,
        None,
        "host:port[,host:port...][/chroot]: keep the metadata in ZooKeeper, not Raft.",
    ),
    ConfigKey(
        "zookeeper.session.timeout.ms",
        INT,
        "18000",
        "A broker (or controller) whose ZooKeeper session ends is gone.",
        AtLeast(1),
    ),
    ConfigKey(
        "zookeeper.connection.timeout.ms",
        INT,
        None,
        "Wait for the first ZooKeeper connection (default: the session timeout).",
        AtLeast(1),
    ),
    ConfigKey(
        "initial.broker.registration.timeout.ms",
        INT,
        "60000",
        "Time a starting broker waits to register with the controller.",
        AtLeast(1),
    ),
)


def parse_ip_overrides(text: str) -> tuple[tuple[str, int], ...]:
    """`host:count,host:count` as (host, count) pairs; ValueError naming the problem.
    A host may be an IPv6 address: the count follows its last colon."""
    pairs = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, colon, count = item.rpartition(":")
        host = host.strip().removeprefix("[").removesuffix("]")
        if not colon or not host or not count.strip().isdigit():
            raise ValueError(f"expected host:count, got {item!r}")
        pairs.append((host, int(count)))
    return tuple(pairs)


@dataclass(frozen=True, slots=True)
class IpOverrides:
    """max.connections.per.ip.overrides: `host:count` pairs, comma-separated."""

    def __call__(self, value: ConfigValue) -> str | None:
        try:
            parse_ip_overrides(str(value))
        except ValueError as exc:
            return str(exc)
        return None


CONNECTION_KEYS: tuple[ConfigKey, ...] = (
    # --- requests and connections
    ConfigKey(
        "socket.request.max.bytes",
        INT,
        "104857600",
        "Largest request the broker reads.",
        AtLeast(1),
    ),
    ConfigKey(
        "connections.max.idle.ms",
        LONG,
        "600000",
        "Idle connections are closed after this long.",
        AtLeast(1),
    ),
    ConfigKey(
        "quota.window.num",
        INT,
        "11",
        "Samples a client quota's rate is measured over (byte rates, request share, IPs).",
        AtLeast(1),
    ),
    ConfigKey(
        "quota.window.size.seconds",
        INT,
        "1",
        "The time one sample of a client quota's rate spans.",
        AtLeast(1),
    ),
    ConfigKey(
        "controller.quota.window.num",
        INT,
        "11",
        "Samples of controller_mutation_rate: its bucket holds this many windows' worth.",
        AtLeast(1),
    ),
    ConfigKey(
        "controller.quota.window.size.seconds",
        INT,
        "1",
        "The time one sample of controller_mutation_rate spans.",
        AtLeast(1),
    ),
    ConfigKey(
        "max.incremental.fetch.session.cache.slots",
        INT,
        "1000",
        "Incremental fetch sessions (KIP-227) the broker keeps; 0 answers every fetch in full.",
        AtLeast(0),
    ),
    ConfigKey(
        "max.connections",
        INT,
        str(2**31 - 1),
        "Connections the broker holds; more wait (listener.name.<l>.max.connections: one's).",
        AtLeast(0),
    ),
    ConfigKey(
        "max.connections.per.ip",
        INT,
        str(2**31 - 1),
        "Connections one address may hold; one more is closed at once.",
        AtLeast(0),
    ),
    ConfigKey(
        "max.connections.per.ip.overrides",
        STRING,
        "",
        "Per-address limits: host:count,... (a host name or an address).",
        IpOverrides(),
    ),
    ConfigKey(
        "max.connection.creation.rate",
        INT,
        str(2**31 - 1),
        "New connections per second the broker takes; more wait (per listener: prefixed).",
        AtLeast(0),
    ),
)
