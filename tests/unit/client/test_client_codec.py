"""The client codec: header versions, exact request bytes, response decoding, negotiation."""

from __future__ import annotations

import datetime
import struct
from random import Random

import pytest
from client_fake_peer import response, response_frame
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.produce.v9.request import ProduceRequest

from strom.client import ReconnectBackoff, UnsupportedVersionError, pick_version
from strom.client.codec import (
    build_request,
    client_versions,
    correlation_id_of,
    decode_response,
    encode_private_request,
    encode_request,
    expects_response,
    next_correlation_id,
    private_response_payload,
    request_class,
    request_header_version,
    response_header_version,
)
from strom.client.errors import MalformedResponseError
from strom.client.versions import api_versions_retry
from strom.protocol.codec import decode_request

METADATA, API_VERSIONS, CREATE_TOPICS = 3, 18, 19


def all_versions() -> list[tuple[int, int]]:
    return [
        (key, version)
        for key, name in sorted(api_key_map.items())
        for version in sorted(schema_name_map[name])
    ]


# --- header versions -------------------------------------------------------------------


@pytest.mark.parametrize(("api_key", "api_version"), all_versions())
def test_header_versions_follow_kafkas_rule(api_key: int, api_version: int) -> None:
    flexible = request_class(api_key, api_version).__flexible__
    assert request_header_version(api_key, api_version) == (2 if flexible else 1)
    # ApiVersions answers with header v0 at every version, so any client can read it.
    expected_response = 1 if flexible and api_key != API_VERSIONS else 0
    assert response_header_version(api_key, api_version) == expected_response


def test_header_versions_at_the_flexible_boundary() -> None:
    assert (request_header_version(METADATA, 8), response_header_version(METADATA, 8)) == (1, 0)
    assert (request_header_version(METADATA, 9), response_header_version(METADATA, 9)) == (2, 1)
    assert (request_header_version(API_VERSIONS, 3), response_header_version(18, 3)) == (2, 0)


# --- request bytes ---------------------------------------------------------------------


def test_flexible_request_bytes() -> None:
    body = MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    frame = encode_request(METADATA, 12, 7, body, client_id="ab")
    header = struct.pack(">hhih", 3, 12, 7, 2) + b"ab" + b"\x00"  # v2: + empty tag buffer
    # null compact array (uvarint 0), two booleans, empty tag buffer
    assert frame == struct.pack(">i", len(header) + 4) + header + b"\x00\x00\x00\x00"


def test_non_flexible_request_bytes_and_null_client_id() -> None:
    body = MetadataRequestV4(topics=None, allow_auto_topic_creation=True)
    frame = encode_request(METADATA, 4, 7, body, client_id=None)
    header = struct.pack(">hhih", 3, 4, 7, -1)  # v1: no tag buffer; client_id null
    assert frame == struct.pack(">i", len(header) + 5) + header + b"\xff\xff\xff\xff\x01"


def test_the_broker_decoder_reads_what_the_client_writes() -> None:
    body = build_request(
        METADATA,
        12,
        {
            "topics": [{"name": "orders", "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True,
        },
    )
    request = decode_request(encode_request(METADATA, 12, 2**31 - 1, body, client_id="node-2")[4:])
    assert (request.api_version, request.correlation_id) == (12, 2**31 - 1)
    assert request.client_id == "node-2"
    assert request.body == body


def test_body_must_match_the_api_and_version() -> None:
    body = MetadataRequestV4(topics=None, allow_auto_topic_creation=True)
    with pytest.raises(ValueError, match="not a request of API 3 v12"):
        encode_request(METADATA, 12, 1, body, client_id="x")
    with pytest.raises(ValueError):
        encode_request(CREATE_TOPICS, 4, 1, body, client_id="x")
    with pytest.raises(ValueError, match="cannot encode"):  # kio checks types only here
        encode_request(METADATA, 4, 1, MetadataRequestV4(topics=5), client_id="x")  # type: ignore[arg-type]


def test_build_request_from_a_mapping() -> None:
    fields = {
        "topics": [
            {
                "name": "t",
                "num_partitions": 3,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": "cleanup.policy", "value": "compact"}],
            }
        ],
        "timeout": 1500,
        "validate_only": False,
    }
    body = build_request(CREATE_TOPICS, 7, fields)
    assert body.timeout == datetime.timedelta(milliseconds=1500)
    assert body.topics[0].configs[0].value == "compact"
    assert type(build_request(CREATE_TOPICS, 2, fields)).__version__ == 2
    with pytest.raises(KeyError, match="topics"):
        build_request(CREATE_TOPICS, 7, {"timeout": 1, "validate_only": False})
    with pytest.raises(UnsupportedVersionError):
        build_request(METADATA, 99, {})
    with pytest.raises(UnsupportedVersionError):
        build_request(9999, 0, {})


def test_only_produce_with_acks_0_goes_unanswered() -> None:
    produce = ProduceRequest(transactional_id=None, acks=0, timeout=1000, topic_data=())
    assert not expects_response(0, produce)
    all_replicas = ProduceRequest(transactional_id=None, acks=-1, timeout=1000, topic_data=())
    assert expects_response(0, all_replicas)
    assert expects_response(METADATA, MetadataRequestV4(topics=None))


# --- responses -------------------------------------------------------------------------


def test_decode_a_flexible_response() -> None:
    body = response(
        METADATA,
        12,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id="c",
        controller_id=1,
        topics=(),
    )
    frame = response_frame(41, body)[4:]
    assert correlation_id_of(frame) == 41
    assert decode_response(METADATA, 12, frame) == body


def test_api_versions_unsupported_answer_is_read_as_v0() -> None:
    # What a broker sends for an ApiVersions version it does not serve: a v0 body.
    v0 = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=API_VERSIONS, min_version=0, max_version=2),),
    )
    decoded = decode_response(API_VERSIONS, 3, response_frame(5, v0)[4:])
    assert decoded == v0


def test_a_garbled_response_is_malformed() -> None:
    with pytest.raises(MalformedResponseError):
        decode_response(METADATA, 12, struct.pack(">i", 1) + b"\x00\x05")
    with pytest.raises(MalformedResponseError):
        correlation_id_of(b"\x00")


# --- private frames --------------------------------------------------------------------


def test_private_request_bytes() -> None:
    frame = encode_private_request(32002, 0, 9, b"payload")
    assert frame == struct.pack(">ihhi", 15, 32002, 0, 9) + b"payload"
    assert private_response_payload(struct.pack(">i", 9) + b"answer") == b"answer"
    with pytest.raises(ValueError):
        encode_private_request(40000, 0, 1, b"")


def test_correlation_ids_wrap_to_zero() -> None:
    assert next_correlation_id(0) == 1
    assert next_correlation_id(2**31 - 1) == 0


# --- negotiation and backoff -----------------------------------------------------------


def test_pick_the_highest_common_version() -> None:
    ours = client_versions(METADATA)
    assert ours == (0, 13)
    assert pick_version(METADATA, {METADATA: (0, 12)}) == 12
    assert pick_version(METADATA, {METADATA: (0, 99)}) == 13
    assert pick_version(METADATA, {METADATA: (0, 12)}, max_version=9) == 9
    assert pick_version(METADATA, {METADATA: (4, 12)}, min_version=1, max_version=5) == 5
    with pytest.raises(UnsupportedVersionError, match="does not serve"):
        pick_version(METADATA, {})
    with pytest.raises(UnsupportedVersionError, match="no common version"):
        pick_version(METADATA, {METADATA: (0, 3)}, min_version=4)
    with pytest.raises(UnsupportedVersionError, match="no schema"):
        pick_version(9999, {9999: (0, 1)})


def test_api_versions_retry_uses_the_brokers_max() -> None:
    assert api_versions_retry(3, {API_VERSIONS: (0, 2)}) == 2
    assert api_versions_retry(3, {API_VERSIONS: (0, 7)}) == 2  # never the same again
    assert api_versions_retry(3, {}) == 0
    assert api_versions_retry(0, {API_VERSIONS: (0, 2)}) is None


def test_backoff_grows_to_its_cap_with_jitter() -> None:
    exact = ReconnectBackoff(initial_s=0.05, max_s=1.0, jitter=0)
    assert [exact.delay_s(n, Random(0)) for n in range(7)] == [
        0.05,
        0.1,
        0.2,
        0.4,
        0.8,
        1.0,
        1.0,
    ]
    assert exact.delay_s(10**9, Random(0)) == 1.0
    jittered = ReconnectBackoff(initial_s=1.0, max_s=1.0, jitter=0.2)
    delays = [jittered.delay_s(3, Random(seed)) for seed in range(50)]
    assert all(0.8 <= d <= 1.2 for d in delays) and len(set(delays)) > 1
    with pytest.raises(ValueError):
        ReconnectBackoff(initial_s=2.0, max_s=1.0)
