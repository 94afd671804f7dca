"""The request decoder: every advertised version round-trips, and no input crashes it."""

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.codec import (
    RequestError,
    UnsupportedVersion,
    build,
    decode_request,
    encode_request,
    response_class,
)


def metadata_frame() -> bytes:
    body = MetadataRequest(
        topics=(MetadataRequestTopic(name="t", topic_id=None),),
        allow_auto_topic_creation=True,
        include_topic_authorized_operations=False,
    )
    return encode_request(3, 12, 42, body)[4:]


def test_decode_round_trip() -> None:
    request = decode_request(metadata_frame())
    assert request.api_key == ApiKey.METADATA
    assert request.correlation_id == 42
    assert request.body.topics[0].name == "t"


def test_every_advertised_response_version_has_a_class() -> None:
    for key, versions in SUPPORTED_APIS.items():
        for version in range(versions.min_version, versions.max_version + 1):
            assert response_class(key, version).__version__ == version


def test_unknown_api_and_version() -> None:
    with pytest.raises(RequestError, match="unknown API key"):
        decode_request(struct.pack(">hhi", 999, 0, 1) + b"\0\0")
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(struct.pack(">hhi", 18, 99, 5) + b"\0\0")
    assert info.value.correlation_id == 5


def test_trailing_bytes_are_ignored_and_truncation_refused() -> None:
    frame = metadata_frame()
    # librdkafka sends null-topic Metadata requests with 3 stray bytes; Kafka ignores them.
    assert decode_request(frame + b"\x01\0\0").body.topics[0].name == "t"
    for cut in range(len(frame)):
        with pytest.raises(RequestError):
            decode_request(frame[:cut])


def test_huge_array_count_is_refused_without_allocating() -> None:
    # Metadata v12: header, then a compact array whose varint length claims ~2**31 topics.
    header = struct.pack(">hhi", 3, 12, 1) + b"\xff\xff\x00"
    frame = header + b"\xff\xff\xff\xff\x07" + b"\x00" * 8
    with pytest.raises(RequestError):
        decode_request(frame)


def test_build_fills_version_specific_fields() -> None:
    cls = response_class(ApiKey.API_VERSIONS, 0)
    body = build(cls, {"error_code": 0, "api_keys": [], "throttle_time": 5, "extra": 1})
    assert body.api_keys == ()


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    key=st.sampled_from(sorted(SUPPORTED_APIS)),
    version=st.integers(0, 20),
    payload=st.binary(max_size=300),
)
def test_fuzz_decoder_raises_only_request_errors(key: ApiKey, version: int, payload: bytes) -> None:
    frame = struct.pack(">hhi", int(key), version, 7) + payload
    with contextlib.suppress(RequestError):
        decode_request(frame)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fuzz_mutated_valid_requests(data: st.DataObject) -> None:
    frame = bytearray(metadata_frame())
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(frame) - 1))
        frame[position] = data.draw(st.integers(0, 255))
    with contextlib.suppress(RequestError):
        decode_request(bytes(frame))
