"""strom.testing.error_responses: for every API and version strom serves, the error
response is the right kio class, encodes, decodes back to itself and carries the error in
every error code; and the per-API shapes follow Kafka's getErrorResponse."""

from __future__ import annotations

import dataclasses
import typing
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records

from strom.protocol.apis import SERVED_APIS, SUPPORTED_APIS, ApiKey
from strom.protocol.codec import (
    Request,
    RequestError,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_class,
    response_class,
)
from strom.testing.error_responses import error_response
from strom.testing.neutral import fill

# kio registers Hypothesis strategies for its primitives but not for record sets; any
# bytes (or null) will do, the codec does not parse them.
st.register_type_strategy(Records, st.none() | st.binary(max_size=16))

NOT_LEADER = ErrorCode.not_leader_or_follower
VERSIONS = [
    pytest.param(api, version, id=f"{api.name}-v{version}")
    for api, served in SERVED_APIS.items()
    for version in range(served.min_version, served.max_version + 1)
]


def _request(
    api: ApiKey, version: int, data: Mapping[str, Any], correlation_id: int = 7
) -> Request:
    """A decoded request: `data` completed with neutral values, encoded, decoded."""
    body = fill(request_class(api, version), data, ErrorCode.none)
    return _roundtrip_request(api, version, body, correlation_id)


def _roundtrip_request(api: ApiKey, version: int, body: Any, correlation_id: int) -> Request:
    """The request as the test network sees it. A body that strom refuses to decode
    (kio generates durations no decoder reads back) never reaches error_response: the
    network passes it to the broker, which closes the connection."""
    frame = encode_request(api, version, correlation_id, body)
    try:
        return decode_request(frame[4:])
    except RequestError:
        assume(False)
        raise


def _error_codes(entity: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """(path, value) of every error_code field in a kio entity, recursively."""
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        path = f"{where}.{field.name}"
        if field.metadata.get("kafka_type") == "error_code":
            yield path, value
        elif dataclasses.is_dataclass(value):
            yield from _error_codes(value, path)
        elif isinstance(value, tuple):
            for index, item in enumerate(value):
                if dataclasses.is_dataclass(item):
                    yield from _error_codes(item, f"{path}[{index}]")


def _check(request: Request, error: ErrorCode) -> Any:
    """The error response, checked: class, encoding, round trip, error codes."""
    response = error_response(request, error)
    assert type(response) is response_class(request.api_key, request.api_version)
    frame = encode_response(request.correlation_id, response)
    correlation_id, decoded = decode_response(request.api_key, request.api_version, frame[4:])
    assert correlation_id == request.correlation_id
    assert decoded == response
    # Every error code carries the error, at every level: the top-level error where the
    # version has one, each echoed topic, partition, group, key, resource or member. (Kafka
    # leaves Metadata v13's top-level code 0 and sends only the top-level code for Fetch
    # v13+, OffsetFetch v2+, OffsetDelete and LeaveGroup v3+; the module echoes with the
    # error everywhere, see its docstring.)
    wrong = [(path, code) for path, code in _error_codes(response) if code != error]
    assert not wrong
    if hasattr(response, "throttle_time"):
        assert response.throttle_time.total_seconds() == 0
    return response


@pytest.mark.parametrize(("api", "version"), VERSIONS)
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_any_request_gets_an_encodable_error_response(
    api: ApiKey, version: int, data: st.DataObject
) -> None:
    body = data.draw(st.from_type(request_class(api, version)), label="body")
    error = data.draw(st.sampled_from(list(ErrorCode)), label="error")
    correlation_id = data.draw(st.integers(0, 2**31 - 1), label="correlation_id")
    _check(_roundtrip_request(api, version, body, correlation_id), error)


@pytest.mark.parametrize(("api", "version"), VERSIONS)
def test_the_emptiest_request_gets_an_error_response(api: ApiKey, version: int) -> None:
    _check(_request(api, version, {}), ErrorCode.unknown_server_error)


def test_served_apis_include_every_supported_version() -> None:
    assert all(SERVED_APIS[api] == served for api, served in SUPPORTED_APIS.items())


# --- Produce ---------------------------------------------------------------------------

TWO_BY_TWO = [
    {"name": "orders", "partition_data": [{"index": 0}, {"index": 3}]},
    {"name": "payments", "partition_data": [{"index": 1}, {"index": 2}]},
]


@pytest.mark.parametrize("version", range(3, 13))
def test_produce_answers_each_partition_with_the_error(version: int) -> None:
    request = _request(ApiKey.PRODUCE, version, {"acks": -1, "topic_data": TWO_BY_TWO})
    response = _check(request, NOT_LEADER)
    answered = {
        (topic.name, partition.index): partition
        for topic in response.responses
        for partition in topic.partition_responses
    }
    assert sorted(answered) == [("orders", 0), ("orders", 3), ("payments", 1), ("payments", 2)]
    for partition in answered.values():
        assert partition.error_code == NOT_LEADER
        assert partition.base_offset == -1
        assert partition.log_append_time is None  # -1 on the wire
        assert getattr(partition, "log_start_offset", -1) == -1
        assert getattr(partition, "record_errors", ()) == ()


def test_an_acks_0_produce_is_still_answered() -> None:
    # Kafka sends nothing for acks=0; the function answers anyway and the caller decides.
    request = _request(ApiKey.PRODUCE, 9, {"acks": 0, "topic_data": TWO_BY_TWO})
    response = _check(request, NOT_LEADER)
    assert len(response.responses) == 2


# --- Fetch -----------------------------------------------------------------------------

TOPIC_IDS = {"orders": uuid.UUID(int=1), "payments": uuid.UUID(int=2)}


def _fetch_topics() -> list[dict[str, Any]]:
    return [
        {
            "topic": name,
            "topic_id": topic_id,
            "partitions": [{"partition": 0}, {"partition": 5}],
        }
        for name, topic_id in TOPIC_IDS.items()
    ]


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_answers_each_partition_by_name_then_by_id(version: int) -> None:
    data = {"session_id": 42, "session_epoch": 3, "topics": _fetch_topics()}
    response = _check(_request(ApiKey.FETCH, version, data), ErrorCode.fenced_leader_epoch)
    if version >= 7:
        assert response.error_code == ErrorCode.fenced_leader_epoch
        assert response.session_id == 42  # Kafka echoes the request's session id
    keys = [topic.topic if version < 13 else topic.topic_id for topic in response.responses]
    expected = list(TOPIC_IDS) if version < 13 else list(TOPIC_IDS.values())
    assert keys == expected
    for topic in response.responses:
        assert [p.partition_index for p in topic.partitions] == [0, 5]
        for partition in topic.partitions:
            assert partition.error_code == ErrorCode.fenced_leader_epoch
            assert partition.high_watermark == -1
            assert partition.last_stable_offset == -1
            assert getattr(partition, "log_start_offset", -1) == -1  # v5+
            assert partition.records is None


# --- offsets and coordinators ----------------------------------------------------------


def test_offset_fetch_v8_answers_each_group() -> None:
    groups = [
        {"group_id": "g1", "topics": [{"name": "orders", "partition_indexes": [0, 1]}]},
        {"group_id": "g2", "topics": None},
    ]
    request = _request(ApiKey.OFFSET_FETCH, 8, {"groups": groups})
    response = _check(request, ErrorCode.coordinator_load_in_progress)
    assert [group.group_id for group in response.groups] == ["g1", "g2"]
    first, second = response.groups
    assert first.error_code == ErrorCode.coordinator_load_in_progress
    assert [topic.name for topic in first.topics] == ["orders"]
    partitions = first.topics[0].partitions
    assert [p.partition_index for p in partitions] == [0, 1]
    assert all(p.committed_offset == -1 and p.metadata == "" for p in partitions)
    assert second.topics == ()


@pytest.mark.parametrize("version", range(1, 8))
def test_offset_fetch_before_v8_answers_the_topics(version: int) -> None:
    topics = [{"name": "orders", "partition_indexes": [2]}]
    request = _request(ApiKey.OFFSET_FETCH, version, {"group_id": "g", "topics": topics})
    response = _check(request, ErrorCode.not_coordinator)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics] == [
        ("orders", [2])
    ]
    assert getattr(response, "error_code", ErrorCode.not_coordinator) == ErrorCode.not_coordinator


@pytest.mark.parametrize("version", range(4, 7))
def test_find_coordinator_v4_answers_each_key(version: int) -> None:
    request = _request(ApiKey.FIND_COORDINATOR, version, {"coordinator_keys": ["a", "b"]})
    response = _check(request, ErrorCode.coordinator_not_available)
    assert [c.key for c in response.coordinators] == ["a", "b"]
    for coordinator in response.coordinators:
        assert (coordinator.node_id, coordinator.host, coordinator.port) == (-1, "", -1)


@pytest.mark.parametrize("version", range(0, 4))
def test_find_coordinator_before_v4_answers_at_the_top(version: int) -> None:
    request = _request(ApiKey.FIND_COORDINATOR, version, {"key": "g"})
    response = _check(request, ErrorCode.coordinator_not_available)
    assert (response.node_id, response.host, response.port) == (-1, "", -1)


# --- cluster ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(1, 14))
def test_metadata_answers_the_requested_topics(version: int) -> None:
    topics = [{"name": "orders"}, {"name": "payments"}]
    request = _request(ApiKey.METADATA, version, {"topics": topics})
    response = _check(request, ErrorCode.unknown_topic_or_partition)
    assert [topic.name for topic in response.topics] == ["orders", "payments"]
    assert all(topic.partitions == () for topic in response.topics)
    assert response.brokers == ()


@pytest.mark.parametrize("version", range(1, 14))
def test_metadata_for_all_topics_answers_none(version: int) -> None:
    request = _request(ApiKey.METADATA, version, {"topics": None})
    response = _check(request, ErrorCode.unknown_server_error)
    assert response.topics == ()


def test_api_versions_unsupported_version_lists_its_own_range() -> None:
    response = _check(_request(ApiKey.API_VERSIONS, 3, {}), ErrorCode.unsupported_version)
    served = SUPPORTED_APIS[ApiKey.API_VERSIONS]
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [
        (ApiKey.API_VERSIONS, served.min_version, served.max_version)
    ]
    other = _check(_request(ApiKey.API_VERSIONS, 3, {}), ErrorCode.unknown_server_error)
    assert other.api_keys == ()


# --- groups ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(2, 10))
def test_join_group_echoes_the_member_id(version: int) -> None:
    request = _request(ApiKey.JOIN_GROUP, version, {"group_id": "g", "member_id": "m-1"})
    response = _check(request, ErrorCode.rebalance_in_progress)
    assert response.member_id == "m-1"
    assert response.generation_id == -1
    assert response.leader == ""
    assert response.members == ()
    assert response.protocol_name == (None if version >= 7 else "")


@pytest.mark.parametrize("version", range(3, 6))
def test_leave_group_echoes_the_members(version: int) -> None:
    members = [{"member_id": "m-1"}, {"member_id": "m-2", "group_instance_id": "i-2"}]
    request = _request(ApiKey.LEAVE_GROUP, version, {"group_id": "g", "members": members})
    response = _check(request, ErrorCode.not_coordinator)
    assert [(m.member_id, m.group_instance_id) for m in response.members] == [
        ("m-1", None),
        ("m-2", "i-2"),
    ]


def test_describe_groups_answers_each_group_as_unknown() -> None:
    request = _request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": ["g1", "g2"]})
    response = _check(request, ErrorCode.not_coordinator)
    assert [group.group_id for group in response.groups] == ["g1", "g2"]
    for group in response.groups:
        assert (group.group_state, group.protocol_type, group.protocol_data) == ("", "", "")
        assert group.authorized_operations == -(2**31)


def test_init_producer_id_has_no_producer() -> None:
    response = _check(_request(ApiKey.INIT_PRODUCER_ID, 4, {}), ErrorCode.not_coordinator)
    assert (response.producer_id, response.producer_epoch) == (-1, -1)


# --- the generic response --------------------------------------------------------------


def test_an_api_without_a_builder_gets_the_error_and_defaults() -> None:
    response = _check(_request(ApiKey.BROKER_HEARTBEAT, 1, {}), ErrorCode.not_controller)
    assert response.error_code == ErrorCode.not_controller
    # BrokerHeartbeatResponse.json: IsFenced defaults to true, ShouldShutDown to false.
    assert response.is_fenced is True
    assert response.should_shut_down is False


def test_fill_completes_nested_entities_and_keeps_schema_defaults() -> None:
    partition_type = typing.get_type_hints(
        typing.get_type_hints(response_class(ApiKey.PRODUCE, 12))["responses"].__args__[0]
    )["partition_responses"].__args__[0]
    partition = fill(partition_type, {"index": 4}, NOT_LEADER)
    assert partition.index == 4
    assert partition.error_code == NOT_LEADER
    assert partition.log_start_offset == -1  # ProduceResponse.json default
    assert (partition.current_leader.leader_id, partition.current_leader.leader_epoch) == (-1, -1)
    assert partition.error_message is None  # nullable, no default
