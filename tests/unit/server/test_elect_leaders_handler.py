"""ElectLeaders' handler (handlers/elections.py) with a real ControllerService on the
in-memory metadata store: every served version, the null "every partition", a refused
election type, and the request forwarded to the active controller. No socket, no sleep;
every answer is read as a client reads it (encoded and decoded again)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from admin_harness import TOPIC, codes, controller_with_brokers, created, reassign
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to, wire
from server_harness import request, run

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.broker import Broker
from strom.server.handlers import elections, reassignments
from strom.server.private import PrivateApi

PREFERRED, UNCLEAN = 0, 1


def elect(
    partitions: Sequence[int] | None, *, version: int = 2, election_type: int = PREFERRED
) -> Request:
    """ElectLeaders of TOPIC's `partitions` (None: every partition of every topic)."""
    topics = None if partitions is None else [{"topic": TOPIC, "partitions": list(partitions)}]
    body: dict[str, Any] = {"topic_partitions": topics, "timeout": 30_000}
    if version >= 1:
        body["election_type"] = election_type
    return request(ApiKey.ELECT_LEADERS, version, body)


def results(answer: Any) -> list[tuple[str, list[tuple[int, ErrorCode]]]]:
    return [
        (r.topic, [(p.partition_id, ErrorCode(p.error_code)) for p in r.partition_result])
        for r in answer.replica_election_results
    ]


async def led_by_its_second_replica(node: Broker) -> tuple[int, int]:
    """TOPIC's partition 0 with its first two replicas swapped (a reassignment that is
    in sync at once): its leader is no longer its preferred replica. (leader, preferred)."""
    await created(node, factor=3)
    before = node.metadata.image.topics_by_name[TOPIC].partitions[0]
    swapped = [before.replicas[1], before.replicas[0], *before.replicas[2:]]
    answer = await answered(
        reassignments.handle_alter_partition_reassignments,
        admin_context(node),
        reassign(0, swapped),
    )
    assert codes(answer) == {ErrorCode.none}
    after = node.metadata.image.topics_by_name[TOPIC].partitions[0]
    assert after.replicas == tuple(swapped) and after.leader == before.leader
    return after.leader, after.replicas[0]


def test_every_version_elects_or_says_why_not(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        leader, preferred = await led_by_its_second_replica(one)
        epoch = one.metadata.image.topics_by_name[TOPIC].partitions[0].leader_epoch

        answer = wire(ApiKey.ELECT_LEADERS, 2, await one.dispatch(elect([0])))
        assert answer.error_code == ErrorCode.none
        assert results(answer) == [(TOPIC, [(0, ErrorCode.none)])]
        assert answer.replica_election_results[0].partition_result[0].error_message is None
        after = one.metadata.image.topics_by_name[TOPIC].partitions[0]
        assert (after.leader, after.leader_epoch) == (preferred, epoch + 1)
        assert leader != preferred

        for version in (0, 1, 2):
            answer = wire(
                ApiKey.ELECT_LEADERS, version, await one.dispatch(elect([0], version=version))
            )
            assert results(answer) == [(TOPIC, [(0, ErrorCode.election_not_needed)])], version
        answer = wire(
            ApiKey.ELECT_LEADERS,
            1,
            await one.dispatch(elect([0, 9], version=1, election_type=UNCLEAN)),
        )
        assert results(answer) == [
            (TOPIC, [(0, ErrorCode.election_not_needed), (9, ErrorCode.unknown_topic_or_partition)])
        ]
        for version in (0, 1):
            answer = wire(
                ApiKey.ELECT_LEADERS, version, await one.dispatch(elect(None, version=version))
            )
            assert results(answer) == [(TOPIC, [])], version  # nothing needed anywhere
        assert one.metadata.image.topics_by_name[TOPIC].partitions[0] == after

    run(scenario())


def test_an_unknown_election_type_is_an_invalid_request(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await led_by_its_second_replica(one)
        offset = one.metadata.image.offset
        answer = wire(ApiKey.ELECT_LEADERS, 2, await one.dispatch(elect([0], election_type=2)))
        assert answer.error_code == ErrorCode.invalid_request
        assert results(answer) == [(TOPIC, [(0, ErrorCode.invalid_request)])]
        assert answer.replica_election_results[0].partition_result[0].error_message == (
            "unknown election type 2"
        )
        assert one.metadata.image.offset == offset

    run(scenario())


def test_a_node_that_is_not_the_controller_forwards_the_election(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        _, preferred = await led_by_its_second_replica(one)
        link = loopback_to(one)
        at_two = admin_context(two, channel=link)
        answer = await answered(elections.handle_elect_leaders, at_two, elect([0]))
        assert results(answer) == [(TOPIC, [(0, ErrorCode.none)])]
        assert [(key, version) for key, version, _ in link.sent] == [(PrivateApi.FORWARD, 0)]
        assert two.metadata.image.topics_by_name[TOPIC].partitions[0].leader == preferred

        # On the controller listener, a node that is not the controller refuses.
        for version in (0, 2):
            asked = elect([0], version=version)
            answer = await answered(elections.controller_elect_leaders, admin_context(two), asked)
            assert results(answer) == [(TOPIC, [(0, ErrorCode.not_controller)])]
            body = await two.dispatch_controller(asked)
            assert codes(wire(ApiKey.ELECT_LEADERS, version, body)) <= {ErrorCode.not_controller}

    run(scenario())
