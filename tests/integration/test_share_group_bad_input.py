"""Hostile ShareGroupHeartbeat and ShareGroupDescribe requests against a live broker: every
field with arbitrary values (empty, blank, huge, unknown topics, any epoch), truncated
frames and versions strom does not serve. Each gets a Kafka error code or a closed
connection, never UNKNOWN_SERVER_ERROR or a traceback, and the broker keeps serving: a
well-formed member still joins and is assigned afterwards.

The requests go to the `strom_broker` fixture's node through its test network.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import kafka_wire as wire
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.share_group_describe.v1.request import ShareGroupDescribeRequest as Describe
from kio.schema.share_group_heartbeat.v1.request import ShareGroupHeartbeatRequest as Heartbeat
from kio.static.primitive import i32
from node_files import port

from strom.protocol.codec import encode_request
from strom.testing import StromCluster

TOPIC = "tshare"
MAX_SIZE = 5
HEARTBEAT = 76
DESCRIBE = 77

pytestmark = pytest.mark.strom(config={"group.share.max.size": MAX_SIZE})

names = st.text(alphabet="ab-_.\u00e9\U0001f600 ", max_size=6)
group_ids = st.one_of(
    st.sampled_from(["s1", "s2"]),
    names,
    st.sampled_from(["", "   "]),
    st.text(alphabet="xyz", min_size=1000, max_size=5000),
)
member_ids = st.one_of(st.sampled_from(["m1", "m2", "m3"]), st.sampled_from(["", " "]), names)
epochs = st.one_of(
    st.integers(0, 3), st.sampled_from([-2, -1]), st.integers(-(2**31), 2**31 - 1)
).map(i32)
topic_names = st.one_of(
    st.just((TOPIC,)),
    st.none(),
    st.lists(st.one_of(st.just(TOPIC), names), max_size=4).map(tuple),
    st.just(tuple(f"nope-{i}" for i in range(5_000))),
)
racks = st.one_of(st.none(), st.sampled_from(["", " ", "r1"]), names)

heartbeats = st.builds(
    Heartbeat,
    group_id=group_ids,
    member_id=member_ids,
    member_epoch=epochs,
    rack_id=racks,
    subscribed_topic_names=topic_names,
)
describes = st.builds(
    Describe,
    group_ids=st.lists(group_ids, max_size=4).map(tuple),
    include_authorized_operations=st.booleans(),
)


@pytest.fixture
def share_target(strom_broker: StromCluster) -> StromCluster:
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(10)
    return strom_broker


def _still_serves(broker: StromCluster, group: str) -> None:
    """A well-formed member joins `group` and gets both partitions."""
    member = Heartbeat(
        group_id=group,
        member_id="good-member",
        member_epoch=i32(0),
        rack_id=None,
        subscribed_topic_names=(TOPIC,),
    )
    deadline = time.monotonic() + 20
    with wire.connect(port(broker)) as sock:
        response = wire.call(sock, member)
        while True:
            assert response.error_code == ErrorCode.none, response
            if response.assignment is not None and response.assignment.topic_partitions:
                return
            assert time.monotonic() < deadline, response
            time.sleep(0.2)
            again = Heartbeat(
                group_id=group,
                member_id="good-member",
                member_epoch=response.member_epoch,
                rack_id=None,
                subscribed_topic_names=None,
            )
            response = wire.call(sock, again)


def test_hostile_share_group_requests_get_error_codes(
    share_target: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="strom")
    known = {int(code) for code in ErrorCode} - {int(ErrorCode.unknown_server_error)}

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(requests=st.lists(st.one_of(heartbeats, describes), min_size=1, max_size=6))
    def hostile(requests: list[Any]) -> None:
        with wire.connect(port(share_target)) as sock:
            sock.settimeout(15)
            for correlation_id, request in enumerate(requests, start=1):
                assert set(wire.error_codes(wire.call(sock, request, correlation_id))) <= known
        log = caplog.text
        assert "Traceback" not in log and "bug while handling" not in log, log[-3000:]

    hostile()
    with wire.connect(port(share_target)) as sock:
        described = wire.call(
            sock, Describe(group_ids=("s1", "s2"), include_authorized_operations=False)
        )
    assert all(len(g.members) <= MAX_SIZE for g in described.groups)
    _still_serves(share_target, "after-hostile")


def _heartbeat_frame() -> bytes:
    body = Heartbeat(
        group_id="framed",
        member_id="m-framed",
        member_epoch=i32(0),
        rack_id=None,
        subscribed_topic_names=(TOPIC,),
    )
    return encode_request(HEARTBEAT, 1, 3, body)[4:]


@pytest.mark.parametrize("cut", [5, 12, 20, 30, -1])
def test_a_truncated_heartbeat_closes_the_connection(share_target: StromCluster, cut: int) -> None:
    with wire.connect(port(share_target)) as sock:
        sock.sendall(wire.frame(_heartbeat_frame()[:cut]))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _still_serves(share_target, f"after-cut-{cut}")


@pytest.mark.parametrize(("api_key", "version"), [(HEARTBEAT, 0), (HEARTBEAT, 9), (DESCRIBE, 0)])
def test_versions_not_served_close_the_connection(
    share_target: StromCluster, api_key: int, version: int
) -> None:
    """Kafka 4.0's early-access v0 is not served: as any version the broker does not speak."""
    with wire.connect(port(share_target)) as sock:
        sock.sendall(wire.frame(wire.header(api_key, version, 9) + b"\x00" + b"\x00" * 24))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _still_serves(share_target, f"after-v{version}-{api_key}")
