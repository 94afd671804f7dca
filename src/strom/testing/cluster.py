"""`StromCluster`: a real strom cluster for a test, started in milliseconds, with faults.

    with StromCluster(nodes=3) as cluster:
        producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
        cluster.crash_node(cluster.leader("orders", 0))
        cluster.wait_for_leader("orders", 0)

Nodes run in this process (each on a thread and an event loop of its own) or, with
`processes=True`, as child processes. They listen on free loopback ports behind the test
network (strom.testing.network), which can cut links and answer requests with errors.
Data lives in a temporary directory, in memory (/dev/shm) where there is one, and is
removed afterwards. Everything started is stopped when the block ends, also when the
test fails. Every call is made from the test's thread; `async with` works too, and the
waits have `_async` twins for tests that run on an event loop.

The node configs are a Kafka KRaft cluster's (strom.cli.dev_plan: every node a broker
and a controller), with `TEST_CONFIG` on top: timeouts short enough that a fault plays
out within a test, and what `config` sets on top of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import tempfile
import threading
import warnings
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from strom.cli.dev_plan import NodePlan, plan_local_cluster, render_config
from strom.client import NodeClient
from strom.config import load_config
from strom.protocol.apis import ApiKey
from strom.testing import admin
from strom.testing.faults import Injection
from strom.testing.links import CLIENTS
from strom.testing.network import Network, Route
from strom.testing.node import ChildNode, InProcessNode, NodeError, TestNode
from strom.testing.queries import ClusterError, ClusterQueries, config_text

T = TypeVar("T")

TEST_CONFIG: Mapping[str, str] = {
    "broker.heartbeat.interval.ms": "250",
    "broker.session.timeout.ms": "2000",
    "replica.lag.time.max.ms": "3000",
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "controller.quorum.election.timeout.ms": "500",
}
"""What a test cluster changes from strom's defaults (Kafka's), before `config`."""

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


class StromCluster(ClusterQueries):
    """created -> start() -> running -> close() -> closed (or `with` / `async with`)."""

    __test__ = False

    def __init__(
        self,
        nodes: int = 1,
        *,
        config: Mapping[str, str | int | bool] | None = None,
        processes: bool = False,
        data_dir: Path | str | None = None,
        in_memory: bool = True,
    ) -> None:
        """`config`: broker keys for every node, over `TEST_CONFIG`. `processes`: run the
        nodes as child processes instead of threads of this one. `data_dir`: keep the
        data there (kept afterwards); otherwise a temporary directory, under /dev/shm
        when `in_memory` and the machine has one, removed afterwards."""
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        self.size = nodes
        self.processes = processes
        self.config = {**TEST_CONFIG, **{k: config_text(v) for k, v in (config or {}).items()}}
        self._given_dir = Path(data_dir) if data_dir is not None else None
        self._in_memory = in_memory
        self.data_dir: Path | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._network: Network | None = None
        self._nodes: dict[int, TestNode] = {}
        self._private: dict[int, tuple[int, int]] = {}  # node -> (client, controller) ports
        self._client_routes: dict[int, Route] = {}
        self._clients: dict[int, NodeClient] = {}

    # --- life ------------------------------------------------------------------------

    def __enter__(self) -> StromCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> StromCluster:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.close)

    def start(self) -> None:
        """Start every node and wait until each serves clients."""
        if self._thread is not None:
            raise ClusterError("the cluster was started already")
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        self.data_dir = self._given_dir or Path(
            tempfile.mkdtemp(prefix="strom-test-", dir=_memory_dir() if self._in_memory else None)
        )
        self._start_control_loop()
        network = self._network = self._run(_new_network())
        routes = {
            (node_id, kind): Route(node_id, HOST, self._private_port_of(node_id, kind))
            for node_id in range(1, self.size + 1)
            for kind in (0, 1)
        }
        self._run(network.serve(list(routes.values())))
        self._client_routes = {n: routes[(n, 0)] for n in range(1, self.size + 1)}
        plans = plan_local_cluster(
            self.size,
            self.data_dir,
            host=HOST,
            client_ports=[routes[(n, 0)].public_port for n in range(1, self.size + 1)],
            controller_ports=[routes[(n, 1)].public_port for n in range(1, self.size + 1)],
            settings=tuple(self.config.items()),
        )
        for plan in plans:
            self._nodes[plan.node_id] = self._make_node(plan)
        self._start_nodes(list(self._nodes))

    def _make_node(self, plan: NodePlan) -> TestNode:
        """The node listens on private ports and advertises its public ones."""
        properties = dict(plan.properties)
        if self.processes:
            from strom.testing.child import NODE_ID_ENV, PUBLIC_ENV

            client_port, controller_port = free_ports(2, HOST)
            self._private[plan.node_id] = (client_port, controller_port)
        else:
            client_port = controller_port = 0
        properties["listeners"] = (
            f"PLAINTEXT://{HOST}:{client_port},CONTROLLER://{HOST}:{controller_port}"
        )
        text = render_config(_replan(plan, properties))
        plan.config_path.parent.mkdir(parents=True, exist_ok=True)
        plan.config_path.write_text(text)
        if self.processes:
            assert self._network is not None
            public = ",".join(f"{h}:{p}" for h, p in sorted(self._network.public))
            return ChildNode(
                plan.node_id,
                plan.config_path,
                plan.log_path,
                {NODE_ID_ENV: str(plan.node_id), PUBLIC_ENV: public},
            )
        network = self._network
        assert network is not None
        return InProcessNode(
            plan.node_id,
            load_config(file_text=text),
            partial(network.dialer, plan.node_id),
        )

    def _private_port_of(self, node_id: int, kind: int) -> Callable[[], int | None]:
        def port() -> int | None:
            node = self._nodes.get(node_id)
            if node is None or not node.is_running:
                return None
            if isinstance(node, InProcessNode):
                try:
                    bound = node.broker.bound
                except NodeError:  # it stopped since is_running said otherwise
                    return None
                return bound[kind][1] if kind < len(bound) else None
            return self._private[node_id][kind]

        return port

    def _start_nodes(self, node_ids: list[int]) -> None:
        """Start nodes together: a Raft quorum forms only once most voters run."""
        errors: list[BaseException] = []

        def start(node: TestNode) -> None:
            try:
                node.start(START_TIMEOUT_S)
            except BaseException as exc:  # raised below, the first one
                errors.append(exc)

        threads = [
            threading.Thread(target=start, args=(self._nodes[n],), name=f"start-node-{n}")
            for n in node_ids
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Stop everything (nodes crash: a test cluster's data is not kept for later)."""
        for node in self._nodes.values():
            try:
                node.crash(lose_unflushed=False, timeout_s=STOP_TIMEOUT_S)
            except NodeError as exc:  # a node that does not stop is a bug: say where it hangs
                warnings.warn(str(exc), RuntimeWarning, stacklevel=2)
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self._run(self._close_clients())
            if self._network is not None:
                with contextlib.suppress(Exception):
                    self._run(self._network.close())
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)
        if self._given_dir is None and self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
        self._nodes.clear()

    async def _close_clients(self) -> None:
        for client in self._clients.values():
            client.close()

    # --- where -----------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """`host:port,...` of every node, for any Kafka client's bootstrap.servers."""
        return ",".join(f"{HOST}:{route.public_port}" for route in self._client_routes.values())

    def address(self, node_id: int) -> str:
        """The node's client address (host:port), as clients are told."""
        return f"{HOST}:{self._route(node_id).public_port}"

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    def is_running(self, node_id: int) -> bool:
        return self._node(node_id).is_running

    # --- nodes -----------------------------------------------------------------------

    def stop_node(self, node_id: int) -> None:
        """Stop cleanly: leaderships handed over, logs flushed (SIGTERM's path). Raises
        NodeError if the node failed instead, where `strom serve` would exit nonzero."""
        self._node(node_id).stop(STOP_TIMEOUT_S)

    def crash_node(self, node_id: int, *, lose_unflushed: bool = False) -> None:
        """Stop at once, as kill -9 does; with `lose_unflushed` (in-process nodes only)
        the partition logs also lose what was not fsynced yet, as in a power failure."""
        self._node(node_id).crash(lose_unflushed=lose_unflushed, timeout_s=STOP_TIMEOUT_S)

    def start_node(self, node_id: int) -> None:
        """Start a stopped or crashed node again, on its data; returns once it serves."""
        self._start_nodes([node_id])

    def restart_node(self, node_id: int) -> None:
        self.stop_node(node_id)
        self.start_node(node_id)

    def pause_node(self, node_id: int) -> None:
        """Freeze the node (SIGSTOP): it keeps its connections but answers nothing, and
        the others fence it after broker.session.timeout.ms."""
        self._node(node_id).pause()

    def resume_node(self, node_id: int) -> None:
        self._node(node_id).resume()

    @contextlib.contextmanager
    def paused(self, node_id: int) -> Iterator[None]:
        self.pause_node(node_id)
        try:
            yield
        finally:
            self.resume_node(node_id)

    def reset(self) -> None:
        """Undo every fault: heal the network, drop unused injected errors and delays,
        resume paused nodes and start stopped or crashed ones. The session fixtures call
        it after each test, so that one test's faults never reach the next."""
        self.heal()
        self.clear_faults()
        for node in self._nodes.values():
            node.resume()
        stopped = [n for n, node in self._nodes.items() if not node.is_running]
        if stopped:
            self._start_nodes(stopped)

    @property
    def session_timeout_s(self) -> float:
        """How long a paused or cut-off node takes to be fenced."""
        return int(self.config["broker.session.timeout.ms"]) / 1000

    # --- network ---------------------------------------------------------------------

    def cut(self, a: int, b: int) -> None:
        """Cut the link between nodes `a` and `b`: bytes wait until heal()."""
        self._change_links(lambda rules: rules.cut(self._known(a), self._known(b)))

    def cut_clients(self, node_id: int) -> None:
        """Cut every client (not the other nodes) off node `node_id`."""
        self._change_links(lambda rules: rules.cut(self._known(node_id), CLIENTS))

    def isolate(self, node_id: int) -> None:
        """Cut node `node_id` off every other node and every client."""
        self._change_links(lambda rules: rules.isolate(self._known(node_id), self._nodes))

    def heal(self, a: int | None = None, b: int | None = None) -> None:
        """Heal one link, every link of one node, or (no argument) the whole network."""
        self._change_links(lambda rules: rules.heal(a, b))

    @property
    def cut_links(self) -> list[tuple[int, int]]:
        """Cut links as (a, b); -1 stands for the clients."""
        return self._on_loop(lambda network: network.rules.cut_links)

    def _change_links(self, change: Callable[[Any], None]) -> None:
        async def apply() -> None:
            assert self._network is not None
            change(self._network.rules)
            await self._network.changed()

        self._run(apply())

    # --- requests --------------------------------------------------------------------

    def fail_requests(
        self,
        api: ApiKey | str | int,
        error: ErrorCode | str | int,
        *,
        count: int = 1,
        node_id: int | None = None,
    ) -> None:
        """Answer the next `count` client requests of `api` (to `node_id`, or to any node)
        with `error`, as that node would; they never reach the broker. E.g.
        fail_requests("PRODUCE", "NOT_LEADER_OR_FOLLOWER", count=3)."""
        self._inject(_api_key(api), Injection(_error_code(error)), count, node_id)

    def delay_requests(
        self, api: ApiKey | str | int, delay_s: float, *, count: int = 1, node_id: int | None = None
    ) -> None:
        """Hold the next `count` client requests of `api` back `delay_s` seconds each
        (and, behind them, what the same connection sends next)."""
        self._inject(_api_key(api), Injection(None, delay_s), count, node_id)

    def _inject(
        self, api_key: ApiKey, injection: Injection, count: int, node_id: int | None
    ) -> None:
        if node_id is not None:
            self._node(node_id)
        self._on_loop(lambda n: n.faults.add(api_key, injection, count=count, node_id=node_id))

    def pending_faults(self, api: ApiKey | str | int | None = None) -> int:
        """Injected errors and delays not used yet."""
        key = None if api is None else _api_key(api)
        return self._on_loop(lambda network: network.faults.remaining(key))

    def clear_faults(self) -> None:
        self._on_loop(lambda network: network.faults.clear())

    # --- plumbing --------------------------------------------------------------------

    def _node(self, node_id: int) -> TestNode:
        node = self._nodes.get(node_id)
        if node is None:
            raise ClusterError(f"no node {node_id}: the nodes are {self.node_ids}")
        return node

    def _known(self, node_id: int) -> int:
        return self._node(node_id).node_id

    def _route(self, node_id: int) -> Route:
        self._node(node_id)
        return self._client_routes[node_id]

    def _running_clients(self) -> dict[int, NodeClient]:
        """A client for each running node that is not paused, on its private port (past
        the test network). Call on the control loop."""
        running = {}
        for node_id, node in self._nodes.items():
            port = self._route(node_id).private_port()
            if port is None or node.paused:
                continue
            client = self._clients.get(node_id)
            if client is None or client.port != port:
                if client is not None:
                    client.close()
                client = self._clients[node_id] = NodeClient(
                    HOST, port, client_id=admin.CLIENT_ID, node_id=node_id, connect_timeout_s=2.0
                )
            running[node_id] = client
        return running

    def _on_loop(self, use: Callable[[Network], T]) -> T:
        async def run() -> T:
            assert self._network is not None
            return use(self._network)

        return self._run(run())

    def _start_control_loop(self) -> None:
        started: Future[asyncio.AbstractEventLoop] = Future()

        def run() -> None:
            loop = asyncio.new_event_loop()
            started.set_result(loop)
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="strom-test-network", daemon=True)
        self._thread.start()
        self._loop = started.result(10)

    def _run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        if self._loop is None:
            coro.close()
            raise ClusterError("the cluster is not running")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)


async def _new_network() -> Network:
    return Network()  # made on the control loop, which owns it


def _replan(plan: NodePlan, properties: dict[str, str]) -> NodePlan:
    from dataclasses import replace

    return replace(plan, properties=tuple(properties.items()))


def free_ports(count: int, host: str) -> list[int]:
    """`count` distinct free ports (each stays bound until all are chosen)."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            s = stack.enter_context(socket.socket())
            s.bind((host, 0))
            ports.append(int(s.getsockname()[1]))
        return ports


def _memory_dir() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and shutil.disk_usage(shm).free > 256 << 20 else None


def _api_key(api: ApiKey | str | int) -> ApiKey:
    if isinstance(api, str):
        try:
            return ApiKey[api.upper().replace("-", "_")]
        except KeyError:
            raise ValueError(f"unknown API {api!r}; e.g. 'PRODUCE', 'FETCH'") from None
    return ApiKey(api)


def _error_code(error: ErrorCode | str | int) -> ErrorCode:
    if isinstance(error, str):
        try:
            return ErrorCode[error.lower()]
        except KeyError:
            raise ValueError(f"unknown error {error!r}; e.g. 'NOT_LEADER_OR_FOLLOWER'") from None
    return ErrorCode(error)
