"""strom's own client (strom.client) against a strom broker on loopback (the
`strom_broker` fixture: one node, behind the test network).

ApiVersions, Metadata v12, CreateTopics, 100 pipelined requests on one connection, and
the failures a broker-to-broker caller must see as ClientConnectionError: a broker that
stops answering, one that dies, one that restarts under a NodeClient (that one on a
`strom serve` process, for the kernel's refusal while it is down).
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from broker import BrokerProcess
from kio.schema.errors import ErrorCode
from node_files import port

from strom.client import ClientConnectionError, KafkaConnection, NodeClient, ReconnectBackoff
from strom.testing import StromCluster

METADATA, API_VERSIONS, CREATE_TOPICS = 3, 18, 19
NODE_ID = 1  # the fixture's node, and strom serve's default node.id
ALL_TOPICS = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def asyncio_test(
    test: Callable[[StromCluster], Coroutine[Any, Any, None]],
) -> Callable[[StromCluster], None]:
    @functools.wraps(test)
    def wrapper(strom_broker: StromCluster) -> None:
        asyncio.run(asyncio.wait_for(test(strom_broker), timeout=60))

    return wrapper


async def connect(broker: StromCluster) -> KafkaConnection:
    return await KafkaConnection.connect("127.0.0.1", port(broker), client_id="test-client")


def topic_fields(name: str, partitions: int) -> dict[str, Any]:
    topic = {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }
    return {"topics": [topic], "timeout": 10_000, "validate_only": False}


def metadata_fields(*names: str) -> dict[str, Any]:
    return {**ALL_TOPICS, "topics": [{"name": name, "topic_id": None} for name in names]}


@asyncio_test
async def test_api_versions(strom_broker: StromCluster) -> None:
    connection = await connect(strom_broker)
    try:
        versions = await connection.api_versions()
        assert versions[API_VERSIONS][0] == 0 and versions[API_VERSIONS][1] >= 3
        assert versions[METADATA][0] <= 12 <= versions[METADATA][1]
        assert versions[CREATE_TOPICS][0] <= 7 <= versions[CREATE_TOPICS][1]
        assert await connection.api_versions() == versions
    finally:
        connection.close()
        await connection.wait_closed()


@asyncio_test
async def test_metadata_v12(strom_broker: StromCluster) -> None:
    connection = await connect(strom_broker)
    try:
        metadata = await connection.request(METADATA, 12, ALL_TOPICS)
        assert [(b.node_id, b.host, b.port) for b in metadata.brokers] == [
            (NODE_ID, "127.0.0.1", port(strom_broker))
        ]
        assert metadata.cluster_id and metadata.controller_id == NODE_ID
    finally:
        connection.close()
        await connection.wait_closed()


@asyncio_test
async def test_create_topics_then_metadata_shows_the_topic(strom_broker: StromCluster) -> None:
    name = f"client-{uuid.uuid4().hex[:8]}"
    connection = await connect(strom_broker)
    try:
        created = await connection.request(CREATE_TOPICS, 7, topic_fields(name, 3))
        assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == [
            (name, ErrorCode.none, 3)
        ]
        metadata = await connection.request(METADATA, 12, metadata_fields(name))
        (topic,) = metadata.topics
        assert (topic.name, topic.error_code) == (name, ErrorCode.none)
        assert sorted(p.partition_index for p in topic.partitions) == [0, 1, 2]
        assert {p.leader_id for p in topic.partitions} == {NODE_ID}
    finally:
        connection.close()
        await connection.wait_closed()


@asyncio_test
async def test_100_pipelined_metadata_requests(strom_broker: StromCluster) -> None:
    names = [f"pipe-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    connection = await connect(strom_broker)
    try:
        for name in names:
            await connection.request(CREATE_TOPICS, 7, topic_fields(name, 1))
        calls = [
            asyncio.create_task(connection.request(METADATA, 12, metadata_fields(names[i % 3])))
            for i in range(100)
        ]
        peak = 0
        while not all(call.done() for call in calls):
            peak = max(peak, connection.in_flight)
            await asyncio.sleep(0)
        answers = [call.result() for call in calls]
        assert [a.topics[0].name for a in answers] == [names[i % 3] for i in range(100)]
        assert peak > 1  # the requests really were in flight together
        assert connection.in_flight == 0 and not connection.is_closed
    finally:
        connection.close()
        await connection.wait_closed()


@asyncio_test
async def test_a_timeout_closes_the_connection(strom_broker: StromCluster) -> None:
    connection = await connect(strom_broker)
    try:
        await connection.request(METADATA, 12, ALL_TOPICS)
        with strom_broker.paused(NODE_ID):  # connected, but answering nothing
            other = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
            with pytest.raises(ClientConnectionError, match="timed out"):
                await connection.request(METADATA, 12, ALL_TOPICS, timeout_s=0.5)
            with pytest.raises(ClientConnectionError):
                await other
        assert connection.is_closed
        with pytest.raises(ClientConnectionError):
            await connection.request(METADATA, 12, ALL_TOPICS)
    finally:
        connection.close()
        await connection.wait_closed()
    # The broker itself is fine: a new connection works.
    connection = await connect(strom_broker)
    assert (await connection.request(METADATA, 12, ALL_TOPICS)).brokers
    connection.close()
    await connection.wait_closed()


@asyncio_test
async def test_a_dead_broker_fails_pending_requests(strom_broker: StromCluster) -> None:
    connection = await connect(strom_broker)
    try:
        # The request waits in the test network while the clients' link is cut, so the
        # broker cannot answer it before it dies; the heal lets the death reach the client.
        await asyncio.to_thread(strom_broker.cut_clients, NODE_ID)
        pending = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
        while connection.in_flight == 0:  # written, waiting for an answer
            await asyncio.sleep(0)
        await asyncio.to_thread(strom_broker.crash_node, NODE_ID)
        await asyncio.to_thread(strom_broker.heal)
        with pytest.raises(ClientConnectionError, match=r"closed the connection|connection lost"):
            await pending
        assert connection.is_closed
    finally:
        connection.close()
        await connection.wait_closed()


def stop(broker: BrokerProcess) -> None:
    """SIGTERM and wait; closes the stdout pipe, which BrokerProcess.stop() leaves open."""
    broker.stop()
    assert broker.process is not None and broker.process.stdout is not None
    broker.process.stdout.close()


def test_node_client_reconnects_after_a_restart(broker: BrokerProcess) -> None:
    """On a real process: while it is down the kernel refuses the connection, and a
    refused connect is what counts toward the NodeClient's backoff (`failures`). The
    fixture's test network accepts a connection to a node that is down and then closes
    it, which a client sees as a connection that failed after connecting."""
    asyncio.run(asyncio.wait_for(_reconnects_after_a_restart(broker), timeout=60))


async def _reconnects_after_a_restart(broker: BrokerProcess) -> None:
    name = f"restart-{uuid.uuid4().hex[:8]}"
    node = NodeClient(
        "127.0.0.1",
        broker.port,
        node_id=NODE_ID,
        backoff=ReconnectBackoff(initial_s=0.05, max_s=0.2),
    )
    try:
        created = await node.request(CREATE_TOPICS, topic_fields(name, 2))
        assert created.topics[0].error_code == ErrorCode.none
        before = await node.connection()

        await asyncio.to_thread(stop, broker)
        with pytest.raises(ClientConnectionError):
            await node.request(METADATA, metadata_fields(name), timeout_s=5)
        assert before.is_closed and node.failures >= 1

        await asyncio.to_thread(broker.start)
        metadata = await node.request(METADATA, metadata_fields(name), max_version=12)
        assert type(metadata).__version__ == 12
        assert metadata.topics[0].name == name and len(metadata.topics[0].partitions) == 2
        assert node.failures == 0 and node.is_connected
        assert await node.connection() is not before
    finally:
        node.close()
        await node.wait_closed()
