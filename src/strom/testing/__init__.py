"""strom as a test fixture: a real Kafka-compatible cluster inside a test run, with faults.

    from strom.testing import StromCluster

    with StromCluster(nodes=3) as cluster:
        ...  # any Kafka client, with cluster.bootstrap_servers

The pytest plugin (strom.pytest_plugin, installed with strom) gives the same as
fixtures: strom_broker, strom_cluster and their session-wide twins. docs/testing.md
has the whole story and a worked example.
"""

from strom.testing.admin import AdminError, GroupStatus, PartitionStatus
from strom.testing.cluster import TEST_CONFIG, StromCluster
from strom.testing.links import CLIENTS
from strom.testing.node import NodeError
from strom.testing.queries import ClusterError

__all__ = [
    "CLIENTS",
    "TEST_CONFIG",
    "AdminError",
    "ClusterError",
    "GroupStatus",
    "NodeError",
    "PartitionStatus",
    "StromCluster",
]
