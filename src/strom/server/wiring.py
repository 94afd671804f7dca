"""How the broker builds its services from ports (broker.py): each service gets only what
it uses, the node id as a value and whatever the broker makes or replaces while it runs
(its config, metadata store, controller service, fetcher) as a function read at each use.
Kept apart so that broker.py stays about the node's lifecycle."""

from __future__ import annotations

from typing import TYPE_CHECKING

from strom.metadata.controller import NewTopic, TopicResult
from strom.metadata.image import MetadataImage
from strom.server.consumer_groups import ConsumerGroupService
from strom.server.controller import ControllerService
from strom.server.controller_channel import ControllerChannel
from strom.server.groups import GroupService
from strom.server.handlers.admin import create_here, create_topics
from strom.server.metadata_fetcher import MetadataFetcher
from strom.server.share_coordinator import ShareCoordinatorService
from strom.server.share_dead_letters import DeadLetterCopier
from strom.server.share_groups import ShareGroupService
from strom.server.share_partitions import SharePartitionManager
from strom.server.share_state_client import ShareStateClient
from strom.server.transactions import TxnService
from strom.server.txn_markers import MarkerAppender, TxnMarkerSender
from strom.server.txn_verifier import TxnVerifier, VerifierPorts

if TYPE_CHECKING:
    from strom.server.broker import Broker

DEAD_LETTER_TIMEOUT_KEY = "strom.share.dead.letter.copy.timeout.ms"


def controller_channel(broker: Broker) -> ControllerChannel:
    return ControllerChannel(
        node_id=broker.node_id,
        config=lambda: broker.config,
        store=lambda: broker.store,
        fetcher=lambda: broker.fetcher,
        controller=lambda: broker.controller,
        security=lambda: broker.links.controller(),
    )


def metadata_fetcher(broker: Broker) -> MetadataFetcher:
    return MetadataFetcher(
        node_id=broker.node_id,
        config=lambda: broker.config,
        store=lambda: broker.store,
        metadata=broker.metadata,
        on_leader_changed=broker.channel.leader_changed,
        security=lambda: broker.links.controller(),
    )


def group_services(
    broker: Broker,
) -> tuple[GroupService, ConsumerGroupService, ShareGroupService]:
    """The group coordinator's shell, and those of its KIP-848 and KIP-932 groups."""

    async def create(topics: list[NewTopic]) -> list[TopicResult]:
        return await create_topics(broker.admin_context, topics)

    groups = GroupService(
        node_id=broker.node_id,
        config=lambda: broker.config,
        image=lambda: broker.metadata.image,
        partitions=broker.partitions,
        create_topics=create,
    )
    consumer = ConsumerGroupService(
        groups,
        lambda: broker.metadata.image,
        lambda: broker.config.offsets_retention_check_interval_ms,
    )
    share = ShareGroupService(  # on_member_left: the share-partitions' release_member
        groups,
        lambda: broker.metadata.image,
        lambda: broker.share_state,
        enabled=lambda: broker.config.share_group_enable,
    )
    return groups, consumer, share


def share_state(broker: Broker) -> ShareStateClient:
    """Where share-partition states are kept, for share-partition leaders and the group
    coordinator (a strom.share.state_port.ShareStatePort): this broker's share
    coordinator, or the one that leads the key's `__share_group_state` partition."""

    async def create(topics: list[NewTopic]) -> list[TopicResult]:
        return await create_topics(broker.admin_context, topics)

    coordinator = ShareCoordinatorService(
        node_id=broker.node_id,
        config=lambda: broker.config,
        image=lambda: broker.metadata.image,
        partitions=broker.partitions,
        create_topics=create,
    )

    def address(broker_id: int) -> tuple[str, int] | None:
        found = broker.metadata.image.brokers.get(broker_id)
        return None if found is None or found.fenced else (found.host, found.port)

    return ShareStateClient(
        node_id=broker.node_id,
        coordinator=coordinator,
        address=address,
        security=lambda: broker.links.inter_broker(),
    )


def follow_coordinators(broker: Broker, image: MetadataImage) -> None:
    """The coordinators load the partitions of their internal topics led here now."""
    broker.groups.follow(image)
    broker.transactions.follow(image)
    broker.share_state.coordinator.follow(image)


def close_coordinators(broker: Broker) -> None:
    """Waiting requests answered NOT_COORDINATOR: clients find the coordinator again."""
    broker.groups.close()
    broker.transactions.close()
    broker.share_state.close()


def share_services(broker: Broker) -> tuple[ShareStateClient, SharePartitionManager]:
    """The share-state port (strom.share.state_port) and the share-partitions this broker
    leads (ShareFetch, ShareAcknowledge) over it; a member the share groups here remove
    gives back what it holds on them."""
    state = share_state(broker)
    image = lambda: broker.metadata.image  # noqa: E731 (one line in a small function)
    manager = SharePartitionManager(
        broker.node_id,
        state,
        broker.partitions,
        image,
        lambda: broker.config,
        DeadLetterCopier(
            broker.node_id,
            image,
            broker.partitions,
            lambda: broker.links.inter_broker(),
            bound_s=lambda: int(broker.config.raw.get(DEAD_LETTER_TIMEOUT_KEY, "5000")) / 1000,
        ),
    )
    broker.share_groups.on_member_left = manager.member_left
    broker.share_groups.state_reset = manager.state_reset
    return state, manager


def marker_appender(broker: Broker) -> MarkerAppender:
    """Markers written on this broker: for the WriteTxnMarkers handler and for the
    coordinator's markers to partitions led here."""
    return MarkerAppender(
        image=lambda: broker.metadata.image,
        partitions=broker.partitions,
        groups=lambda: broker.groups,
        on_marker=lambda topic, index, producer_id: broker.txn_verifier.on_marker(
            topic, index, producer_id
        ),
    )


def txn_service(broker: Broker) -> TxnService:
    async def create(topics: list[NewTopic]) -> list[TopicResult]:
        return await create_topics(broker.admin_context, topics)

    return TxnService(
        node_id=broker.node_id,
        config=lambda: broker.config,
        image=lambda: broker.metadata.image,
        partitions=broker.partitions,
        create_topics=create,
        producer_ids=broker.producer_ids,
        markers=TxnMarkerSender(
            node_id=broker.node_id,
            image=lambda: broker.metadata.image,
            here=broker.marker_appender,
            security=lambda: broker.links.inter_broker(),
        ),
    )


def txn_verifier(broker: Broker) -> TxnVerifier:
    """Transactional produces: KIP-890's check with the id's coordinator, here or remote."""
    image = lambda: broker.metadata.image  # noqa: E731 (one line in a small function)
    enabled = lambda: broker.config.transaction_partition_verification_enable  # noqa: E731
    security = lambda: broker.links.inter_broker()  # noqa: E731
    return TxnVerifier(VerifierPorts(broker.node_id, image, broker.transactions, enabled, security))


def controller_service(broker: Broker) -> ControllerService:
    async def adopt(topics: list[NewTopic]) -> list[TopicResult]:
        return await create_here(broker.admin_context, topics)

    return ControllerService(
        node_id=broker.node_id,
        config=lambda: broker.config,
        metadata=broker.metadata,
        store=lambda: broker.store,
        leader_id=lambda: broker.channel.leader_id,
        cluster_id_to_form=lambda: broker.local_cluster_id or broker.new_cluster_id(),
        create_topics_here=adopt,
    )
