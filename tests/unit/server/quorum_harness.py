"""The controller's handlers without a socket: nodes whose metadata and ControllerService
run on one in-memory metadata log (metadata/stores/memory.py), never started as brokers,
and the contexts their handlers get (server/handlers/ports.py).

Nothing here sleeps: the memory log commits on the event loop's next turn, and `until`
waits for a node's metadata to change."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from server_harness import request

from strom.config import BrokerConfig, load_config
from strom.metadata.image import MetadataImage
from strom.metadata.stores import (
    Advertised,
    ControllerListener,
    Liveness,
    QuorumDescription,
    StoreCapabilities,
    StorePorts,
    VoterProgress,
)
from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, decode_response, encode_response
from strom.server import wiring
from strom.server.broker import Broker
from strom.server.controller import NotController
from strom.server.handlers.ports import (
    AdminContext,
    ControllerLink,
    ForwardPort,
    PrivateContext,
    QuorumContext,
    QuorumSource,
)
from strom.server.handlers.private import PrivateSession

LISTENER = "CONTROLLER"

QUORUM = QuorumDescription(
    leader_epoch=4,
    high_watermark=17,
    voters=(VoterProgress(1, 17, 1_000, 1_000), VoterProgress(2, 12, 900, -1)),
    endpoints=((1, "c1.example", 9093), (2, "c2.example", 9093)),
)
"""A quorum of two voters as its leader, node 1, would describe it."""


def controller_node(
    log: MemoryLog, node_id: int, tmp_path: Path, config: Sequence[str] = ()
) -> Broker:
    """Node `node_id` of the cluster on `log`: a Broker never started, its metadata store on
    the memory log and its ControllerService following the log's leadership; `config`
    holds more `key=value` settings."""
    broker = Broker(
        load_config(
            overrides=[f"node.id={node_id}", f"log.dirs={tmp_path / f'node-{node_id}'}", *config]
        )
    )

    def follow_the_log() -> None:
        store, controller = broker.store, broker.controller
        assert store is not None and controller is not None
        controller.follow(
            is_leader=store.is_leader, term=store.term, applied_term=broker.metadata.applied_term
        )

    broker.store = log.store(
        StorePorts(
            node_id=node_id,
            metadata=broker.metadata,
            on_change=follow_the_log,
            fail=broker.fail,
            watches=lambda: (
                broker.controller if broker.controller and broker.controller.active else None
            ),
            advertised=lambda: Advertised("PLAINTEXT", "localhost", 9090 + node_id),
            cluster_id=lambda: None,
            incarnation_id=broker.incarnation_id,
            rack=None,
            clock_ms=lambda: 0,
        )
    )
    broker.controller = wiring.controller_service(broker)  # its ports, as Broker builds it
    broker.metadata.subscribe(broker.controller.on_applied)
    return broker


async def until(broker: Broker, check: Callable[[MetadataImage], bool]) -> None:
    """Wait (on metadata changes, never a clock) until `check` holds for broker's image."""

    async def wait() -> None:
        while not check(broker.metadata.image):
            await broker.metadata.changed()

    await asyncio.wait_for(wait(), 5)


async def cluster(
    log: MemoryLog, tmp_path: Path, *node_ids: int, config: Sequence[str] = ()
) -> list[Broker]:
    """The nodes `node_ids`, started on `log`; the first one is the active controller and
    has formed the cluster (every node has applied its cluster record)."""
    nodes = [controller_node(log, node_id, tmp_path, config) for node_id in node_ids]
    for node in nodes:
        assert node.store is not None
        await node.store.start()
    log.elect(node_ids[0])
    for node in nodes:
        await until(node, lambda image: bool(image.cluster_id))
    await until(nodes[0], lambda _image: active(nodes[0]))
    return nodes


def active(node: Broker) -> bool:
    return node.controller is not None and node.controller.active


def quorum_context(
    node: Broker,
    *,
    store: QuorumSource | None = None,
    channel: ControllerLink | None = None,
) -> QuorumContext:
    """`node`'s quorum handlers' context, as Broker builds it; `store` stands in for its
    metadata store's side of DescribeQuorum, `channel` for its way to the controller."""
    return QuorumContext(
        node_id=node.node_id,
        controller=lambda: node.controller,
        store=(lambda: node.store) if store is None else (lambda: store),
        listener_name=LISTENER,
        forward=ForwardPort(node.node_id, channel or node.channel, node.metadata),
    )


def admin_context(
    node: Broker,
    *,
    config: BrokerConfig | None = None,
    channel: ControllerLink | None = None,
) -> AdminContext:
    """`node`'s admin handlers' context, as Broker builds it; `config` stands in for its
    config, `channel` for its way to the controller."""
    return AdminContext(
        node_id=node.node_id,
        config=(lambda: node.config) if config is None else (lambda: config),
        metadata=node.metadata,
        controller=lambda: node.controller,
        rng=node.rng,
        forward=ForwardPort(node.node_id, channel or node.channel, node.metadata),
    )


RAFT_LIKE = StoreCapabilities(
    liveness=Liveness.HEARTBEATS,
    follows_controller=False,
    controller_listener=ControllerListener.CONTROLLER,
    quorum_refusal=None,
)
"""A store that has a quorum for DescribeQuorum to describe."""


@dataclass(frozen=True, slots=True)
class DescribedQuorum:
    """A store with a quorum to describe (as the Raft store is): what `describe_quorum`
    says while this node leads it, None while it does not."""

    description: QuorumDescription | None
    capabilities: StoreCapabilities = RAFT_LIKE

    def describe_quorum(self) -> QuorumDescription | None:
        return self.description


@dataclass(slots=True)
class Loopback:
    """A ControllerLink to another node in the same process: a private request goes to that
    node's PrivateSession, as it would over its controller listener; with no session, it
    gets `reply` back, or fails as an unreachable controller does (NotController)."""

    leader_id: int | None
    session: PrivateSession | None
    local_controller_active: bool = False
    reply: bytes | None = None
    sent: list[tuple[int, int, bytes]] = field(default_factory=list)

    async def raw_request(
        self, api_key: int, api_version: int, payload: bytes, timeout_s: float
    ) -> bytes:
        self.sent.append((api_key, api_version, payload))
        if self.session is None:
            if self.reply is not None:
                return self.reply
            raise NotController(self.leader_id)
        answer = await self.session.handle(api_key, api_version, payload)
        assert answer is not None
        return answer


def loopback_to(node: Broker) -> Loopback:
    """A ControllerLink to `node`, the active controller, as another node reaches it."""
    session = PrivateSession(
        PrivateContext(
            node_id=node.node_id,
            metadata=node.metadata,
            store=lambda: node.store,
            channel=node.channel,
            dispatch_controller=node.dispatch_controller,  # the broker's own table
        )
    )
    return Loopback(leader_id=node.node_id, session=session)


def wire(api_key: ApiKey, version: int, body: Any) -> Any:
    """`body` as a client reads it: encoded into a response frame and decoded again."""
    _correlation_id, decoded = decode_response(api_key, version, encode_response(7, body)[4:])
    return decoded


C = TypeVar("C")


async def answered(
    handler: Callable[[C, Request], Awaitable[Any]],
    context: C,
    asked: Request,
) -> Any:
    """The handler's answer to `asked`, as it goes over the wire."""
    return wire(asked.api_key, asked.api_version, await handler(context, asked))


# --- requests -------------------------------------------------------------------------


def registration(broker_id: int, cluster_id: str, *, listeners: bool = True) -> Request:
    return request(
        ApiKey.BROKER_REGISTRATION,
        4,
        {
            "broker_id": broker_id,
            "cluster_id": cluster_id,
            "incarnation_id": uuid.UUID(int=broker_id),
            "listeners": [
                {
                    "name": "PLAINTEXT",
                    "host": "localhost",
                    "port": 9000 + broker_id,
                    "security_protocol": 0,
                }
            ]
            if listeners
            else [],
            "features": [],
            "rack": None,
        },
    )


def heartbeat(broker_id: int, broker_epoch: int, metadata_offset: int) -> Request:
    return request(
        ApiKey.BROKER_HEARTBEAT,
        1,
        {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "current_metadata_offset": metadata_offset,
            "want_fence": False,
            "want_shut_down": False,
        },
    )


def allocation(broker_id: int, broker_epoch: int) -> Request:
    return request(
        ApiKey.ALLOCATE_PRODUCER_IDS, 0, {"broker_id": broker_id, "broker_epoch": broker_epoch}
    )


def alter_partition(
    broker_id: int,
    broker_epoch: int,
    topic_id: uuid.UUID,
    *,
    leader_epoch: int,
    partition_epoch: int,
    isr: Sequence[tuple[int, int]],
) -> Request:
    """AlterPartition v3 for partition 0 of `topic_id`; `isr` as (broker id, its epoch)."""
    return request(
        ApiKey.ALTER_PARTITION,
        3,
        {
            "broker_id": broker_id,
            "broker_epoch": broker_epoch,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "leader_epoch": leader_epoch,
                            "new_isr_with_epochs": [
                                {"broker_id": member, "broker_epoch": epoch}
                                for member, epoch in isr
                            ],
                            "leader_recovery_state": 0,
                            "partition_epoch": partition_epoch,
                        }
                    ],
                }
            ],
        },
    )


def describe_quorum(version: int = 2) -> Request:
    return request(
        ApiKey.DESCRIBE_QUORUM,
        version,
        {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
    )
