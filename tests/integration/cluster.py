"""Start, disturb and stop a real multi-node strom cluster for integration tests.

Built on strom.cli.dev_cluster.LocalCluster (what `strom dev` runs), on free ports:

    with running_cluster(tmp_path, nodes=3, settings=["num.partitions=3"]) as cluster:
        cluster.kill(2)
        cluster.wait_until(lambda: leader_of(cluster) != 2, 20, "a new leader")
        cluster.start(2)

Every process is killed when the block ends, also when the test fails. A wait that times
out raises with the tail of every node's log in the message.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from strom.cli.dev_cluster import LocalCluster, exit_reason
from strom.cli.dev_plan import NodePlan, parse_settings, plan_local_cluster

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.1
LOG_LINES = 40

T = TypeVar("T")


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports nothing listens on (each socket stays bound until all are
    chosen, so the kernel cannot hand out one twice)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind((host, 0))
            ports.append(int(s.getsockname()[1]))
        return ports


class ClusterTimeout(AssertionError):
    """wait_until gave up; the message has every node's log tail."""


class TestCluster:
    """N combined broker+controller nodes with ids 1..N on free ports under `root`."""

    __test__ = False  # not a test class, whatever pytest thinks of the name

    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        *,
        settings: Sequence[str] = (),
        ready_timeout_s: float = READY_TIMEOUT_S,
        stop_timeout_s: float = STOP_TIMEOUT_S,
        zookeeper: str | None = None,
        hosts: Sequence[str] | None = None,
        command_prefixes: Mapping[int, Sequence[str]] | None = None,
        node_settings: Mapping[int, Sequence[str]] | None = None,
        more_listeners: Mapping[int, str] | None = None,
    ) -> None:
        """`hosts` (one per node) and `command_prefixes` (node id -> what to run its
        command under) put each node somewhere else than 127.0.0.1, e.g. in a network
        namespace of its own (tests/fault/network.py). `node_settings` (node id ->
        KEY=VALUE) are keys of one node only, written after the others. `more_listeners`
        (node id -> e.g. "SSL://localhost:9094") are client listeners a node serves and
        advertises beside its PLAINTEXT one."""
        ports = free_ports(2 * nodes)
        self.zookeeper = zookeeper
        """zookeeper.connect of the nodes; None: the built-in Raft quorum."""
        self.plans = plan_local_cluster(
            nodes,
            root,
            client_ports=ports[:nodes],
            controller_ports=ports[nodes:],
            settings=parse_settings(settings),
            zookeeper=zookeeper,
            hosts=hosts,
        )
        for node_id, listener in (more_listeners or {}).items():
            plan = self.plans[node_id - 1]
            planned = dict(plan.properties)
            for key in ("listeners", "advertised.listeners"):
                planned[key] = f"{planned[key]},{listener}"
            name = listener.partition(":")[0]
            planned["listener.security.protocol.map"] += f",{name}:{name}"
            self.plans[node_id - 1] = dataclasses.replace(plan, properties=tuple(planned.items()))
        for node_id, extra in (node_settings or {}).items():
            plan = self.plans[node_id - 1]
            properties = (*plan.properties, *parse_settings(extra))
            self.plans[node_id - 1] = dataclasses.replace(plan, properties=properties)
        self.local = LocalCluster(
            self.plans,
            ready_timeout_s=ready_timeout_s,
            stop_timeout_s=stop_timeout_s,
            command_prefixes=command_prefixes,
        )

    # --- what and where ---------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return self.local.bootstrap

    @property
    def node_ids(self) -> list[int]:
        return [plan.node_id for plan in self.plans]

    def plan(self, node_id: int) -> NodePlan:
        return self.local.node(node_id).plan

    def address(self, node_id: int) -> str:
        """The node's client address, host:port."""
        return self.plan(node_id).client_address

    def log_path(self, node_id: int) -> Path:
        return self.local.log_path(node_id)

    def is_running(self, node_id: int) -> bool:
        return self.local.node(node_id).is_running

    def logs(self, lines: int = LOG_LINES) -> str:
        """The end of every node's log since its last start, node by node."""
        parts = []
        for node_id, node in self.local.nodes.items():
            state = exit_reason(node) if node.process is not None else "was never started"
            tail = node.log_tail(lines).rstrip() or "(empty)"
            parts.append(f"--- node {node_id} ({state}), {node.plan.log_path}:\n{tail}")
        return "\n".join(parts)

    # --- starting, stopping, disturbing -----------------------------------------------

    def start_all(self) -> None:
        """Write the configs, start every node at once and wait until each is ready."""
        self.local.start()

    def start(self, node_id: int, *, wait: bool = True) -> None:
        """Start a stopped or killed node again, with the same config and data."""
        self.local.start_node(node_id, wait=wait)

    def stop(self, node_id: int) -> int | None:
        """SIGTERM, wait (SIGKILL after the stop timeout); the exit code."""
        return self.local.stop_node(node_id)

    def stop_all(self) -> None:
        self.local.stop()

    def kill(self, node_id: int) -> None:
        """SIGKILL: the node ends as in a crash, with no chance to flush or leave."""
        self.local.kill(node_id)

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node keeps its sockets open but answers nothing."""
        self.local.pause(node_id)

    def resume(self, node_id: int) -> None:
        self.local.resume(node_id)

    def close(self) -> None:
        """Kill every process (resuming paused ones is not needed for SIGKILL)."""
        self.local.close()

    # --- waiting ----------------------------------------------------------------------

    def wait_until(
        self,
        predicate: Callable[[], T | None],
        timeout_s: float,
        what: str,
        *,
        interval_s: float = POLL_INTERVAL_S,
        seen: Callable[[], str] | None = None,
    ) -> T:
        """Call `predicate` until it returns something true, and return that. An exception
        from it counts as "not yet" (a node may be restarting); on timeout, ClusterTimeout
        says what was awaited, the last exception, what `seen()` (when given) says the
        cluster looks like, and every node's log."""
        deadline = time.monotonic() + timeout_s
        last_error: BaseException | None = None
        attempts = 0
        while True:
            attempts += 1
            try:
                result = predicate()
            except Exception as exc:
                last_error = exc
            else:
                if result:
                    return result
                last_error = None
            if time.monotonic() >= deadline:
                break
            self.local.pump(interval_s)  # reads stray node output while it waits
        error = f"; the last attempt raised {last_error!r}" if last_error is not None else ""
        if seen is not None:
            try:
                error += f"; last seen: {seen()}"
            except Exception as exc:  # the description is a courtesy: never hide the timeout
                error += f"; describing what was seen raised {exc!r}"
        raise ClusterTimeout(
            f"timed out after {timeout_s:g} s ({attempts} attempts) waiting for {what}"
            f"{error}\n{self.logs()}"
        )

    def check_running(self) -> None:
        """AssertionError naming every node that has exited, with the logs."""
        exited = self.local.exited()
        if exited:
            names = ", ".join(f"{i} (code {code})" for i, code in exited.items())
            raise AssertionError(f"nodes exited: {names}\n{self.logs()}")


@contextlib.contextmanager
def running_cluster(
    root: Path,
    nodes: int = 3,
    *,
    settings: Sequence[str] = (),
    ready_timeout_s: float = READY_TIMEOUT_S,
    zookeeper: str | None = None,
    hosts: Sequence[str] | None = None,
    command_prefixes: Mapping[int, Sequence[str]] | None = None,
    node_settings: Mapping[int, Sequence[str]] | None = None,
    more_listeners: Mapping[int, str] | None = None,
) -> Iterator[TestCluster]:
    """A started cluster; every process is killed at the end, also on failure."""
    cluster = TestCluster(
        root,
        nodes,
        settings=settings,
        ready_timeout_s=ready_timeout_s,
        zookeeper=zookeeper,
        hosts=hosts,
        command_prefixes=command_prefixes,
        node_settings=node_settings,
        more_listeners=more_listeners,
    )
    try:
        try:
            cluster.start_all()
        except Exception as exc:
            raise AssertionError(f"the cluster did not start: {exc}\n{cluster.logs()}") from exc
        try:
            yield cluster
        except Exception:
            # A client's own timeout says nothing of the nodes: pytest shows this output
            # beside the failure.
            print(f"every node's log when the test failed:\n{cluster.logs()}")
            raise
    finally:
        cluster.close()
