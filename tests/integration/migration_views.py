"""What the broker says about a group during a protocol migration: its type, state and
members (confluent-kafka's AdminClient, and ConsumerGroupDescribe v1 by hand for each
member's type, which the client does not show), its committed offsets and the log ends."""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient
from kafka_wire import call, connect
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.types import GroupId

CLASSIC_MEMBER, CONSUMER_MEMBER = 0, 1
"""ConsumerGroupDescribe v1's member_type (KIP-1099): 0 classic, 1 consumer, -1 unknown."""

TIMEOUT_S = 10


@dataclass(frozen=True, slots=True)
class GroupView:
    """describe_consumer_groups' answer: type and state names (CONSUMER, STABLE, ...)
    and the client ids of the members."""

    type: str
    state: str
    client_ids: frozenset[str]


def describe(bootstrap: str, group: str) -> GroupView:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer
    found = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    return GroupView(
        found.type.name, found.state.name, frozenset(m.client_id for m in found.members)
    )


def member_types(port: int, group: str) -> tuple[int, dict[str, int]]:
    """ConsumerGroupDescribe v1 of `group` from the broker on `port` (its coordinator, on
    a single node): the error code, and each member's member_type by client id."""
    error, members = consumer_group_members(port, group)
    return error, {client_id: kind for client_id, (_, kind) in members.items()}


def consumer_group_members(port: int, group: str) -> tuple[int, dict[str, tuple[str, int]]]:
    """ConsumerGroupDescribe v1 of `group` from the broker on `port`: the error code, and
    each member's (member id, member_type) by client id."""
    request = ConsumerGroupDescribeRequest(
        group_ids=(GroupId(group),), include_authorized_operations=False
    )
    with connect(port) as sock:
        described = call(sock, request).groups[0]
    members = {m.client_id: (str(m.member_id), int(m.member_type)) for m in described.members}
    return int(described.error_code), members


def member_ids(bootstrap: str, group: str) -> dict[str, str]:
    """Each member's member id by client id, as describe_consumer_groups tells them (of a
    classic group or a consumer group)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer
    found = admin.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    return {m.client_id: m.member_id for m in found.members}


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until the answer
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(partitions)]
    )
    found = admin.list_consumer_group_offsets([request])[group].result(TIMEOUT_S)
    return {tp.partition: tp.offset for tp in found.topic_partitions}


def log_end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-log-ends"})
    try:  # the high watermarks, asked of the leaders: no group is joined
        ends = {}
        for p in range(partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)
            ends[p] = int(high)
        return ends
    finally:
        consumer.close()
