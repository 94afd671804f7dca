"""The share coordinator on a three-node cluster: share-partition states kept in
`__share_group_state`, reached with the five share-state RPCs over strom's own client,
and surviving a `kill -9` of the coordinator's broker.

The state is written a few hundred times (with a snapshot every 50 updates), then read
back through strom's `ShareStateClient` (the port share-partition leaders use) from this
test process, which is no coordinator: it finds the leader of the key's partition and
retries NOT_COORDINATOR while leadership moves. The partition is pruned (every 300 ms)
up to the key's latest snapshot before the kill; after it the new leader replays the
partition's log from its pruned start and answers the same state.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

sys.path.insert(0, str(Path(__file__).parent))

from cluster import TestCluster, running_cluster
from group_members import wait_until

from strom.client import ClientError, KafkaConnection
from strom.protocol.apis import ApiKey
from strom.server.share_coordinator import ShareCoordinatorUnavailable
from strom.server.share_state_client import ShareStateClient
from strom.share.batches import combine_batches
from strom.share.placement import SHARE_STATE_TOPIC, share_coordinator_key, share_state_partition
from strom.share.records import StateBatch
from strom.share.state_port import ShareStateKey, ShareStateWrite

STATE_PARTITIONS = 3
SETTINGS = [
    "broker.session.timeout.ms=3000",
    "broker.heartbeat.interval.ms=300",
    "default.replication.factor=3",
    f"share.coordinator.state.topic.num.partitions={STATE_PARTITIONS}",
    "share.coordinator.state.topic.replication.factor=3",
    "share.coordinator.snapshot.update.records.per.snapshot=50",
    "leader.imbalance.check.interval.seconds=300",
    "share.coordinator.state.topic.prune.interval.ms=300",
]
GROUP = "workers"
WRITES = 300


def _topic_id(cluster: TestCluster, name: str) -> uuid.UUID:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 3)])[name].result(30)
    found = admin.describe_topics(TopicCollection([name]))[name].result(10)
    raw = found.topic_id
    msb = raw.get_most_significant_bits() & (2**64 - 1)
    lsb = raw.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


class RemoteOnly:
    """The port's idea of "this broker" for a process that is none: it leads nothing, and
    learns the leaders of `__share_group_state` with a Metadata request."""

    def __init__(self, cluster: TestCluster, alive: set[int]) -> None:
        self.cluster = cluster
        self.alive = alive
        self.leaders: dict[int, int] = {}

    @property
    def num_partitions(self) -> int:
        return STATE_PARTITIONS

    def partition_of(self, key: ShareStateKey) -> int:
        return share_state_partition(key.group_id, key.topic_id, key.partition, STATE_PARTITIONS)

    def leader_of(self, index: int) -> int:
        return self.leaders.get(index, -1)

    async def ensure_topic(self) -> None:
        for node_id in sorted(self.alive):
            host, port = self.cluster.address(node_id).rsplit(":", 1)
            try:
                connection = await KafkaConnection.connect(host, int(port), timeout_s=3.0)
            except OSError:
                continue
            try:
                body = {
                    "topics": [{"name": SHARE_STATE_TOPIC}],
                    "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": False,
                    "include_topic_authorized_operations": False,
                }
                metadata = await connection.request(ApiKey.METADATA, 9, body, timeout_s=5.0)
            except (ClientError, OSError, TimeoutError):
                continue
            finally:
                connection.close()
            for topic in metadata.topics:
                if topic.name == SHARE_STATE_TOPIC:
                    self.leaders = {
                        int(p.partition_index): int(p.leader_id) for p in topic.partitions
                    }
                    return

    async def _never(self, *args: object) -> Any:
        raise ShareCoordinatorUnavailable(ErrorCode.not_coordinator, "not a broker")

    initialize = read = write = delete = summary = _never

    def follow(self, image: Any) -> None:
        pass

    async def run_pruning(self) -> None:
        pass

    def close(self) -> None:
        pass


async def _rpc(cluster: TestCluster, node_id: int, api_key: int, version: int, body: Any) -> Any:
    host, port = cluster.address(node_id).rsplit(":", 1)
    connection = await KafkaConnection.connect(host, int(port), timeout_s=3.0)
    try:
        return await connection.request(api_key, version, body, timeout_s=20.0)
    finally:
        connection.close()


def _log_start(cluster: TestCluster, index: int) -> int:
    """Where `__share_group_state`-`index` starts at its leader (ListOffsets earliest)."""
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "watcher"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(SHARE_STATE_TOPIC, index), 5)
    finally:
        consumer.close()
    return int(low)


def _coordinator(cluster: TestCluster, key: str) -> int:
    async def find() -> int:
        body = {"key_type": 2, "coordinator_keys": [key]}
        for _ in range(100):
            response = await _rpc(cluster, 1, ApiKey.FIND_COORDINATOR, 6, body)
            entry = response.coordinators[0]
            if entry.error_code == ErrorCode.none:
                return int(entry.node_id)
            await asyncio.sleep(0.2)
        raise AssertionError(f"no share coordinator for {key}: {entry}")

    return asyncio.run(find())


def test_share_state_survives_the_coordinators_death(tmp_path: Path) -> None:
    with running_cluster(tmp_path, 3, settings=SETTINGS) as cluster:
        topic_id = _topic_id(cluster, "work")
        key = ShareStateKey(GROUP, topic_id, 0)
        coordinator = _coordinator(cluster, share_coordinator_key(GROUP, topic_id, 0))
        others = [n for n in cluster.node_ids if n != coordinator]
        bad = asyncio.run(
            _rpc(
                cluster,
                1,
                ApiKey.FIND_COORDINATOR,
                6,
                {"key_type": 2, "coordinator_keys": ["no-colons"]},
            )
        )
        assert bad.coordinators[0].error_code == ErrorCode.invalid_request

        alive = set(cluster.node_ids)
        remote = RemoteOnly(cluster, alive)

        async def scenario() -> tuple[Any, list[StateBatch], int]:
            port = ShareStateClient(
                node_id=-1,
                coordinator=remote,
                address=lambda n: (
                    (cluster.address(n).rsplit(":", 1)[0], int(cluster.address(n).rsplit(":")[1]))
                    if n in alive
                    else None
                ),
                deadline_s=30.0,
            )
            try:
                assert await port.initialize(key, 0, 0) == (ErrorCode.none, None)
                read = await port.read(key, 1)
                assert (read.error, read.start_offset, read.state_batches) == (
                    ErrorCode.none,
                    0,
                    (),
                )
                # the RPC itself, at a broker that is not the coordinator
                wire = {
                    "group_id": GROUP,
                    "topics": [
                        {"topic_id": topic_id, "partitions": [{"partition": 0, "leader_epoch": 1}]}
                    ],
                }
                elsewhere = await _rpc(cluster, others[0], ApiKey.READ_SHARE_GROUP_STATE, 0, wire)
                assert elsewhere.results[0].partitions[0].error_code == ErrorCode.not_coordinator

                expected: tuple[StateBatch, ...] = ()
                start = 0
                for i in range(WRITES):
                    batches = (StateBatch(i, i, 2 if i % 3 else 4, 1 + i % 2),)
                    moved = i - 40 if i % 50 == 49 else -1
                    write = ShareStateWrite(0, 1, moved, batches)
                    assert await port.write(key, write) == (ErrorCode.none, None), i
                    start = max(start, moved)
                    expected = combine_batches(expected, batches, start)
                # fencing: an older leader epoch, an older state epoch
                stale = await port.write(key, ShareStateWrite(0, 0, -1, ()))
                assert stale[0] is ErrorCode.fenced_leader_epoch
                assert (await port.read(key, 0)).error is ErrorCode.fenced_leader_epoch
                read = await port.read(key, 1)
                assert (read.start_offset, read.state_batches) == (start, expected)
                return read, list(expected), start
            finally:
                port.close()

        before, expected, start = asyncio.run(scenario())
        index = share_state_partition(GROUP, topic_id, 0, STATE_PARTITIONS)
        wait_until(lambda: _log_start(cluster, index) > 0, 30, f"{SHARE_STATE_TOPIC} pruned")

        cluster.kill(coordinator)  # kill -9
        alive.discard(coordinator)

        async def after() -> None:
            port = ShareStateClient(
                node_id=-1,
                coordinator=remote,
                address=lambda n: (
                    (cluster.address(n).rsplit(":", 1)[0], int(cluster.address(n).rsplit(":")[1]))
                    if n in alive
                    else None
                ),
                deadline_s=30.0,
            )
            try:
                read = await port.read(key, 2)  # a new leader's epoch
                assert read.error is ErrorCode.none, read
                assert (read.state_epoch, read.start_offset) == (0, start)
                assert list(read.state_batches) == expected
                stale = await port.write(key, ShareStateWrite(0, 1, -1, ()))
                assert stale[0] is ErrorCode.fenced_leader_epoch
                assert await port.initialize(key, 1, 500) == (ErrorCode.none, None)
                fenced = await port.write(key, ShareStateWrite(0, 2, -1, ()))
                assert fenced[0] is ErrorCode.fenced_state_epoch
                summary = await port.summary(key, 2)
                assert (summary.error, summary.state_epoch, summary.start_offset) == (
                    ErrorCode.none,
                    1,
                    500,
                )
                assert await port.delete(key) == (ErrorCode.none, None)
                gone = await port.read(key, 2)
                assert gone.error is ErrorCode.invalid_request
            finally:
                port.close()

        asyncio.run(after())
        assert before.state_epoch == 0
