"""The share-state RPCs with hostile values get error codes, never a broken broker.

InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState (v0, v1),
DeleteShareGroupState and ReadShareGroupStateSummary (v0, v1), well-formed with
arbitrary field values: empty and odd group ids, zero and random topic ids, negative and
huge partitions and epochs, start offsets of every kind, state batches backwards, over
2^62 offsets, with unknown states and negative counts, many of them. Then truncated
frames and versions strom does not speak. Every answer is a Kafka error code (never
UNKNOWN_SERVER_ERROR) or a closed connection, nothing is logged as a bug, and the share
coordinator still keeps a real share-partition's state afterwards.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import kafka_wire as wire
import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.delete_share_group_state.v0 import request as delete_v0
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v6.request import FindCoordinatorRequest
from kio.schema.initialize_share_group_state.v0 import request as init_v0
from kio.schema.read_share_group_state.v0 import request as read_v0
from kio.schema.read_share_group_state_summary.v0 import request as summary_v0
from kio.schema.read_share_group_state_summary.v1 import request as summary_v1
from kio.schema.write_share_group_state.v0 import request as write_v0
from kio.schema.write_share_group_state.v1 import request as write_v1
from kio.static.primitive import i8, i16, i32, i64
from node_files import port

from strom.protocol.codec import encode_request
from strom.share.placement import share_coordinator_key
from strom.testing import StromCluster

TOPIC = "shared-work"
INITIALIZE, READ, WRITE = 83, 84, 85

pytestmark = pytest.mark.strom(
    config={
        "share.coordinator.state.topic.num.partitions": 3,
        "share.coordinator.snapshot.update.records.per.snapshot": 3,
    }
)

groups = st.one_of(
    st.sampled_from(["g1", "g2"]),
    st.sampled_from(["", " ", "a:b:c"]),
    st.text(alphabet="ab:-\u00e9\U0001f600", max_size=8),
    st.text(alphabet="xyz", min_size=1000, max_size=3000),
)
int32s = st.one_of(st.integers(-2, 3), st.integers(-(2**31), 2**31 - 1)).map(i32)
int64s = st.one_of(st.integers(-2, 50), st.integers(-(2**63), 2**63 - 1)).map(i64)


def topic_ids(real: uuid.UUID) -> st.SearchStrategy[uuid.UUID | None]:
    return st.one_of(st.just(real), st.uuids(), st.just(uuid.UUID(int=0)), st.none())


def batches(kind: Any) -> st.SearchStrategy[tuple[Any, ...]]:
    one = st.builds(
        kind,
        first_offset=int64s,
        last_offset=int64s,
        delivery_state=st.one_of(st.sampled_from([0, 2, 3, 4]), st.integers(-128, 127)).map(i8),
        delivery_count=st.one_of(st.integers(0, 5), st.integers(-(2**15), 2**15 - 1)).map(i16),
    )
    huge = st.just(
        (
            kind(
                first_offset=i64(0),
                last_offset=i64(2**62),
                delivery_state=i8(0),
                delivery_count=i16(1),
            ),
        )
    )
    return st.one_of(
        st.lists(one, max_size=4).map(tuple),
        huge,
        st.lists(one, min_size=200, max_size=400).map(tuple),
    )


def requests(real: uuid.UUID) -> st.SearchStrategy[Any]:
    def topics(data: Any, partition: Any) -> st.SearchStrategy[tuple[Any, ...]]:
        entry = st.builds(
            data, topic_id=topic_ids(real), partitions=st.lists(partition, max_size=3).map(tuple)
        )
        return st.lists(entry, max_size=3).map(tuple)

    def write(module: Any, **more: Any) -> st.SearchStrategy[Any]:
        partition = st.builds(
            module.PartitionData,
            partition=int32s,
            state_epoch=int32s,
            leader_epoch=int32s,
            start_offset=int64s,
            state_batches=batches(module.StateBatch),
            **more,
        )
        return st.builds(
            module.WriteShareGroupStateRequest,
            group_id=groups,
            topics=topics(module.WriteStateData, partition),
        )

    init = st.builds(
        init_v0.InitializeShareGroupStateRequest,
        group_id=groups,
        topics=topics(
            init_v0.InitializeStateData,
            st.builds(
                init_v0.PartitionData, partition=int32s, state_epoch=int32s, start_offset=int64s
            ),
        ),
    )
    read = st.builds(
        read_v0.ReadShareGroupStateRequest,
        group_id=groups,
        topics=topics(
            read_v0.ReadStateData,
            st.builds(read_v0.PartitionData, partition=int32s, leader_epoch=int32s),
        ),
    )
    delete = st.builds(
        delete_v0.DeleteShareGroupStateRequest,
        group_id=groups,
        topics=topics(
            delete_v0.DeleteStateData, st.builds(delete_v0.PartitionData, partition=int32s)
        ),
    )
    summaries = [
        st.builds(
            m.ReadShareGroupStateSummaryRequest,
            group_id=groups,
            topics=topics(
                m.ReadStateSummaryData,
                st.builds(m.PartitionData, partition=int32s, leader_epoch=int32s),
            ),
        )
        for m in (summary_v0, summary_v1)
    ]
    return st.one_of(
        init,
        read,
        delete,
        write(write_v0),
        write(write_v1, delivery_complete_count=int32s),
        *summaries,
    )


@pytest.fixture
def share_target(strom_broker: StromCluster) -> tuple[StromCluster, uuid.UUID]:
    admin = AdminClient({"bootstrap.servers": strom_broker.bootstrap_servers})
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(10)
    raw = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(10).topic_id
    msb = raw.get_most_significant_bits() & (2**64 - 1)
    lsb = raw.get_least_significant_bits() & (2**64 - 1)
    return strom_broker, uuid.UUID(int=(msb << 64) | lsb)


def _still_keeps_state(broker: StromCluster, topic_id: uuid.UUID, group: str) -> None:
    """A share-partition initialized, written and read back: the coordinator works."""
    partition = init_v0.PartitionData(partition=i32(1), state_epoch=i32(0), start_offset=i64(0))
    init = init_v0.InitializeShareGroupStateRequest(
        group_id=group,
        topics=(init_v0.InitializeStateData(topic_id=topic_id, partitions=(partition,)),),
    )
    batch = write_v1.StateBatch(
        first_offset=i64(3), last_offset=i64(7), delivery_state=i8(2), delivery_count=i16(1)
    )
    write = write_v1.WriteShareGroupStateRequest(
        group_id=group,
        topics=(
            write_v1.WriteStateData(
                topic_id=topic_id,
                partitions=(
                    write_v1.PartitionData(
                        partition=i32(1),
                        state_epoch=i32(0),
                        leader_epoch=i32(0),
                        start_offset=i64(-1),
                        state_batches=(batch,),
                    ),
                ),
            ),
        ),
    )
    read = read_v0.ReadShareGroupStateRequest(
        group_id=group,
        topics=(
            read_v0.ReadStateData(
                topic_id=topic_id,
                partitions=(read_v0.PartitionData(partition=i32(1), leader_epoch=i32(0)),),
            ),
        ),
    )
    with wire.connect(port(broker)) as sock:
        sock.settimeout(30)
        # The first one finds no __share_group_state (only FindCoordinator creates it, as
        # in Kafka) or its partition still loading: retried as a broker would.
        find = FindCoordinatorRequest(
            key_type=i8(2), coordinator_keys=(share_coordinator_key(group, topic_id, 1),)
        )
        wire.call(sock, find, 1)
        for attempt in range(100):
            codes = wire.error_codes(wire.call(sock, init, 10 + attempt))
            if codes != [int(ErrorCode.coordinator_not_available)] and codes != [
                int(ErrorCode.coordinator_load_in_progress)
            ]:
                break
            time.sleep(0.1)
        assert codes == [0]
        assert wire.error_codes(wire.call(sock, write, 2)) == [0]
        answer = wire.call(sock, read, 3).results[0].partitions[0]
    assert answer.error_code == ErrorCode.none
    assert [(b.first_offset, b.last_offset, b.delivery_state) for b in answer.state_batches] == [
        (3, 7, 2)
    ]


def test_hostile_share_state_requests_get_error_codes(
    share_target: tuple[StromCluster, uuid.UUID], caplog: pytest.LogCaptureFixture
) -> None:
    broker, topic_id = share_target
    caplog.set_level(logging.INFO, logger="strom")
    _still_keeps_state(broker, topic_id, "before")  # creates __share_group_state
    known = {int(code) for code in ErrorCode} - {int(ErrorCode.unknown_server_error)}

    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(sent=st.lists(requests(topic_id), min_size=1, max_size=5))
    def hostile(sent: list[Any]) -> None:
        with wire.connect(port(broker)) as sock:
            sock.settimeout(30)
            for correlation_id, request in enumerate(sent, start=1):
                response = wire.call(sock, request, correlation_id)
                assert set(wire.error_codes(response)) <= known
        log = caplog.text
        assert "Traceback" not in log and "bug while handling" not in log, log[-3000:]

    hostile()
    _still_keeps_state(broker, topic_id, "after")


def _frame(api_key: int, version: int) -> bytes:
    body = read_v0.ReadShareGroupStateRequest(
        group_id="framed",
        topics=(
            read_v0.ReadStateData(
                topic_id=uuid.uuid4(),
                partitions=(read_v0.PartitionData(partition=i32(0), leader_epoch=i32(0)),),
            ),
        ),
    )
    return encode_request(api_key, version, 7, body)


@pytest.mark.parametrize("cut", [5, 12, 20, 30, -1])
def test_a_truncated_share_state_request_closes_the_connection(
    share_target: tuple[StromCluster, uuid.UUID], cut: int
) -> None:
    broker, topic_id = share_target
    frame = _frame(READ, 0)[4:]
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(frame[:cut]))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _still_keeps_state(broker, topic_id, f"cut-{cut}")


@pytest.mark.parametrize(("api_key", "version"), [(INITIALIZE, 1), (READ, 1), (WRITE, 2)])
def test_share_state_versions_strom_does_not_speak_close_the_connection(
    share_target: tuple[StromCluster, uuid.UUID], api_key: int, version: int
) -> None:
    broker, topic_id = share_target
    header = wire.header(api_key, version, 9) + b"\x00"
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(header + b"\x00" * 24))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _still_keeps_state(broker, topic_id, f"v{api_key}-{version}")
