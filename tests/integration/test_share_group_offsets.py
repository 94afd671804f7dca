"""KIP-932's share-group offset admin APIs against a `strom serve` process: confluent-kafka's
ShareConsumer (in child processes) consumes, strom's own client sends Describe, Alter and
DeleteShareGroupOffsets; altering an empty group back makes a new member get the
records again, deleting a topic's state makes the next member start by
share.auto.offset.reset, and a group with members or of another type is refused as
Kafka refuses it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from share_members import ACCEPT, ShareMember, set_group_configs

from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey

SETTINGS = [
    "group.share.session.timeout.ms=6000",
    "group.share.min.session.timeout.ms=1000",
    "group.share.heartbeat.interval.ms=500",
    "group.share.min.heartbeat.interval.ms=100",
]


@pytest.fixture
def offsets_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    extra: list[str] = []
    for setting in SETTINGS:
        extra += ["--set", setting]
    broker = BrokerProcess(tmp_path / "data", extra=extra)
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
def started() -> Iterator[list[ShareMember]]:
    members: list[ShareMember] = []
    try:
        yield members
    finally:
        for member in members:
            member.kill()


def _setup(bootstrap: str, count: int) -> tuple[str, str]:
    topic = f"jobs-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    group = f"share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    return topic, group


def _accepted_until(member: ShareMember, offsets: set[int], timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        acked = {o for _, o, kind in member.snapshot()[1] if kind == ACCEPT}
        if offsets <= acked:
            return
        time.sleep(0.1)
    raise AssertionError(f"accepted {member.snapshot()[1]}, errors {member.errors}")


async def _connect(bootstrap: str) -> KafkaConnection:
    host, port = bootstrap.split(":")
    return await KafkaConnection.connect(host, int(port), client_id="share-offsets-test")


async def _describe(
    bootstrap: str, group: str, topics: list[Any] | None = None, version: int = 1
) -> Any:
    connection = await _connect(bootstrap)
    try:
        response = await connection.request(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            version,
            {"groups": [{"group_id": group, "topics": topics}]},
        )
        return response.groups[0]
    finally:
        connection.close()


async def _alter(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> Any:
    connection = await _connect(bootstrap)
    try:
        return await connection.request(
            ApiKey.ALTER_SHARE_GROUP_OFFSETS,
            0,
            {
                "group_id": group,
                "topics": [
                    {
                        "topic_name": topic,
                        "partitions": [
                            {"partition_index": p, "start_offset": o} for p, o in offsets.items()
                        ],
                    }
                ],
            },
        )
    finally:
        connection.close()


async def _delete(bootstrap: str, group: str, topics: list[str]) -> Any:
    connection = await _connect(bootstrap)
    try:
        return await connection.request(
            ApiKey.DELETE_SHARE_GROUP_OFFSETS,
            0,
            {"group_id": group, "topics": [{"topic_name": t} for t in topics]},
        )
    finally:
        connection.close()


def _until_empty(bootstrap: str, group: str, timeout_s: float = 30) -> None:
    """Alter until the group has no members (a stopped member's leave is durable)."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = asyncio.run(_describe_group(bootstrap, group))
        if response.error_code == ErrorCode.none and not response.members:
            return
        assert time.monotonic() < deadline, response
        time.sleep(0.1)


async def _describe_group(bootstrap: str, group: str) -> Any:
    connection = await _connect(bootstrap)
    try:
        response = await connection.request(
            ApiKey.SHARE_GROUP_DESCRIBE,
            1,
            {"group_ids": [group], "include_authorized_operations": False},
        )
        return response.groups[0]
    finally:
        connection.close()


def _start_offset(bootstrap: str, group: str, topic: str, version: int = 1) -> tuple[int, int]:
    described = asyncio.run(
        _describe(bootstrap, group, [{"topic_name": topic, "partitions": [0]}], version)
    )
    assert described.error_code == ErrorCode.none
    partition = described.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    return int(partition.start_offset), int(getattr(partition, "lag", -1))


def test_describe_alter_and_delete_share_group_offsets(
    offsets_broker: BrokerProcess, started: list[ShareMember]
) -> None:
    bootstrap = offsets_broker.bootstrap
    topic, group = _setup(bootstrap, 10)
    first = ShareMember(bootstrap, group, topic)
    started.append(first)
    _accepted_until(first, set(range(10)))

    # Describe: every record accepted, start offset 10, nothing left (v1's lag).
    deadline = time.monotonic() + 20
    while _start_offset(bootstrap, group, topic) != (10, 0):
        assert time.monotonic() < deadline, _start_offset(bootstrap, group, topic)
        time.sleep(0.1)
    assert _start_offset(bootstrap, group, topic, version=0)[0] == 10
    everything = asyncio.run(_describe(bootstrap, group))
    assert [
        (t.topic_name, [int(p.start_offset) for p in t.partitions]) for t in everything.topics
    ] == [(topic, [10])]

    # Alter while a member is active: NON_EMPTY_GROUP.
    refused = asyncio.run(_alter(bootstrap, group, topic, {0: 4}))
    assert refused.error_code == ErrorCode.non_empty_group

    # Alter once the group is empty: the next member gets 4..9 again.
    first.stop()
    _until_empty(bootstrap, group)
    altered = asyncio.run(_alter(bootstrap, group, topic, {0: 4, 7: 0}))
    assert altered.error_code == ErrorCode.none
    answers = {
        int(p.partition_index): p.error_code for t in altered.responses for p in t.partitions
    }
    assert answers == {0: ErrorCode.none, 7: ErrorCode.unknown_topic_or_partition}
    assert _start_offset(bootstrap, group, topic) == (4, 6)
    second = ShareMember(bootstrap, group, topic)
    started.append(second)
    _accepted_until(second, set(range(4, 10)))
    assert min(o for _, o, _, _ in second.snapshot()[0]) == 4

    # Delete while a member is active: NON_EMPTY_GROUP; once empty, the topic's state
    # goes and the next member starts by share.auto.offset.reset (earliest: 0).
    assert asyncio.run(_delete(bootstrap, group, [topic])).error_code == ErrorCode.non_empty_group
    second.stop()
    _until_empty(bootstrap, group)
    deleted = asyncio.run(_delete(bootstrap, group, [topic, "no-such-topic"]))
    assert deleted.error_code == ErrorCode.none
    by_topic = {t.topic_name: t.error_code for t in deleted.responses}
    assert by_topic == {
        topic: ErrorCode.none,
        "no-such-topic": ErrorCode.unknown_topic_or_partition,
    }
    assert _start_offset(bootstrap, group, topic) == (-1, -1)
    again = asyncio.run(_delete(bootstrap, group, [topic]))
    assert [t.error_code for t in again.responses] == [ErrorCode.unknown_topic_or_partition]
    third = ShareMember(bootstrap, group, topic)
    started.append(third)
    _accepted_until(third, set(range(10)))
    assert min(o for _, o, _, _ in third.snapshot()[0]) == 0


def test_unknown_and_other_type_groups(offsets_broker: BrokerProcess) -> None:
    bootstrap = offsets_broker.bootstrap
    topic, _ = _setup(bootstrap, 1)
    unknown = f"nobody-{uuid.uuid4().hex[:6]}"
    # Describe looks at no group (Kafka's): no offsets, no error.
    described = asyncio.run(_describe(bootstrap, unknown))
    assert described.error_code == ErrorCode.none and list(described.topics) == []
    named = asyncio.run(_describe(bootstrap, unknown, [{"topic_name": topic, "partitions": [0]}]))
    assert int(named.topics[0].partitions[0].start_offset) == -1
    # Delete of an unknown group: GROUP_ID_NOT_FOUND.
    deleted = asyncio.run(_delete(bootstrap, unknown, [topic]))
    assert deleted.error_code == ErrorCode.group_id_not_found

    # A classic group's id: GROUP_ID_NOT_FOUND "Group g is not a share group." for both.
    classic = f"classic-{uuid.uuid4().hex[:6]}"

    async def commit() -> None:
        connection = await _connect(bootstrap)
        try:
            await connection.request(
                ApiKey.OFFSET_COMMIT,
                8,
                {
                    "group_id": classic,
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "group_instance_id": None,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 1,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": None,
                                }
                            ],
                        }
                    ],
                },
            )
        finally:
            connection.close()

    asyncio.run(commit())
    for response in (
        asyncio.run(_alter(bootstrap, classic, topic, {0: 0})),
        asyncio.run(_delete(bootstrap, classic, [topic])),
    ):
        assert response.error_code == ErrorCode.group_id_not_found
        assert response.error_message == f"Group {classic} is not a share group."

    # Alter of an unknown group creates it (Kafka's), empty, with the offset set.
    created = asyncio.run(_alter(bootstrap, unknown, topic, {0: 1}))
    assert created.error_code == ErrorCode.none
    assert _start_offset(bootstrap, unknown, topic)[0] == 1
