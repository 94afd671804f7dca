"""Dead letters in a three-node cluster: the share-partition's leader copies the records a
member rejects to the dead-letter partition another broker leads (a Produce over the
inter-broker link), each once, with KIP-1191's `__dlq.errors.*` headers."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster import running_cluster
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import wait_until
from share_members import ACCEPT, REJECT, ShareMember, set_group_configs, story

SETTINGS = [
    "group.share.record.lock.duration.ms=2000",
    "group.share.min.record.lock.duration.ms=1000",
    "group.share.session.timeout.ms=6000",
    "group.share.min.session.timeout.ms=1000",
    "group.share.heartbeat.interval.ms=500",
    "group.share.min.heartbeat.interval.ms=100",
]
RECORDS = 30
REJECTED = {f"bad-{i}" for i in range(0, RECORDS, 4)}


@pytest.fixture
def members() -> Iterator[list[ShareMember]]:
    started: list[ShareMember] = []
    try:
        yield started
    finally:
        for member in started:
            member.kill()


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or found.error is not None:
        return {}
    return {int(p): int(meta.leader) for p, meta in found.partitions.items()}


def _value(i: int) -> str:
    return f"bad-{i}" if f"bad-{i}" in REJECTED else f"ok-{i}"


def test_rejected_records_reach_a_dead_letter_partition_led_elsewhere(
    tmp_path: Path, members: list[ShareMember]
) -> None:
    with running_cluster(tmp_path, nodes=3, settings=SETTINGS) as cluster:
        bootstrap = cluster.bootstrap
        a, b, c = cluster.node_ids
        topic = f"queue-{uuid.uuid4().hex[:6]}"
        dlq = f"dlq.{topic}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        # The source is led by a; the dead-letter partition its records go to (0) by b.
        created = admin.create_topics(
            [
                NewTopic(topic, 1, replica_assignment=[[a, b, c]]),
                NewTopic(dlq, 3, replica_assignment=[[b, c, a], [c, a, b], [a, b, c]]),
            ]
        )
        for future in created.values():
            future.result(30)
        wait_until(
            lambda: (
                _leaders(bootstrap, topic) == {0: a}
                and _leaders(bootstrap, dlq) == {0: b, 1: c, 2: a}
            ),
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
        member = ShareMember(bootstrap, group, topic, reject=sorted(REJECTED))
        members.append(member)
        producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
        for i in range(RECORDS):
            producer.produce(topic, _value(i).encode(), key=f"k{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        rejected_offsets = {i for i in range(RECORDS) if _value(i) in REJECTED}
        wait_until(
            lambda: {o for _, o, _ in member.snapshot()[1]} == set(range(RECORDS)),
            60,
            "every record acknowledged",
            lambda: story(members),
        )
        decided = {o: kind for _, o, kind in member.snapshot()[1]}
        assert {o for o, kind in decided.items() if kind == REJECT} == rejected_offsets
        assert {o for o, kind in decided.items() if kind == ACCEPT} == (
            set(range(RECORDS)) - rejected_offsets
        )

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"dlq-reader-{group}",
                "auto.offset.reset": "earliest",
            }
        )
        consumer.subscribe([dlq])
        letters: list[tuple[int, bytes, bytes, dict[str, bytes]]] = []
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

    assert {partition for partition, _, _, _ in letters} == {0}
    counts = Counter(value for _, _, value, _ in letters)
    assert counts == Counter({v.encode(): 1 for v in REJECTED})
    for _, key, value, headers in letters:
        offset = int(value.decode().removeprefix("bad-"))
        assert key == f"k{offset}".encode()
        assert headers["__dlq.errors.topic"] == topic.encode()
        assert headers["__dlq.errors.partition"] == b"0"
        assert headers["__dlq.errors.offset"] == str(offset).encode()
        assert headers["__dlq.errors.group"] == group.encode()
        assert headers["__dlq.errors.delivery.count"] == b"1"
        assert b"rejected" in headers["__dlq.errors.message"]


def _read_some(consumer: Consumer, into: list[tuple[int, bytes, bytes, dict[str, bytes]]]) -> int:
    message = consumer.poll(0.5)
    if message is not None and message.error() is None:
        into.append(
            (
                message.partition(),
                message.key(),
                message.value(),
                dict(message.headers() or []),
            )
        )
    return len(into)
