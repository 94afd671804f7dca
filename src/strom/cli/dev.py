"""`strom dev`: run a local N-node cluster (separate `strom serve` processes) until Ctrl-C.

The plan (ports, paths, configs) is dev_plan.py; the processes are dev_cluster.py.
"""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated

import typer

from strom.cli.common import CommandError, echo_error, echo_status, print_table, usage_error
from strom.cli.dev_cluster import (
    LocalCluster,
    NodeFailure,
    exit_reason,
    port_in_use,
)
from strom.cli.dev_plan import (
    DEFAULT_BASE_PORT,
    DEFAULT_HOST,
    DEFAULT_NODE_COUNT,
    MAX_NODES,
    NodePlan,
    PlanError,
    check_plan,
    parse_settings,
    plan_local_cluster,
    plan_rows,
    secure_bootstrap_servers,
)

if TYPE_CHECKING:
    from strom.cli.dev_tls import DevSecurity

_WATCH_S = 0.25


_ZOOKEEPER_PROBE_S = 2.0


def plan_from_options(
    nodes: int,
    data_dir: Path,
    host: str,
    base_port: int,
    settings: list[str] | None,
    zookeeper: str | None = None,
    metrics_port: int | None = None,
    secure_keystore: Path | None = None,
) -> list[NodePlan]:
    """The checked plan for the command's options; a usage error for anything wrong."""
    try:
        plans = plan_local_cluster(
            nodes,
            data_dir.absolute(),
            host=host,
            base_port=base_port,
            settings=parse_settings(settings or []),
            zookeeper=zookeeper,
            metrics_base_port=metrics_port,
            secure_keystore=secure_keystore,
        )
        configs = check_plan(plans)
    except PlanError as exc:
        raise usage_error(str(exc).replace("'zookeeper.connect'", "--zookeeper")) from None
    ensemble = configs[0].zookeeper
    if ensemble is not None and not any(
        _answers(server.host, server.port) for server in ensemble.hosts
    ):
        raise usage_error(
            f"no ZooKeeper server of --zookeeper {zookeeper} accepts connections; start one "
            "first (docs/metadata-stores.md) or leave --zookeeper out for the built-in quorum"
        )
    return plans


def _answers(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=_ZOOKEEPER_PROBE_S).close()
    except OSError:
        return False
    return True


def busy_ports(plans: list[NodePlan]) -> list[str]:
    busy = []
    for plan in plans:
        ports = (
            [plan.client_port]
            if plan.zookeeper is not None
            else [
                plan.client_port,
                plan.controller_port,
            ]
        )
        ports += [port for port in (plan.metrics_port, plan.secure_port) if port is not None]
        for port in ports:
            if port_in_use(plan.host, port):
                busy.append(f"{plan.host}:{port}")
    return busy


class _Stop(Exception):
    """SIGTERM or SIGINT arrived."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def dev(
    nodes: Annotated[
        int,
        typer.Option("--nodes", "-n", min=1, max=MAX_NODES, help="How many nodes to run."),
    ] = DEFAULT_NODE_COUNT,
    data_dir: Annotated[
        Path,
        typer.Option(
            "--data-dir",
            metavar="DIR",
            help="Where each node's data, config and log go (node-1/, node-1.properties, "
            "node-1.log, ...). The same directory starts the same cluster again.",
        ),
    ] = Path("strom-dev"),
    host: Annotated[
        str, typer.Option("--host", help="Address every node listens on.")
    ] = DEFAULT_HOST,
    base_port: Annotated[
        int,
        typer.Option(
            "--base-port",
            min=1,
            max=65535,
            help="Client port of node 1; node i listens on BASE+i-1 for clients and "
            "BASE+100+i-1 for the controller quorum.",
        ),
    ] = DEFAULT_BASE_PORT,
    settings: Annotated[
        list[str] | None,
        typer.Option(
            "--set", "-s", metavar="KEY=VALUE", help="A config key for every node (repeatable)."
        ),
    ] = None,
    zookeeper: Annotated[
        str | None,
        typer.Option(
            "--zookeeper",
            metavar="HOST:PORT[/CHROOT]",
            help="Keep the metadata in this ZooKeeper ensemble (zookeeper.connect) instead "
            "of the built-in Raft quorum; the chroot is created if missing.",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            min=1,
            max=65535,
            metavar="BASE",
            help="Serve Prometheus metrics, /health and /ready: node i on BASE+i-1.",
        ),
    ] = None,
    secure: Annotated[
        bool,
        typer.Option(
            "--secure",
            help="Also serve clients over TLS with SCRAM-SHA-512 logins (node i on BASE+200+i-1), "
            "with a CA and an admin user made in DIR/tls, and write DIR/client.properties.",
        ),
    ] = False,
) -> None:
    """Run a local cluster of N combined broker+controller nodes until Ctrl-C."""
    try:
        security = None
        if secure:  # cryptography takes a while to load: only when asked
            from strom.cli.dev_tls import dev_security

            security = dev_security(data_dir.absolute() / "tls", [host])
        plans = plan_from_options(
            nodes,
            data_dir,
            host,
            base_port,
            settings,
            zookeeper,
            metrics_port,
            None if security is None else security.keystore_path,
        )
        code = _run(plans, security)
    except CommandError as error:
        echo_error(error.message)
        code = int(error.exit_code)
    raise typer.Exit(code)


def _run(plans: list[NodePlan], security: DevSecurity | None = None) -> int:
    busy = busy_ports(plans)
    if busy:
        raise usage_error(
            f"address{'es' if len(busy) > 1 else ''} already in use: {', '.join(busy)} "
            "(another strom dev or broker?); pick others with --base-port"
        )
    cluster = LocalCluster(plans)
    previous = {
        signum: signal.signal(signum, _raise_stop) for signum in (signal.SIGTERM, signal.SIGINT)
    }
    try:
        where = plans[0].config_path.parent
        again = any(plan.data_dir.is_dir() and any(plan.data_dir.iterdir()) for plan in plans)
        store = f", metadata in ZooKeeper {plans[0].zookeeper}" if plans[0].zookeeper else ""
        echo_status(
            f"starting {len(plans)} nodes in {where}{store}"
            + (" with the data of the last run ..." if again else " ...")
        )
        cluster.start()
        print(f"bootstrap servers: {cluster.bootstrap}\n", flush=True)
        metrics = ("METRICS",) if plans[0].metrics_port is not None else ()
        print_table(
            ("NODE", "CLIENT ADDRESS", "CONTROLLER ADDRESS", *metrics, "LOG"),
            plan_rows(plans, Path.cwd()),
        )
        if security is not None:
            _secure(plans, security)
        echo_status(
            f"\nFor the strom command: export STROM_BOOTSTRAP={cluster.bootstrap}\n"
            "Ctrl-C stops every node."
        )
        return _watch(cluster)
    except NodeFailure as failure:
        echo_error(str(failure))
        return 1
    except _Stop:
        return 0
    finally:
        try:
            running = [i for i, node in cluster.nodes.items() if node.is_running]
            if running:
                echo_status("stopping every node ... (Ctrl-C again kills them)")
                killed = cluster.stop(running)
                _report_stopped(cluster, running, killed)
        except _Stop:
            echo_status("killing every node")
        finally:
            for signum in previous:
                signal.signal(signum, signal.SIG_IGN)
            cluster.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _secure(plans: list[NodePlan], security: DevSecurity) -> None:
    """Give the admin user its password, write client.properties, and say how to use it."""
    import asyncio

    from strom.cli.dev_tls import ADMIN_USER, add_admin_user, client_properties, write_private
    from strom.client import ClientError

    first = plans[0]
    try:
        asyncio.run(add_admin_user(first.host, first.client_port, security.password))
    except (RuntimeError, ClientError) as exc:
        raise CommandError(f"--secure: {exc}") from None
    properties = first.config_path.parent / "client.properties"
    write_private(properties, client_properties(security).encode())
    secured = secure_bootstrap_servers(plans)
    print(
        f"\nTLS and SCRAM-SHA-512 on: {secured}\n"
        f"Client settings (user {ADMIN_USER}): {_shown_path(properties)}\n\n"
        + client_properties(security)
        + f"\nTry: strom topic list -b {secured.split(',')[0]} "
        f"--command-config {_shown_path(properties)}",
        flush=True,
    )


def _shown_path(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _watch(cluster: LocalCluster) -> int:
    """Until a signal: pass on what the nodes print. A node that ends is reported once
    and the others keep running (killing one is how failover is tried); when every node
    has ended, so does `strom dev`."""
    reported: set[int] = set()
    while True:
        for line in cluster.pump(_WATCH_S):
            print(line, flush=True)
        exited = cluster.exited()
        for node_id in sorted(set(exited) - reported):
            reported.add(node_id)
            node = cluster.node(node_id)
            echo_error(str(node.failure(exit_reason(node))))
            echo_status(
                f"the other nodes keep running; start node {node_id} again with: "
                f"strom serve --config {node.plan.config_path}"
            )
        if len(exited) == len(cluster.nodes):
            return 1
        reported &= set(exited)  # a node started again by hand is watched anew


def _report_stopped(cluster: LocalCluster, stopped: list[int], killed: list[int]) -> None:
    for node_id in killed:
        echo_status(f"node {node_id} did not stop within {cluster.stop_timeout_s:g} s: killed")
    failed = [i for i in stopped if i not in killed and cluster.node(i).returncode != 0]
    for node_id in failed:
        node = cluster.node(node_id)
        echo_status(f"node {node_id} {exit_reason(node)}; its log: {node.plan.log_path}")
    if not killed and not failed:
        echo_status("stopped")
