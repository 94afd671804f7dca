"""KIP-848 requests with hostile values get an error code, never a broken broker.

ConsumerGroupHeartbeat (v0, v1) and ConsumerGroupDescribe, well-formed (so they reach the
coordinator) with arbitrary field values: empty, odd and huge group ids, member epochs
of every kind, unknown member and instance ids, garbage topic ids in the owned
partitions, nonexistent topics, huge subscriptions, invalid regular expressions, unknown
assignors, rebalance timeouts of -1, 0 and more than a day. Then malformed frames of
these APIs (truncated bodies, versions strom does not speak). Every answer is a Kafka
error code or a closed connection, nothing is logged as a bug, the broker keeps serving
(a KIP-848 consumer consumes afterwards), and one client cannot make a group hold more
than `group.consumer.max.size` members.

The requests go to the `strom_broker` fixture's node through its test network.
"""

from __future__ import annotations

import datetime
import logging
import struct
import uuid
from typing import Any

import kafka_wire as wire
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.consumer_group_describe.v0.request import (
    ConsumerGroupDescribeRequest as DescribeV0,
)
from kio.schema.consumer_group_describe.v1.request import (
    ConsumerGroupDescribeRequest as DescribeV1,
)
from kio.schema.consumer_group_heartbeat.v0.request import (
    ConsumerGroupHeartbeatRequest as HeartbeatV0,
)
from kio.schema.consumer_group_heartbeat.v0.request import TopicPartitions as OwnedV0
from kio.schema.consumer_group_heartbeat.v1.request import (
    ConsumerGroupHeartbeatRequest as HeartbeatV1,
)
from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions as OwnedV1
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta
from node_files import port

from strom.protocol.codec import encode_request
from strom.testing import StromCluster

TOPIC = "t848"
GOOD_GROUP = "good-848"
MAX_SIZE = 5
HEARTBEAT = 68
DESCRIBE = 69

pytestmark = pytest.mark.strom(
    config={
        "group.consumer.max.size": MAX_SIZE,
        "group.consumer.session.timeout.ms": 45000,
    }
)

names = st.text(alphabet="ab-_.\u00e9\U0001f600 ", max_size=6)
# Half of the values are those of a real member (a few groups, members and epochs, so
# that requests meet each other's groups), half hostile.
group_ids = st.one_of(
    st.sampled_from(["g1", "g2"]),
    names,
    st.sampled_from(["", "   "]),
    st.text(alphabet="xyz", min_size=1000, max_size=5000),
)
member_ids = st.one_of(st.sampled_from(["m1", "m2", "m3"]), st.sampled_from(["", " "]), names)
epochs = st.one_of(
    st.integers(0, 3), st.sampled_from([-3, -2, -1]), st.integers(-(2**31), 2**31 - 1)
).map(i32)
timeouts = st.one_of(
    st.just(30_000), st.sampled_from([-1, 0, 2**31 - 1]), st.integers(-(2**31), 2**31 - 1)
).map(lambda n: i32Timedelta.parse(datetime.timedelta(milliseconds=n)))
topic_names = st.one_of(
    st.just((TOPIC,)),
    st.none(),
    st.lists(st.one_of(st.just(TOPIC), names), max_size=4).map(tuple),
    st.just(tuple(f"nope-{i}" for i in range(20_000))),
)
regexes = st.one_of(
    st.none(),
    st.sampled_from(["t.*", ".*", "", "(", "[a-", "*", "a{2,1}", "(?P<x", "\\", "t848|x"]),
    names,
)
assignors = st.one_of(st.none(), st.sampled_from(["uniform", "range", "nope", "", " "]))
optional_ids = st.one_of(st.none(), st.none(), st.sampled_from(["", " ", "i1"]), names)


def owned(kind: type[Any], topic_ids: list[uuid.UUID]) -> st.SearchStrategy[Any]:
    partitions = st.lists(
        st.one_of(st.integers(-2, 3), st.integers(-(2**31), 2**31 - 1)).map(i32), max_size=4
    ).map(tuple)
    ids = st.one_of(st.sampled_from(topic_ids), st.uuids(), st.just(uuid.UUID(int=0)))
    return st.one_of(
        st.just(()),
        st.none(),
        st.lists(st.builds(kind, topic_id=ids, partitions=partitions), max_size=3).map(tuple),
    )


def heartbeats(topic_ids: list[uuid.UUID]) -> st.SearchStrategy[Any]:
    common = {
        "group_id": group_ids,
        "member_id": member_ids,
        "member_epoch": epochs,
        "instance_id": optional_ids,
        "rack_id": optional_ids,
        "rebalance_timeout": timeouts,
        "subscribed_topic_names": topic_names,
        "server_assignor": assignors,
    }
    return st.one_of(
        st.builds(HeartbeatV0, topic_partitions=owned(OwnedV0, topic_ids), **common),
        st.builds(
            HeartbeatV1,
            subscribed_topic_regex=regexes,
            topic_partitions=owned(OwnedV1, topic_ids),
            **common,
        ),
    )


def describes() -> st.SearchStrategy[Any]:
    groups = st.lists(st.one_of(group_ids, st.just(GOOD_GROUP)), max_size=4).map(tuple)
    return st.one_of(
        st.builds(DescribeV0, group_ids=groups, include_authorized_operations=st.booleans()),
        st.builds(DescribeV1, group_ids=groups, include_authorized_operations=st.booleans()),
    )


def _topic_id(bootstrap: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    from confluent_kafka import TopicCollection

    found = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(10)
    raw = found.topic_id
    msb = raw.get_most_significant_bits() & (2**64 - 1)
    lsb = raw.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


@pytest.fixture
def kip848_target(strom_broker: StromCluster) -> tuple[StromCluster, uuid.UUID]:
    """The fixture's broker with the topic TOPIC (2 partitions, 10 records) and its id."""
    bootstrap = strom_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    return strom_broker, _topic_id(bootstrap)


def _consumes(bootstrap: str, group: str, count: int) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([TOPIC])
        got = 0
        for _ in range(300):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                got += 1
                if got == count:
                    return
        raise AssertionError(f"a KIP-848 consumer read {got} of {count} records")
    finally:
        consumer.close()


def test_hostile_kip848_requests_get_error_codes(
    kip848_target: tuple[StromCluster, uuid.UUID], caplog: pytest.LogCaptureFixture
) -> None:
    broker, topic_id = kip848_target
    caplog.set_level(logging.INFO, logger="strom")
    # Every code Kafka has, but UNKNOWN_SERVER_ERROR: what a bug would be answered with.
    known = {int(code) for code in ErrorCode} - {int(ErrorCode.unknown_server_error)}
    good = DescribeV1(group_ids=(GOOD_GROUP,), include_authorized_operations=False)

    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        requests=st.lists(st.one_of(heartbeats([topic_id]), describes()), min_size=1, max_size=6)
    )
    def hostile(requests: list[Any]) -> None:
        # Several on one connection, so that later ones meet the members earlier ones made.
        with wire.connect(port(broker)) as sock:
            sock.settimeout(15)
            for correlation_id, request in enumerate(requests, start=1):
                response = wire.call(sock, request, correlation_id)
                assert set(wire.error_codes(response)) <= known
            # The coordinator still answers on the same connection.
            described = wire.call(sock, good, correlation_id=99)
        assert described.groups[0].error_code == ErrorCode.group_id_not_found
        log = caplog.text
        assert "Traceback" not in log and "bug while handling" not in log, log[-3000:]

    hostile()
    with wire.connect(port(broker)) as sock:
        groups = DescribeV1(group_ids=("g1", "g2"), include_authorized_operations=False)
        described = wire.call(sock, groups)
    assert all(len(g.members) <= MAX_SIZE for g in described.groups)
    _consumes(broker.bootstrap_servers, GOOD_GROUP, 10)


def _heartbeat_bytes(version: int, correlation_id: int) -> bytes:
    body = HeartbeatV1(
        group_id="framed",
        member_id="m-framed",
        member_epoch=i32(0),
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        subscribed_topic_names=(TOPIC,),
        topic_partitions=(),
    )
    return encode_request(HEARTBEAT, version, correlation_id, body)


@pytest.mark.parametrize("cut", [5, 12, 20, 30, -1])
def test_truncated_heartbeat_closes_the_connection(
    kip848_target: tuple[StromCluster, uuid.UUID], cut: int
) -> None:
    broker, _ = kip848_target
    frame = _heartbeat_bytes(1, 3)[4:]
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(frame[:cut]))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _consumes(broker.bootstrap_servers, GOOD_GROUP, 10)


@pytest.mark.parametrize(("api_key", "version"), [(HEARTBEAT, 2), (HEARTBEAT, 99), (DESCRIBE, 7)])
def test_unsupported_versions_close_the_connection(
    kip848_target: tuple[StromCluster, uuid.UUID], api_key: int, version: int
) -> None:
    """As Kafka: only ApiVersions is answered at a version the broker does not speak."""
    broker, _ = kip848_target
    header = wire.header(api_key, version, 9) + b"\x00"
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(header + b"\x00" * 24))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _consumes(broker.bootstrap_servers, GOOD_GROUP, 10)


@pytest.mark.parametrize(("sent", "claimed"), [(1, 0), (0, 1)])
def test_a_body_of_the_other_version(
    kip848_target: tuple[StromCluster, uuid.UUID], sent: int, claimed: int
) -> None:
    """A v1 body under a v0 header (and the other way round): the fields are read as
    the header's version says, so the result is a request with odd values or a frame
    that does not decode. Either an error code or a closed connection."""
    broker, _ = kip848_target
    encoded = bytearray(_heartbeat_bytes(sent, 4)[4:])
    encoded[2:4] = struct.pack(">h", claimed)
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(bytes(encoded)))
        try:
            payload: bytes | None = wire.read_frame(sock)
        except wire.Closed:
            payload = None
    if payload is not None:
        from strom.protocol.codec import decode_response

        correlation_id, response = decode_response(HEARTBEAT, claimed, payload)
        assert correlation_id == 4
        assert int(response.error_code) in {int(code) for code in ErrorCode}
    _consumes(broker.bootstrap_servers, GOOD_GROUP, 10)


def test_one_client_cannot_grow_a_group_past_its_max_size(
    kip848_target: tuple[StromCluster, uuid.UUID],
) -> None:
    broker, _ = kip848_target
    answers = []
    with wire.connect(port(broker)) as sock:
        for i in range(3 * MAX_SIZE):
            join = HeartbeatV1(
                group_id="crowded",
                member_id=f"member-{i}",
                member_epoch=i32(0),
                rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                subscribed_topic_names=(TOPIC,),
                topic_partitions=(),
            )
            answers.append(wire.call(sock, join, correlation_id=i + 1).error_code)
        described = wire.call(
            sock, DescribeV1(group_ids=("crowded",), include_authorized_operations=False), 99
        )
    assert answers[:MAX_SIZE] == [ErrorCode.none] * MAX_SIZE
    assert answers[MAX_SIZE:] == [ErrorCode.group_max_size_reached] * (2 * MAX_SIZE)
    assert len(described.groups[0].members) == MAX_SIZE
