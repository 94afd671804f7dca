"""Dead letters survive a crash between KIP-1191's two phases: records a member rejects are
written ARCHIVING, the copy to the dead-letter topic cannot be made (its only replica
refuses acks=all writes: min.insync.replicas above the replication factor), and the
share-partition's leader is killed with SIGKILL while the copy keeps being tried. Once the
copy can be made again, the next leader reads the records back ARCHIVING, copies them
and archives them: each rejected record reaches the dead-letter topic once (nothing was
copied before the kill), with KIP-1191's headers, and the share-partition's start
offset moves past them (an ARCHIVING record would hold it back)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster import TestCluster, running_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from group_members import wait_until
from kio.schema.errors import ErrorCode
from share_members import ACCEPT, REJECT, ShareMember, set_group_configs, story

from strom.client import ClientError, KafkaConnection
from strom.protocol.apis import ApiKey

SETTINGS = [
    "group.share.record.lock.duration.ms=2000",
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.session.timeout.ms=6000",
    "group.share.min.session.timeout.ms=1000",
    "group.share.heartbeat.interval.ms=500",
    "group.share.min.heartbeat.interval.ms=100",
    # The copies must still be retrying when the leader is killed, however slow the
    # machine: they are tried for two minutes, not the default five seconds.
    "strom.share.dead.letter.copy.timeout.ms=120000",
]
RECORDS = 12
REJECTED = {f"bad-{i}" for i in range(1, RECORDS, 3)}
GIVEN_UP = "not copied"
"""What the copier logs when it gives a copy up (the records are archived anyway)."""


@pytest.fixture
def members() -> Iterator[list[ShareMember]]:
    started: list[ShareMember] = []
    try:
        yield started
    finally:
        for member in started:
            member.kill()


def _value(i: int) -> str:
    return f"bad-{i}" if f"bad-{i}" in REJECTED else f"ok-{i}"


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return {}
    return {int(p): int(meta.leader) for p, meta in found.partitions.items()}


def _set_min_isr(bootstrap: str, topic: str, value: int) -> None:
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "min.insync.replicas", str(value), incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


async def _describe_offsets(address: str, group: str, topic: str) -> Any:
    host, port = address.rsplit(":", 1)
    connection = await KafkaConnection.connect(host, int(port), client_id="dlq-crash-test")
    try:
        response = await connection.request(
            ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
            1,
            {"groups": [{"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}]},
        )
    finally:
        connection.close()
    return response.groups[0]


def _start_offset(cluster: TestCluster, group: str, topic: str) -> int | None:
    """The share-partition's start offset, asked of each running broker until the group's
    coordinator answers."""
    for node in cluster.node_ids:
        if not cluster.is_running(node):
            continue
        try:
            described = asyncio.run(_describe_offsets(cluster.address(node), group, topic))
        except (ClientError, OSError, TimeoutError):
            continue
        if described.error_code != ErrorCode.none:
            continue
        partition = described.topics[0].partitions[0]
        if partition.error_code == ErrorCode.none:
            return int(partition.start_offset)
    return None


def _read_some(consumer: Consumer, into: list[tuple[bytes, bytes, dict[str, bytes]]]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append((message.key(), message.value(), dict(message.headers() or [])))
    return len(into)


def test_rejected_records_are_copied_after_the_leader_dies_while_archiving(
    tmp_path: Path, members: list[ShareMember]
) -> None:
    with running_cluster(tmp_path, nodes=3, settings=SETTINGS) as cluster:
        bootstrap = cluster.bootstrap
        a, b, c = cluster.node_ids
        topic = f"queue-{uuid.uuid4().hex[:6]}"
        dlq = f"dlq.{topic}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # The source is led by a, with replicas on b and c to take over. The dead-letter
        # partition has one replica, on c, which refuses every acks=all write while its
        # min.insync.replicas is 2: the copy is retried, never made.
        created = admin.create_topics(
            [
                NewTopic(topic, 1, replica_assignment=[[a, b, c]]),
                NewTopic(dlq, 1, replica_assignment=[[c]], config={"min.insync.replicas": "2"}),
            ]
        )
        for future in created.values():
            future.result(30)
        wait_until(
            lambda: _leaders(bootstrap, topic) == {0: a} and _leaders(bootstrap, dlq) == {0: c},
            30,
            "the first replicas leading",
        )
        group = f"share-{uuid.uuid4().hex[:8]}"
        set_group_configs(
            bootstrap,
            group,
            {
                "share.auto.offset.reset": "earliest",
                "share.delivery.count.limit": "3",
                "errors.deadletterqueue.topic.name": dlq,
                "errors.deadletterqueue.copy.record.enable": "true",
            },
        )
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(RECORDS):
            producer.produce(topic, _value(i).encode(), key=f"k{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        rejected_offsets = {i for i in range(RECORDS) if _value(i) in REJECTED}

        member = ShareMember(bootstrap, group, topic, reject=sorted(REJECTED))
        members.append(member)
        wait_until(
            lambda: {o for _, o, _ in member.snapshot()[1]} == set(range(RECORDS)),
            60,
            "every record acknowledged (the rejected ones ARCHIVING, durably)",
            lambda: story(members),
        )
        cluster.kill(a)  # SIGKILL while the copies are being tried
        member.kill()  # nobody fetches (so loads the share-partition) until told to
        decided = {o: kind for _, o, kind in member.snapshot()[1]}
        assert {o for o, kind in decided.items() if kind == REJECT} == rejected_offsets
        assert {o for o, kind in decided.items() if kind == ACCEPT} == (
            set(range(RECORDS)) - rejected_offsets
        )
        log_a = cluster.log_path(a).read_text(errors="replace")
        assert GIVEN_UP not in log_a, "a copy was given up before the leader was killed"
        wait_until(  # offset 0 accepted; 1, ARCHIVING, holds the start offset back
            lambda: _start_offset(cluster, group, topic) == min(rejected_offsets),
            30,
            "the start offset at the first rejected record",
        )

        survivor = b
        wait_until(
            lambda: _leaders(cluster.address(survivor), topic).get(0) in (b, c),
            30,
            "a new leader of the source partition",
        )
        _set_min_isr(cluster.address(survivor), dlq, 1)  # the copy can be made again
        cluster.start(a)
        fresh = ShareMember(bootstrap, group, topic)  # its fetch loads the share-partition
        members.append(fresh)
        wait_until(
            lambda: _start_offset(cluster, group, topic) == RECORDS,
            90,
            "the rejected records archived: the start offset past them",
            lambda: f"start offset {_start_offset(cluster, group, topic)}; {story(members)}",
        )
        assert fresh.snapshot()[0] == [], "a rejected or accepted record was delivered again"

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"dlq-reader-{group}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([dlq])
        letters: list[tuple[bytes, bytes, dict[str, bytes]]] = []
        try:
            wait_until(
                lambda: _read_some(consumer, letters) >= len(REJECTED),
                60,
                f"{len(REJECTED)} dead letters",
            )
            quiet_until = time.monotonic() + 3  # a duplicate would come now
            while time.monotonic() < quiet_until:
                _read_some(consumer, letters)
        finally:
            consumer.close()

    counts = Counter(value for _, value, _ in letters)
    assert counts == Counter({v.encode(): 1 for v in REJECTED})  # nothing copied before
    for key, value, headers in letters:
        offset = int(value.decode().removeprefix("bad-"))
        assert key == f"k{offset}".encode()
        assert headers["__dlq.errors.topic"] == topic.encode()
        assert headers["__dlq.errors.partition"] == b"0"
        assert headers["__dlq.errors.offset"] == str(offset).encode()
        assert headers["__dlq.errors.group"] == group.encode()
        assert headers["__dlq.errors.delivery.count"] == b"1"
        assert headers["__dlq.errors.message"] == b"Offset rejected by client."
