"""The metadata stores, and the one place that builds one.

The rest of strom reaches the stores only through this module and `base.py` (the
interface, its capabilities and its ports); a unit test (tests/unit/test_purity.py)
checks that no module outside `strom.metadata.stores` imports another of its modules or
names a concrete store. The adapters:

- `raft/`: the built-in Raft quorum (the pure core of `strom.raft` on the event loop);
- `zookeeper/`: ZooKeeper through kazoo (the znode codec is the pure metadata/znodes.py);
- `memory.py`: an in-memory log shared by several nodes, for tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from strom.client.security import ClientSecurity
from strom.config import BrokerConfig, Listener
from strom.config.listeners import WILDCARD_HOSTS, QuorumVoter
from strom.metadata.stores.base import (
    Advertised,
    AppliedMetadata,
    ControllerListener,
    Liveness,
    MetadataStore,
    NotMetadataLeader,
    PeerStream,
    QuorumDescription,
    StoreCapabilities,
    StorePorts,
    StoreWatches,
    VoterProgress,
)
from strom.metadata.stores.raft.driver import RaftDriver
from strom.metadata.stores.zookeeper.store import ZooKeeperSettings, ZooKeeperStore
from strom.raft.core import RaftConfig

__all__ = [
    "Advertised",
    "AppliedMetadata",
    "ControllerListener",
    "Liveness",
    "MetadataStore",
    "NotMetadataLeader",
    "PeerStream",
    "QuorumDescription",
    "StoreCapabilities",
    "StorePorts",
    "StoreWatches",
    "VoterProgress",
    "build_store",
]


def build_store(
    config: BrokerConfig,
    ports: StorePorts,
    *,
    raft_directory: Path,
    snapshot_every_bytes: int,
    security: Callable[[], ClientSecurity | None] = lambda: None,
    bound: Sequence[tuple[Listener, int]] = (),
) -> MetadataStore | None:
    """The store the config names for this node: ZooKeeper with `zookeeper.connect`,
    else the Raft quorum on a controller; None on a broker-only node of a Raft cluster,
    which pulls the committed metadata from the controllers instead
    (server/metadata_fetcher.py). `security`: how the Raft driver's connections to the
    other voters are secured (the controller listener's). `bound`: the node's listeners
    and the ports they were bound to."""
    if config.zookeeper is not None:
        settings = ZooKeeperSettings(
            connect=config.zookeeper,
            session_timeout_ms=config.zookeeper_session_timeout_ms,
            connection_timeout_ms=config.zookeeper_connection_timeout_ms,
        )
        return ZooKeeperStore(settings, ports)
    if not config.is_controller:
        return None
    voters = list(config.controller_quorum_voters)
    if not voters:  # the embedded single node: a quorum of one
        voters = [_embedded_voter(config, ports, bound)]
    return RaftDriver(
        ports,
        voters=voters,
        directory=raft_directory,
        config=RaftConfig(
            election_timeout_ms=config.controller_quorum_election_timeout_ms,
            check_quorum_ms=max(
                config.controller_quorum_election_timeout_ms,
                config.controller_quorum_fetch_timeout_ms * 3 // 2,
            ),
        ),
        snapshot_every_bytes=snapshot_every_bytes,
        security=security,
    )


def _embedded_voter(
    config: BrokerConfig, ports: StorePorts, bound: Sequence[tuple[Listener, int]]
) -> QuorumVoter:
    """The one voter of an embedded single node (no controller.quorum.voters) where
    DescribeQuorum lists it: at its controller listener when it has one (a wildcard host
    as localhost, port 0 as the port bound), else at the client listener its clients
    and brokers use, which then reaches its controller."""
    controller = next(iter(config.controller_listeners), None)
    if controller is not None:
        host = "localhost" if controller.host in WILDCARD_HOSTS else controller.host
        port = controller.port or dict(bound).get(controller, 0)
        return QuorumVoter(ports.node_id, host, port)
    if not config.is_broker:  # no listener to name
        return QuorumVoter(ports.node_id, "localhost", 0)
    advertised = ports.advertised()
    return QuorumVoter(ports.node_id, advertised.host, advertised.port)
