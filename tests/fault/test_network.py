"""The network namespaces of the fault tests (network.py) on their own, with a few
Python processes instead of a cluster: a cut drops packets silently both ways (connects
time out, an open connection hangs and resumes after the heal), the clients in the root
namespace reach both sides all along, and nothing is left behind. Skips unless root.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from .network import Network, NetworkError, sweep_leftovers
from .topology import WHOLE, Topology, isolate

pytestmark = pytest.mark.usefixtures("network_faults")
PORT = 7000
CONNECT_TIMEOUT_S = 1.5
ECHO_SERVER = """
import socket, sys, threading
server = socket.create_server((sys.argv[1], int(sys.argv[2])), reuse_port=True)
def echo(connection):
    with connection:
        while data := connection.recv(1024):
            connection.sendall(data)
while True:
    threading.Thread(target=echo, args=(server.accept()[0],), daemon=True).start()
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3]))
    print("connected")
except TimeoutError:
    print("timed out")
except ConnectionRefusedError:
    print("refused")
"""


@pytest.fixture
def network() -> Iterator[Network]:
    """Nodes 1 and 2, each with an echo server on PORT."""
    with Network([1, 2]) as net:
        servers = [
            subprocess.Popen(
                [
                    *net.command_prefix(n),
                    sys.executable,
                    "-c",
                    ECHO_SERVER,
                    net.address(n),
                    str(PORT),
                ]
            )
            for n in (1, 2)
        ]
        try:
            for n in (1, 2):
                _wait_listening(net.address(n))
            yield net
        finally:
            for server in servers:
                server.kill()
                server.wait()


def _wait_listening(address: str) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection((address, PORT), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def connect_from(net: Network, source: int, target: int) -> str:
    """ "connected", "timed out" or "refused": a connect from inside `source`'s namespace."""
    command = [
        sys.executable,
        "-c",
        CONNECT,
        net.address(target),
        str(PORT),
        str(CONNECT_TIMEOUT_S),
    ]
    result = subprocess.run(
        [*net.command_prefix(source), *command], capture_output=True, text=True, timeout=20
    )
    return result.stdout.strip()


def from_root(net: Network, target: int) -> str:
    try:
        socket.create_connection((net.address(target), PORT), timeout=CONNECT_TIMEOUT_S).close()
    except TimeoutError:
        return "timed out"
    return "connected"


def test_a_cut_drops_silently_both_ways_while_the_root_namespace_reaches_both(
    network: Network,
) -> None:
    assert connect_from(network, 1, 2) == connect_from(network, 2, 1) == "connected"
    network.apply(isolate(1, [2]))
    assert "ip saddr @cut drop" in network.rules(1)
    assert network.address(2) in network.rules(1) and network.address(1) in network.rules(2)
    # No reset, no ICMP: the connects time out, as across a real partition.
    assert connect_from(network, 1, 2) == connect_from(network, 2, 1) == "timed out"
    assert from_root(network, 1) == from_root(network, 2) == "connected"
    network.apply(WHOLE)
    assert connect_from(network, 1, 2) == connect_from(network, 2, 1) == "connected"
    assert network.address(2) not in network.rules(1)


def test_an_open_connection_hangs_during_a_cut_and_resumes_after_the_heal(
    network: Network,
) -> None:
    """Through the namespace of node 1 (a client socket made inside it): what is sent
    during the cut is answered only after the heal, by TCP's retransmission."""
    with network.inside(1):
        connection = socket.create_connection((network.address(2), PORT), timeout=5)
    with connection:
        connection.sendall(b"before")
        assert connection.recv(16) == b"before"
        network.apply(isolate(2, [1]))
        connection.settimeout(1.0)
        connection.sendall(b"during")
        with pytest.raises(TimeoutError):
            connection.recv(16)
        network.apply(WHOLE)
        connection.settimeout(15.0)
        assert connection.recv(16) == b"during"


def test_only_the_endpoints_of_a_network_can_be_cut() -> None:
    with Network([1, 2]) as net, pytest.raises(ValueError, match=r"no endpoints \[3\]"):
        net.apply(Topology.of([(1, 3)]))


def test_everything_is_removed_at_the_end_and_leftovers_of_dead_runs_are_swept() -> None:
    with Network([1, 2, 0]) as net:
        names = [net.namespace(e) for e in net.endpoints]
        assert set(names) <= set(_namespaces())
    assert not set(names) & set(_namespaces())
    assert net.bridge not in _links() and net.veth(1) not in _links()

    dead = subprocess.Popen(["true"])  # its pid is nobody's once it has been reaped
    dead.wait()
    leftover = f"strom{dead.pid}"
    subprocess.run(["ip", "netns", "add", f"{leftover}n1"], check=True)
    subprocess.run(["ip", "link", "add", f"{leftover}br", "type", "bridge"], check=True)
    try:
        removed = sweep_leftovers()
        assert {f"{leftover}n1", f"{leftover}br"} <= set(removed)
        assert f"{leftover}n1" not in _namespaces() and f"{leftover}br" not in _links()
    finally:
        subprocess.run(["ip", "netns", "del", f"{leftover}n1"], check=False, capture_output=True)
        subprocess.run(["ip", "link", "del", f"{leftover}br"], check=False, capture_output=True)


def test_a_command_that_fails_raises_with_its_output() -> None:
    with Network([1]) as net, pytest.raises(NetworkError, match="nft"):
        net._nft(1, "this is not nft syntax\n")


def _namespaces() -> list[str]:
    lines = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in lines.splitlines() if line.strip()]


def _links() -> list[str]:
    lines = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return [line.split(":")[1].strip().split("@")[0] for line in lines.splitlines()]
