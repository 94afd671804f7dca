"""The controller service's decisions run through the in-memory metadata store: two nodes
share one log, no sockets, no sleeps (only the event loop's turns)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from strom.config import load_config
from strom.metadata.controller import NewTopic, TopicResult
from strom.metadata.image import MetadataImage
from strom.metadata.stores import Advertised, Liveness, MetadataStore, StorePorts
from strom.metadata.stores.memory import MemoryLog
from strom.server.controller import ControllerService, NotController
from strom.server.layout import new_cluster_id
from strom.server.metadata_state import MetadataState


@dataclass(slots=True)
class ControllerNode:
    """A node's committed metadata, its metadata store and the controller service built
    on them from its ports, without a Broker."""

    metadata: MetadataState
    store: MetadataStore | None = None
    controller: ControllerService | None = None
    failures: list[str] = field(default_factory=list)


async def _no_adoption(topics: list[NewTopic]) -> list[TopicResult]:
    raise AssertionError(f"no topic is written into these stores by hand: {topics}")


def node(log: MemoryLog, node_id: int, tmp_path: Path) -> ControllerNode:
    """A node that is never started: its metadata and controller on the memory store."""
    config = load_config(overrides=[f"node.id={node_id}", f"log.dirs={tmp_path / str(node_id)}"])
    built = ControllerNode(MetadataState(node_id))

    def on_change() -> None:
        assert built.store is not None and built.controller is not None
        built.controller.follow(
            is_leader=built.store.is_leader,
            term=built.store.term,
            applied_term=built.metadata.applied_term,
        )

    store = log.store(
        StorePorts(
            node_id=node_id,
            metadata=built.metadata,
            on_change=on_change,
            fail=built.failures.append,
            watches=lambda: (
                built.controller if built.controller and built.controller.active else None
            ),
            advertised=lambda: Advertised("PLAINTEXT", "localhost", 9090 + node_id),
            cluster_id=lambda: None,
            incarnation_id=uuid.UUID(int=node_id),
            rack=None,
            clock_ms=lambda: 0,
        )
    )
    built.store = store
    built.controller = ControllerService(
        node_id=node_id,
        config=lambda: config,
        metadata=built.metadata,
        store=lambda: store,
        leader_id=lambda: store.leader_id,
        cluster_id_to_form=new_cluster_id,
        create_topics_here=_no_adoption,
    )
    built.metadata.subscribe(built.controller.on_applied)
    return built


async def until(broker: ControllerNode, check: Callable[[MetadataImage], bool]) -> None:
    async def wait() -> None:
        while not check(broker.metadata.image):
            await broker.metadata.changed()

    await asyncio.wait_for(wait(), 5)


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(scenario())


def test_decisions_commit_through_the_log_and_leadership_moves(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = MemoryLog()
        one, two = node(log, 1, tmp_path), node(log, 2, tmp_path)
        for broker in (one, two):
            assert broker.store is not None
            await broker.store.start()
        assert one.controller is not None and two.controller is not None
        log.elect(1)
        await until(two, lambda image: bool(image.cluster_id))  # node 1 formed the cluster
        assert one.controller.active and not two.controller.active
        cluster_id = two.metadata.image.cluster_id

        error, _message, epoch = await one.controller.register_broker(
            broker_id=2,
            cluster_id=cluster_id,
            incarnation_id=uuid.UUID(int=2),
            host="localhost",
            port=9092,
            rack=None,
        )
        assert error == ErrorCode.none and epoch > 0
        await until(two, lambda image: 2 in image.brokers)
        assert two.metadata.image.brokers[2].fenced
        result = await one.controller.broker_heartbeat(
            broker_id=2,
            broker_epoch=epoch,
            current_metadata_offset=two.metadata.applied_index,
            want_fence=False,
            want_shutdown=False,
        )
        assert result.error_code == ErrorCode.none and not result.is_fenced
        await until(two, lambda image: not image.brokers[2].fenced)

        log.elect(2)  # a new term: node 1 stops deciding, node 2 takes over
        await until(two, lambda image: two.controller is not None and two.controller.active)
        assert not one.controller.active and two.controller.term == 2
        await two.controller.fence([2])
        await until(one, lambda image: image.brokers[2].fenced)
        assert one.metadata.image == two.metadata.image
        two.controller.deactivate()

    run(scenario)


def test_with_session_liveness_the_store_decides_who_is_alive(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = MemoryLog(liveness=Liveness.SESSIONS)
        (one,) = [node(log, 1, tmp_path)]
        assert one.store is not None and one.controller is not None
        await one.store.start()
        log.elect(1)
        await until(one, lambda image: bool(image.cluster_id))
        controller = one.controller
        assert controller.active
        error, _message, epoch = await controller.register_broker(
            broker_id=2,
            cluster_id=one.metadata.image.cluster_id,
            incarnation_id=uuid.UUID(int=2),
            host="localhost",
            port=9092,
            rack=None,
        )
        assert error == ErrorCode.none
        assert not controller.session_alive(2)  # the store's sessions say, not heartbeats

        def heartbeat() -> Any:
            return controller.broker_heartbeat(
                broker_id=2,
                broker_epoch=epoch,
                current_metadata_offset=one.metadata.applied_index,
                want_fence=False,
                want_shutdown=False,
            )

        assert (await heartbeat()).is_fenced  # no live session: it stays fenced
        log.set_live(frozenset({1, 2}))
        assert not (await heartbeat()).is_fenced
        log.set_live(frozenset({1}))  # its session ended: the controller fences it
        await until(one, lambda image: image.brokers[2].fenced)
        controller.deactivate()

    run(scenario)


def test_a_cancelled_decision_does_not_cancel_the_decisions_waiting_behind_it(
    tmp_path: Path,
) -> None:
    """A decision whose caller gives up (a timeout; the controller's own tasks cancelled
    when it steps down) must not fail the callers waiting on the same entry with a
    CancelledError: they were not cancelled, and a broker's heartbeat loop that sees one
    ends without a word, leaving the broker fenced for good."""

    async def scenario() -> None:
        log = MemoryLog(auto_deliver=False)
        one = node(log, 1, tmp_path)
        assert one.store is not None and one.controller is not None
        await one.store.start()
        log.elect(1)
        log.deliver()
        controller = one.controller
        assert controller.active
        await asyncio.sleep(0)  # the controller proposes the cluster's record
        log.deliver()
        await until(one, lambda image: bool(image.cluster_id))

        def register(broker_id: int) -> Coroutine[Any, Any, Any]:
            return controller.register_broker(
                broker_id=broker_id,
                cluster_id=one.metadata.image.cluster_id,
                incarnation_id=uuid.UUID(int=broker_id),
                host="localhost",
                port=9092,
                rack=None,
            )

        proposer = asyncio.create_task(register(7))  # proposed, not committed yet
        await asyncio.sleep(0)
        waiter = asyncio.create_task(controller.decide(lambda image: ((), "answer")))
        await asyncio.sleep(0)
        proposer.cancel()  # the proposer gives up; its entry is still on its way
        await asyncio.sleep(0)
        assert not waiter.done()
        log.deliver()  # committed: the waiter gets its answer
        assert await asyncio.wait_for(waiter, 5) == "answer"

        proposer = asyncio.create_task(register(8))
        await asyncio.sleep(0)
        waiter = asyncio.create_task(controller.decide(lambda image: ((), "answer")))
        await asyncio.sleep(0)
        proposer.cancel()
        controller.deactivate()  # stepping down: the waiter hears why
        with pytest.raises(NotController):
            await asyncio.wait_for(waiter, 5)

    run(scenario)
