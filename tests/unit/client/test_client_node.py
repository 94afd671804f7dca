"""NodeClient against in-process listeners: on-demand connect, negotiation, reconnects."""

from __future__ import annotations

import asyncio
import datetime

import pytest
from client_fake_peer import FakeBroker, FakePeer, run, unused_port
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v4.request import MetadataRequest as MetadataRequestV4

from strom.client import (
    ClientConnectionError,
    NodeClient,
    ReconnectBackoff,
    UnsupportedVersionError,
)
from strom.client.codec import response_class
from strom.protocol.codec import build

METADATA, API_VERSIONS = 3, 18
ALL_TOPICS = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
    "include_cluster_authorized_operations": False,
}
QUICK = ReconnectBackoff(initial_s=0.001, max_s=0.001, jitter=0)


def metadata_response(version: int) -> object:
    fields = {"throttle_time": 0, "brokers": [], "cluster_id": f"v{version}", "topics": []}
    return build(response_class(METADATA, version), {**fields, "controller_id": 1})


def version_of(response: object) -> int:
    return int(type(response).__version__)  # type: ignore[attr-defined]


class MetadataBroker:
    """Serves Metadata v0..max_metadata_version and ApiVersions; records what it saw."""

    def __init__(self, max_metadata_version: int = 9) -> None:
        self.max_version = max_metadata_version
        self.seen: list[tuple[int, int]] = []
        self.drop_after = -1  # close each connection after this many answers (-1: never)

    async def serve(self, peer: FakePeer) -> None:
        answered = 0
        while answered != self.drop_after:
            request = await peer.read_request()
            self.seen.append((request.api_key, request.api_version))
            if request.api_key == API_VERSIONS:
                peer.respond(
                    request.correlation_id,
                    ApiVersionsResponse(
                        error_code=ErrorCode.none,
                        api_keys=(
                            ApiVersion(
                                api_key=METADATA,
                                min_version=0,
                                max_version=self.max_version,
                            ),
                            ApiVersion(api_key=API_VERSIONS, min_version=0, max_version=3),
                        ),
                        throttle_time=datetime.timedelta(0),
                    ),
                )
            else:
                peer.respond(request.correlation_id, metadata_response(request.api_version))
            answered += 1
        await peer.writer.drain()


@run
async def test_connects_on_demand_and_negotiates_once_per_connection() -> None:
    served = MetadataBroker(max_metadata_version=9)
    async with FakeBroker(served.serve) as broker:
        node = NodeClient("127.0.0.1", broker.port, node_id=2)
        assert not node.is_connected and broker.connections == 0
        assert version_of(await node.request(METADATA, ALL_TOPICS)) == 9
        assert version_of(await node.request(METADATA, ALL_TOPICS, max_version=5)) == 5
        assert version_of(await node.request(METADATA, ALL_TOPICS, api_version=1)) == 1
        body = MetadataRequestV4(topics=None, allow_auto_topic_creation=False)
        assert version_of(await node.request(METADATA, body)) == 4
        with pytest.raises(UnsupportedVersionError):
            await node.request(METADATA, ALL_TOPICS, min_version=10)
        assert served.seen == [(18, 3), (3, 9), (3, 5), (3, 1), (3, 4)]
        assert broker.connections == 1 and node.is_connected
        node.close()
        await node.wait_closed()


@run
async def test_reconnects_after_the_connection_is_lost() -> None:
    served = MetadataBroker()
    served.drop_after = 2  # ApiVersions and one Metadata
    async with FakeBroker(served.serve) as broker:
        node = NodeClient("127.0.0.1", broker.port, backoff=QUICK)
        for round_ in range(3):
            assert version_of(await node.request(METADATA, ALL_TOPICS)) == 9
            lost = await node.connection()
            await lost.wait_closed()  # the broker hung up
            assert lost.close_reason == "the peer closed the connection"
            assert broker.connections == round_ + 1
        assert served.seen.count((18, 3)) == 3  # versions asked again on each connection
        assert node.failures == 0
        node.close()
        await node.wait_closed()


@run
async def test_backs_off_after_a_failed_connect_then_connects() -> None:
    port = unused_port()
    node = NodeClient(
        "127.0.0.1", port, backoff=ReconnectBackoff(initial_s=0.02, max_s=0.02, jitter=0)
    )
    with pytest.raises(ClientConnectionError, match="cannot connect"):
        await node.request(METADATA, ALL_TOPICS, api_version=9)
    assert node.failures == 1 and 0 < node.next_attempt_in_s() <= 0.02
    with pytest.raises(ClientConnectionError, match=r"no connection to .* in time"):
        await node.raw_request(32002, 0, b"", timeout_s=0)
    assert node.failures == 1  # no attempt was made inside the backoff
    served = MetadataBroker()
    async with FakeBroker(served.serve, port=port):
        assert version_of(await node.request(METADATA, ALL_TOPICS, api_version=9)) == 9
        assert node.failures == 0
        node.close()
        await node.wait_closed()


@run
async def test_a_closed_node_client_refuses_calls() -> None:
    served = MetadataBroker()
    async with FakeBroker(served.serve) as broker:
        node = NodeClient("127.0.0.1", broker.port)
        connection = await node.connection()
        node.close()
        assert node.is_closed and connection.is_closed
        with pytest.raises(ClientConnectionError, match="closed"):
            await node.request(METADATA, ALL_TOPICS)
        await node.wait_closed()


@run
async def test_private_requests_and_one_way_messages() -> None:
    messages: list[bytes] = []

    async def serve(peer: FakePeer) -> None:
        while True:
            request = await peer.read_private()
            if request.api_key == 32001:  # one-way: never answered
                messages.append(request.payload)
            else:
                peer.respond_private(request.correlation_id, request.payload[::-1])

    async with FakeBroker(serve) as broker:
        node = NodeClient("127.0.0.1", broker.port)
        for i in range(5):
            await node.send_oneway(32001, 0, b"raft-%d" % i)
        answers = await asyncio.gather(
            *(node.raw_request(32002, 0, b"abc%d" % i) for i in range(10))
        )
        assert answers == [b"%dcba" % i for i in range(10)]
        assert messages == [b"raft-%d" % i for i in range(5)]  # in order, before the answers
        node.close()
        await node.wait_closed()
