"""The context each group of handlers gets (handlers/ports.py), built from the broker's
services once, at its construction. Kept apart so that broker.py stays about the node's
lifecycle."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from strom.config import BrokerConfig
from strom.security.acls import CLUSTER_NAME
from strom.security.authorizer import Authorizer
from strom.security.operations import AclOperation, AclResourceType
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
from strom.server.handlers.share_fetch import ShareContext, share_connection_closed
from strom.server.handlers.share_offsets import ShareOffsetsContext
from strom.server.handlers.share_state import ShareStateContext
from strom.server.handlers.txn_markers import TxnMarkersContext
from strom.server.log_ends import LogEnds
from strom.server.share_group_offsets import ShareOffsetAdmin
from strom.server.throttling import ControllerMutationQuota
from strom.share.sessions import ShareSessionCache

if TYPE_CHECKING:
    from strom.server.broker import Broker


def quorum_listener_name(config: BrokerConfig) -> str:
    """The listener DescribeQuorum names the voters' endpoints after: the controller
    listener's name, but on an embedded single node with no controller listener the
    client listener its one voter is listed at (metadata/stores' build_store)."""
    embedded = not config.controller_quorum_voters and not config.controller_listeners
    if embedded and config.inter_broker_listener_name is not None:
        return config.inter_broker_listener_name
    return next(iter(config.controller_listener_names), "CONTROLLER")


def authorizer(broker: Broker) -> Authorizer | None:
    """The ACL decisions over the broker's image now; None without an authorizer."""
    settings = broker.config.authorizer
    if settings is None:
        return None
    return Authorizer(broker.image.acl_index, settings.super_users, settings.allow_if_no_acl)


def node_peer(broker: Broker, principal: str, host: str) -> bool:
    """Whether `principal` at `host` may use strom's node-to-node APIs: CLUSTER_ACTION on
    the cluster, as Kafka asks of its brokers; any may without an authorizer."""
    current = authorizer(broker)
    if current is None:
        return True
    address = host.removeprefix("/").partition("%")[0]
    return current.authorize(
        principal, address, AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME
    )


def handler_contexts(broker: Broker) -> Contexts:
    """What each group of handlers reaches (handlers/ports.py)."""

    def current() -> Authorizer | None:
        return authorizer(broker)

    admin = AdminContext(
        node_id=broker.node_id,
        config=lambda: broker.config,
        metadata=broker.metadata,
        controller=lambda: broker.controller,
        rng=broker.rng,
        forward=broker.forward,
        authorizer=current,
        mutation_quota=ControllerMutationQuota(
            lambda: broker.metadata.image, broker.config.controller_quota_windows
        ),
    )
    share = ShareContext(
        metadata=broker.metadata,
        partitions=broker.partitions,
        shares=broker.share_partitions,
        sessions=ShareSessionCache(int(broker.config.raw["group.share.max.share.sessions"])),
        stopping=lambda: broker.stopping,
        authorizer=current,
    )
    log_ends = LogEnds(
        broker.node_id,
        lambda: broker.metadata.image,
        broker.partitions,
        lambda: broker.links.inter_broker(),
    )
    broker.share_groups.log_end = log_ends  # where `latest` places a new share-partition
    # A share session ends with the connection that opened it (KIP-932, as Kafka's).
    broker.connections.on_closed.append(functools.partial(share_connection_closed, share))
    return Contexts(
        produce=ProduceContext(
            node_id=broker.node_id,
            metadata=broker.metadata,
            partitions=broker.partitions,
            producer_ids=broker.producer_ids,
            txns=broker.transactions,
            verifier=broker.txn_verifier,
            produced=broker.observability.counters.traffic.produced,
            authorizer=current,
        ),
        fetch=FetchContext(
            authorizer=current,
            metadata=broker.metadata,
            partitions=broker.partitions,
            stopping=lambda: broker.stopping,
            sessions=broker.fetch_sessions,
            traffic=broker.observability.counters.traffic,
        ),
        groups=GroupContext(
            broker.metadata,
            broker.groups,
            broker.txn_verifier,
            current,
            broker.consumer_groups,
            broker.share_groups,
        ),
        txns=TxnContext(
            broker.node_id,
            broker.metadata,
            broker.partitions,
            broker.groups,
            broker.transactions,
            current,
            broker.share_state.coordinator,
        ),
        txn_markers=TxnMarkersContext(markers=broker.marker_appender, authorizer=current),
        share_state=ShareStateContext(broker.share_state.coordinator, current),
        cluster=ClusterContext(
            node_id=broker.node_id,
            metadata=broker.metadata,
            cluster_id=lambda: broker.cluster_id,
            channel=broker.channel,
            admin=admin,
            stopping=lambda: broker.stopping,
        ),
        quorum=QuorumContext(
            node_id=broker.node_id,
            controller=lambda: broker.controller,
            store=lambda: broker.store,
            listener_name=quorum_listener_name(broker.config),
            forward=broker.forward,
            authorizer=current,
        ),
        admin=admin,
        share=share,
        share_offsets=ShareOffsetsContext(
            offsets=ShareOffsetAdmin(
                broker.share_groups,
                log_ends,
                broker.share_partitions.state_reset,
            ),
            enabled=lambda: broker.config.share_group_enable,
            topic_ids=lambda: {
                name: t.topic_id for name, t in broker.metadata.image.topics_by_name.items()
            },
            authorizer=current,
        ),
        private=PrivateContext(
            node_id=broker.node_id,
            metadata=broker.metadata,
            store=lambda: broker.store,
            channel=broker.channel,
            dispatch_controller=broker.dispatch_controller,
        ),
    )
