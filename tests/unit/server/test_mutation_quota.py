"""`controller_mutation_rate` at the active controller (handlers/mutations.py,
server/throttling.py's ControllerMutationQuota): CreateTopics, DeleteTopics and
CreatePartitions count the partitions of their valid changes; strict versions refuse a
change while the client's bucket is below zero, older ones let it through; the answer
carries the wait; a node's own request is not counted. Around a real ControllerService
on the in-memory metadata store, with a manual clock; no socket, no sleep."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from pathlib import Path

from acl_admin_helpers import by_alice
from admin_harness import controller_with_brokers, create_topics, delete_named
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered
from server_harness import request, run

from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import ClientQuotaRecord
from strom.protocol.apis import ApiKey
from strom.server.broker import Broker
from strom.server.handlers import admin
from strom.server.handlers.ports import AdminContext
from strom.server.throttling import ControllerMutationQuota

E = ErrorCode
NOW_MS = 10**12


async def limited(node: Broker, rate: float) -> AdminContext:
    """`node`'s admin context, with alice's controller_mutation_rate `rate` a second."""
    assert node.controller is not None
    entity = QuotaEntity.user("alice")
    await node.controller.commit([ClientQuotaRecord(entity, "controller_mutation_rate", rate)])
    quota = ControllerMutationQuota(lambda: node.metadata.image, clock_ms=lambda: NOW_MS)
    return dataclasses.replace(admin_context(node), mutation_quota=quota)


def test_strict_creations_are_refused_once_the_bucket_is_below_zero(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = await limited(one, 2.0)  # a bucket of 22 partitions
        answer = await answered(
            admin.handle_create_topics,
            context,
            by_alice(create_topics(("a", 20, 1, {}), ("b", 10, 1, {}), ("c", 1, 1, {}))),
        )
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("a", E.none),
            ("b", E.none),  # may take the bucket below zero: to -8
            ("c", E.throttling_quota_exceeded),
        ]
        assert answer.topics[2].error_message == "The throttling quota has been exceeded."
        assert answer.throttle_time == timedelta(seconds=4)  # 8 partitions at 2 a second
        assert {"a", "b"} <= set(one.metadata.image.topics_by_name)
        assert "c" not in one.metadata.image.topics_by_name

        # A change the decision refuses costs nothing, and is answered for what it is.
        again = await answered(
            admin.handle_create_topics, context, by_alice(create_topics(("a", 5, 1, {})))
        )
        assert again.topics[0].error_code == E.topic_already_exists

        # Deleting counts the topic's partitions: refused too.
        deleted = await answered(admin.handle_delete_topics, context, by_alice(delete_named("a")))
        assert deleted.responses[0].error_code == E.throttling_quota_exceeded
        assert "a" in one.metadata.image.topics_by_name

    run(scenario())


def test_older_versions_are_let_through_and_told_to_wait(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = await limited(one, 1.0)  # 11 partitions
        v5 = request(
            ApiKey.CREATE_TOPICS,
            5,
            {
                "topics": [
                    {"name": name, "num_partitions": 10, "replication_factor": 1,
                     "assignments": [], "configs": []}
                    for name in ("x", "y")
                ],
                "timeout": 30_000,
                "validate_only": False,
            },
        )  # fmt: skip
        answer = await answered(admin.handle_create_topics, context, by_alice(v5))
        assert [t.error_code for t in answer.topics] == [E.none, E.none]
        assert answer.throttle_time == timedelta(seconds=9)  # 20 taken from 11

    run(scenario())


def test_a_nodes_own_creation_and_other_clients_are_not_counted(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = await limited(one, 1.0)
        own = await answered(admin.handle_create_topics, context, create_topics(("big", 50, 1, {})))
        assert own.topics[0].error_code == E.none and own.throttle_time == timedelta(0)
        bob = dataclasses.replace(
            by_alice(create_topics(("bobs", 50, 1, {}))), principal="User:bob"
        )
        answer = await answered(admin.handle_create_topics, context, bob)
        assert answer.topics[0].error_code == E.none and answer.throttle_time == timedelta(0)

    run(scenario())
