"""The plan of a local development cluster: ports, paths and each node's config. No I/O.

Every node is a combined broker+controller configured as a Kafka KRaft cluster is:
`process.roles=broker,controller`, a PLAINTEXT listener for clients and a CONTROLLER
listener for the quorum, and the same `controller.quorum.voters` on every node. Client
ports are `base_port .. base_port+N-1`, controller ports `base_port+100 ..` unless given.
With a `zookeeper.connect` value the metadata is kept there instead: `broker.id`, a client
listener only, no voters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from strom.cli.wire import format_address

if TYPE_CHECKING:
    from strom.config import BrokerConfig

DEFAULT_NODE_COUNT = 3
DEFAULT_HOST = "127.0.0.1"
DEFAULT_BASE_PORT = 9092
CONTROLLER_PORT_OFFSET = 100
SECURE_PORT_OFFSET = 200
SECURE_LISTENER = "SASL_SSL"
MAX_NODES = 64


class PlanError(ValueError):
    """The cluster asked for cannot be planned (bad count, ports or settings)."""


@dataclass(frozen=True, slots=True)
class NodePlan:
    """One node of a local cluster: where it listens, where it keeps its files, its config."""

    node_id: int
    host: str
    client_port: int
    controller_port: int
    data_dir: Path
    """The node's log.dirs."""
    config_path: Path
    log_path: Path
    """Where the node's stderr (its log) goes."""
    properties: tuple[tuple[str, str], ...]
    """The node's config as (key, value), in the order written."""
    zookeeper: str | None = None
    """zookeeper.connect when the metadata is in ZooKeeper: then the node has no
    controller listener and `controller_port` is unused."""
    metrics_port: int | None = None
    """The port of the node's metrics endpoint (metrics.listener); None: none."""
    secure_port: int | None = None
    """The port of its SASL_SSL listener (strom dev --secure); None: none."""

    @property
    def client_address(self) -> str:
        return format_address(self.host, self.client_port)

    @property
    def secure_address(self) -> str | None:
        return None if self.secure_port is None else format_address(self.host, self.secure_port)

    @property
    def controller_address(self) -> str:
        return format_address(self.host, self.controller_port)

    @property
    def config(self) -> dict[str, str]:
        return dict(self.properties)


def bootstrap_servers(plans: Sequence[NodePlan]) -> str:
    """`host:port,host:port,...`: every node's client address, for bootstrap.servers."""
    return ",".join(plan.client_address for plan in plans)


def secure_bootstrap_servers(plans: Sequence[NodePlan]) -> str:
    """Every node's SASL_SSL address (strom dev --secure)."""
    return ",".join(plan.secure_address or "" for plan in plans if plan.secure_port)


def plan_local_cluster(
    node_count: int,
    data_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    base_port: int = DEFAULT_BASE_PORT,
    client_ports: Sequence[int] | None = None,
    controller_ports: Sequence[int] | None = None,
    settings: Sequence[tuple[str, str]] = (),
    zookeeper: str | None = None,
    hosts: Sequence[str] | None = None,
    metrics_base_port: int | None = None,
    secure_keystore: Path | None = None,
    secure_ports: Sequence[int] | None = None,
) -> list[NodePlan]:
    """The plan of `node_count` combined nodes with ids 1..N, their files in `data_dir`:
    `node-i/` (data), `node-i.properties` (config) and `node-i.log` (log).

    Ports come from `base_port` unless `client_ports` / `controller_ports` list them (the
    test harness passes free ones). `settings` are extra keys for every node and win over
    the planned ones. With `zookeeper` (a zookeeper.connect value) the nodes keep their
    metadata there: no controller listeners, no quorum voters. `hosts` gives each node
    an address of its own to listen on and advertise (both listeners), instead of
    `host` for all (the fault tests put each node in a network namespace of its own).
    With `metrics_base_port` node i serves /metrics, /health and /ready on that port
    plus i-1 (metrics.listener). With `secure_keystore` (a PEM key store) each node also
    serves a SASL_SSL listener offering SCRAM-SHA-512 on `secure_ports` (default: base_port
    plus 200 plus i-1); the PLAINTEXT one stays the inter-broker listener. Raises
    PlanError; the configs are not checked here (`check_plan`).
    """
    if not 1 <= node_count <= MAX_NODES:
        raise PlanError(f"--nodes must be from 1 to {MAX_NODES}, got {node_count}")
    node_hosts = [h.strip() for h in hosts] if hosts is not None else [host.strip()] * node_count
    if len(node_hosts) != node_count:
        raise PlanError(f"{node_count} nodes need {node_count} hosts, got {len(node_hosts)}")
    for node_host in node_hosts:
        if not node_host or node_host in ("0.0.0.0", "::"):
            raise PlanError(f"--host must be an address clients can connect to, got {node_host!r}")
    if client_ports is None:
        client_ports = [base_port + i for i in range(node_count)]
    if controller_ports is None:
        controller_ports = [base_port + CONTROLLER_PORT_OFFSET + i for i in range(node_count)]
    metrics_ports = (
        [] if metrics_base_port is None else [metrics_base_port + i for i in range(node_count)]
    )
    if secure_keystore is None:
        secure_ports = []
    elif secure_ports is None:
        secure_ports = [base_port + SECURE_PORT_OFFSET + i for i in range(node_count)]
    _check_ports(node_count, client_ports, controller_ports, [*metrics_ports, *secure_ports])
    voters = ",".join(
        f"{node_id}@{format_address(node_hosts[node_id - 1], port)}"
        for node_id, port in enumerate(controller_ports, start=1)
    )
    replication_factor = str(min(3, node_count))
    plans = []
    for index in range(node_count):
        node_id = index + 1
        host = node_hosts[index]
        client = format_address(host, client_ports[index])
        controller = format_address(host, controller_ports[index])
        node_dir = data_dir / f"node-{node_id}"
        planned = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "listeners": f"PLAINTEXT://{client},CONTROLLER://{controller}",
            "advertised.listeners": f"PLAINTEXT://{client}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.voters": voters,
            "log.dirs": str(node_dir),
            "default.replication.factor": replication_factor,
            "offsets.topic.replication.factor": replication_factor,
            "min.insync.replicas": "1",
        }
        if zookeeper is not None:
            for key in ("controller.quorum.voters", "controller.listener.names", "node.id"):
                del planned[key]
            planned["broker.id"] = str(node_id)
            planned["listeners"] = f"PLAINTEXT://{client}"
            planned["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT"
            planned["zookeeper.connect"] = zookeeper
        metrics_port = None if metrics_base_port is None else metrics_base_port + index
        if metrics_port is not None:
            planned["metrics.listener"] = format_address(host, metrics_port)
        secure_port = secure_ports[index] if secure_ports else None
        if secure_keystore is not None and secure_port is not None:
            secure = f"{SECURE_LISTENER}://{format_address(host, secure_port)}"
            for key in ("listeners", "advertised.listeners"):
                planned[key] += f",{secure}"
            planned["listener.security.protocol.map"] += f",{SECURE_LISTENER}:SASL_SSL"
            planned["sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
            planned["ssl.keystore.type"] = "PEM"
            planned["ssl.keystore.location"] = str(secure_keystore)
        for key, value in settings:
            planned.pop(key, None)  # a --set key goes last, where a reader looks for it
            planned[key] = value
        plans.append(
            NodePlan(
                node_id=node_id,
                host=host,
                client_port=client_ports[index],
                controller_port=controller_ports[index],
                data_dir=node_dir,
                config_path=data_dir / f"node-{node_id}.properties",
                log_path=data_dir / f"node-{node_id}.log",
                properties=tuple(planned.items()),
                zookeeper=zookeeper,
                metrics_port=metrics_port,
                secure_port=secure_port,
            )
        )
    return plans


def _check_ports(
    node_count: int,
    client_ports: Sequence[int],
    controller_ports: Sequence[int],
    metrics_ports: Sequence[int] = (),
) -> None:
    if len(client_ports) != node_count or len(controller_ports) != node_count:
        raise PlanError(
            f"{node_count} nodes need {node_count} client and controller ports, got "
            f"{len(client_ports)} and {len(controller_ports)}"
        )
    seen: set[int] = set()
    for port in [*client_ports, *controller_ports, *metrics_ports]:
        if not 1 <= port <= 65535:
            raise PlanError(f"port {port} is outside 1..65535 (see --base-port, --metrics-port)")
        if port in seen:
            raise PlanError(
                f"port {port} would be used twice (see --base-port, --metrics-port and --nodes)"
            )
        seen.add(port)


def render_config(plan: NodePlan, *, header: str | None = None) -> str:
    """The node's config as a `server.properties` file, one `key=value` per line."""
    lines = [f"# {line}" if line else "#" for line in (header or "").splitlines()]
    lines += [f"{key}={_escape(value)}" for key, value in plan.properties]
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """A value as .properties syntax reads it back: backslashes and a leading blank escaped."""
    escaped = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    if escaped[:1] in (" ", "\t", "\f"):
        escaped = "\\" + escaped
    return escaped


def check_plan(plans: Sequence[NodePlan]) -> list[BrokerConfig]:
    """Each node's config as `strom serve` will load it; PlanError naming the node and the
    key on the first one strom would refuse."""
    from strom.config import ConfigError, load_config

    configs = []
    for plan in plans:
        try:
            configs.append(load_config(file_text=render_config(plan)))
        except ConfigError as exc:
            raise PlanError(f"node {plan.node_id}'s config is invalid: {exc}") from None
    return configs


def parse_settings(texts: Sequence[str]) -> list[tuple[str, str]]:
    """`--set KEY=VALUE` options as (key, value); PlanError on one without a key."""
    result = []
    for text in texts:
        key, separator, value = text.partition("=")
        key = key.strip()
        if not separator or not key:
            raise PlanError(f"--set expects KEY=VALUE, got {text!r}")
        result.append((key, value))
    return result


def plan_rows(plans: Sequence[NodePlan], cwd: Path | None = None) -> list[tuple[str, ...]]:
    """(node, client address, controller address or "-" on ZooKeeper, log file) per node,
    and the metrics URL after the controller address when the nodes have one."""
    return [
        (
            str(p.node_id),
            p.client_address,
            "-" if p.zookeeper is not None else p.controller_address,
            *(() if p.metrics_port is None else (metrics_url(p),)),
            _shown_path(p.log_path, cwd),
        )
        for p in plans
    ]


def metrics_url(plan: NodePlan) -> str:
    assert plan.metrics_port is not None
    return f"http://{format_address(plan.host, plan.metrics_port)}/metrics"


def _shown_path(path: Path, cwd: Path | None) -> str:
    if cwd is not None:
        try:
            return str(path.relative_to(cwd))
        except ValueError:
            pass
    return str(path)


def config_header(node_id: int, node_count: int) -> str:
    return (
        f"Node {node_id} of a {node_count}-node local strom cluster, written by `strom dev`.\n"
        "Written again on every `strom dev` start: edit the options given to it instead."
    )
