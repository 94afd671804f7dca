"""A local cluster of `strom serve` processes, one per NodePlan: `strom dev` runs one, and
the integration tests' harness (tests/integration/cluster.py) builds on it.

Each node is a child process started as `python -m strom serve --config node-i.properties`
in a process group of its own (Ctrl-C in the terminal reaches only `strom dev`, which then
stops the nodes in order). A node is ready once it prints its `strom ready` line on
stdout; its log (stderr) is appended to its log file.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

from strom.cli.dev_plan import NodePlan, bootstrap_servers, config_header, render_config

READY_PREFIX = "strom ready"
DEFAULT_READY_TIMEOUT_S = 60.0
DEFAULT_STOP_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 25
_POLL_S = 0.1


class NodeFailure(Exception):
    """A node exited, or did not get ready in time; the message ends with its log's tail."""

    def __init__(self, node_id: int, reason: str, log_path: Path, log_tail: str) -> None:
        tail = log_tail.rstrip() or "(empty)"
        super().__init__(f"node {node_id} {reason}; the end of its log {log_path}:\n{tail}")
        self.node_id = node_id
        self.reason = reason


def port_in_use(host: str, port: int) -> bool:
    """Whether something already listens on (or holds) host:port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def read_tail(path: Path, lines: int = LOG_TAIL_LINES, *, start_bytes: int = 0) -> str:
    """The last `lines` lines of a text file from byte `start_bytes` on ("" if unreadable)."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(start_bytes, size - 64 * 1024))
            data = file.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


class LocalNode:
    """One `strom serve` child: stopped -> starting -> ready -> exited -> starting ...

    `stopped` before the first start; `exited` once the process has ended for any reason
    (stop, kill, crash); start() is legal from stopped and exited only.
    """

    def __init__(
        self,
        plan: NodePlan,
        *,
        python: str,
        env: Mapping[str, str],
        command_prefix: Sequence[str] = (),
    ) -> None:
        self.plan = plan
        self._python = python
        self._env = dict(env)
        self.command_prefix = tuple(command_prefix)
        """Put before the node's command, e.g. `ip netns exec NAME` to run it in a network
        namespace; the prefix must exec the command (the pid stays the node's)."""
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_line: str | None = None
        self.paused = False
        self._stdout = b""
        self._log_start_bytes = 0

    @property
    def node_id(self) -> int:
        return self.plan.node_id

    @property
    def pid_path(self) -> Path:
        """Holds the pid while the node runs (`kill -9 $(cat node-2.pid)` to try a crash)."""
        return self.plan.log_path.with_suffix(".pid")

    @property
    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def is_ready(self) -> bool:
        return self.ready_line is not None and self.is_running

    @property
    def returncode(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def start(self) -> None:
        if self.is_running:
            raise RuntimeError(f"node {self.node_id} is already running")
        self._close_stdout()
        self.plan.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.plan.log_path.open("ab") as log_file:
            self._log_start_bytes = log_file.tell()
            self.process = subprocess.Popen(
                [
                    *self.command_prefix,
                    self._python,
                    *("-m", "strom", "serve", "--config", str(self.plan.config_path)),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=log_file,
                env={**self._env, "PYTHONUNBUFFERED": "1"},
                process_group=0,
            )
        self.pid_path.write_text(f"{self.process.pid}\n", encoding="ascii")
        self.ready_line = None
        self.paused = False
        self._stdout = b""

    def stdout_fd(self) -> int | None:
        if self.process is None or self.process.stdout is None or self.process.stdout.closed:
            return None
        return self.process.stdout.fileno()

    def read_stdout(self) -> list[str]:
        """Read what the node wrote to stdout (call when select says it is readable); the
        complete lines other than the ready line, which sets `ready_line`."""
        fd = self.stdout_fd()
        if fd is None:
            return []
        chunk = os.read(fd, 65536)
        if not chunk:
            self._close_stdout()
            return []
        self._stdout += chunk
        *lines, self._stdout = self._stdout.split(b"\n")
        others = []
        for raw in lines:
            line = raw.decode(errors="replace").rstrip("\r")
            if self.ready_line is None and line.startswith(READY_PREFIX):
                self.ready_line = line
            else:
                others.append(line)
        return others

    def send_signal(self, signum: int) -> None:
        if self.is_running:
            assert self.process is not None
            self.process.send_signal(signum)

    def wait(self, timeout_s: float) -> int | None:
        """The exit code, or None if still running after `timeout_s`."""
        if self.process is None:
            return None
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> int | None:
        """SIGKILL (also to a paused node) and reap; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._close_stdout()
        self.pid_path.unlink(missing_ok=True)
        return self.process.returncode

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The end of what this node logged since its last start."""
        return read_tail(self.plan.log_path, lines, start_bytes=self._log_start_bytes)

    def failure(self, reason: str) -> NodeFailure:
        return NodeFailure(self.node_id, reason, self.plan.log_path, self.log_tail())

    def _close_stdout(self) -> None:
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


def exit_reason(node: LocalNode) -> str:
    """What became of the node: exited with code 1, was ended by SIGKILL, is paused, or
    is running."""
    code = node.returncode
    if code is None:
        return "is paused" if node.paused else "is running"
    if code < 0:
        try:
            return f"was ended by {signal.Signals(-code).name}"
        except ValueError:
            return f"was ended by signal {-code}"
    return f"exited with code {code}"


class LocalCluster:
    """The nodes of one local cluster. start() writes every config and starts every node at
    once (a quorum forms only once a majority runs), then waits until all are ready.

    Use it as a context manager, or call close(): that kills whatever still runs.
    """

    def __init__(
        self,
        plans: Sequence[NodePlan],
        *,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
        command_prefixes: Mapping[int, Sequence[str]] | None = None,
    ) -> None:
        """`command_prefixes`: node id -> what to put before that node's command (see
        LocalNode.command_prefix)."""
        if not plans:
            raise ValueError("a cluster needs at least one node")
        self.plans = list(plans)
        prefixes = command_prefixes or {}
        self.nodes = {
            plan.node_id: LocalNode(
                plan,
                python=python,
                env=os.environ if env is None else env,
                command_prefix=prefixes.get(plan.node_id, ()),
            )
            for plan in plans
        }
        self.ready_timeout_s = ready_timeout_s
        self.stop_timeout_s = stop_timeout_s

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    # --- what and where ---------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return bootstrap_servers(self.plans)

    def node(self, node_id: int) -> LocalNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ValueError(
                f"no node {node_id} (nodes: {', '.join(map(str, self.nodes))})"
            ) from None

    def log_path(self, node_id: int) -> Path:
        return self.node(node_id).plan.log_path

    def log_tail(self, node_id: int, lines: int = LOG_TAIL_LINES) -> str:
        return self.node(node_id).log_tail(lines)

    def exited(self) -> dict[int, int]:
        """{node id: exit code} of the nodes that were started and have ended."""
        codes = {}
        for node_id, node in self.nodes.items():
            code = node.returncode
            if code is not None:
                codes[node_id] = code
        return codes

    # --- starting ---------------------------------------------------------------------

    def write_configs(self) -> None:
        for plan in self.plans:
            plan.config_path.parent.mkdir(parents=True, exist_ok=True)
            plan.data_dir.mkdir(parents=True, exist_ok=True)
            header = config_header(plan.node_id, len(self.plans))
            plan.config_path.write_text(render_config(plan, header=header), encoding="utf-8")

    def start(self, *, wait: bool = True) -> None:
        """Write the configs, start every node, and (by default) wait until all are ready.
        Raises NodeFailure; the nodes are left running for the caller to stop or close."""
        self.write_configs()
        for node in self.nodes.values():
            node.start()
        if wait:
            self.wait_ready()

    def start_node(self, node_id: int, *, wait: bool = True) -> None:
        """Start one node again, with the same config and data."""
        node = self.node(node_id)
        node.start()
        if wait:
            self.wait_ready([node_id])

    def wait_ready(
        self, node_ids: Iterable[int] | None = None, timeout_s: float | None = None
    ) -> None:
        """Wait until each node has printed its ready line; NodeFailure for the first that
        exits, or for the first not ready within the timeout."""
        waiting = [self.node(i) for i in (self.nodes if node_ids is None else node_ids)]
        timeout_s = self.ready_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        while True:
            waiting = [node for node in waiting if node.ready_line is None]
            for node in waiting:
                if not node.is_running:
                    raise node.failure(f"{exit_reason(node)} before it was ready")
            if not waiting:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise waiting[0].failure(f"was not ready within {timeout_s:g} s")
            self.pump(min(remaining, _POLL_S), waiting)

    def pump(self, timeout_s: float, nodes: Iterable[LocalNode] | None = None) -> list[str]:
        """Wait up to `timeout_s` for output on the nodes' stdout and read it; the lines
        other than ready lines, as `[node i] line`. A node's stdout must be read now and
        then: a full pipe would stop it."""
        by_fd = {}
        for node in self.nodes.values() if nodes is None else nodes:
            fd = node.stdout_fd()
            if fd is not None:
                by_fd[fd] = node
        if not by_fd:
            time.sleep(timeout_s)
            return []
        readable, _, _ = select.select(list(by_fd), [], [], timeout_s)
        lines = []
        for fd in readable:
            node = by_fd[fd]
            lines += [f"[node {node.node_id}] {line}" for line in node.read_stdout()]
        return lines

    # --- stopping and disturbing ------------------------------------------------------

    def stop(
        self, node_ids: Iterable[int] | None = None, timeout_s: float | None = None
    ) -> list[int]:
        """SIGTERM to each node (all at once), wait, then SIGKILL the ones still running;
        the ids of those that had to be killed."""
        nodes = [self.node(i) for i in (self.nodes if node_ids is None else node_ids)]
        timeout_s = self.stop_timeout_s if timeout_s is None else timeout_s
        for node in nodes:
            node.send_signal(signal.SIGCONT)  # a paused node cannot act on SIGTERM
            node.paused = False
            node.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        killed = []
        for node in nodes:
            if node.is_running and node.wait(max(0.0, deadline - time.monotonic())) is None:
                killed.append(node.node_id)
            node.kill()
        return killed

    def stop_node(self, node_id: int, timeout_s: float | None = None) -> int | None:
        """Stop one node as stop() does; its exit code (-9 if it had to be killed)."""
        self.stop([node_id], timeout_s)
        return self.node(node_id).returncode

    def kill(self, node_id: int) -> None:
        """SIGKILL one node, as a crash or power loss would end it."""
        self.node(node_id).kill()

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the node stops answering but keeps its sockets (a hung process)."""
        node = self.node(node_id)
        node.send_signal(signal.SIGSTOP)
        node.paused = node.is_running

    def resume(self, node_id: int) -> None:
        node = self.node(node_id)
        node.send_signal(signal.SIGCONT)
        node.paused = False

    def close(self) -> None:
        """Kill every node that still runs. Safe to call more than once."""
        for node in self.nodes.values():
            with contextlib.suppress(OSError):
                node.kill()
