"""ShareFetch and ShareAcknowledge with hostile values get error codes, never a broken
broker: arbitrary group and member ids, session epochs, waits and limits, unknown and
garbage topic ids, acknowledgement batches of every shape and type; then truncated
frames and versions strom does not speak. Every answer is a Kafka error code (never
UNKNOWN_SERVER_ERROR, nothing logged as a bug) or a closed connection, and the broker
still serves a normal consumer afterwards."""

from __future__ import annotations

import datetime
import logging
import uuid
from typing import Any

import kafka_wire as wire
import pytest
from confluent_kafka import Consumer, Producer, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.share_acknowledge.v1 import request as ack_v1
from kio.schema.share_acknowledge.v2 import request as ack_v2
from kio.schema.share_fetch.v1 import request as fetch_v1
from kio.schema.share_fetch.v2 import request as fetch_v2
from kio.static.primitive import i8, i32, i32Timedelta, i64
from node_files import port

from strom.protocol.codec import encode_request
from strom.testing import StromCluster

TOPIC = "share-hostile"
SHARE_FETCH, SHARE_ACKNOWLEDGE = 78, 79

names = st.one_of(
    st.sampled_from(["g1", "g2", "m1", "m2"]),
    st.text(alphabet="ab-_.\u00e9 ", max_size=6),
    st.text(alphabet="xyz", min_size=1000, max_size=3000),
)
epochs = st.one_of(st.integers(-2, 3), st.integers(-(2**31), 2**31 - 1)).map(i32)
int32s = st.one_of(st.sampled_from([-1, 0, 1, 500]), st.integers(-(2**31), 2**31 - 1)).map(i32)
waits = st.sampled_from([0, 50, -1]).map(
    lambda n: i32Timedelta.parse(datetime.timedelta(milliseconds=n))
)
offsets = st.one_of(st.integers(-2, 12), st.integers(-(2**63), 2**63 - 1)).map(i64)
types = st.lists(st.integers(-128, 127).map(i8), max_size=4)


def _batches(kind: Any) -> st.SearchStrategy[tuple[Any, ...]]:
    batch = st.builds(kind, first_offset=offsets, last_offset=offsets, acknowledge_types=types)
    return st.lists(batch, max_size=3).map(tuple)


def fetches(topic_ids: list[uuid.UUID]) -> st.SearchStrategy[Any]:
    ids = st.one_of(st.sampled_from(topic_ids), st.uuids())
    requests = []
    for module in (fetch_v1, fetch_v2):
        partition = st.builds(
            module.FetchPartition,
            partition_index=st.sampled_from([0, -1, 7]).map(i32),
            acknowledgement_batches=_batches(module.AcknowledgementBatch),
        )
        topic = st.builds(
            module.FetchTopic, topic_id=ids, partitions=st.lists(partition, max_size=2).map(tuple)
        )
        forgotten = st.builds(
            module.ForgottenTopic,
            topic_id=ids,
            partitions=st.lists(st.sampled_from([0, 3]).map(i32), max_size=2).map(tuple),
        )
        extra: dict[str, Any] = {}
        if module is fetch_v2:
            extra = {
                "share_acquire_mode": st.sampled_from([0, 1, 9]).map(i8),
                "is_renew_ack": st.booleans(),
            }
        requests.append(
            st.builds(
                module.ShareFetchRequest,
                group_id=st.one_of(st.none(), names),
                member_id=st.one_of(st.none(), names),
                share_session_epoch=epochs,
                max_wait=waits,
                min_bytes=int32s,
                max_bytes=int32s,
                max_records=int32s,
                batch_size=int32s,
                topics=st.lists(topic, max_size=2).map(tuple),
                forgotten_topics_data=st.lists(forgotten, max_size=1).map(tuple),
                **extra,
            )
        )
    return st.one_of(*requests)


def acknowledges(topic_ids: list[uuid.UUID]) -> st.SearchStrategy[Any]:
    ids = st.one_of(st.sampled_from(topic_ids), st.uuids())
    requests = []
    for module in (ack_v1, ack_v2):
        partition = st.builds(
            module.AcknowledgePartition,
            partition_index=st.sampled_from([0, -1, 7]).map(i32),
            acknowledgement_batches=_batches(module.AcknowledgementBatch),
        )
        topic = st.builds(
            module.AcknowledgeTopic,
            topic_id=ids,
            partitions=st.lists(partition, max_size=2).map(tuple),
        )
        extra: dict[str, Any] = {"is_renew_ack": st.booleans()} if module is ack_v2 else {}
        requests.append(
            st.builds(
                module.ShareAcknowledgeRequest,
                group_id=st.one_of(st.none(), names),
                member_id=st.one_of(st.none(), names),
                share_session_epoch=epochs,
                topics=st.lists(topic, max_size=2).map(tuple),
                **extra,
            )
        )
    return st.one_of(*requests)


def error_codes(response: Any) -> list[int]:
    codes = [int(response.error_code)]
    for topic in response.responses:
        for partition in topic.partitions:
            codes.append(int(partition.error_code))
            codes.append(int(getattr(partition, "acknowledge_error_code", 0)))
    return codes


@pytest.fixture
def target(strom_broker: StromCluster) -> tuple[StromCluster, uuid.UUID]:
    bootstrap = strom_broker.bootstrap_servers
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        producer.produce(TOPIC, f"v{i}".encode())
    assert producer.flush(30) == 0
    found = admin.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(10).topic_id
    msb = found.get_most_significant_bits() & (2**64 - 1)
    lsb = found.get_least_significant_bits() & (2**64 - 1)
    return strom_broker, uuid.UUID(int=(msb << 64) | lsb)


def _consumes(bootstrap: str) -> None:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "normal", "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([TOPIC])
        for _ in range(300):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                return
        raise AssertionError("a consumer read nothing after the hostile requests")
    finally:
        consumer.close()


def test_hostile_share_requests_get_error_codes(
    target: tuple[StromCluster, uuid.UUID], caplog: pytest.LogCaptureFixture
) -> None:
    broker, topic_id = target
    caplog.set_level(logging.INFO, logger="strom")
    known = {int(code) for code in ErrorCode} - {int(ErrorCode.unknown_server_error)}

    @settings(
        max_examples=150,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        requests=st.lists(
            st.one_of(fetches([topic_id]), acknowledges([topic_id])), min_size=1, max_size=5
        )
    )
    def hostile(requests: list[Any]) -> None:
        with wire.connect(port(broker)) as sock:
            sock.settimeout(15)
            for correlation_id, request in enumerate(requests, start=1):
                response = wire.call(sock, request, correlation_id)
                assert set(error_codes(response)) <= known, response
        log = caplog.text
        assert "Traceback" not in log and "bug while handling" not in log, log[-3000:]

    hostile()
    _consumes(broker.bootstrap_servers)


def _fetch_bytes(version: int) -> bytes:
    module = fetch_v1 if version == 1 else fetch_v2
    body = module.ShareFetchRequest(
        group_id="framed",
        member_id="m",
        share_session_epoch=i32(0),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
        min_bytes=i32(1),
        max_bytes=i32(1000),
        max_records=i32(10),
        batch_size=i32(10),
        topics=(),
        forgotten_topics_data=(),
    )
    return encode_request(SHARE_FETCH, version, 5, body)


@pytest.mark.parametrize("cut", [5, 12, 20, 30, -1])
def test_truncated_share_fetch_closes_the_connection(
    target: tuple[StromCluster, uuid.UUID], cut: int
) -> None:
    broker, _ = target
    frame = _fetch_bytes(1)[4:]
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(frame[:cut]))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _consumes(broker.bootstrap_servers)


@pytest.mark.parametrize(
    ("api_key", "version"), [(SHARE_FETCH, 0), (SHARE_FETCH, 3), (SHARE_ACKNOWLEDGE, 9)]
)
def test_unsupported_share_versions_close_the_connection(
    target: tuple[StromCluster, uuid.UUID], api_key: int, version: int
) -> None:
    broker, _ = target
    header = wire.header(api_key, version, 9) + b"\x00"
    with wire.connect(port(broker)) as sock:
        sock.sendall(wire.frame(header + b"\x00" * 24))
        assert wire.wait_closed(sock), "the broker kept the connection open"
    _consumes(broker.bootstrap_servers)
