"""Share groups' membership (KIP-932) against a `strom serve` process: members heartbeating
with strom's own client get the `simple` assignment once their share-partitions are
initialized, leave, and are fenced when quiet; ShareGroupDescribe, ListGroups and
DeleteGroups see the group; one group-id namespace across types; and confluent-kafka's
ShareConsumer joins (ShareFetch is not served here, so its polls return nothing)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import BrokerProcess
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey

PARTITIONS = 6
SESSION_MS = 3000


@pytest.fixture
def share_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path / "data",
        extra=[
            "--set",
            f"group.share.session.timeout.ms={SESSION_MS}",
            "--set",
            "group.share.min.session.timeout.ms=1000",
            "--set",
            "group.share.heartbeat.interval.ms=500",
            "--set",
            "group.share.min.heartbeat.interval.ms=100",
        ],
    )
    process.start()
    try:
        yield process
    finally:
        process.kill()


def _topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(10)


class Member:
    """One share group member driven by hand: its id, epoch and last assignment."""

    def __init__(self, connection: KafkaConnection, group: str, topic: str) -> None:
        self.connection = connection
        self.group = group
        self.topic = topic
        self.member_id = uuid.uuid4().hex
        self.epoch = 0
        self.assignment: dict[uuid.UUID, set[int]] = {}

    async def beat(self, epoch: int | None = None) -> Any:
        response = await self.connection.request(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            1,
            {
                "group_id": self.group,
                "member_id": self.member_id,
                "member_epoch": self.epoch if epoch is None else epoch,
                "rack_id": None,
                "subscribed_topic_names": [self.topic] if self.epoch == 0 else None,
            },
        )
        if response.error_code == ErrorCode.none:
            self.epoch = int(response.member_epoch)
            if response.assignment is not None:
                self.assignment = {
                    tp.topic_id: {int(p) for p in tp.partitions}
                    for tp in response.assignment.topic_partitions
                }
        return response

    def partitions(self) -> set[int]:
        return {p for ps in self.assignment.values() for p in ps}


async def _describe(connection: KafkaConnection, group: str) -> Any:
    response = await connection.request(
        ApiKey.SHARE_GROUP_DESCRIBE,
        1,
        {"group_ids": [group], "include_authorized_operations": False},
    )
    return response.groups[0]


async def _until(members: list[Member], done: Any, timeout_s: float = 20) -> None:
    """Heartbeat every member (each 0.2 s) until `done()` holds."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, [(m.member_id, m.epoch, m.assignment) for m in members]
        for member in members:
            assert (await member.beat()).error_code == ErrorCode.none
        await asyncio.sleep(0.2)


async def _membership(bootstrap: str) -> None:
    host, port = bootstrap.split(":")
    connection = await KafkaConnection.connect(host, int(port), client_id="share-test")
    try:
        await _story(connection)
    finally:
        connection.close()


async def _story(connection: KafkaConnection) -> None:
    members = [Member(connection, "sg", "shared") for _ in range(3)]
    for member in members:  # the coordinator may still be loading
        deadline = time.monotonic() + 20
        while (await member.beat()).error_code != ErrorCode.none:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.2)

    def spread(among: list[Member], each: int) -> bool:
        owned = [m.partitions() for m in among]
        return all(len(p) == each for p in owned) and set().union(*owned) == set(range(PARTITIONS))

    await _until(members, lambda: spread(members, 2))
    described = await _describe(connection, "sg")
    assert described.error_code == ErrorCode.none
    assert (described.group_state, described.assignor_name) == ("Stable", "simple")
    assert {m.member_id for m in described.members} == {m.member_id for m in members}
    assert {int(m.member_epoch) for m in described.members} == {int(described.assignment_epoch)}
    assert all(m.assignment.topic_partitions[0].topic_name == "shared" for m in described.members)

    left = await members[2].beat(epoch=-1)  # leaves
    assert (left.error_code, int(left.member_epoch)) == (ErrorCode.none, -1)
    await _until(members[:2], lambda: spread(members[:2], 3))

    # members[1] goes quiet: its session runs out and it is removed.
    deadline = time.monotonic() + SESSION_MS / 1000 + 15
    while len((await _describe(connection, "sg")).members) != 1:
        assert time.monotonic() < deadline
        await members[0].beat()
        await asyncio.sleep(0.2)
    await _until(members[:1], lambda: spread(members[:1], PARTITIONS))
    fenced = await members[1].beat()
    assert fenced.error_code == ErrorCode.unknown_member_id

    # One namespace: a consumer group heartbeat to the share group is refused.
    consumer = await connection.request(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        {
            "group_id": "sg",
            "member_id": "c1",
            "member_epoch": 0,
            "rebalance_timeout": 30000,
            "subscribed_topic_names": ["shared"],
            "topic_partitions": [],
        },
    )
    assert consumer.error_code == ErrorCode.group_id_not_found

    listed = await connection.request(
        ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": ["share"]}
    )
    assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
        ("sg", "share", "Stable")
    ]
    busy = await connection.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["sg"]})
    assert busy.results[0].error_code == ErrorCode.non_empty_group
    assert (await members[0].beat(epoch=-1)).error_code == ErrorCode.none
    deleted = await connection.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["sg"]})
    assert deleted.results[0].error_code == ErrorCode.none
    gone = await _describe(connection, "sg")
    assert gone.error_code == ErrorCode.group_id_not_found


def test_members_are_assigned_leave_and_are_fenced(share_broker: BrokerProcess) -> None:
    _topic(share_broker.bootstrap, "shared")
    asyncio.run(_membership(share_broker.bootstrap))


def test_a_confluent_share_consumer_joins(share_broker: BrokerProcess) -> None:
    bootstrap = share_broker.bootstrap
    _topic(bootstrap, "queue")
    consumer = ShareConsumer(
        {"bootstrap.servers": bootstrap, "group.id": "sq", "client.id": "share-client"}
    )
    try:
        consumer.subscribe(["queue"])

        async def described() -> Any:
            host, port = bootstrap.split(":")
            connection = await KafkaConnection.connect(host, int(port))
            try:
                return await _describe(connection, "sq")
            finally:
                connection.close()

        deadline = time.monotonic() + 30
        while True:
            consumer.poll(0.5)
            group = asyncio.run(described())
            assigned = [
                p
                for m in group.members
                for tp in m.assignment.topic_partitions
                for p in tp.partitions
            ]
            if group.error_code == ErrorCode.none and sorted(assigned) == list(range(PARTITIONS)):
                break
            assert time.monotonic() < deadline, group
        assert [m.client_id for m in group.members] == ["share-client"]
        # confluent-kafka 2.16's AdminClient has no SHARE group type: its
        # list_consumer_groups() does not show share groups, so it is not asked here.
    finally:
        consumer.close()


def test_a_lone_new_member_is_assigned_in_its_first_answer(share_broker: BrokerProcess) -> None:
    """The first heartbeat of a new group's first member initializes the share-partitions;
    strom answers it with them assigned (Kafka assigns them at the member's next
    heartbeat, an interval later)."""
    _topic(share_broker.bootstrap, "fresh")

    async def first_answer() -> set[int]:
        host, port = share_broker.bootstrap.split(":")
        connection = await KafkaConnection.connect(host, int(port), client_id="share-test")
        try:
            member = Member(connection, "lone", "fresh")
            deadline = time.monotonic() + 20
            while (await member.beat()).error_code != ErrorCode.none:  # the coordinator loads
                assert time.monotonic() < deadline
                member.epoch = 0
                await asyncio.sleep(0.1)
            return member.partitions()
        finally:
            connection.close()

    assert asyncio.run(first_answer()) == set(range(PARTITIONS))
