"""strom.testing, the test fixture, with real clients: what each fault really does.

Every test starts its cluster in this process (unless it says processes=True) through
the pytest plugin's fixtures or StromCluster itself; all of it is stopped afterwards.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator, Mapping

import pytest
from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from strom.client import KafkaConnection
from strom.protocol.apis import ApiKey
from strom.server.broker import Broker
from strom.testing import ClusterError, NodeError, StromCluster

UNFLUSHED = {"log.flush.interval.messages": 1_000_000, "log.flush.interval.ms": 3_600_000}
"""Acknowledge once written to the page cache, and fsync only every hour."""


def produce(
    bootstrap: str, topic: str, count: int, settings: Mapping[str, object] | None = None
) -> list[Message]:
    """`count` records, each acknowledged (or failed) before this returns."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **(settings or {})})
    delivered: list[Message] = []

    def on_delivery(error: KafkaError | None, message: Message) -> None:
        assert error is None, error
        delivered.append(message)

    for i in range(count):
        producer.produce(topic, f"record-{i}".encode(), on_delivery=on_delivery)
    assert producer.flush(30) == 0
    return delivered


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 10)
        return int(high)
    finally:
        consumer.close()


@pytest.fixture
def unflushed_broker() -> Iterator[StromCluster]:
    with StromCluster(nodes=1, config=UNFLUSHED) as cluster:
        yield cluster


def test_a_one_node_fixture_serves_a_real_producer_and_consumer(
    strom_broker: StromCluster,
) -> None:
    produce(strom_broker.bootstrap_servers, "events", 20)
    consumer = Consumer(
        {
            "bootstrap.servers": strom_broker.bootstrap_servers,
            "group.id": "readers",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["events"])
    values: list[bytes] = []
    try:
        strom_broker.wait_until(
            lambda: _poll_into(consumer, values) >= 20, 20, "20 records consumed"
        )
    finally:
        consumer.close()
    assert values == [f"record-{i}".encode() for i in range(20)]


def _poll_into(consumer: Consumer, values: list[bytes]) -> int:
    message = consumer.poll(0.1)
    if message is not None and message.error() is None:
        values.append(message.value())
    return len(values)


def test_a_crash_that_loses_unflushed_writes_loses_exactly_those(
    unflushed_broker: StromCluster,
) -> None:
    cluster = unflushed_broker
    cluster.create_topic("volatile")
    produce(cluster.bootstrap_servers, "volatile", 10, {"acks": 1})
    cluster.crash_node(1)  # kill -9: the page cache keeps what was written
    cluster.start_node(1)
    cluster.wait_for_leader("volatile")
    assert end_offset(cluster.bootstrap_servers, "volatile") == 10

    produce(cluster.bootstrap_servers, "volatile", 5, {"acks": 1})
    cluster.crash_node(1, lose_unflushed=True)  # a power failure: only fsynced data stays
    cluster.start_node(1)
    cluster.wait_for_leader("volatile")
    # The clean restart above fsynced the first ten; the five since were never fsynced.
    assert end_offset(cluster.bootstrap_servers, "volatile") == 10


def test_with_fsync_before_ack_a_power_failure_loses_no_acknowledged_record(
    strom_broker: StromCluster,
) -> None:
    strom_broker.create_topic("durable")
    produce(strom_broker.bootstrap_servers, "durable", 25, {"acks": 1})
    strom_broker.crash_node(1, lose_unflushed=True)
    strom_broker.start_node(1)
    strom_broker.wait_for_leader("durable")
    assert end_offset(strom_broker.bootstrap_servers, "durable") == 25


def test_a_stop_that_fails_raises_and_a_clean_one_does_not(
    strom_broker: StromCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """stop_node is SIGTERM's path: where `strom serve` would exit nonzero, it raises."""
    real_stop = Broker.stop

    async def stop_then_fail(self: Broker) -> None:
        await real_stop(self)
        raise OSError("the last flush failed")

    monkeypatch.setattr(Broker, "stop", stop_then_fail)
    with pytest.raises(NodeError, match="node 1 did not stop cleanly: failed: OSError"):
        strom_broker.stop_node(1)
    monkeypatch.undo()
    strom_broker.start_node(1)
    strom_broker.restart_node(1)
    strom_broker.stop_node(1)


def test_isolating_the_leader_moves_leadership_and_healing_restores_the_isr(
    strom_cluster: StromCluster,
) -> None:
    cluster = strom_cluster
    cluster.create_topic("orders", replication_factor=3)
    old = cluster.wait_for_leader("orders")
    cluster.isolate(old)
    assert set(cluster.cut_links) >= {(-1, old)}
    new = cluster.wait_for_leader("orders", not_on=old)
    assert new != old
    cluster.heal()
    cluster.wait_until(lambda: len(cluster.isr("orders")) == 3, 30, "the ISR to grow back")
    produce(cluster.bootstrap_servers, "orders", 10, {"acks": "all"})
    assert end_offset(cluster.bootstrap_servers, "orders") == 10


def test_clients_cut_from_a_node_wait_until_the_heal(strom_broker: StromCluster) -> None:
    strom_broker.create_topic("waiting")
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers, "linger.ms": 0})
    producer.produce("waiting", b"before")
    assert producer.flush(10) == 0
    strom_broker.cut_clients(1)
    producer.produce("waiting", b"during")
    assert producer.flush(1.0) == 1  # held in the network, not refused
    strom_broker.heal()
    assert producer.flush(30) == 0
    assert end_offset(strom_broker.bootstrap_servers, "waiting") == 2


def test_injected_errors_are_answered_in_request_order(strom_broker: StromCluster) -> None:
    """Three pipelined requests on one connection; the middle one is answered by the
    network with the injected error, the others by the broker, in order."""
    strom_broker.create_topic("pipelined")
    strom_broker.fail_requests("LIST_OFFSETS", "NOT_LEADER_OR_FOLLOWER")
    host, port = strom_broker.address(1).split(":")

    async def exchange() -> list[object]:
        connection = await KafkaConnection.connect(host, int(port))
        try:
            metadata = {
                "topics": [{"name": "pipelined", "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            }
            list_offsets = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "pipelined",
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                        ],
                    }
                ],
            }
            return list(
                await asyncio.gather(
                    connection.request(ApiKey.METADATA, 12, metadata),
                    connection.request(ApiKey.LIST_OFFSETS, 7, list_offsets),
                    connection.request(ApiKey.METADATA, 12, metadata),
                )
            )
        finally:
            connection.close()

    first, refused, last = asyncio.run(exchange())
    assert [t.name for t in first.topics] == ["pipelined"]  # type: ignore[attr-defined]
    partition = refused.topics[0].partitions[0]  # type: ignore[attr-defined]
    assert partition.error_code == ErrorCode.not_leader_or_follower
    assert [t.error_code for t in last.topics] == [ErrorCode.none]  # type: ignore[attr-defined]
    assert strom_broker.pending_faults() == 0


def test_a_burst_of_not_leader_errors_is_ridden_out_by_the_producer(
    strom_broker: StromCluster,
) -> None:
    strom_broker.create_topic("bursty")
    strom_broker.fail_requests("PRODUCE", "NOT_LEADER_OR_FOLLOWER", count=4)
    delivered = produce(strom_broker.bootstrap_servers, "bursty", 6, {"enable.idempotence": True})
    assert sorted(m.offset() for m in delivered) == list(range(6))
    assert strom_broker.pending_faults() == 0


def test_a_paused_leader_is_fenced_and_rejoins_when_resumed(strom_cluster: StromCluster) -> None:
    cluster = strom_cluster
    cluster.create_topic("paused", replication_factor=3)
    old = cluster.wait_for_leader("paused")
    with cluster.paused(old):
        cluster.wait_for_leader("paused", not_on=old, timeout_s=4 * cluster.session_timeout_s)
    cluster.wait_until(lambda: old in cluster.isr("paused"), 30, f"node {old} back in the ISR")


def test_a_forced_rebalance_gives_the_consumer_a_new_generation(
    strom_broker: StromCluster,
) -> None:
    strom_broker.create_topic("rebalanced", partitions=2)
    assigned: list[int] = []
    consumer = Consumer({"bootstrap.servers": strom_broker.bootstrap_servers, "group.id": "forced"})
    consumer.subscribe(["rebalanced"], on_assign=lambda _c, parts: assigned.append(len(parts)))
    try:
        strom_broker.wait_until(lambda: _polled(consumer, assigned) == 1, 20, "the first join")
        strom_broker.wait_for_group("forced", members=1)
        strom_broker.rebalance("forced")
        strom_broker.wait_until(lambda: _polled(consumer, assigned) == 2, 20, "the rejoin")
        assert assigned == [2, 2]
        strom_broker.wait_for_group("forced", members=1)
    finally:
        consumer.close()
    with pytest.raises(ClusterError, match="GROUP_ID_NOT_FOUND"):
        strom_broker.rebalance("no-such-group")


def test_a_wait_that_times_out_says_what_it_saw_last(strom_broker: StromCluster) -> None:
    strom_broker.create_topic("watched")
    consumer = Consumer({"bootstrap.servers": strom_broker.bootstrap_servers, "group.id": "left"})
    consumer.subscribe(["watched"])
    strom_broker.wait_until(
        lambda: consumer.poll(0.1) is None and consumer.assignment(), 20, "a join"
    )
    consumer.close()
    with pytest.raises(ClusterError, match=r"'left' to be Stable; last seen: Empty with 0 members"):
        strom_broker.wait_for_group("left", timeout_s=0.3)
    with pytest.raises(ClusterError, match=r"other than node 1; last seen: leader node 1, epoch"):
        strom_broker.wait_for_leader("watched", 0, not_on=1, timeout_s=0.3)


def _polled(consumer: Consumer, assigned: list[int]) -> int:
    consumer.poll(0.1)
    return len(assigned)


@pytest.mark.strom(nodes=2, config={"num.partitions": 4})
def test_the_marker_sets_the_size_and_the_config(strom_cluster: StromCluster) -> None:
    assert strom_cluster.node_ids == [1, 2]
    produce(strom_cluster.bootstrap_servers, "auto-created", 1)
    leaders = [strom_cluster.wait_for_leader("auto-created", p) for p in range(4)]
    assert set(leaders) <= {1, 2}


@pytest.mark.parametrize("strom_cluster", [{"nodes": 1}, {"nodes": 2}], indirect=True)
def test_indirect_parameters_set_the_size(strom_cluster: StromCluster) -> None:
    assert len(strom_cluster.node_ids) in (1, 2)
    assert strom_cluster.bootstrap_servers.count(",") == len(strom_cluster.node_ids) - 1


def test_child_process_nodes_take_the_same_faults() -> None:
    with StromCluster(nodes=3, processes=True) as cluster:
        cluster.create_topic("children", replication_factor=3)
        old = cluster.wait_for_leader("children")
        cluster.crash_node(old)
        cluster.wait_for_leader("children", not_on=old)
        cluster.start_node(old)
        cluster.wait_until(lambda: len(cluster.isr("children")) == 3, 30, "the ISR back")
        with pytest.raises(NodeError, match="needs an in-process node"):
            cluster.crash_node(old, lose_unflushed=True)
        produce(cluster.bootstrap_servers, "children", 5, {"acks": "all"})
        assert end_offset(cluster.bootstrap_servers, "children") == 5


def test_move_leader_hands_a_partition_to_the_chosen_replica(strom_cluster: StromCluster) -> None:
    cluster = strom_cluster
    cluster.create_topic("moved", replication_factor=3)
    old = cluster.wait_for_leader("moved")
    target = next(n for n in cluster.replicas("moved") if n != old)
    cluster.move_leader("moved", 0, to=target)
    assert cluster.leader("moved") == target
    assert cluster.replicas("moved")[0] == target
    produce(cluster.bootstrap_servers, "moved", 3, {"acks": "all"})
    assert end_offset(cluster.bootstrap_servers, "moved") == 3
    cluster.move_leader("moved", 0, to=target)  # already there: nothing to do
    with pytest.raises(ClusterError, match="not a replica"):
        cluster.move_leader("moved", 0, to=7)


def test_a_session_cluster_is_reset_after_a_test_that_cut_and_stopped(
    strom_session_cluster: StromCluster,
) -> None:
    """The first of a pair: leaves faults behind for the plugin to undo."""
    strom_session_cluster.create_topic("session", replication_factor=3)
    strom_session_cluster.cut(1, 2)
    strom_session_cluster.stop_node(3)
    strom_session_cluster.fail_requests("FETCH", "UNKNOWN_SERVER_ERROR", count=9)


def test_the_next_test_finds_the_session_cluster_whole(
    strom_session_cluster: StromCluster,
) -> None:
    """The second of the pair (pytest runs a module's tests in order)."""
    assert strom_session_cluster.cut_links == []
    assert all(strom_session_cluster.is_running(n) for n in strom_session_cluster.node_ids)
    assert strom_session_cluster.pending_faults() == 0
    strom_session_cluster.wait_for_leader("session")


def test_an_async_with_block_serves_kafka_python_and_kcat() -> None:
    import shutil
    import subprocess

    from kafka import KafkaConsumer, KafkaProducer

    async def main() -> list[bytes]:
        async with StromCluster() as cluster:
            await asyncio.to_thread(cluster.create_topic, "async")
            await cluster.wait_for_leader_async("async")
            producer = KafkaProducer(bootstrap_servers=cluster.bootstrap_servers)
            for i in range(3):
                producer.send("async", f"kp-{i}".encode()).get(timeout=10)
            producer.close()
            if shutil.which("kcat"):
                listing = subprocess.run(
                    ["kcat", "-b", cluster.bootstrap_servers, "-L", "-t", "async"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=True,
                )
                assert 'topic "async" with 1 partitions' in listing.stdout
            consumer = KafkaConsumer(
                "async",
                bootstrap_servers=cluster.bootstrap_servers,
                auto_offset_reset="earliest",
                consumer_timeout_ms=10_000,
            )
            values = []
            for message in consumer:
                values.append(message.value)
                if len(values) == 3:
                    break
            consumer.close()
            return values

    assert asyncio.run(main()) == [b"kp-0", b"kp-1", b"kp-2"]


def test_a_crash_drops_a_connection_whose_request_is_held(strom_broker: StromCluster) -> None:
    strom_broker.delay_requests("API_VERSIONS", 120.0)
    host, port = strom_broker.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as client:
        # ApiVersions v0: size, api key 18, version 0, correlation id 7, no client id
        client.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))
        strom_broker.wait_until(lambda: not strom_broker.pending_faults(), 10, "the request held")
        strom_broker.crash_node(1)
        assert client.recv(1) == b"", "the connection outlived its node"


def test_the_smallest_request_and_a_frame_too_small_to_read_pass_the_network(
    strom_broker: StromCluster,
) -> None:
    host, port = strom_broker.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))  # ApiVersions v0, ten bytes
        size, correlation_id = struct.unpack(">ii", _receive(client, 8))
        assert correlation_id == 7 and size > 4
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(struct.pack(">ih", 2, 18))  # no request is two bytes long
        assert client.recv(1) == b"", "the broker closes a connection that sends no frames"


def _receive(client: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = client.recv(size - len(data))
        assert chunk, "the connection closed early"
        data += chunk
    return data


def test_end_offsets_and_a_groups_committed_offsets(strom_broker: StromCluster) -> None:
    strom_broker.create_topic("counted", partitions=2)
    producer = Producer({"bootstrap.servers": strom_broker.bootstrap_servers})
    for i in range(5):
        producer.produce("counted", b"x", partition=i % 2)
    assert producer.flush(10) == 0
    assert strom_broker.end_offsets("counted") == {0: 3, 1: 2}
    assert strom_broker.committed("readers") == {}
    consumer = Consumer(
        {
            "bootstrap.servers": strom_broker.bootstrap_servers,
            "group.id": "readers",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.commit(
            offsets=[TopicPartition("counted", 0, 3), TopicPartition("counted", 1, 1)],
            asynchronous=False,
        )
    finally:
        consumer.close()
    assert strom_broker.committed("readers") == {("counted", 0): 3, ("counted", 1): 1}
    with pytest.raises(ClusterError, match="no topic 'nowhere'"):
        strom_broker.end_offsets("nowhere")
