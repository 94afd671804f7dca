"""A share session ends with the connection that opened it (KIP-932, as Kafka's): a share
consumer killed with SIGKILL, or a raw connection closed, gives its acquired records back
at once, not when their acquisition locks run out. The locks and the group session here
last a minute, so a record that comes back within 20 s came back because the connection
closed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import BrokerProcess
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from group_members import wait_until
from node_files import port
from share_members import ShareMember as ShareMemberProcess
from share_members import set_group_configs, story
from test_share_fetch import ShareMember, acquired, join, setup_topic

from strom.client import KafkaConnection
from strom.testing import StromCluster

LONG_MS = 60000
BACK_WITHIN_S = 20
LONG_SETTINGS = {
    "group.share.record.lock.duration.ms": LONG_MS,
    "group.share.session.timeout.ms": LONG_MS,
    "group.share.max.session.timeout.ms": LONG_MS,
    "group.share.heartbeat.interval.ms": 500,
    "group.share.min.heartbeat.interval.ms": 100,
}


@pytest.fixture
def share_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    extra: list[str] = []
    for name, value in LONG_SETTINGS.items():
        extra += ["--set", f"{name}={value}"]
    broker = BrokerProcess(tmp_path / "data", extra=extra)
    broker.start()
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
def members() -> Iterator[list[ShareMemberProcess]]:
    started: list[ShareMemberProcess] = []
    try:
        yield started
    finally:
        for member in started:
            member.kill()


def test_a_killed_share_consumers_records_come_back_before_their_locks_run_out(
    share_broker: BrokerProcess, members: list[ShareMemberProcess]
) -> None:
    bootstrap = share_broker.bootstrap
    topic = f"queue-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    group = f"share-{uuid.uuid4().hex[:8]}"
    set_group_configs(bootstrap, group, {"share.auto.offset.reset": "earliest"})
    holder = ShareMemberProcess(bootstrap, group, topic, hold_s=120)
    members.append(holder)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    wait_until(lambda: len(holder.snapshot()[0]) > 0, 60, "the holder's records")
    held = {offset for _, offset, _, _ in holder.snapshot()[0]}
    other = ShareMemberProcess(bootstrap, group, topic)
    members.append(other)
    holder.kill()  # SIGKILL while it holds its records: its connections close
    killed_at = time.monotonic()

    def held_came_back() -> bool:
        return held <= {o for _, o, _, count in other.snapshot()[0] if count == 2}

    wait_until(held_came_back, BACK_WITHIN_S, "the killed member's records", lambda: story(members))
    assert time.monotonic() - killed_at < LONG_MS / 1000 / 2
    assert all(count == 1 for _, o, _, count in other.snapshot()[0] if o not in held)


@pytest.mark.strom(config=LONG_SETTINGS)
def test_a_closed_connection_ends_the_session_it_opened(strom_broker: StromCluster) -> None:
    """Records acquired in a session go back when the connection that opened it closes;
    a member that reopened its session (epoch 0) on another connection keeps them until
    that one closes."""
    topic_id = setup_topic(strom_broker, "closing", "g-closing", 6)
    address = ("127.0.0.1", port(strom_broker))

    async def scenario() -> None:
        first = await KafkaConnection.connect(*address)
        second = await KafkaConnection.connect(*address)
        watching = await KafkaConnection.connect(*address)
        try:
            a = ShareMember(first, "g-closing", "a")
            b = ShareMember(watching, "g-closing", "b")
            await join(a, b, topic="closing")
            assert acquired(await a.fetch(topic_id, max_records=3)) == {0: 1, 1: 1, 2: 1}
            # a's session, reopened on the second connection, is that connection's now.
            a.connection, a.epoch = second, 0
            assert acquired(await a.fetch(topic_id, max_records=3)) == {3: 1, 4: 1, 5: 1}
            first.close()
            assert acquired(await b.fetch(topic_id, max_wait_ms=1500)) == {}
            started = time.monotonic()
            second.close()
            back: dict[int, int] = {}
            while len(back) < 6 and time.monotonic() - started < BACK_WITHIN_S:
                back |= acquired(await b.fetch(topic_id, max_wait_ms=1000))
            assert back == {o: 2 for o in range(6)}
        finally:
            for connection in (first, second, watching):
                connection.close()

    async def bounded() -> None:
        async with asyncio.timeout(60):
            await scenario()

    asyncio.run(bounded())
