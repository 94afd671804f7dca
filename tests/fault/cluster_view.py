"""Who leads what, asked of each live node with strom's own client.

Every node is asked directly (Metadata, DescribeQuorum) with a deadline of its own, all
at once, so a question never waits on a dead or paused node and never reaches another
node than the one meant, which librdkafka's metadata calls cannot promise while nodes come
and go. Views can be stale: the freshest answer (the highest leader epoch) wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from strom.client import ClientError, KafkaConnection
from strom.metadata.znodes import parse_controller
from strom.protocol.apis import ApiKey

QUERY_TIMEOUT_S = 2.0
_METADATA_VERSION = 12
_DESCRIBE_QUORUM_VERSION = 2


@dataclass(frozen=True, slots=True)
class PartitionView:
    leader: int
    """-1 while the partition has no leader."""
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node's metadata of the topic."""

    node: int
    controller: int
    partitions: dict[int, PartitionView]


async def _ask(address: str, api_key: int, version: int, fields: dict[str, Any]) -> Any:
    host, port = address.rsplit(":", 1)
    async with asyncio.timeout(QUERY_TIMEOUT_S):
        connection = await KafkaConnection.connect(host, int(port), timeout_s=QUERY_TIMEOUT_S)
        try:
            return await connection.request(api_key, version, fields, timeout_s=QUERY_TIMEOUT_S)
        finally:
            connection.close()


async def _ask_all(
    addresses: Mapping[int, str], api_key: int, version: int, fields: dict[str, Any]
) -> dict[int, Any]:
    nodes = list(addresses)
    answers = await asyncio.gather(
        *(_ask(addresses[n], api_key, version, fields) for n in nodes), return_exceptions=True
    )
    found = {}
    for node_id, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, BaseException):
            if not isinstance(answer, ClientError | OSError | TimeoutError):
                raise answer
            continue
        found[node_id] = answer
    return found


def topic_views(addresses: Mapping[int, str], topic: str) -> dict[int, NodeView]:
    """node id -> its view of `topic`, for each node in `addresses` that answered."""
    fields = {
        "topics": [{"name": topic, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    answers = asyncio.run(_ask_all(addresses, ApiKey.METADATA, _METADATA_VERSION, fields))
    views = {}
    for node_id, answer in answers.items():
        topics = [t for t in answer.topics if t.name == topic and int(t.error_code) == 0]
        if not topics:
            continue
        partitions = {
            int(p.partition_index): PartitionView(
                leader=int(p.leader_id),
                leader_epoch=int(p.leader_epoch),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
            )
            for p in topics[0].partitions
        }
        views[node_id] = NodeView(node_id, int(answer.controller_id), partitions)
    return views


def freshest(views: Mapping[int, NodeView], partition: int) -> PartitionView | None:
    """The view of `partition` with the highest leader epoch among the answers."""
    known = [v.partitions[partition] for v in views.values() if partition in v.partitions]
    return max(known, key=lambda view: view.leader_epoch, default=None)


def active_controller(addresses: Mapping[int, str]) -> int | None:
    """The metadata quorum's leader as the node with the newest term sees it."""
    fields = {
        "topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]
    }
    answers = asyncio.run(
        _ask_all(addresses, ApiKey.DESCRIBE_QUORUM, _DESCRIBE_QUORUM_VERSION, fields)
    )
    best: tuple[int, int] | None = None
    for answer in answers.values():
        if int(answer.error_code) != 0 or not answer.topics:
            continue
        partition = answer.topics[0].partitions[0]
        term, leader_id = int(partition.leader_epoch), int(partition.leader_id)
        if leader_id >= 0 and (best is None or term > best[0]):
            best = (term, leader_id)
    return None if best is None else best[1]


def zookeeper_controller(connect: str) -> int | None:
    """The active controller of a cluster on ZooKeeper: the broker holding `/controller`
    under the chroot of `connect` (DescribeQuorum has no quorum to describe there)."""
    client = KazooClient(hosts=connect, timeout=QUERY_TIMEOUT_S)
    try:
        client.start(timeout=QUERY_TIMEOUT_S)
        data, _ = client.get("/controller")
        return parse_controller(data)
    except (NoNodeError, KazooTimeoutError, KazooException, ValueError):
        return None
    finally:
        client.stop()
        client.close()


def not_recovered(
    views: Mapping[int, NodeView], nodes: list[int], partitions: list[int]
) -> str | None:
    """None when every node answered and all agree that every partition has a leader and
    its full replica set in the ISR; otherwise what is still missing."""
    silent = [n for n in nodes if n not in views]
    if silent:
        return f"no metadata from nodes {silent}"
    for partition in partitions:
        seen = {n: v.partitions.get(partition) for n, v in views.items()}
        first = seen[nodes[0]]
        if first is None or any(view != first for view in seen.values()):
            return f"nodes disagree on partition {partition}: {seen}"
        if first.leader < 0:
            return f"partition {partition} has no leader"
        if sorted(first.isr) != sorted(first.replicas):
            return f"partition {partition} has ISR {list(first.isr)} of {list(first.replicas)}"
    return None


def leaderless(views: Mapping[int, NodeView], partitions: list[int]) -> list[int]:
    """The partitions whose freshest view has no leader (or that no node knows)."""
    missing = []
    for partition in partitions:
        view = freshest(views, partition)
        if view is None or view.leader < 0:
            missing.append(partition)
    return missing
