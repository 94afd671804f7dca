"""KafkaConnection against a fake broker on a socketpair: matching, framing, failures."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from client_fake_peer import SIZE, FakePeer, connected_pair, response, run
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v2.response import ApiVersion as ApiVersionV2
from kio.schema.api_versions.v2.response import ApiVersionsResponse as ApiVersionsResponseV2
from kio.schema.api_versions.v3.response import ApiVersion as ApiVersionV3
from kio.schema.api_versions.v3.response import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import ProduceRequest

from strom.client import BrokerError, ClientConnectionError, KafkaConnection

METADATA, API_VERSIONS = 3, 18
ALL_TOPICS = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def metadata_response(cluster_id: str) -> Any:
    return response(
        METADATA,
        12,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id=cluster_id,
        controller_id=1,
        topics=(),
    )


def api_versions_v3(
    *ranges: tuple[int, int, int], error_code: ErrorCode = ErrorCode.none
) -> ApiVersionsResponseV3:
    return ApiVersionsResponseV3(
        error_code=error_code,
        api_keys=tuple(
            ApiVersionV3(api_key=key, min_version=low, max_version=high)
            for key, low, high in ranges
        ),
        throttle_time=datetime.timedelta(0),
    )


async def finish(connection: KafkaConnection, peer: FakePeer) -> None:
    connection.close()
    await connection.wait_closed()
    peer.close()


# --- matching ---------------------------------------------------------------------------


@run
async def test_request_and_response() -> None:
    connection, peer = await connected_pair(client_id="node-7")
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    request = await peer.read_request()
    assert (request.api_key, request.api_version, request.header_version) == (3, 12, 2)
    assert request.client_id == "node-7"
    assert request.body.topics is None
    peer.respond(request.correlation_id, metadata_response("c1"))
    assert (await call).cluster_id == "c1"
    assert connection.in_flight == 0
    await finish(connection, peer)


@run
async def test_pipelined_responses_are_matched_by_correlation_id() -> None:
    connection, peer = await connected_pair()
    calls = [asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS)) for _ in range(20)]
    requests = [await peer.read_request() for _ in range(20)]
    assert len({r.correlation_id for r in requests}) == 20
    for request in reversed(requests):  # answer in the opposite order
        peer.respond(request.correlation_id, metadata_response(f"c{request.correlation_id}"))
    answers = await asyncio.gather(*calls)
    assert [a.cluster_id for a in answers] == [f"c{r.correlation_id}" for r in requests]
    await finish(connection, peer)


@run
async def test_a_cancelled_callers_late_answer_is_dropped() -> None:
    connection, peer = await connected_pair()
    abandoned = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    first = await peer.read_request()
    abandoned.cancel()
    with pytest.raises(asyncio.CancelledError):
        await abandoned
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    second = await peer.read_request()
    peer.respond(first.correlation_id, metadata_response("late"))
    peer.respond(second.correlation_id, metadata_response("mine"))
    assert (await call).cluster_id == "mine"
    assert not connection.is_closed
    await finish(connection, peer)


@run
async def test_produce_with_acks_0_returns_once_written() -> None:
    connection, peer = await connected_pair()
    body = ProduceRequest(
        transactional_id=None, acks=0, timeout=datetime.timedelta(seconds=1), topic_data=()
    )
    assert await connection.request(0, 9, body) is None
    assert (await peer.read_request()).body == body
    assert connection.in_flight == 0
    await finish(connection, peer)


# --- strom's private frames -------------------------------------------------------------


@run
async def test_raw_request_framing() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.raw_request(32002, 1, b"from-index"))
    request = await peer.read_private()
    assert (request.api_key, request.api_version, request.payload) == (32002, 1, b"from-index")
    peer.respond_private(request.correlation_id, b"entries")
    assert await call == b"entries"
    await finish(connection, peer)


@run
async def test_raw_and_kafka_requests_share_one_id_space() -> None:
    connection, peer = await connected_pair()
    raw = asyncio.create_task(connection.raw_request(32002, 0, b"a"))
    private = await peer.read_private()
    kafka = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    request = await peer.read_request()
    assert request.correlation_id != private.correlation_id
    peer.respond(request.correlation_id, metadata_response("k"))
    peer.respond_private(private.correlation_id, b"r")
    assert (await kafka).cluster_id == "k" and await raw == b"r"
    await finish(connection, peer)


@run
async def test_send_oneway_framing_and_order() -> None:
    connection, peer = await connected_pair()
    for i in range(3):
        await connection.send_oneway(32001, 0, f"m{i}".encode())
    received = [await peer.read_private() for _ in range(3)]
    assert [r.payload for r in received] == [b"m0", b"m1", b"m2"]
    assert {r.api_key for r in received} == {32001}
    assert connection.in_flight == 0
    await finish(connection, peer)


@run
async def test_send_oneway_waits_while_the_peer_does_not_read() -> None:
    connection, peer = await connected_pair()
    payload = b"x" * (16 * 1024 * 1024)  # far more than the socket buffers hold
    send = asyncio.create_task(connection.send_oneway(32001, 0, payload))
    for _ in range(10):
        await asyncio.sleep(0)  # let the event loop run, without waiting for time
    assert not send.done()
    assert (await peer.read_private()).payload == payload
    await send
    await finish(connection, peer)


# --- failures ---------------------------------------------------------------------------


@run
async def test_a_timeout_closes_the_connection_and_fails_everyone() -> None:
    connection, peer = await connected_pair()
    waiting = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    await peer.read_request()
    with pytest.raises(ClientConnectionError, match="timed out"):
        await connection.request(METADATA, 12, ALL_TOPICS, timeout_s=0)
    assert connection.is_closed
    with pytest.raises(ClientConnectionError, match="timed out"):
        await waiting
    with pytest.raises(ClientConnectionError):
        await connection.request(METADATA, 12, ALL_TOPICS)
    await connection.wait_closed()
    peer.close()


@run
async def test_close_fails_pending_calls() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.raw_request(32002, 0, b""))
    await peer.read_private()
    connection.close()
    with pytest.raises(ClientConnectionError, match="closed by the client"):
        await call
    await connection.wait_closed()
    assert await peer.reader.read() == b""  # the peer sees the end of the stream
    with pytest.raises(ClientConnectionError):
        await connection.send_oneway(32001, 0, b"")
    peer.close()


@run
async def test_the_peer_closing_fails_pending_calls() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    await peer.read_request()
    peer.close()
    with pytest.raises(ClientConnectionError, match="peer closed"):
        await call
    assert connection.is_closed
    await connection.wait_closed()


@pytest.mark.parametrize("size", [-1, 0, 3, 1025])
def test_a_bogus_frame_size_closes_the_connection(size: int) -> None:
    async def scenario() -> None:
        connection, peer = await connected_pair(max_frame_bytes=1024)
        call = asyncio.create_task(connection.raw_request(32002, 0, b""))
        await peer.read_private()
        peer.write(SIZE.pack(size) + b"\0" * 8)
        with pytest.raises(ClientConnectionError, match=f"size {size} is outside"):
            await call
        await finish(connection, peer)

    asyncio.run(scenario())


@run
async def test_an_unknown_correlation_id_closes_the_connection() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.raw_request(32002, 0, b""))
    request = await peer.read_private()
    peer.respond_private(request.correlation_id + 1000, b"")
    with pytest.raises(ClientConnectionError, match="unknown correlation id"):
        await call
    await finish(connection, peer)


@run
async def test_connect_failure_is_a_connection_error() -> None:
    with pytest.raises(ClientConnectionError, match="cannot connect"):
        await KafkaConnection.connect("127.0.0.1", 1)


# --- ApiVersions ------------------------------------------------------------------------


@run
async def test_api_versions_are_asked_once() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.api_versions())
    request = await peer.read_request()
    assert (request.api_version, request.body.client_software_name) == (3, "strom")
    peer.respond(request.correlation_id, api_versions_v3((3, 0, 12), (18, 0, 4)))
    assert await call == {3: (0, 12), 18: (0, 4)}
    assert await connection.api_versions() == {3: (0, 12), 18: (0, 4)}  # cached: no request
    await finish(connection, peer)


@run
async def test_api_versions_falls_back_on_unsupported_version() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.api_versions())
    first = await peer.read_request()
    refusal = ApiVersionsResponseV0(
        error_code=ErrorCode.unsupported_version,
        api_keys=(ApiVersionV0(api_key=18, min_version=0, max_version=2),),
    )
    peer.respond(first.correlation_id, refusal)
    second = await peer.read_request()
    assert (second.api_version, second.header_version) == (2, 1)
    answer = ApiVersionsResponseV2(
        error_code=ErrorCode.none,
        api_keys=(ApiVersionV2(api_key=18, min_version=0, max_version=2),),
        throttle_time=datetime.timedelta(0),
    )
    peer.respond(second.correlation_id, answer)
    assert await call == {18: (0, 2)}
    await finish(connection, peer)


@run
async def test_api_versions_error_is_a_broker_error() -> None:
    connection, peer = await connected_pair()
    call = asyncio.create_task(connection.api_versions())
    request = await peer.read_request()
    peer.respond(request.correlation_id, api_versions_v3(error_code=ErrorCode.invalid_request))
    with pytest.raises(BrokerError) as raised:
        await call
    assert raised.value.error_code == ErrorCode.invalid_request
    await finish(connection, peer)
