"""The fixture's own questions to the cluster, over the Kafka protocol.

The fixture asks the nodes directly on their private ports, past the test network, so a
cut the test made never hides the truth from it. Each call runs on the cluster's control
loop with strom's asyncio client.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client import ClientError, NodeClient
from strom.protocol.apis import ApiKey

CLIENT_ID = "strom-testing"
_METADATA_V = 12
_FIND_COORDINATOR_V = 4
_DESCRIBE_GROUPS_V = 5
_CREATE_TOPICS_V = 7
_REASSIGN_V = 0
_ELECT_LEADERS_V = 2
_LIST_OFFSETS_V = 7
_OFFSET_FETCH_V = 7
_LATEST = -1
_GROUP_KEY = 0


class AdminError(RuntimeError):
    """The cluster refused what the fixture asked; the message has its error code."""


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    """A partition as one node's metadata has it."""

    leader_id: int
    """-1: no leader."""
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class GroupStatus:
    state: str
    """Kafka's group state name: Empty, PreparingRebalance, CompletingRebalance, Stable,
    Dead."""
    members: tuple[str, ...]
    coordinator_id: int


async def partitions(client: NodeClient, topic: str) -> dict[int, PartitionStatus] | None:
    """Every partition of `topic` as `client`'s node sees it; None if it knows no such
    topic."""
    response = await client.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": topic, "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        api_version=_METADATA_V,
        timeout_s=5.0,
    )
    for described in response.topics:
        if described.name != topic or described.error_code != ErrorCode.none:
            continue
        return {
            int(p.partition_index): PartitionStatus(
                int(p.leader_id),
                int(p.leader_epoch),
                tuple(int(r) for r in p.replica_nodes),
                tuple(int(r) for r in p.isr_nodes),
            )
            for p in described.partitions
        }
    return None


async def create_topic(
    client: NodeClient,
    name: str,
    partition_count: int,
    replication_factor: int,
    configs: Mapping[str, str],
) -> None:
    response = await client.request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partition_count,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
        api_version=_CREATE_TOPICS_V,
        timeout_s=35.0,
    )
    result = response.topics[0]
    if result.error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
        why = f" ({result.error_message})" if result.error_message else ""
        raise AdminError(f"creating topic {name!r}: {result.error_code.name.upper()}{why}")


async def coordinator(clients: Mapping[int, NodeClient], group_id: str) -> int | None:
    """The node coordinating the group, as the first node that can say says; None if
    none can yet."""
    for client in clients.values():
        try:
            found = await client.request(
                ApiKey.FIND_COORDINATOR,
                {"key_type": _GROUP_KEY, "coordinator_keys": [group_id]},
                api_version=_FIND_COORDINATOR_V,
                timeout_s=5.0,
            )
        except ClientError:
            continue
        answer = found.coordinators[0]
        if answer.error_code == ErrorCode.none:
            return int(answer.node_id)
    return None


async def group(clients: Mapping[int, NodeClient], group_id: str) -> GroupStatus | None:
    """The group as its coordinator describes it; None if no node can say yet."""
    node_id = await coordinator(clients, group_id)
    owner = None if node_id is None else clients.get(node_id)
    if owner is None or node_id is None:
        return None
    try:
        described = await owner.request(
            ApiKey.DESCRIBE_GROUPS,
            {"groups": [group_id], "include_authorized_operations": False},
            api_version=_DESCRIBE_GROUPS_V,
            timeout_s=5.0,
        )
    except ClientError:
        return None
    result = described.groups[0]
    if result.error_code != ErrorCode.none:
        return None
    return GroupStatus(
        str(result.group_state), tuple(str(m.member_id) for m in result.members), node_id
    )


async def committed(
    clients: Mapping[int, NodeClient], group_id: str
) -> dict[tuple[str, int], int] | None:
    """Every offset the group has committed, by (topic, partition); None if its
    coordinator cannot say yet."""
    node_id = await coordinator(clients, group_id)
    owner = None if node_id is None else clients.get(node_id)
    if owner is None:
        return None
    try:
        response = await owner.request(
            ApiKey.OFFSET_FETCH,
            {"group_id": group_id, "topics": None, "require_stable": True},
            api_version=_OFFSET_FETCH_V,
            timeout_s=5.0,
        )
    except ClientError:
        return None
    if response.error_code != ErrorCode.none:
        return None
    return {
        (str(topic.name), int(p.partition_index)): int(p.committed_offset)
        for topic in response.topics
        for p in topic.partitions
        if p.error_code == ErrorCode.none and p.committed_offset >= 0
    }


async def end_offset(client: NodeClient, topic: str, partition: int) -> int | None:
    """The partition's latest offset as its leader (`client`) answers ListOffsets: the
    high watermark, up to which consumers read. None if that node does not lead it."""
    response = await client.request(
        ApiKey.LIST_OFFSETS,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": partition, "timestamp": _LATEST}],
                }
            ],
        },
        api_version=_LIST_OFFSETS_V,
        timeout_s=5.0,
    )
    answer = response.topics[0].partitions[0]
    return int(answer.offset) if answer.error_code == ErrorCode.none else None


async def reassign(client: NodeClient, topic: str, partition: int, replicas: Sequence[int]) -> None:
    response = await client.request(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        {
            "timeout": 30_000,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": partition, "replicas": list(replicas)}],
                }
            ],
        },
        api_version=_REASSIGN_V,
        timeout_s=35.0,
    )
    errors = [response.error_code] + [
        p.error_code for t in response.responses for p in t.partitions
    ]
    refused = [e for e in errors if e != ErrorCode.none]
    if refused:
        raise AdminError(
            f"reassigning {topic}-{partition} to {list(replicas)}: {refused[0].name.upper()}"
        )


async def elect_preferred(client: NodeClient, topic: str, partition: int) -> ErrorCode:
    """ElectLeaders (preferred) for one partition: its error code (ELECTION_NOT_NEEDED
    when the preferred replica already leads)."""
    response: Any = await client.request(
        ApiKey.ELECT_LEADERS,
        {
            "election_type": 0,
            "topic_partitions": [{"topic": topic, "partitions": [partition]}],
            "timeout": 30_000,
        },
        api_version=_ELECT_LEADERS_V,
        timeout_s=35.0,
    )
    if response.error_code != ErrorCode.none:
        return ErrorCode(response.error_code)
    for result in response.replica_election_results:
        for partition_result in result.partition_result:
            return ErrorCode(partition_result.error_code)
    return ErrorCode.unknown_server_error
