"""ApiVersions, Metadata (with topic auto-creation) and DescribeCluster, called with their
context around a real ControllerService on the in-memory metadata store: no broker
started, no socket, no sleep. Every answer is read as a client reads it."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any

import pytest
from admin_harness import TOPIC, controller_with_brokers, create_topics
from kio.schema.errors import ErrorCode
from quorum_harness import Loopback, admin_context, answered
from server_harness import request, run

from strom.config import load_config
from strom.metadata.records import FenceBrokerRecord, RegisterBrokerRecord
from strom.protocol.apis import ApiKey
from strom.server.broker import Broker
from strom.server.handlers import admin, cluster
from strom.server.handlers.ports import ClusterContext, ControllerLink
from strom.server.transactions import TRANSACTION_VERSION


def context_of(node: Broker, **overrides: str) -> ClusterContext:
    """`node`'s cluster handlers' context as Broker builds it; `overrides` stand in for
    broker config keys."""
    config = (
        load_config(
            overrides=[
                f"node.id={node.node_id}",
                f"log.dirs={node.config.log_dir}",
                *(f"{key}={value}" for key, value in overrides.items()),
            ]
        )
        if overrides
        else None
    )
    return ClusterContext(
        node_id=node.node_id,
        metadata=node.metadata,
        cluster_id=lambda: node.cluster_id,
        channel=node.channel,
        admin=admin_context(node, config=config),
    )


def metadata(*names: str | None, version: int = 12, auto_create: bool = True) -> Any:
    topics = None if not names else [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names]
    return request(
        ApiKey.METADATA,
        version,
        {
            "topics": topics,
            "allow_auto_topic_creation": auto_create,
            "include_topic_authorized_operations": False,
        },
    )


def describe_cluster(*, include_fenced: bool) -> Any:
    return request(
        ApiKey.DESCRIBE_CLUSTER,
        2,
        {
            "include_cluster_authorized_operations": False,
            "endpoint_type": 1,
            "include_fenced_brokers": include_fenced,
        },
    )


def test_metadata_lists_the_cluster_the_live_brokers_and_every_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await answered(
            admin.handle_create_topics, admin_context(one), create_topics((TOPIC, 2, 3, {}))
        )
        assert one.controller is not None
        await one.controller.commit(
            [RegisterBrokerRecord(4, uuid.UUID(int=4), "fenced.example", 9004, None, fenced=True)]
        )
        answer = await answered(cluster.handle_metadata, context_of(one), metadata())
        assert answer.cluster_id == one.metadata.image.cluster_id and answer.cluster_id
        assert answer.controller_id == 1
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [
            (1, "localhost", 9001),
            (2, "localhost", 9002),
            (3, "localhost", 9003),
        ]  # fenced broker 4 is not offered to clients
        (topic,) = [t for t in answer.topics if t.name == TOPIC]
        assert topic.error_code == ErrorCode.none
        assert topic.topic_id == one.metadata.image.topics_by_name[TOPIC].topic_id
        committed = one.metadata.image.topics_by_name[TOPIC].partitions
        assert [p.partition_index for p in topic.partitions] == [0, 1]
        for partition in topic.partitions:
            state = committed[partition.partition_index]
            assert partition.error_code == ErrorCode.none
            assert partition.leader_id == state.leader
            assert tuple(partition.replica_nodes) == state.replicas
            assert tuple(partition.isr_nodes) == state.isr

    run(scenario())


def test_metadata_auto_creates_a_missing_topic_only_when_both_sides_allow_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        refused_by_client = await answered(
            cluster.handle_metadata, context_of(one), metadata("fresh", auto_create=False)
        )
        assert [(t.name, t.error_code) for t in refused_by_client.topics] == [
            ("fresh", ErrorCode.unknown_topic_or_partition)
        ]
        off = context_of(one, **{"auto.create.topics.enable": "false"})
        refused_by_broker = await answered(cluster.handle_metadata, off, metadata("fresh"))
        assert refused_by_broker.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert "fresh" not in one.metadata.image.topics_by_name

        created = await answered(cluster.handle_metadata, context_of(one), metadata("fresh"))
        (topic,) = created.topics
        assert (topic.name, topic.error_code) == ("fresh", ErrorCode.none)
        assert len(topic.partitions) == one.config.num_partitions
        assert "fresh" in one.metadata.image.topics_by_name

        bad = await answered(cluster.handle_metadata, context_of(one), metadata("bad/name"))
        assert bad.topics[0].error_code == ErrorCode.invalid_topic_exception
        assert "bad/name" not in one.metadata.image.topics_by_name

    run(scenario())


def test_metadata_by_topic_id_answers_unknown_ids(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        asked = request(
            ApiKey.METADATA,
            12,
            {
                "topics": [{"name": None, "topic_id": uuid.UUID(int=99)}],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        answer = await answered(cluster.handle_metadata, context_of(one), asked)
        (topic,) = answer.topics
        assert (topic.error_code, topic.topic_id) == (ErrorCode.unknown_topic_id, uuid.UUID(int=99))

    run(scenario())


def test_a_lone_broker_fenced_while_it_stops_still_lists_itself(tmp_path: Path) -> None:
    """A single broker's controlled shutdown fences it before its connections close: its
    Metadata answers then list it, not nothing (librdkafka would forget every broker)."""

    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        assert one.controller is not None
        brokers = one.metadata.image.brokers
        await one.controller.commit([FenceBrokerRecord(b, brokers[b].epoch) for b in brokers])
        assert all(b.fenced for b in one.metadata.image.brokers.values())
        starting = await answered(cluster.handle_metadata, context_of(one), metadata())
        assert starting.brokers == ()  # not yet unfenced: none, as Kafka answers
        stopping = dataclasses.replace(context_of(one), stopping=lambda: True)
        answer = await answered(cluster.handle_metadata, stopping, metadata())
        assert [(b.node_id, b.host, b.port) for b in answer.brokers] == [(1, "localhost", 9001)]

    run(scenario())


def test_describe_cluster_lists_fenced_brokers_only_when_asked(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        assert one.controller is not None
        await one.controller.commit(
            [RegisterBrokerRecord(4, uuid.UUID(int=4), "fenced.example", 9004, None, fenced=True)]
        )
        live = await answered(
            cluster.handle_describe_cluster, context_of(one), describe_cluster(include_fenced=False)
        )
        assert live.error_code == ErrorCode.none and live.controller_id == 1
        assert live.cluster_id == one.metadata.image.cluster_id
        assert [b.broker_id for b in live.brokers] == [1, 2, 3]
        every = await answered(
            cluster.handle_describe_cluster, context_of(one), describe_cluster(include_fenced=True)
        )
        assert [(b.broker_id, b.is_fenced) for b in every.brokers] == [
            (1, False),
            (2, False),
            (3, False),
            (4, True),
        ]

    run(scenario())


def test_the_controller_id_clients_get(tmp_path: Path) -> None:
    """The active controller when it is a live broker; this broker when the controller is
    not one clients can reach (a controller-only node, or fenced); with none, -1 in
    DescribeCluster and this broker in Metadata."""

    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        image = one.metadata.image

        def controller_id(leader: int | None) -> tuple[int, int]:
            channel: ControllerLink = Loopback(leader_id=leader, session=None)
            at = ClusterContext(
                node_id=2,
                metadata=one.metadata,
                cluster_id=lambda: one.cluster_id,
                channel=channel,
                admin=admin_context(one),
            )
            return cluster.controller_id(at, image), cluster.metadata_controller_id(at, image)

        assert controller_id(3) == (3, 3)  # a live broker
        assert controller_id(7) == (2, 2)  # not a registered broker: a controller-only node
        assert controller_id(None) == (-1, 2)  # DescribeCluster says none; Metadata: itself

    run(scenario())


def test_api_versions_lists_the_apis_with_their_version_ranges(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        asked = request(
            ApiKey.API_VERSIONS,
            3,
            {"client_software_name": "test", "client_software_version": "1"},
        )
        answer = await answered(cluster.handle_api_versions, context_of(one), asked)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert answer.error_code == ErrorCode.none
        assert ranges[ApiKey.METADATA] == (0, 13)
        assert ApiKey.PRODUCE in ranges and ApiKey.FETCH in ranges

    run(scenario())


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_advertises_the_transaction_version_feature(
    tmp_path: Path, version: int
) -> None:
    """Kafka 4.0's Java client reads the finalized `transaction.version` (v3+) to choose
    its transaction protocol; v0-v3 leave out supported features whose minimum is 0."""

    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        body = {"client_software_name": "test", "client_software_version": "1"}
        answer = await answered(
            cluster.handle_api_versions,
            context_of(one),
            request(ApiKey.API_VERSIONS, version, body),
        )
        ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
        assert ranges[ApiKey.END_TXN] == (0, 5)
        assert ranges[ApiKey.ADD_PARTITIONS_TO_TXN] == (0, 5)
        if version < 3:
            return  # no feature fields before v3
        supported = {f.name: (f.min_version, f.max_version) for f in answer.supported_features}
        assert supported == ({"transaction.version": (0, 2)} if version >= 4 else {})
        finalized = {
            f.name: (f.min_version_level, f.max_version_level) for f in answer.finalized_features
        }
        assert finalized == {"transaction.version": (TRANSACTION_VERSION, TRANSACTION_VERSION)}
        assert answer.finalized_features_epoch >= 0  # else clients ignore the levels

    run(scenario())
