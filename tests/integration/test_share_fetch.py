"""ShareFetch and ShareAcknowledge (KIP-932) against one strom broker (the `strom_broker`
fixture), sent raw with strom's own client: members share a partition's records, ACCEPT
is final, RELEASE and lock expiry redeliver with a higher count, REJECT and the delivery
count limit archive and dead-letter (read back with confluent-kafka), strom's delivery
delay holds records back, and the share session's epochs are checked."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kio.schema.errors import ErrorCode
from node_files import port

from strom.client import KafkaConnection
from strom.testing import StromCluster

SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79
ACCEPT, RELEASE, REJECT = 1, 2, 3
LOCK_MS = 1500

pytestmark = pytest.mark.strom(
    config={
        "group.share.min.record.lock.duration.ms": 1000,
        "group.share.record.lock.duration.ms": LOCK_MS,
    }
)


SHARE_GROUP_HEARTBEAT = 76


async def join(*members: ShareMember, topic: str, timeout_s: float = 20) -> None:
    """Each member joins its share group (ShareGroupHeartbeat v1) and heartbeats until it
    is assigned partition 0 of `topic`: the group coordinator initializes a share-
    partition's state before it assigns it, and a fetch of one never initialized fails."""
    deadline = time.monotonic() + timeout_s
    waiting = list(members)
    while waiting:
        assert time.monotonic() < deadline, f"{[m.member for m in waiting]} not assigned"
        for member in list(waiting):
            response = await member.connection.request(
                SHARE_GROUP_HEARTBEAT,
                1,
                {
                    "group_id": member.group,
                    "member_id": member.member,
                    "member_epoch": member.member_epoch,
                    "rack_id": None,
                    "subscribed_topic_names": [topic] if member.member_epoch == 0 else None,
                },
            )
            assert response.error_code == ErrorCode.none, response
            member.member_epoch = int(response.member_epoch)
            if response.assignment is not None and any(
                0 in tp.partitions for tp in response.assignment.topic_partitions
            ):
                waiting.remove(member)
        if waiting:
            await asyncio.sleep(0.1)


def _topic_id(admin: AdminClient, topic: str) -> uuid.UUID:
    found = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    raw = found.topic_id
    msb = raw.get_most_significant_bits() & (2**64 - 1)
    lsb = raw.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


def setup_topic(
    broker: StromCluster,
    topic: str,
    group: str,
    count: int,
    *,
    topic_configs: dict[str, str] | None = None,
    group_configs: dict[str, str] | None = None,
) -> uuid.UUID:
    """`topic` (one partition) with `count` records, and `group` reading from the start."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    new = NewTopic(topic, 1, 1, config=topic_configs or {})
    for future in admin.create_topics([new]).values():
        future.result(10)
    entries = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in {"share.auto.offset.reset": "earliest", **(group_configs or {})}.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(count):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode())
    assert producer.flush(30) == 0
    return _topic_id(admin, topic)


class ShareMember:
    """One member's share session with the broker, on its own connection."""

    def __init__(self, connection: KafkaConnection, group: str, member: str) -> None:
        self.connection = connection
        self.group = group
        self.member = member
        self.epoch = 0
        self.member_epoch = 0
        """In the share group (ShareGroupHeartbeat); `epoch` is the share session's."""

    async def fetch(
        self,
        topic_id: uuid.UUID,
        *,
        acks: list[tuple[int, int, int]] = (),  # type: ignore[assignment]
        max_records: int = 100,
        max_wait_ms: int = 0,
        epoch: int | None = None,
    ) -> Any:
        batches = [
            {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
            for f, last, t in acks
        ]
        body = {
            "group_id": self.group,
            "member_id": self.member,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "max_wait": max_wait_ms,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "max_records": max_records,
            "batch_size": max_records,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [{"partition_index": 0, "acknowledgement_batches": batches}],
                }
            ],
            "forgotten_topics_data": [],
        }
        response = await self.connection.request(SHARE_FETCH, 1, body, timeout_s=30)
        if response.error_code == ErrorCode.none and epoch is None:
            self.epoch = self.epoch + 1 if self.epoch >= 0 else self.epoch
        return response

    async def acknowledge(
        self, topic_id: uuid.UUID, acks: list[tuple[int, int, int]], *, epoch: int | None = None
    ) -> Any:
        body = {
            "group_id": self.group,
            "member_id": self.member,
            "share_session_epoch": self.epoch if epoch is None else epoch,
            "topics": [
                {
                    "topic_id": topic_id,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "acknowledgement_batches": [
                                {"first_offset": f, "last_offset": last, "acknowledge_types": [t]}
                                for f, last, t in acks
                            ],
                        }
                    ],
                }
            ],
        }
        response = await self.connection.request(SHARE_ACKNOWLEDGE, 1, body, timeout_s=30)
        if response.error_code == ErrorCode.none and epoch is None:
            self.epoch += 1
        return response


def acquired(response: Any) -> dict[int, int]:
    """offset -> delivery count of what a ShareFetch acquired."""
    assert response.error_code == ErrorCode.none, response
    found: dict[int, int] = {}
    for topic in response.responses:
        for partition in topic.partitions:
            assert partition.error_code == ErrorCode.none, partition
            for entry in partition.acquired_records:
                for offset in range(entry.first_offset, entry.last_offset + 1):
                    found[offset] = int(entry.delivery_count)
    return found


def ack_errors(response: Any) -> list[int]:
    return [
        int(getattr(p, "acknowledge_error_code", None) or p.error_code)
        for t in response.responses
        for p in t.partitions
    ]


async def until_acquired(
    member: ShareMember, topic_id: uuid.UUID, timeout_s: float
) -> dict[int, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = acquired(await member.fetch(topic_id, max_wait_ms=500))
        if got:
            return got
    raise AssertionError(f"{member.member} acquired nothing in {timeout_s} s")


def run(coroutine: Any) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(60):
            return await coroutine

    return asyncio.run(bounded())


def test_members_share_records_and_accept_is_final(strom_broker: StromCluster) -> None:
    topic_id = setup_topic(strom_broker, "shared", "g-shared", 30)

    async def story() -> None:
        connection = await KafkaConnection.connect("127.0.0.1", port(strom_broker))
        try:
            a, b, c = (ShareMember(connection, "g-shared", m) for m in ("a", "b", "c"))
            await join(a, b, c, topic="shared")
            got = {}
            for member in (a, b, c):
                got[member.member] = acquired(await member.fetch(topic_id, max_records=10))
            offsets = [o for taken in got.values() for o in taken]
            assert sorted(offsets) == list(range(30)), got  # disjoint, and all of them
            assert all(count == 1 for taken in got.values() for count in taken.values())
            accepted = await a.acknowledge(topic_id, [(min(got["a"]), max(got["a"]), ACCEPT)])
            assert ack_errors(accepted) == [0]
            released = await b.acknowledge(topic_id, [(min(got["b"]), max(got["b"]), RELEASE)])
            assert ack_errors(released) == [0]
            again = acquired(await c.fetch(topic_id, acks=[(min(got["c"]), max(got["c"]), ACCEPT)]))
            assert again == {o: 2 for o in got["b"]}  # the released ones, delivered again
            # Another member's records are not this one's to acknowledge.
            theirs = await a.acknowledge(topic_id, [(min(got["b"]), min(got["b"]), ACCEPT)])
            assert ack_errors(theirs) == [int(ErrorCode.invalid_record_state)]
            assert acquired(await a.fetch(topic_id)) == {}
        finally:
            connection.close()

    run(story())


def test_an_expired_lock_redelivers(strom_broker: StromCluster) -> None:
    topic_id = setup_topic(strom_broker, "expiring", "g-expiring", 3)

    async def story() -> None:
        connection = await KafkaConnection.connect("127.0.0.1", port(strom_broker))
        try:
            quiet, other = (
                ShareMember(connection, "g-expiring", "q"),
                ShareMember(connection, "g-expiring", "o"),
            )
            await join(quiet, other, topic="expiring")
            fetched = await quiet.fetch(topic_id)
            assert acquired(fetched) == {0: 1, 1: 1, 2: 1}
            assert int(fetched.acquisition_lock_timeout.total_seconds() * 1000) == LOCK_MS
            # The other member waits in a long poll until the lock runs out.
            assert await until_acquired(other, topic_id, 20) == {0: 2, 1: 2, 2: 2}
            late = await quiet.acknowledge(topic_id, [(0, 2, ACCEPT)])
            assert ack_errors(late) == [int(ErrorCode.invalid_record_state)]
        finally:
            connection.close()

    run(story())


def test_reject_and_the_delivery_limit_dead_letter(strom_broker: StromCluster) -> None:
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic("dlq-jobs", 1, 1)]).values():
        future.result(10)
    topic_id = setup_topic(
        strom_broker,
        "jobs",
        "g-jobs",
        2,
        group_configs={
            "errors.deadletterqueue.topic.name": "dlq-jobs",
            "errors.deadletterqueue.copy.record.enable": "true",
            "share.delivery.count.limit": "2",
        },
    )

    async def story() -> None:
        connection = await KafkaConnection.connect("127.0.0.1", port(strom_broker))
        try:
            m = ShareMember(connection, "g-jobs", "m")
            await join(m, topic="jobs")
            assert acquired(await m.fetch(topic_id)) == {0: 1, 1: 1}
            assert ack_errors(await m.acknowledge(topic_id, [(0, 0, REJECT), (1, 1, RELEASE)])) == [
                0
            ]
            assert acquired(await m.fetch(topic_id)) == {1: 2}
            assert ack_errors(await m.acknowledge(topic_id, [(1, 1, RELEASE)])) == [0]
            assert acquired(await m.fetch(topic_id)) == {}  # archived at the limit
        finally:
            connection.close()

    run(story())
    consumer = Consumer(
        {
            "bootstrap.servers": strom_broker.bootstrap_servers,
            "group.id": "dlq-reader",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["dlq-jobs"])
        letters = []
        deadline = time.monotonic() + 20
        while len(letters) < 2 and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                letters.append(message)
    finally:
        consumer.close()
    assert len(letters) == 2
    headers = [dict(m.headers()) for m in letters]
    assert [m.value() for m in letters] == [b"v0", b"v1"]
    assert [m.key() for m in letters] == [b"k0", b"k1"]
    assert [h["__dlq.errors.offset"] for h in headers] == [b"0", b"1"]
    assert {h["__dlq.errors.topic"] for h in headers} == {b"jobs"}
    assert {h["__dlq.errors.partition"] for h in headers} == {b"0"}
    assert {h["__dlq.errors.group"] for h in headers} == {b"g-jobs"}
    assert [h["__dlq.errors.delivery.count"] for h in headers] == [b"1", b"2"]
    assert [h["__dlq.errors.message"] for h in headers] == [
        b"Offset rejected by client.",
        b"Offset delivery count exceeded the threshold.",
    ]


def test_the_delivery_delay_holds_records_back(strom_broker: StromCluster) -> None:
    """No record is acquired before its timestamp + strom.share.delivery.delay.ms: the
    record's timestamp is at least `produced_ms` (the producer stamps it after), so an
    acquisition seen at `acquired_ms` must have `acquired_ms >= produced_ms + DELAY`. One
    clock (this machine's) reads both, so the tolerance is only its granularity."""
    delay_ms = 2000
    produced_ms = int(time.time() * 1000)
    topic_id = setup_topic(
        strom_broker,
        "delayed",
        "g-delayed",
        1,
        topic_configs={"strom.share.delivery.delay.ms": str(delay_ms)},
    )

    async def story() -> int:
        connection = await KafkaConnection.connect("127.0.0.1", port(strom_broker))
        try:
            m = ShareMember(connection, "g-delayed", "m")
            await join(m, topic="delayed")
            while True:
                got = acquired(await m.fetch(topic_id, max_wait_ms=200))
                if got:
                    assert got == {0: 1}
                    return int(time.time() * 1000)
        finally:
            connection.close()

    acquired_ms = run(story())
    assert acquired_ms >= produced_ms + delay_ms - 2, (produced_ms, acquired_ms)


def test_share_session_epochs(strom_broker: StromCluster) -> None:
    topic_id = setup_topic(strom_broker, "epochs", "g-epochs", 2)

    async def story() -> None:
        connection = await KafkaConnection.connect("127.0.0.1", port(strom_broker))
        try:
            m = ShareMember(connection, "g-epochs", "m")
            await join(m, topic="epochs")
            stray = await m.fetch(topic_id, epoch=3)
            assert stray.error_code == ErrorCode.share_session_not_found
            ack = await m.acknowledge(topic_id, [(0, 0, ACCEPT)], epoch=1)
            assert ack.error_code == ErrorCode.share_session_not_found
            with_acks = await m.fetch(topic_id, acks=[(0, 0, ACCEPT)], epoch=0)
            assert with_acks.error_code == ErrorCode.invalid_request
            assert acquired(await m.fetch(topic_id)) == {0: 1, 1: 1}
            wrong = await m.fetch(topic_id, epoch=7)
            assert wrong.error_code == ErrorCode.invalid_share_session_epoch
            zero = await m.acknowledge(topic_id, [(0, 0, ACCEPT)], epoch=0)
            assert zero.error_code == ErrorCode.invalid_share_session_epoch
            # Closing the session (epoch -1) accepts offset 0 and gives offset 1 back.
            closing = await m.acknowledge(topic_id, [(0, 0, ACCEPT)], epoch=-1)
            assert closing.error_code == ErrorCode.none and ack_errors(closing) == [0]
            other = ShareMember(connection, "g-epochs", "other")
            await join(other, topic="epochs")
            assert acquired(await other.fetch(topic_id)) == {1: 2}
        finally:
            connection.close()

    run(story())


def test_latest_starts_where_the_log_ended_when_the_group_took_the_partition(
    strom_broker: StromCluster,
) -> None:
    """share.auto.offset.reset=latest (the default): a member joins, records are written,
    and only then does it fetch; it gets them, since the share-partition starts at the
    log end as the group took it (Kafka places it at its first fetch, past them)."""
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic("later", 1, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers})
    producer.produce("later", b"before the group")
    assert producer.flush(30) == 0
    topic_id = _topic_id(admin, "later")

    async def story() -> dict[int, int]:
        connection = await KafkaConnection.connect("127.0.0.1", port(strom_broker))
        try:
            m = ShareMember(connection, "g-later", "m")
            await join(m, topic="later")
            for i in range(3):
                producer.produce("later", f"after {i}".encode())
            assert producer.flush(30) == 0
            return await until_acquired(m, topic_id, 20)
        finally:
            connection.close()

    assert run(story()) == {1: 1, 2: 1, 3: 1}
