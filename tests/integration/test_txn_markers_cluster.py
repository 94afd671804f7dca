"""A transaction's markers across brokers: its partitions led by three different brokers,
the coordinator writes the marker on the one it leads and sends WriteTxnMarkers to the
other two; each partition's log then ends with the COMMIT (or ABORT) marker, and the
coordinator completes the transaction."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from test_txn_cluster import CONFIG, all_unfenced, ask, coordinator

from strom.protocol.markers import marker_of
from strom.protocol.records import decode_batch, iter_batches
from strom.server.broker import Broker
from strom.testing import StromCluster
from strom.txn.coordinator import TxnResult
from strom.txn.state import TxnState

TX = "orders-app"
TOPIC = "spread"


def markers_in(cluster: StromCluster, node_id: int, index: int) -> list[tuple[bool, int]]:
    async def read(broker: Broker) -> list[tuple[bool, int]]:
        partition = broker.partitions.get(TOPIC, index)
        assert partition is not None
        data = memoryview(partition.log.read(0, 1 << 20).read_bytes())
        found = []
        for position, header in iter_batches(data):
            if header.is_control:
                _, records = decode_batch(data[position : position + header.size_bytes])
                found += [marker_of(r.key, r.value) for r in records]
        return [(m.commit, m.coordinator_epoch) for m in found]

    return cluster._node(node_id).call(read, 10.0)  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("commit", [True, False])
def test_markers_reach_every_leader(commit: bool) -> None:
    with StromCluster(3, config=CONFIG) as cluster:
        all_unfenced(cluster)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        created = admin.create_topics([NewTopic(TOPIC, 3, replica_assignment=[[1], [2], [3]])])
        created[TOPIC].result(30)
        coordinator_id, init = coordinator(
            cluster, lambda txns: txns.init_producer_id(TX, 60_000, None)
        )
        pid, epoch = init.producer_id, init.producer_epoch
        added = ask(
            cluster,
            coordinator_id,
            lambda t: t.add_partitions(
                TX, pid, epoch, [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)], transaction_version=0
            ),
        )
        assert isinstance(added, TxnResult) and added.error is ErrorCode.none
        ended = ask(
            cluster,
            coordinator_id,
            lambda t: t.end_txn(TX, pid, epoch, commit, transaction_version=0),
        )
        assert isinstance(ended, TxnResult) and ended.error is ErrorCode.none

        async def state(broker: Broker) -> TxnState | None:
            entry = broker.transactions.entry(TX)
            return None if entry is None else entry.value.state

        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        end = time.monotonic() + 30
        while cluster._node(coordinator_id).call(state, 10.0) is not done:  # type: ignore[attr-defined]
            assert time.monotonic() < end, "the transaction did not complete"
            time.sleep(0.05)
        for index, leader in enumerate((1, 2, 3)):
            [(marker_commit, _)] = markers_in(cluster, leader, index)
            assert marker_commit is commit
