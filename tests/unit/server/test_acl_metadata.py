"""ACL checks of Metadata and DescribeCluster, around a real ControllerService on the
in-memory metadata store, as Kafka's KafkaApis makes them: Metadata shows only the topics
the principal may DESCRIBE (left out of an all-topics answer, TOPIC_AUTHORIZATION_FAILED
when named, whether they exist or not), auto-creates a topic only with CREATE on the
cluster or the topic, and tells the authorized operations asked for; DescribeCluster on a
controller listener needs ALTER on the cluster. Without an authorizer nothing changes.
No socket, no sleep."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from acl_admin_helpers import DENY, PREFIXED, Op, acl, by_alice, cluster_acl, guarded
from admin_harness import controller_with_brokers, create_topics
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered
from server_harness import request, run
from test_acl_cluster_admin import says_who
from test_cluster_handlers import context_of

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.security.acls import AclBinding
from strom.security.operations import OMITTED, SUPPORTED_OPERATIONS, AclResourceType
from strom.server.broker import Broker
from strom.server.handlers import admin, cluster
from strom.server.handlers.ports import ClusterContext

E = ErrorCode
NO_ID = uuid.UUID(int=0)
CONTROLLER = "CONTROLLER"
"""The node's controller listener in these tests (ForwardPort.controller_listeners)."""


async def topics(node: Broker, *names: str) -> None:
    """`names` created (one partition, one replica each), no authorizer asked."""
    answer = await answered(
        admin.handle_create_topics,
        admin_context(node),
        create_topics(*((name, 1, 1, {}) for name in names)),
    )
    assert {t.error_code for t in answer.topics} == {E.none}


def alice_s(context: ClusterContext, *bindings: AclBinding) -> ClusterContext:
    """`context` whose admin port's authorizer decides by `bindings` alone."""
    return replace(context, admin=guarded(context.admin, *bindings))


def on_controller_listener(context: ClusterContext) -> ClusterContext:
    """`context` of a node that has CONTROLLER as a controller listener."""
    forward = replace(context.admin.forward, controller_listeners=frozenset({CONTROLLER}))
    return replace(context, admin=replace(context.admin, forward=forward))


def metadata(
    *names: str,
    version: int = 12,
    auto_create: bool = False,
    topic_operations: bool = False,
    cluster_operations: bool = False,
) -> Request:
    """Metadata of `names` (none: every topic), as ALICE sends it."""
    asked = None if not names else [{"name": n, "topic_id": NO_ID} for n in names]
    return by_alice(
        request(
            ApiKey.METADATA,
            version,
            {
                "topics": asked,
                "allow_auto_topic_creation": auto_create,
                "include_topic_authorized_operations": topic_operations,
                "include_cluster_authorized_operations": cluster_operations,
            },
        )
    )


def describe_cluster(*, listener: str = "PLAINTEXT", operations: bool = False) -> Request:
    return by_alice(
        request(
            ApiKey.DESCRIBE_CLUSTER,
            2,
            {
                "include_cluster_authorized_operations": operations,
                "endpoint_type": 1,
                "include_fenced_brokers": False,
            },
        ),
        listener=listener,
    )


def listed(answer: Any) -> list[tuple[str | None, ErrorCode, int]]:
    """Each topic of a Metadata answer: its name, error and number of partitions."""
    return [(t.name, E(t.error_code), len(t.partitions)) for t in answer.topics]


def bits(*operations: Op) -> int:
    return sum(1 << op for op in operations)


# --- Metadata: which topics are shown -------------------------------------------------


def test_metadata_of_every_topic_lists_only_those_the_principal_may_describe(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "alpha", "beta", "secret")
        context = alice_s(
            context_of(one),
            acl(Op.DESCRIBE, "alpha"),
            acl(Op.READ, "beta"),  # allows DESCRIBE too
            acl(Op.DESCRIBE, "secret", permission=DENY),
            acl(Op.ALTER, "secret"),  # the DENY above wins over what ALTER implies
        )
        for version in (1, 4, 12):
            answer = await answered(cluster.handle_metadata, context, metadata(version=version))
            assert listed(answer) == [("alpha", E.none, 1), ("beta", E.none, 1)]
            assert [b.node_id for b in answer.brokers] == [1, 2, 3]

        nothing = await answered(cluster.handle_metadata, alice_s(context_of(one)), metadata())
        assert nothing.topics == ()

    run(scenario())


def test_a_named_topic_without_describe_is_refused_whether_it_exists_or_not(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "alpha", "secret")
        context = alice_s(
            context_of(one),
            acl(Op.DESCRIBE, "alpha"),
            acl(Op.DESCRIBE, "seen-missing"),
            cluster_acl(Op.CREATE),  # may create, yet not describe "ghost"
        )
        for auto_create in (False, True):
            answer = await answered(
                cluster.handle_metadata,
                context,
                metadata("secret", "ghost", "alpha", auto_create=auto_create),
            )
            assert listed(answer) == [
                ("secret", E.topic_authorization_failed, 0),
                ("ghost", E.topic_authorization_failed, 0),  # missing, and not told so
                ("alpha", E.none, 1),
            ]
            secret, ghost, _ = answer.topics
            assert secret.topic_id is None and ghost.topic_id is None  # nor its id (zero)
            assert "ghost" not in one.metadata.image.topics_by_name

        told = await answered(cluster.handle_metadata, context, metadata("seen-missing"))
        assert listed(told) == [("seen-missing", E.unknown_topic_or_partition, 0)]

        # By id: the id is no secret, the name is.
        secret_id = one.metadata.image.topics_by_name["secret"].topic_id
        by_id = request(
            ApiKey.METADATA,
            12,
            {
                "topics": [{"name": None, "topic_id": secret_id}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        answer = await answered(cluster.handle_metadata, context, by_alice(by_id))
        ((name, code, _),) = listed(answer)
        assert (name, code, answer.topics[0].topic_id) == (
            None,
            E.topic_authorization_failed,
            secret_id,
        )

    run(scenario())


# --- Metadata: auto-creation ------------------------------------------------------------


def test_auto_creation_needs_create_on_the_topic_or_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        describe_new = acl(Op.DESCRIBE, "new-", pattern=PREFIXED)
        context = alice_s(context_of(one), describe_new, acl(Op.CREATE, "new-mine"))
        asked = metadata("new-other", "new-mine", auto_create=True)
        answer = await answered(cluster.handle_metadata, context, asked)
        # Kafka's answer for a topic it may describe but not create: refused, not unknown.
        assert listed(answer) == [
            ("new-other", E.topic_authorization_failed, 0),
            ("new-mine", E.none, one.config.num_partitions),
        ]
        names = one.metadata.image.topics_by_name
        assert "new-mine" in names and "new-other" not in names

        # Without auto-creation asked (or allowed), it is just unknown, and still not made.
        unasked = await answered(cluster.handle_metadata, context, metadata("new-other"))
        assert listed(unasked) == [("new-other", E.unknown_topic_or_partition, 0)]
        off = alice_s(
            context_of(one, **{"auto.create.topics.enable": "false"}),
            describe_new,
            acl(Op.CREATE, "new-other"),
        )
        disabled = await answered(cluster.handle_metadata, off, asked)
        assert listed(disabled) == [
            ("new-other", E.unknown_topic_or_partition, 0),
            ("new-mine", E.none, one.config.num_partitions),
        ]
        assert "new-other" not in one.metadata.image.topics_by_name

        on_the_cluster = alice_s(context_of(one), describe_new, cluster_acl(Op.CREATE))
        created = await answered(cluster.handle_metadata, on_the_cluster, asked)
        assert listed(created) == [
            ("new-other", E.none, one.config.num_partitions),
            ("new-mine", E.none, one.config.num_partitions),
        ]
        assert "new-other" in one.metadata.image.topics_by_name

    run(scenario())


# --- Metadata: authorized operations ----------------------------------------------------


def test_authorized_operations_tell_the_grants_and_are_omitted_unless_asked(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "alpha", "beta", "secret")
        context = alice_s(
            context_of(one),
            acl(Op.READ, "alpha"),  # implies DESCRIBE
            acl(Op.DESCRIBE, "beta"),
            acl(Op.ALTER_CONFIGS, "beta"),  # implies DESCRIBE_CONFIGS
            acl(Op.DESCRIBE, "seen-missing"),
            cluster_acl(Op.ALTER),  # implies DESCRIBE
            cluster_acl(Op.IDEMPOTENT_WRITE),
        )
        asked = metadata(
            "alpha",
            "beta",
            "secret",
            "seen-missing",
            version=10,
            topic_operations=True,
            cluster_operations=True,
        )
        answer = await answered(cluster.handle_metadata, context, asked)
        assert [(t.name, t.error_code, t.topic_authorized_operations) for t in answer.topics] == [
            ("alpha", E.none, bits(Op.READ, Op.DESCRIBE)),
            ("beta", E.none, bits(Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)),
            ("secret", E.topic_authorization_failed, OMITTED),
            ("seen-missing", E.unknown_topic_or_partition, bits(Op.DESCRIBE)),
        ]
        assert answer.cluster_authorized_operations == bits(
            Op.ALTER, Op.DESCRIBE, Op.IDEMPOTENT_WRITE
        )
        every = await answered(
            cluster.handle_metadata, context, metadata(version=10, topic_operations=True)
        )
        assert [(t.name, t.topic_authorized_operations) for t in every.topics] == [
            ("alpha", bits(Op.READ, Op.DESCRIBE)),
            ("beta", bits(Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)),
        ]
        assert every.cluster_authorized_operations == OMITTED

        # Not asked: OMITTED (INT32_MIN), whatever the grants.
        for version in (10, 12):
            unasked = await answered(
                cluster.handle_metadata, context, metadata("alpha", version=version)
            )
            assert unasked.topics[0].topic_authorized_operations == OMITTED == -(2**31)

        # The cluster's operations are none at all without DESCRIBE on it.
        no_describe = alice_s(context_of(one), acl(Op.READ, "alpha"), cluster_acl(Op.CREATE))
        cluster_only = await answered(
            cluster.handle_metadata, no_describe, metadata(version=10, cluster_operations=True)
        )
        assert cluster_only.cluster_authorized_operations == 0

    run(scenario())


# --- Metadata without an authorizer -------------------------------------------------------


def test_without_an_authorizer_metadata_is_unchanged(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "alpha", "secret")
        plain = context_of(one)
        every = await answered(cluster.handle_metadata, plain, metadata(version=10))
        assert listed(every) == [("alpha", E.none, 1), ("secret", E.none, 1)]
        asked = metadata(
            "secret",
            "fresh",
            version=10,
            auto_create=True,
            topic_operations=True,
            cluster_operations=True,
        )
        answer = await answered(cluster.handle_metadata, plain, asked)
        assert listed(answer) == [
            ("secret", E.none, 1),
            ("fresh", E.none, one.config.num_partitions),
        ]
        every_topic_op = sum(1 << op for op in SUPPORTED_OPERATIONS[AclResourceType.TOPIC])
        every_cluster_op = sum(1 << op for op in SUPPORTED_OPERATIONS[AclResourceType.CLUSTER])
        assert {t.topic_authorized_operations for t in answer.topics} == {every_topic_op}
        assert answer.cluster_authorized_operations == every_cluster_op

    run(scenario())


# --- DescribeCluster --------------------------------------------------------------------


def test_describe_cluster_on_a_controller_listener_needs_alter_on_the_cluster(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        node = on_controller_listener(context_of(one))
        handle = cluster.handle_describe_cluster
        for refusing in (
            alice_s(node),
            alice_s(node, cluster_acl(Op.DESCRIBE), cluster_acl(Op.CLUSTER_ACTION)),
            alice_s(node, cluster_acl(Op.ALL), cluster_acl(Op.ALTER, permission=DENY)),
        ):
            refused = await answered(handle, refusing, describe_cluster(listener=CONTROLLER))
            assert (refused.error_code, refused.brokers) == (E.cluster_authorization_failed, ())
            says_who(refused.error_message, "DESCRIBE_CLUSTER")

        allowed = alice_s(node, cluster_acl(Op.ALTER))
        answer = await answered(handle, allowed, describe_cluster(listener=CONTROLLER))
        assert (answer.error_code, answer.error_message) == (E.none, None)
        assert [b.broker_id for b in answer.brokers] == [1, 2, 3]
        assert answer.cluster_id == one.metadata.image.cluster_id

        # On a client listener no ACL at all is needed for the answer.
        client = await answered(handle, alice_s(node), describe_cluster(operations=True))
        assert (client.error_code, client.error_message) == (E.none, None)
        assert [b.broker_id for b in client.brokers] == [1, 2, 3]
        assert client.cluster_authorized_operations == 0  # nothing to tell without DESCRIBE
        told = await answered(handle, allowed, describe_cluster(operations=True))
        assert told.cluster_authorized_operations == bits(Op.ALTER, Op.DESCRIBE)
        unasked = await answered(handle, allowed, describe_cluster())
        assert unasked.cluster_authorized_operations == OMITTED

        # Without an authorizer the controller listener answers everyone.
        unchanged = await answered(handle, node, describe_cluster(listener=CONTROLLER))
        assert unchanged.error_code == E.none
        assert [b.broker_id for b in unchanged.brokers] == [1, 2, 3]

    run(scenario())
