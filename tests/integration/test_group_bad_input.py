"""Group requests with arbitrary field values get an error code, never a broken broker.

Each example is a well-formed request (so it reaches the coordinator, unlike random
bytes) with hostile values: empty or odd group ids, unknown members, wrong generations,
huge or negative timeouts, garbage protocol metadata and assignments, offsets for
partitions that do not exist, oversized metadata.

The requests go to the `strom_broker` fixture's node through its test network, which
passes well-formed frames on as they are.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

import kafka_wire as wire
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.delete_groups.v2.request import DeleteGroupsRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.join_group.v9.request import JoinGroupRequest, JoinGroupRequestProtocol
from kio.schema.leave_group.v5.request import LeaveGroupRequest, MemberIdentity
from kio.schema.offset_commit.v9.request import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from kio.schema.offset_delete.v0.request import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from kio.schema.offset_fetch.v9.request import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
)
from kio.schema.sync_group.v5.request import SyncGroupRequest, SyncGroupRequestAssignment
from kio.static.primitive import i32, i32Timedelta, i64
from node_files import port

from strom.testing import StromCluster

TOPIC = "t"
GOOD_GROUP = "good-group"

# strom's default, not the test clusters' 0: a join to an empty group then waits out
# the initial delay (up to its rebalance timeout), so the hostile requests also meet
# groups in that state.
pytestmark = pytest.mark.strom(config={"group.initial.rebalance.delay.ms": 3000})

names = st.text(alphabet="ab-_.\u00e9\U0001f600 ", max_size=8)
i32s = st.integers(-(2**31), 2**31 - 1).map(i32)
blobs = st.binary(max_size=64)
timeouts = st.integers(-(2**31), 2**31 - 1).map(
    lambda n: i32Timedelta.parse(datetime.timedelta(milliseconds=n))
)


@pytest.fixture
def group_broker(strom_broker: StromCluster) -> StromCluster:
    """The fixture's broker with the topic TOPIC, and the group GOOD_GROUP with an offset
    committed."""
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
        future.result(10)
    consumer = Consumer(
        {"bootstrap.servers": strom_broker.bootstrap_servers, "group.id": GOOD_GROUP}
    )
    consumer.commit(offsets=[TopicPartition(TOPIC, 0, 0)], asynchronous=False)
    consumer.close()
    return strom_broker


def joins() -> st.SearchStrategy[Any]:
    return st.builds(
        JoinGroupRequest,
        group_id=names,
        session_timeout=timeouts,
        rebalance_timeout=st.just(i32Timedelta.parse(datetime.timedelta(milliseconds=100))),
        member_id=names,
        group_instance_id=st.none(),
        protocol_type=names,
        protocols=st.lists(
            st.builds(JoinGroupRequestProtocol, name=names, metadata=blobs), max_size=3
        ).map(tuple),
        reason=st.none() | names,
    )


def syncs() -> st.SearchStrategy[Any]:
    return st.builds(
        SyncGroupRequest,
        group_id=names,
        generation_id=i32s,
        member_id=names,
        group_instance_id=st.none() | names,
        protocol_type=st.none() | names,
        protocol_name=st.none() | names,
        assignments=st.lists(
            st.builds(SyncGroupRequestAssignment, member_id=names, assignment=blobs), max_size=3
        ).map(tuple),
    )


def others() -> st.SearchStrategy[Any]:
    partitions = st.lists(
        st.builds(
            OffsetCommitRequestPartition,
            partition_index=st.integers(-2, 3).map(i32),
            committed_offset=st.integers(-(2**63), 2**63 - 1).map(i64),
            committed_leader_epoch=i32s,
            committed_metadata=st.none() | st.text(max_size=5000),
        ),
        max_size=3,
    ).map(tuple)
    return st.one_of(
        st.builds(
            HeartbeatRequest,
            group_id=names,
            generation_id=i32s,
            member_id=names,
            group_instance_id=st.none() | names,
        ),
        st.builds(
            LeaveGroupRequest,
            group_id=names,
            members=st.lists(
                st.builds(MemberIdentity, member_id=names, group_instance_id=st.none() | names),
                max_size=3,
            ).map(tuple),
        ),
        st.builds(
            OffsetCommitRequest,
            group_id=st.one_of(names, st.just(GOOD_GROUP)),
            generation_id_or_member_epoch=i32s,
            member_id=names,
            group_instance_id=st.none() | names,
            topics=st.lists(
                st.builds(
                    OffsetCommitRequestTopic,
                    name=st.one_of(st.just(TOPIC), names),
                    partitions=partitions,
                ),
                max_size=2,
            ).map(tuple),
        ),
        st.builds(
            OffsetFetchRequest,
            groups=st.lists(
                st.builds(
                    OffsetFetchRequestGroup,
                    group_id=st.one_of(names, st.just(GOOD_GROUP)),
                    topics=st.none()
                    | st.lists(
                        st.builds(
                            OffsetFetchRequestTopics,
                            name=names,
                            partition_indexes=st.lists(i32s, max_size=3).map(tuple),
                        ),
                        max_size=2,
                    ).map(tuple),
                ),
                max_size=3,
            ).map(tuple),
            require_stable=st.booleans(),
        ),
        st.builds(
            DescribeGroupsRequest,
            groups=st.lists(names, max_size=3).map(tuple),
            include_authorized_operations=st.booleans(),
        ),
        st.builds(DeleteGroupsRequest, groups_names=st.lists(names, max_size=3).map(tuple)),
        st.builds(
            OffsetDeleteRequest,
            group_id=names,
            topics=st.lists(
                st.builds(
                    OffsetDeleteRequestTopic,
                    name=names,
                    partitions=st.lists(
                        st.builds(OffsetDeleteRequestPartition, partition_index=i32s),
                        max_size=2,
                    ).map(tuple),
                ),
                max_size=2,
            ).map(tuple),
        ),
    )


@settings(
    max_examples=150,
    deadline=None,
    # Every example goes to the same broker, and its log is checked across all of them.
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(request=st.one_of(joins(), syncs(), others()))
def test_hostile_group_requests_get_error_codes(
    group_broker: StromCluster, caplog: pytest.LogCaptureFixture, request: Any
) -> None:
    caplog.set_level(logging.INFO, logger="strom")  # what `strom serve` logs
    with wire.connect(port(group_broker)) as sock:
        sock.settimeout(10)
        response = wire.call(sock, request)
    known = {int(code) for code in ErrorCode}
    assert set(wire.error_codes(response)) <= known
    log = caplog.text
    assert "Traceback" not in log and "bug while handling" not in log, log[-3000:]
    # A real client is still served by the coordinator.
    consumer = Consumer(
        {"bootstrap.servers": group_broker.bootstrap_servers, "group.id": GOOD_GROUP}
    )
    try:
        committed = consumer.committed([TopicPartition(TOPIC, 0)], timeout=10)
    finally:
        consumer.close()
    assert committed[0].error is None


def test_oversized_commit_metadata_is_refused_and_nothing_is_written(
    group_broker: StromCluster,
) -> None:
    request = OffsetCommitRequest(
        group_id="meta",
        generation_id_or_member_epoch=i32(-1),
        member_id="",
        group_instance_id=None,
        topics=(
            OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=(
                    OffsetCommitRequestPartition(
                        partition_index=i32(0),
                        committed_offset=i64(5),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="x" * 5000,
                    ),
                    OffsetCommitRequestPartition(
                        partition_index=i32(7),
                        committed_offset=i64(5),
                        committed_leader_epoch=i32(-1),
                        committed_metadata="",
                    ),
                ),
            ),
        ),
    )
    with wire.connect(port(group_broker)) as sock:
        response = wire.call(sock, request)
    codes = [p.error_code for p in response.topics[0].partitions]
    assert codes == [ErrorCode.offset_metadata_too_large, ErrorCode.unknown_topic_or_partition]


def test_garbage_in_consumer_offsets_is_refused_to_producers(group_broker: StromCluster) -> None:
    response = wire.produce(port(group_broker), "__consumer_offsets", 0, b"\x00" * 80)
    assert response.error_code == ErrorCode.invalid_topic_exception
