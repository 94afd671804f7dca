"""The context each group of handlers gets (handlers/ports.py), built from the broker's
services once, at its construction. Kept apart so that broker.py stays about the node's
lifecycle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.server.handlers import Contexts
from strom.server.handlers.ports import (
    AdminContext,
    ClusterContext,
    FetchContext,
    GroupContext,
    PrivateContext,
    ProduceContext,
    QuorumContext,
    TxnContext,
)
from strom.server.handlers.txn_markers import TxnMarkersContext

if TYPE_CHECKING:
    from strom.server.broker import Broker


def handler_contexts(broker: Broker) -> Contexts:
    """What each group of handlers reaches (handlers/ports.py)."""
    admin = AdminContext(
        node_id=broker.node_id,
        config=lambda: broker.config,
        metadata=broker.metadata,
        controller=lambda: broker.controller,
        rng=broker.rng,
        forward=broker.forward,
    )
    return Contexts(
        produce=ProduceContext(
            node_id=broker.node_id,
            metadata=broker.metadata,
            partitions=broker.partitions,
            producer_ids=broker.producer_ids,
            txns=broker.transactions,
            verifier=broker.txn_verifier,
            produced=broker.observability.counters.traffic.produced,
        ),
        fetch=FetchContext(
            metadata=broker.metadata,
            partitions=broker.partitions,
            stopping=lambda: broker.stopping,
            sessions=broker.fetch_sessions,
            traffic=broker.observability.counters.traffic,
        ),
        groups=GroupContext(broker.metadata, broker.groups, broker.txn_verifier),
        txns=TxnContext(
            broker.node_id, broker.metadata, broker.partitions, broker.groups, broker.transactions
        ),
        txn_markers=TxnMarkersContext(markers=broker.marker_appender),
        cluster=ClusterContext(
            node_id=broker.node_id,
            metadata=broker.metadata,
            cluster_id=lambda: broker.cluster_id,
            channel=broker.channel,
            admin=admin,
        ),
        quorum=QuorumContext(
            node_id=broker.node_id,
            controller=lambda: broker.controller,
            store=lambda: broker.store,
            listener_name=next(iter(broker.config.controller_listener_names), "CONTROLLER"),
            forward=broker.forward,
        ),
        admin=admin,
        private=PrivateContext(
            node_id=broker.node_id,
            metadata=broker.metadata,
            store=lambda: broker.store,
            channel=broker.channel,
            dispatch_controller=broker.dispatch_controller,
        ),
    )
