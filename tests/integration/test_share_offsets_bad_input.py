"""Hostile DescribeShareGroupOffsets (v0-1), AlterShareGroupOffsets and
DeleteShareGroupOffsets (v0) against a live broker: empty, blank and huge group ids,
groups with a member, of another type or unknown, unknown and random topic names,
negative partitions and offsets, duplicate entries; then truncated frames and versions
strom does not serve. Every answer is a Kafka error code (never UNKNOWN_SERVER_ERROR,
nothing logged as a bug) or a closed connection, and the broker still serves: a describe
of a share group answers with its offsets afterwards.

The requests go to the `strom_broker` fixture's node through its test network.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kafka_wire as wire
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.alter_share_group_offsets.v0 import request as alter_v0
from kio.schema.delete_share_group_offsets.v0 import request as delete_v0
from kio.schema.describe_share_group_offsets.v0 import request as describe_v0
from kio.schema.describe_share_group_offsets.v1 import request as describe_v1
from kio.schema.errors import ErrorCode
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest as Heartbeat
from kio.static.primitive import i32, i64
from node_files import port

from strom.protocol.codec import encode_request
from strom.testing import StromCluster

TOPIC = "share-offsets-hostile"
BUSY = "busy"
"""A share group with a member: alter and delete are refused while it has one."""
CLASSIC = "classic"
"""A consumer group: the share-group offset APIs must not treat it as a share group."""
DESCRIBE, ALTER, DELETE = 90, 91, 92

names = st.text(alphabet="ab-_.\u00e9\U0001f600 ", max_size=6)
group_ids = st.one_of(
    st.sampled_from([BUSY, CLASSIC, "s1", "s2"]),
    names,
    st.sampled_from(["", "   "]),
    st.text(alphabet="xyz", min_size=1000, max_size=5000),
)
topic_names = st.one_of(
    st.sampled_from([TOPIC, TOPIC, "nope", "", " "]),
    names,
    st.text(alphabet="xyz", min_size=300, max_size=1000),
)
partitions = st.one_of(st.sampled_from([0, 0, 1, -1, 7]), st.integers(-(2**31), 2**31 - 1)).map(i32)
start_offsets = st.one_of(
    st.sampled_from([0, 3, -1, -2, 10_000]), st.integers(-(2**63), 2**63 - 1)
).map(i64)


def _describes() -> st.SearchStrategy[Any]:
    requests = []
    for module in (describe_v0, describe_v1):
        topic = st.builds(
            module.DescribeShareGroupOffsetsRequestTopic,
            topic_name=topic_names,
            partitions=st.lists(partitions, max_size=4).map(tuple),
        )
        group = st.builds(
            module.DescribeShareGroupOffsetsRequestGroup,
            group_id=group_ids,
            topics=st.one_of(st.none(), st.lists(topic, max_size=3).map(tuple)),
        )
        requests.append(
            st.builds(
                module.DescribeShareGroupOffsetsRequest,
                groups=st.lists(group, max_size=4).map(tuple),
            )
        )
    return st.one_of(*requests)


alter_partition = st.builds(
    alter_v0.AlterShareGroupOffsetsRequestPartition,
    partition_index=partitions,
    start_offset=start_offsets,
)
alters = st.builds(
    alter_v0.AlterShareGroupOffsetsRequest,
    group_id=group_ids,
    topics=st.lists(
        st.builds(
            alter_v0.AlterShareGroupOffsetsRequestTopic,
            topic_name=topic_names,
            partitions=st.lists(alter_partition, max_size=4).map(tuple),
        ),
        max_size=3,
    ).map(tuple),
)
deletes = st.builds(
    delete_v0.DeleteShareGroupOffsetsRequest,
    group_id=group_ids,
    topics=st.lists(
        st.builds(delete_v0.DeleteShareGroupOffsetsRequestTopic, topic_name=topic_names),
        max_size=4,
    ).map(tuple),
)


def _join(sock: Any, group: str) -> None:
    """A member joins `group` by heartbeat and is assigned the topic's partitions."""
    deadline = time.monotonic() + 20
    response = wire.call(
        sock,
        Heartbeat(
            group_id=group,
            member_id="hostile-member",
            member_epoch=i32(0),
            rack_id=None,
            subscribed_topic_names=(TOPIC,),
        ),
    )
    while not (response.assignment is not None and response.assignment.topic_partitions):
        assert response.error_code == ErrorCode.none, response
        assert time.monotonic() < deadline, response
        time.sleep(0.2)
        response = wire.call(
            sock,
            Heartbeat(
                group_id=group,
                member_id="hostile-member",
                member_epoch=response.member_epoch,
                rack_id=None,
                subscribed_topic_names=None,
            ),
        )


@pytest.fixture
def offsets_target(strom_broker: StromCluster) -> StromCluster:
    bootstrap = strom_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(6):
        producer.produce(TOPIC, f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": CLASSIC, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([TOPIC])
        for _ in range(300):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                break
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return strom_broker


def _still_serves(broker: StromCluster) -> None:
    """A fresh share group describes, alters, describes again and deletes its offsets."""
    group = f"after-{time.monotonic_ns()}"
    request = describe_v1.DescribeShareGroupOffsetsRequest(
        groups=(describe_v1.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None),)
    )
    with wire.connect(port(broker)) as sock:
        described = wire.call(sock, request)
        assert described.groups[0].error_code == ErrorCode.none, described
        altered = wire.call(
            sock,
            alter_v0.AlterShareGroupOffsetsRequest(
                group_id=group,
                topics=(
                    alter_v0.AlterShareGroupOffsetsRequestTopic(
                        topic_name=TOPIC,
                        partitions=(
                            alter_v0.AlterShareGroupOffsetsRequestPartition(
                                partition_index=i32(0), start_offset=i64(1)
                            ),
                        ),
                    ),
                ),
            ),
        )
        assert set(wire.error_codes(altered)) == {0}, altered
        described = wire.call(sock, request, 2)
        found = [
            int(p.start_offset)
            for t in described.groups[0].topics
            for p in t.partitions
            if t.topic_name == TOPIC and p.partition_index == 0
        ]
        assert found == [1], described


def test_hostile_share_offset_requests_get_error_codes(
    offsets_target: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="strom")
    known = {int(code) for code in ErrorCode} - {int(ErrorCode.unknown_server_error)}
    seen: set[int] = set()
    with wire.connect(port(offsets_target)) as member:
        _join(member, BUSY)

        @settings(
            max_examples=200,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(requests=st.lists(st.one_of(_describes(), alters, deletes), min_size=1, max_size=6))
        def hostile(requests: list[Any]) -> None:
            with wire.connect(port(offsets_target)) as sock:
                sock.settimeout(15)
                for correlation_id, request in enumerate(requests, start=1):
                    response = wire.call(sock, request, correlation_id)
                    codes = set(wire.error_codes(response))
                    assert codes <= known, response
                    seen.update(codes)
            log = caplog.text
            assert "Traceback" not in log and "bug while handling" not in log, log[-3000:]

        hostile()
    reached = (
        ErrorCode.invalid_group_id,
        ErrorCode.non_empty_group,
        ErrorCode.unknown_topic_or_partition,
    )
    assert {int(code) for code in reached} <= seen, seen
    _still_serves(offsets_target)


def _frame(api_key: int) -> bytes:
    body: Any
    version = 0
    if api_key == DESCRIBE:
        version = 1
        body = describe_v1.DescribeShareGroupOffsetsRequest(
            groups=(
                describe_v1.DescribeShareGroupOffsetsRequestGroup(
                    group_id="framed",
                    topics=(
                        describe_v1.DescribeShareGroupOffsetsRequestTopic(
                            topic_name=TOPIC, partitions=(i32(0),)
                        ),
                    ),
                ),
            )
        )
    elif api_key == ALTER:
        body = alter_v0.AlterShareGroupOffsetsRequest(
            group_id="framed",
            topics=(
                alter_v0.AlterShareGroupOffsetsRequestTopic(
                    topic_name=TOPIC,
                    partitions=(
                        alter_v0.AlterShareGroupOffsetsRequestPartition(
                            partition_index=i32(0), start_offset=i64(0)
                        ),
                    ),
                ),
            ),
        )
    else:
        body = delete_v0.DeleteShareGroupOffsetsRequest(
            group_id="framed",
            topics=(delete_v0.DeleteShareGroupOffsetsRequestTopic(topic_name=TOPIC),),
        )
    return encode_request(api_key, version, 5, body)[4:]


@pytest.mark.parametrize("api_key", [DESCRIBE, ALTER, DELETE])
@pytest.mark.parametrize("cut", [5, 12, 20, -1])
def test_a_truncated_share_offsets_request_closes_the_connection(
    offsets_target: StromCluster, api_key: int, cut: int
) -> None:
    with wire.connect(port(offsets_target)) as sock:
        sock.sendall(wire.frame(_frame(api_key)[:cut]))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _still_serves(offsets_target)


@pytest.mark.parametrize(
    ("api_key", "version"), [(DESCRIBE, 2), (ALTER, 1), (DELETE, 1), (DELETE, -1)]
)
def test_share_offsets_versions_not_served_close_the_connection(
    offsets_target: StromCluster, api_key: int, version: int
) -> None:
    with wire.connect(port(offsets_target)) as sock:
        sock.sendall(wire.frame(wire.header(api_key, version, 9) + b"\x00" + b"\x00" * 24))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _still_serves(offsets_target)
