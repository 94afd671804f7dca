"""Where a strom.testing node keeps its files and takes connections, for the tests that
look past the Kafka clients: at segment files on disk, or over raw sockets.
"""

from __future__ import annotations

from pathlib import Path

from strom.testing import StromCluster


def log_dir(cluster: StromCluster, node_id: int = 1) -> Path:
    """The node's log.dirs: `node-N/` in the cluster's data directory, the layout of
    strom.cli.dev_plan.plan_local_cluster, which StromCluster plans its nodes with."""
    assert cluster.data_dir is not None, "the cluster is not running"
    directory = cluster.data_dir / f"node-{node_id}"
    assert directory.is_dir(), f"node {node_id} has no log dir at {directory}"
    return directory


def port(cluster: StromCluster, node_id: int = 1) -> int:
    """The node's client port, as clients are told (the test network's public port)."""
    return int(cluster.address(node_id).rpartition(":")[2])
