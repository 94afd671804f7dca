"""Network namespaces for a fault run, and the cuts between them (Linux, as root).

Every endpoint of a run (each node, and the ZooKeeper server on that store) gets a
network namespace of its own, connected by a veth pair to one Linux bridge in the root
namespace; the bridge has the first address of a private /24 chosen free on this
machine, so the test process and its clients reach every endpoint through it:

    root namespace: strom<pid>br 10.213.K.1/24 (the clients, the test)
        |-- strom<pid>v1 === eth0 10.213.K.11 in strom<pid>n1   node 1
        |-- strom<pid>v2 === eth0 10.213.K.12 in strom<pid>n2   node 2
        |-- strom<pid>v3 === eth0 10.213.K.13 in strom<pid>n3   node 3
        `-- strom<pid>vzk == eth0 10.213.K.100 in strom<pid>zk  ZooKeeper

A cut between A and B is an nftables rule in each of the two namespaces dropping what
arrives from the other (`ip saddr @cut drop` on the input hook, the set holding the
other's address): nothing is answered, not even with a reset, so connections hang and
connects time out, as on a real partition. The root namespace (the clients) is never
cut. `Network.apply(topology)` moves from the current cuts to the new ones, rewriting
each changed namespace's set in one atomic nft transaction.

Everything is named after the test process's pid. close() (also on failure or Ctrl-C,
as a context manager) kills what still runs in the namespaces and removes them, the
veths and the bridge; sweep_leftovers() removes what runs of dead processes left
behind (a run killed with SIGKILL cannot clean up after itself). The subnet is chosen
under a lock file, so concurrent runs on one machine never pick the same one.

Written by hand: pyroute2 could build the links, but `ip` and `nft` are what a reader
would type to look at a run (`ip netns exec strom1234n1 nft list ruleset`), and this
needs a dozen of their commands.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import ipaddress
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

from .topology import WHOLE, ZOOKEEPER, Topology, changed_endpoints

PREFIX = "strom"
SUBNET_FIRST_OCTETS = (10, 213)
"""Runs use 10.213.K.0/24, K the first free one (from pid-dependent start)."""
BRIDGE_HOST = 1
ZOOKEEPER_HOST = 100
NODE_HOST_BASE = 10
NFT_TABLE = "strom_fault"
NFT_SET = "cut"
LOCK_PATH = Path("/run/lock/strom-fault-network.lock")
COMMAND_TIMEOUT_S = 20.0
_NAME = re.compile(rf"^{PREFIX}(\d+)(n\d+|zk|br|v\d+|vzk|probe)$")
_CLONE_NEWNET = 0x40000000
_ADDRESS = re.compile(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)\b")


class NetworkError(RuntimeError):
    """An `ip` or `nft` command failed; the message has its output."""


def _run(*args: str, stdin: str | None = None, check: bool = True) -> str:
    result = subprocess.run(
        args,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if check and result.returncode != 0:
        raise NetworkError(
            f"`{' '.join(args)}` failed with {result.returncode}: {result.stderr.strip()}"
        )
    return result.stdout


def unavailable_reason() -> str | None:
    """Why network faults cannot run on this machine, or None if they can."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "network faults need root (to create network namespaces and nftables rules)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("setpriv", "util-linux")):
        if shutil.which(tool) is None:
            return f"network faults need `{tool}`: install {package} (./dev test does)"
    probe = f"{PREFIX}{os.getpid()}probe"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "nft", "list", "tables")
    except (NetworkError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace with nftables in it: {exc}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """SIGKILL whatever still runs in `namespace` (a node a dead run left behind)."""
    for word in _run("ip", "netns", "pids", namespace, check=False).split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(word), signal.SIGKILL)


def _our_names() -> tuple[list[str], list[str]]:
    """(namespaces, links) named like a run's, with any owner."""
    namespaces = [
        line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()
    ]
    links = []
    for line in _run("ip", "-o", "link", "show").splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            links.append(parts[1].strip().split("@")[0])
    return (
        [n for n in namespaces if _NAME.match(n)],
        [link for link in links if _NAME.match(link)],
    )


def sweep_leftovers(*, also_pid: int | None = None) -> list[str]:
    """Remove the namespaces and links of runs whose process has ended (and those of
    `also_pid`, a run of this process that is over); the names removed."""
    namespaces, links = _our_names()

    def stale(name: str) -> bool:
        match = _NAME.match(name)
        assert match is not None
        pid = int(match.group(1))
        return pid == also_pid or not _pid_alive(pid)

    removed = []
    for namespace in filter(stale, namespaces):
        _kill_inside(namespace)
    for link in filter(stale, links):
        _run("ip", "link", "del", link, check=False)
        removed.append(link)
    for namespace in filter(stale, namespaces):
        _run("ip", "netns", "del", namespace, check=False)
        removed.append(namespace)
    return removed


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network or address this machine's addresses and routes mention."""
    text = _run("ip", "-4", "-o", "addr", "show") + _run(
        "ip", "-4", "route", "show", "table", "all"
    )
    found = []
    for token in _ADDRESS.findall(text):
        with contextlib.suppress(ValueError):
            network = ipaddress.IPv4Network(token, strict=False)
            if network.prefixlen > 0:
                found.append(network)
    return found


def choose_subnet(used: Sequence[ipaddress.IPv4Network], start: int) -> ipaddress.IPv4Network:
    """The first 10.213.K.0/24 from K=`start` on (wrapping) that overlaps nothing used."""
    first, second = SUBNET_FIRST_OCTETS
    for step in range(256):
        candidate = ipaddress.IPv4Network(f"{first}.{second}.{(start + step) % 256}.0/24")
        if not any(candidate.overlaps(network) for network in used):
            return candidate
    raise NetworkError(f"no free /24 in {first}.{second}.0.0/16 on this machine")


class Network:
    """The namespaces of one run: created -> (apply ...)* -> closed. A context manager."""

    def __init__(self, endpoints: Sequence[int]) -> None:
        if len(set(endpoints)) != len(endpoints) or any(e < 0 for e in endpoints):
            raise ValueError(f"endpoints must be distinct node ids or ZOOKEEPER: {endpoints}")
        self.endpoints = tuple(endpoints)
        self.pid = os.getpid()
        self.prefix = f"{PREFIX}{self.pid}"
        self.bridge = f"{self.prefix}br"
        self.subnet: ipaddress.IPv4Network | None = None
        self.topology = WHOLE
        self._created: list[str] = []

    # --- names and addresses ---------------------------------------------------------

    def namespace(self, endpoint: int) -> str:
        return f"{self.prefix}{'zk' if endpoint == ZOOKEEPER else f'n{endpoint}'}"

    def veth(self, endpoint: int) -> str:
        return f"{self.prefix}v{'zk' if endpoint == ZOOKEEPER else endpoint}"

    def _host(self, number: int) -> str:
        assert self.subnet is not None, "the network is not created"
        return str(self.subnet.network_address + number)

    @property
    def root_address(self) -> str:
        """The bridge's address: where the test and its clients come from."""
        return self._host(BRIDGE_HOST)

    def address(self, endpoint: int) -> str:
        return self._host(ZOOKEEPER_HOST if endpoint == ZOOKEEPER else NODE_HOST_BASE + endpoint)

    def command_prefix(self, endpoint: int) -> list[str]:
        """What to put before a command to run it in the endpoint's namespace; it dies
        with the thread that starts it (setpriv --pdeathsig), so a test killed outright
        leaves no node behind."""
        return ["setpriv", "--pdeathsig", "KILL", "ip", "netns", "exec", self.namespace(endpoint)]

    # --- building and removing -------------------------------------------------------

    def __enter__(self) -> Network:
        self.create()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def create(self) -> None:
        sweep_leftovers(also_pid=self.pid)
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
        with LOCK_PATH.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # until the bridge's route shows the subnet
            self.subnet = choose_subnet(_used_networks(), start=self.pid % 200 + 20)
            self._created.append(self.bridge)
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.root_address}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
        for endpoint in self.endpoints:
            namespace, veth = self.namespace(endpoint), self.veth(endpoint)
            self._created.append(namespace)
            _run("ip", "netns", "add", namespace)
            _run(
                "ip",
                "link",
                "add",
                veth,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                namespace,
            )
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
            _run(
                "ip", "-n", namespace, "addr", "add", f"{self.address(endpoint)}/24", "dev", "eth0"
            )
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
            _run("ip", "-n", namespace, "link", "set", "eth0", "up")
            self._nft(
                endpoint,
                f"table inet {NFT_TABLE} {{\n"
                f"  set {NFT_SET} {{ type ipv4_addr; }}\n"
                "  chain input {\n"
                "    type filter hook input priority filter; policy accept;\n"
                f"    ip saddr @{NFT_SET} drop\n"
                "  }\n"
                "}\n",
            )

    def close(self) -> None:
        """Remove everything this network created (what is already gone is skipped)."""
        namespaces = [self.namespace(e) for e in self.endpoints]
        existing, _ = _our_names()
        for namespace in namespaces:
            if namespace in existing:
                _kill_inside(namespace)
        for endpoint in self.endpoints:
            _run("ip", "link", "del", self.veth(endpoint), check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        for namespace in namespaces:
            if namespace in existing:
                _run("ip", "netns", "del", namespace, check=False)
        self._created.clear()
        self.topology = WHOLE

    # --- cutting ---------------------------------------------------------------------

    def apply(self, topology: Topology) -> None:
        """Move from the current cuts to `topology`'s."""
        unknown = {e for c in topology.cuts for e in (c.a, c.b)} - set(self.endpoints)
        if unknown:
            raise ValueError(f"no endpoints {sorted(unknown)} in this network")
        for endpoint in sorted(changed_endpoints(self.topology, topology)):
            blocked = sorted(topology.blocked(endpoint))
            script = f"flush set inet {NFT_TABLE} {NFT_SET}\n"
            if blocked:
                elements = ", ".join(self.address(e) for e in blocked)
                script += f"add element inet {NFT_TABLE} {NFT_SET} {{ {elements} }}\n"
            self._nft(endpoint, script)
        self.topology = topology

    def rules(self, endpoint: int) -> str:
        """The endpoint's nftables ruleset, as `nft list ruleset` prints it."""
        return _run("ip", "netns", "exec", self.namespace(endpoint), "nft", "list", "ruleset")

    def _nft(self, endpoint: int, script: str) -> None:
        _run("ip", "netns", "exec", self.namespace(endpoint), "nft", "-f", "-", stdin=script)

    # --- running things inside ---------------------------------------------------------

    @contextlib.contextmanager
    def inside(self, endpoint: int) -> Iterator[None]:
        """Run the block's thread in the endpoint's namespace (children it starts stay
        there); back in its own namespace afterwards. For code that starts a process
        itself and takes no command prefix."""
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            target = os.open(f"/run/netns/{self.namespace(endpoint)}", os.O_RDONLY)
            try:
                if libc.setns(target, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(
                        error, f"setns into {self.namespace(endpoint)}: {os.strerror(error)}"
                    )
            finally:
                os.close(target)
            try:
                yield
            finally:
                if libc.setns(own, _CLONE_NEWNET) != 0:
                    error = ctypes.get_errno()
                    raise OSError(
                        error, f"setns back to the test's namespace: {os.strerror(error)}"
                    )
        finally:
            os.close(own)
