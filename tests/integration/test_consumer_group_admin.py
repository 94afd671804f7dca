"""Admin views of KIP-848 consumer groups: confluent-kafka's AdminClient lists a consumer
group with its type (with and without a type filter) and describes it with
ConsumerGroupDescribe (type CONSUMER, state, members with their assignments, the
assignor), side by side with a classic group, which it still describes with
DescribeGroups."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import Member, balanced, group_story, wait_until

PARTITIONS = 4


@pytest.fixture
def admin_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data",
        extra=[
            "--set",
            "group.consumer.heartbeat.interval.ms=500",
            "--set",
            "group.consumer.min.heartbeat.interval.ms=100",
        ],
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    try:
        yield started
    finally:
        for member in started:
            member.kill()


def _topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(8):
        producer.produce(topic, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def start_groups(bootstrap: str, members: list[Member]) -> None:
    """Two KIP-848 members in `new848` on topic `t848`; one classic member in `old` on
    `tclassic`; all of them own their partitions."""
    _topic(bootstrap, "t848")
    _topic(bootstrap, "tclassic")
    kip848 = [Member(bootstrap, "new848", "t848", **{"group.protocol": "consumer"}) for _ in "ab"]
    members.extend(kip848)
    classic = Member(bootstrap, "old", "tclassic")
    members.append(classic)
    wait_until(
        lambda: balanced(kip848, PARTITIONS) and balanced([classic], PARTITIONS),
        60,
        "both groups to own their partitions",
        lambda: group_story(bootstrap, "new848", kip848),
    )


def test_admin_lists_and_describes_both_types(
    admin_broker: BrokerProcess, members: list[Member]
) -> None:
    bootstrap = admin_broker.bootstrap
    start_groups(bootstrap, members)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    listed = admin.list_consumer_groups().result(10)
    types = {g.group_id: g.type for g in listed.valid}
    assert types == {"new848": ConsumerGroupType.CONSUMER, "old": ConsumerGroupType.CLASSIC}
    only = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(10)
    assert [g.group_id for g in only.valid] == ["new848"]
    only = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC}).result(10)
    assert [g.group_id for g in only.valid] == ["old"]

    found = admin.describe_consumer_groups(["new848", "old"])
    new = found["new848"].result(10)
    assert new.type is ConsumerGroupType.CONSUMER
    assert new.state is ConsumerGroupState.STABLE
    assert new.partition_assignor == "uniform"
    assert len(new.members) == 2
    owned = sorted(
        (tp.topic, tp.partition) for m in new.members for tp in m.assignment.topic_partitions
    )
    assert owned == [("t848", p) for p in range(PARTITIONS)]
    for m in new.members:
        assert m.client_id and m.host
        assert m.target_assignment is not None
        assert sorted(tp.partition for tp in m.target_assignment.topic_partitions) == sorted(
            tp.partition for tp in m.assignment.topic_partitions
        )
    old = found["old"].result(10)
    assert old.type is ConsumerGroupType.CLASSIC
    assert old.state is ConsumerGroupState.STABLE
    assert len(old.members) == 1
    assert sorted(tp.partition for tp in old.members[0].assignment.topic_partitions) == list(
        range(PARTITIONS)
    )
