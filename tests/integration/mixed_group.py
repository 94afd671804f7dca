"""A consumer group with one member on each protocol (KIP-848's migration), both driven
here with raw requests (ConsumerGroupHeartbeat v1 for one; JoinGroup v9, SyncGroup v5 and
Heartbeat v4 for the other), and the wire helpers the tests that send it hostile
requests use (test_group_migration_bad_input.py)."""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kafka_wire as wire
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest,
    TopicPartitions,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i32, i32Timedelta

from strom.client.codec import build_request
from strom.group.consumer_protocol import decode_assignment, encode_subscription
from strom.protocol.codec import decode_response, encode_request

TOPIC = "mixed"
PARTITIONS = 4
EVERY_PARTITION = frozenset(range(PARTITIONS))
GROUP = "mixed-group"
COMMITTED = {p: 3 + p for p in range(PARTITIONS)}
RECORDS_PER_PARTITION = 10
MIN_SESSION_MS, MAX_SESSION_MS = 6_000, 300_000
MEMBER_SESSION_MS = 30_000
JOIN, HEARTBEAT, LEAVE, SYNC, OFFSET_COMMIT, OFFSET_FETCH, METADATA = 11, 12, 13, 14, 8, 9, 3
WAIT_S = 10.0

E = ErrorCode


# --- the wire ---------------------------------------------------------------------------


def exchange(broker_port: int, api_key: int, version: int, fields: Mapping[str, Any]) -> Any:
    """One request (built from `fields`, which may hold keys other versions have) on a
    fresh connection: the response, or None when the broker closed the connection.
    Waits at most WAIT_S (a socket timeout fails the test)."""
    body = build_request(api_key, version, fields)
    with wire.connect(broker_port, WAIT_S) as sock:
        sock.sendall(encode_request(api_key, version, 7, body))
        try:
            payload = wire.read_frame(sock)
        except wire.Closed:
            return None
    correlation_id, response = decode_response(api_key, version, payload)
    assert correlation_id == 7
    return response


def call(broker_port: int, body: Any) -> Any:
    with wire.connect(broker_port, WAIT_S) as sock:
        return wire.call(sock, body)


def described(broker_port: int) -> tuple[int, dict[str, int]]:
    """ConsumerGroupDescribe v1 of GROUP: the error and each member's member_type by id."""
    body = ConsumerGroupDescribeRequest(
        group_ids=(GroupId(GROUP),), include_authorized_operations=False
    )
    group = call(broker_port, body).groups[0]
    return int(group.error_code), {m.member_id: int(m.member_type) for m in group.members}


def committed(broker_port: int) -> dict[int, int]:
    fields = {"groups": [{"group_id": GROUP, "topics": None}], "require_stable": False}
    response = exchange(broker_port, OFFSET_FETCH, 8, fields)
    group = response.groups[0]
    assert group.error_code == E.none, group
    return {p.partition_index: p.committed_offset for t in group.topics for p in t.partitions}


def partitions_of(assignment: bytes) -> frozenset[int]:
    by_name, _ = decode_assignment(assignment)
    assert set(by_name) <= {TOPIC}, by_name
    partitions = frozenset(by_name.get(TOPIC, ()))
    assert partitions <= EVERY_PARTITION, partitions
    return partitions


# --- the two members, driven here -------------------------------------------------------


def new_member_id() -> str:
    return uuid.uuid4().hex


@dataclass
class ConsumerMember:
    """The member on the consumer protocol: ConsumerGroupHeartbeat v1, full each time."""

    broker_port: int
    topic_id: uuid.UUID
    member_id: str = field(default_factory=new_member_id)
    epoch: int = 0
    assigned: frozenset[int] = frozenset()

    def heartbeat(self) -> tuple[ErrorCode, str | None]:
        owned = (
            TopicPartitions(
                topic_id=self.topic_id, partitions=tuple(map(i32, sorted(self.assigned)))
            ),
        )
        body = ConsumerGroupHeartbeatRequest(
            group_id=GroupId(GROUP),
            member_id=self.member_id,
            member_epoch=i32(self.epoch),
            instance_id=None,
            rack_id=None,
            rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
            subscribed_topic_names=(TopicName(TOPIC),),
            subscribed_topic_regex=None,
            server_assignor=None,
            topic_partitions=() if self.epoch == 0 else owned,
        )
        response = call(self.broker_port, body)
        if response.error_code == E.none:
            self.epoch = int(response.member_epoch)
            if response.assignment is not None:
                self.assigned = frozenset(
                    int(p)
                    for tp in response.assignment.topic_partitions
                    if tp.topic_id == self.topic_id
                    for p in tp.partitions
                )
        return ErrorCode(response.error_code), response.error_message

    def rejoin(self) -> None:
        """As a fenced member does: everything dropped, a new id, epoch 0."""
        self.member_id, self.epoch, self.assigned = new_member_id(), 0, frozenset()
        error, message = self.heartbeat()
        assert error is E.none, f"the consumer-protocol member could not rejoin: {error} {message}"


def subscription(owned: frozenset[int]) -> bytes:
    return encode_subscription([TOPIC], version=1, owned={TOPIC: tuple(sorted(owned))})


@dataclass
class ClassicMember:
    """The classic member: JoinGroup v9 and SyncGroup v5 (range), Heartbeat v4; its
    subscription names the partitions it owns, as a cooperative member's does."""

    broker_port: int
    member_id: str = ""
    generation: int = -1
    assignment: frozenset[int] = frozenset()

    def join(self) -> None:
        """Join (again) and sync until it has an assignment."""
        for _ in range(30):
            joined = exchange(
                self.broker_port,
                JOIN,
                9,
                {
                    "group_id": GROUP,
                    "session_timeout": MEMBER_SESSION_MS,
                    "rebalance_timeout": 30_000,
                    "member_id": self.member_id,
                    "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": subscription(self.assignment)}],
                    "reason": None,
                },
            )
            if joined.error_code == E.member_id_required:
                self.member_id = joined.member_id
                continue
            if joined.error_code == E.unknown_member_id:  # start again from nothing
                self.member_id, self.assignment = "", frozenset()
                continue
            assert joined.error_code == E.none, f"the classic member's JoinGroup: {joined}"
            self.member_id, self.generation = joined.member_id, int(joined.generation_id)
            synced = exchange(self.broker_port, SYNC, 5, self.sync_fields())
            if synced.error_code == E.none:
                self.assignment = partitions_of(synced.assignment)
                return
            assert synced.error_code in (E.rebalance_in_progress, E.illegal_generation), synced
        raise AssertionError("the classic member did not get an assignment in 30 rounds")

    def sync_fields(self) -> dict[str, Any]:
        return {
            "group_id": GROUP,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        }

    def heartbeat(self) -> ErrorCode:
        fields = {
            "group_id": GROUP,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": None,
        }
        return ErrorCode(exchange(self.broker_port, HEARTBEAT, 4, fields).error_code)


@dataclass
class Mixed:
    """The group: its two members and what the tests check of it."""

    broker_port: int
    consumer: ConsumerMember
    classic: ClassicMember

    def settle(self) -> None:
        """Heartbeat both (the classic one rejoining when told to) until they share every
        partition, each some, twice in a row."""
        deadline = time.monotonic() + 20
        in_a_row = 0
        while in_a_row < 2:
            assert time.monotonic() < deadline, f"the group did not settle: {self}"
            error, message = self.consumer.heartbeat()
            assert error is E.none, f"the consumer-protocol member's heartbeat: {error} {message}"
            if self.classic.heartbeat() is not E.none:
                self.classic.join()
                in_a_row = 0
                continue
            mine, theirs = self.consumer.assigned, self.classic.assignment
            shared = mine and theirs and not mine & theirs and mine | theirs == EVERY_PARTITION
            in_a_row = in_a_row + 1 if shared else 0
            time.sleep(0.02)

    def members(self) -> dict[str, int]:
        error, members = described(self.broker_port)
        assert error == E.none, f"ConsumerGroupDescribe: {error}"
        return members

    def heal(self, named_consumer: bool) -> None:
        """The group back to its two members, each of its kind, settled: the classic one
        joins again (with its own protocols and timeouts, whatever a request changed)."""
        error, message = self.consumer.heartbeat()
        if error is not E.none:
            assert named_consumer, (
                f"the consumer-protocol member's heartbeat failed though no request named it: "
                f"{error} {message}"
            )
            self.consumer.rejoin()
        strays = set(self.members()) - {self.consumer.member_id, self.classic.member_id}
        if strays:
            members = [
                {"member_id": m, "group_instance_id": None, "reason": None} for m in sorted(strays)
            ]
            left = exchange(self.broker_port, LEAVE, 5, {"group_id": GROUP, "members": members})
            assert [m.error_code for m in left.members] == [E.none] * len(strays), left
        self.classic.join()
        self.settle()
        kinds = {self.consumer.member_id: 1, self.classic.member_id: 0}
        assert self.members() == kinds, (
            f"ConsumerGroupDescribe v1 (member id: member_type, 1 consumer, 0 classic) "
            f"{self.members()}, expected {kinds}"
        )


def _topic_id(broker_port: int) -> uuid.UUID:
    fields = {
        "topics": [{"topic_id": None, "name": TOPIC}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    topic = exchange(broker_port, METADATA, 12, fields).topics[0]
    assert topic.error_code == E.none, topic
    return uuid.UUID(str(topic.topic_id))


def start_mixed(bootstrap: str, broker_port: int) -> Mixed:
    """The topic (RECORDS_PER_PARTITION records in each partition) and the group, its
    two members settled and COMMITTED committed by the consumer-protocol member."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(PARTITIONS * RECORDS_PER_PARTITION):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    group = Mixed(
        broker_port, ConsumerMember(broker_port, _topic_id(broker_port)), ClassicMember(broker_port)
    )
    error, message = group.consumer.heartbeat()
    assert error is E.none, f"{error} {message}"
    group.classic.join()
    group.settle()
    commit = {
        "group_id": GROUP,
        "generation_id_or_member_epoch": group.consumer.epoch,
        "member_id": group.consumer.member_id,
        "group_instance_id": None,
        "retention_time_ms": -1,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                    for p, offset in COMMITTED.items()
                ],
            }
        ],
    }
    answer = exchange(broker_port, OFFSET_COMMIT, 9, commit)
    assert [p.error_code for p in answer.topics[0].partitions] == [E.none] * PARTITIONS
    assert committed(broker_port) == COMMITTED
    return group


def consumes_beside(group: Mixed, bootstrap: str) -> None:
    """A confluent-kafka consumer (consumer protocol) joins the group while the two
    members go on, gets partitions, and reads each from its committed offset."""
    failures: list[BaseException] = []
    stop = threading.Event()

    def drive() -> None:
        try:
            while not stop.wait(0.2):
                error, message = group.consumer.heartbeat()
                assert error is E.none, f"{error} {message}"
                if group.classic.heartbeat() is not E.none:
                    group.classic.join()
        except BaseException as exc:  # told in the main thread
            failures.append(exc)

    driver = threading.Thread(target=drive, daemon=True)
    driver.start()
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    first: dict[int, int] = {}
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 30
        while not (first and set(first) == {tp.partition for tp in consumer.assignment()}):
            assert time.monotonic() < deadline and not failures, (failures, first)
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                first.setdefault(int(message.partition() or 0), int(message.offset() or 0))
    finally:
        consumer.close()
        stop.set()
        driver.join(10)
    assert not failures, failures
    assert first == {p: COMMITTED[p] for p in first}, f"first offsets read {first}"
    assert len(first) < PARTITIONS, "the new member took every partition"
