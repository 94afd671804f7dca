"""UnregisterBroker's handler (handlers/elections.py) with a real ControllerService on the
in-memory metadata store: the broker's leaderships move and its registration goes, an
unknown broker is named, the request is forwarded to the active controller, and a store
whose sessions register brokers (ZooKeeper) refuses it. No socket, no sleep."""

from __future__ import annotations

from pathlib import Path

from admin_harness import TOPIC, controller_with_brokers, created
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to, wire
from server_harness import request, run

from strom.metadata.stores import Liveness
from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers import elections
from strom.server.private import PrivateApi


def unregister(broker_id: int) -> Request:
    return request(ApiKey.UNREGISTER_BROKER, 0, {"broker_id": broker_id})


def test_the_broker_is_fenced_out_of_its_partitions_and_forgotten(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await created(one, partitions=3, factor=3)
        before = one.metadata.image.topics_by_name[TOPIC].partitions
        gone = before[0].leader
        answer = wire(ApiKey.UNREGISTER_BROKER, 0, await one.dispatch(unregister(gone)))
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
        image = one.metadata.image
        assert gone not in image.brokers
        for index, partition in image.topics_by_name[TOPIC].partitions.items():
            assert partition.leader != gone, index
            assert gone not in partition.isr, index
            assert partition.replicas == before[index].replicas  # until reassigned

        answer = wire(ApiKey.UNREGISTER_BROKER, 0, await one.dispatch(unregister(gone)))
        assert answer.error_code == ErrorCode.broker_id_not_registered
        assert answer.error_message == f"broker {gone} is not registered"

    run(scenario())


def test_a_node_that_is_not_the_controller_forwards_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        link = loopback_to(one)
        answer = await answered(
            elections.handle_unregister_broker, admin_context(two, channel=link), unregister(3)
        )
        assert answer.error_code == ErrorCode.none
        assert [(key, version) for key, version, _ in link.sent] == [(PrivateApi.FORWARD, 0)]
        assert 3 not in two.metadata.image.brokers

        refused = await answered(
            elections.controller_unregister_broker, admin_context(two), unregister(2)
        )
        assert refused.error_code == ErrorCode.not_controller
        assert 2 in one.metadata.image.brokers

    run(scenario())


def test_brokers_registered_by_sessions_cannot_be_unregistered(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(
            tmp_path, 1, log=MemoryLog(liveness=Liveness.SESSIONS)
        )
        offset = one.metadata.image.offset
        answer = wire(ApiKey.UNREGISTER_BROKER, 0, await one.dispatch(unregister(2)))
        assert answer.error_code == ErrorCode.invalid_request
        assert "ZooKeeper sessions" in answer.error_message
        assert one.metadata.image.offset == offset and 2 in one.metadata.image.brokers

    run(scenario())
