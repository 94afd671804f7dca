"""The transaction coordinator on real in-process brokers (TxnService called on each
node's own loop; the client-facing APIs come with their handlers): `__transaction_state`
is created replicated, an id is coordinated by one broker only, and when that broker
stops the next leader of its partition loads the id and completes what it left."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.errors import ErrorCode

from strom.server.broker import Broker
from strom.server.transactions import TxnUnavailable
from strom.testing import StromCluster
from strom.txn.coordinator import TxnResult
from strom.txn.placement import TRANSACTION_STATE_TOPIC
from strom.txn.state import TxnState

TX = "orders-app"
CONFIG = {"transaction.state.log.num.partitions": 3}


def ask(cluster: StromCluster, node_id: int, make: Any) -> TxnResult | ErrorCode:
    """`make(broker)` on node `node_id`'s loop: its result, or the error of its refusal."""

    async def run(broker: Broker) -> TxnResult | ErrorCode:
        try:
            result: TxnResult = await make(broker.transactions)
        except TxnUnavailable as exc:
            return exc.error_code
        return result

    return cluster._node(node_id).call(run, 30.0)  # type: ignore[attr-defined, no-any-return]


def coordinator(cluster: StromCluster, make: Any, deadline_s: float = 30.0) -> tuple[int, Any]:
    """The node that answers `make` (retrying while the id is loading or unplaced)."""
    end = time.monotonic() + deadline_s
    while True:
        for node_id in cluster.node_ids:
            if not cluster.is_running(node_id):
                continue
            answer = ask(cluster, node_id, make)
            if isinstance(answer, TxnResult) and answer.error not in (
                ErrorCode.coordinator_not_available,
                ErrorCode.not_coordinator,
            ):
                return node_id, answer
        assert time.monotonic() < end, f"no coordinator answered in time: {answer}"
        time.sleep(0.1)


def all_unfenced(cluster: StromCluster) -> None:
    async def live(broker: Broker) -> int:
        return sum(1 for b in broker.metadata.image.brokers.values() if not b.fenced)

    end = time.monotonic() + 30
    while cluster._node(1).call(live, 10.0) < cluster.size:  # type: ignore[attr-defined]
        assert time.monotonic() < end, "the brokers did not all register"
        time.sleep(0.05)


def test_an_id_survives_its_coordinator() -> None:
    with StromCluster(3, config=CONFIG) as cluster:
        all_unfenced(cluster)  # __transaction_state's replicas: as many as live brokers
        first, init = coordinator(cluster, lambda txns: txns.init_producer_id(TX, 60_000, None))
        assert init.error is ErrorCode.none and init.producer_epoch == 0
        others = [n for n in cluster.node_ids if n != first]
        assert ask(cluster, others[0], lambda t: t.init_producer_id(TX, 60_000, None)) is (
            ErrorCode.not_coordinator
        )

        async def topic(broker: Broker) -> tuple[int, int]:
            image = broker.metadata.image.topics_by_name[TRANSACTION_STATE_TOPIC]
            return len(image.partitions), len(image.partitions[0].replicas)

        assert cluster._node(first).call(topic, 10.0) == (3, 3)  # type: ignore[attr-defined]
        # a transaction with no partition ends at once under version 2: its (empty)
        # markers are done and the completion follows
        ended = ask(
            cluster,
            first,
            lambda t: t.end_txn(TX, init.producer_id, 0, False, transaction_version=2),
        )
        assert isinstance(ended, TxnResult) and ended.error is ErrorCode.none
        cluster.stop_node(first)
        second, again = coordinator(cluster, lambda txns: txns.init_producer_id(TX, 60_000, None))
        assert second != first
        assert (again.error, again.producer_id) == (ErrorCode.none, init.producer_id)
        assert again.producer_epoch == 2, "epoch 1 was the aborted transaction's"

        async def state(broker: Broker) -> TxnState | None:
            entry = broker.transactions.entry(TX)
            return None if entry is None else entry.value.state

        assert cluster._node(second).call(state, 10.0) is TxnState.EMPTY  # type: ignore[attr-defined]
