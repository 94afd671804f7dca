"""Where a fault run's cluster lives: on loopback, or every node (and the ZooKeeper server,
on that store) in a network namespace of its own, so that the network between them can
be cut (network.py).

    with started_cluster(root, nodes=3, settings=[...], store="zookeeper",
                         session_timeout_ms=4000, network=True) as (cluster, net):
        net.apply(isolate(1, [2, 3, ZOOKEEPER]))

In namespaces each node listens on and advertises its namespace's address (client and
controller listeners), and is started with `ip netns exec`; the test process and its
clients, in the root namespace, reach every node through the bridge. Everything is
stopped and removed when the block ends, also on failure: the nodes first, then
ZooKeeper, then the namespaces.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path

from cluster import TestCluster, running_cluster
from zookeeper import COMMAND_TIMEOUT_S, ZooKeeperServer, metadata_store

from .network import Network, unavailable_reason
from .topology import ZOOKEEPER


class NetworkUnavailable(RuntimeError):
    """This machine cannot build the network namespaces (the message says why)."""


class NamespacedZooKeeper(ZooKeeperServer):
    """tests/integration/zookeeper.py's server, started inside the network's ZooKeeper
    namespace and listening on its address there."""

    def __init__(self, root: Path, network: Network) -> None:
        super().__init__(root)
        self.network = network
        self.host = network.address(ZOOKEEPER)

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> None:
        with self.network.inside(ZOOKEEPER):
            super().start()

    def command(self, word: str, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        chunks = []
        with socket.create_connection((self.host, self.port), timeout=timeout_s) as sock:
            sock.sendall(word.encode("ascii"))
            while chunk := sock.recv(4096):
                chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")

    def _write_config(self) -> None:
        super()._write_config()
        text = self.config_path.read_text()
        address = f"clientPortAddress={self.host}"
        self.config_path.write_text(text.replace("clientPortAddress=127.0.0.1", address))


@contextlib.contextmanager
def _zookeeper_in(
    network: Network, store: str, root: Path, session_timeout_ms: int
) -> Iterator[tuple[str | None, list[str]]]:
    if store == "raft":
        yield None, []
        return
    with NamespacedZooKeeper(root / "zookeeper", network) as server:
        yield (
            f"{server.connect_string}/strom",
            [f"zookeeper.session.timeout.ms={session_timeout_ms}"],
        )


@contextlib.contextmanager
def started_cluster(
    root: Path,
    *,
    nodes: int,
    settings: Sequence[str],
    store: str,
    session_timeout_ms: int,
    network: bool,
) -> Iterator[tuple[TestCluster, Network | None]]:
    """A started cluster of `nodes` nodes keeping their metadata in `store` ("raft" or
    "zookeeper", a private server under `root`), in network namespaces if `network`
    (NetworkUnavailable if this machine cannot build them); the Network or None."""
    if not network:
        with (
            metadata_store(store, root, session_timeout_ms) as (zookeeper, store_settings),
            running_cluster(
                root / "cluster",
                nodes,
                settings=[*settings, *store_settings],
                zookeeper=zookeeper,
            ) as cluster,
        ):
            yield cluster, None
        return
    reason = unavailable_reason()
    if reason is not None:
        raise NetworkUnavailable(reason)
    node_ids = list(range(1, nodes + 1))
    endpoints = [*node_ids, *([ZOOKEEPER] if store == "zookeeper" else [])]
    with (
        Network(endpoints) as net,
        _zookeeper_in(net, store, root, session_timeout_ms) as (zookeeper, store_settings),
        running_cluster(
            root / "cluster",
            nodes,
            settings=[*settings, *store_settings],
            zookeeper=zookeeper,
            hosts=[net.address(n) for n in node_ids],
            command_prefixes={n: net.command_prefix(n) for n in node_ids},
        ) as cluster,
    ):
        yield cluster, net
