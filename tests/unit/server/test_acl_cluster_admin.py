"""ACL checks of the cluster-wide admin APIs (ElectLeaders, UnregisterBroker, the partition
reassignment APIs, the SCRAM APIs, DescribeQuorum), the controller's own APIs
(BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition) and
DescribeTopicPartitions, around a real ControllerService on the in-memory metadata
store: the operation each needs, Kafka's error shape when refused, and that without an
authorizer nothing changes. No socket, no sleep."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from acl_admin_helpers import ALICE, HOST, Op, acl, by_alice, cluster_acl, guarded
from admin_harness import (
    TOPIC,
    codes,
    controller_with_brokers,
    create_topics,
    created,
    list_reassignments,
    reassign,
)
from kio.schema.errors import ErrorCode
from quorum_harness import (
    QUORUM,
    DescribedQuorum,
    admin_context,
    allocation,
    alter_partition,
    answered,
    cluster,
    describe_quorum,
    heartbeat,
    quorum_context,
    registration,
)
from server_harness import run
from test_cluster_handlers import context_of
from test_elect_leaders_handler import elect
from test_scram_handlers import alter, describe, upsertion
from test_topic_partitions_handler import describe as describe_partitions
from test_unregister_broker_handler import unregister

from strom.metadata.stores.memory import MemoryLog
from strom.security.operations import OMITTED
from strom.server.handlers import admin, elections, reassignments, scram
from strom.server.handlers.quorum import (
    handle_allocate_producer_ids,
    handle_alter_partition,
    handle_broker_heartbeat,
    handle_broker_registration,
    handle_describe_quorum,
)
from strom.server.handlers.topic_partitions import handle_describe_topic_partitions

E = ErrorCode
DENIED = E.cluster_authorization_failed


def says_who(message: str | None, api: str) -> None:
    """Kafka's "Request … is not authorized.", naming the API and who asked."""
    assert message is not None and message.endswith(" is not authorized.")
    assert api in message and ALICE in message and HOST in message


# --- ElectLeaders and UnregisterBroker: ALTER on the cluster ---------------------------


def test_elect_leaders_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await created(one, partitions=2, factor=2)
        refusing = guarded(admin_context(one), cluster_acl(Op.DESCRIBE), acl(Op.ALTER, TOPIC))
        answer = await answered(elections.handle_elect_leaders, refusing, by_alice(elect([0, 1])))
        assert answer.error_code == DENIED
        ((topic, partitions),) = [
            (r.topic, r.partition_result) for r in answer.replica_election_results
        ]
        assert topic == TOPIC and [p.partition_id for p in partitions] == [0, 1]
        for partition in partitions:
            assert partition.error_code == DENIED
            says_who(partition.error_message, "ELECT_LEADERS")
        every = await answered(elections.handle_elect_leaders, refusing, by_alice(elect(None)))
        assert (every.error_code, every.replica_election_results) == (DENIED, ())
        v0 = await answered(
            elections.handle_elect_leaders, refusing, by_alice(elect([0], version=0))
        )
        assert codes_of_elections(v0) == {DENIED}

        allowed = guarded(admin_context(one), cluster_acl(Op.ALTER))
        answer = await answered(elections.handle_elect_leaders, allowed, by_alice(elect([0])))
        assert answer.error_code == E.none and DENIED not in codes_of_elections(answer)

    run(scenario())


def codes_of_elections(answer: Any) -> set[ErrorCode]:
    return {
        ErrorCode(p.error_code) for r in answer.replica_election_results for p in r.partition_result
    }


def test_unregister_broker_needs_alter_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        refusing = guarded(admin_context(one), cluster_acl(Op.CLUSTER_ACTION))
        answer = await answered(
            elections.handle_unregister_broker, refusing, by_alice(unregister(3))
        )
        assert (answer.error_code, answer.error_message) == (DENIED, None)
        assert 3 in one.metadata.image.brokers

        allowed = guarded(admin_context(one), cluster_acl(Op.ALTER))
        answer = await answered(
            elections.handle_unregister_broker, allowed, by_alice(unregister(3))
        )
        assert answer.error_code == E.none and 3 not in one.metadata.image.brokers

    run(scenario())


# --- partition reassignments: ALTER, and DESCRIBE, on the cluster ----------------------


def test_reassignments_need_alter_and_describe_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await created(one, factor=2)
        before = one.metadata.image.topics_by_name[TOPIC].partitions[0].replicas
        target = sorted({1, 2, 3} - {before[1]})  # a new replica: it takes a while
        refusing = guarded(admin_context(one), acl(Op.ALTER, TOPIC), cluster_acl(Op.CREATE))
        answer = await answered(
            reassignments.handle_alter_partition_reassignments,
            refusing,
            by_alice(reassign(0, target)),
        )
        assert answer.error_code == DENIED
        says_who(answer.error_message, "ALTER_PARTITION_REASSIGNMENTS")
        ((name, (partition,)),) = [(t.name, t.partitions) for t in answer.responses]
        assert (name, partition.partition_index, partition.error_code) == (TOPIC, 0, DENIED)
        assert partition.error_message == answer.error_message
        assert one.metadata.image.topics_by_name[TOPIC].partitions[0].replicas == before

        listed = await answered(
            reassignments.handle_list_partition_reassignments,
            refusing,
            by_alice(list_reassignments([0, 2])),
        )
        assert listed.error_code == DENIED
        says_who(listed.error_message, "LIST_PARTITION_REASSIGNMENTS")
        ((name, partitions),) = [(t.name, t.partitions) for t in listed.topics]
        assert name == TOPIC and [p.partition_index for p in partitions] == [0, 2]
        assert all(p.replicas == () for p in partitions)  # the indexes asked for, only
        every = await answered(
            reassignments.handle_list_partition_reassignments,
            refusing,
            by_alice(list_reassignments()),
        )
        assert (every.error_code, every.topics) == (DENIED, ())

        allowed = guarded(admin_context(one), cluster_acl(Op.ALTER))  # allows DESCRIBE too
        answer = await answered(
            reassignments.handle_alter_partition_reassignments,
            allowed,
            by_alice(reassign(0, target)),
        )
        assert codes(answer) == {E.none}
        listed = await answered(
            reassignments.handle_list_partition_reassignments,
            allowed,
            by_alice(list_reassignments()),
        )
        assert listed.error_code == E.none and listed.topics != ()

    run(scenario())


# --- SCRAM credentials: DESCRIBE and ALTER on the cluster ------------------------------


def test_scram_credentials_need_describe_and_alter_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        refusing = guarded(admin_context(one), cluster_acl(Op.DESCRIBE_CONFIGS))
        changed = await answered(
            scram.handle_alter_user_scram_credentials,
            refusing,
            by_alice(
                alter(
                    [upsertion("carol"), upsertion("alice"), upsertion("alice", mechanism=2)],
                    [{"name": "bob", "mechanism": 1}],
                )
            ),
        )
        assert [(r.user, r.error_code) for r in changed.results] == [
            ("alice", DENIED),
            ("bob", DENIED),
            ("carol", DENIED),
        ]
        for result in changed.results:
            says_who(result.error_message, "ALTER_USER_SCRAM_CREDENTIALS")
        assert one.metadata.image.scram_users == {}

        named = await answered(
            scram.handle_describe_user_scram_credentials,
            refusing,
            by_alice(describe("alice", "bob")),
        )
        assert (named.error_code, named.error_message) == (DENIED, None)
        assert [(r.user, r.error_code, r.credential_infos) for r in named.results] == [
            ("", DENIED, ()),
            ("", DENIED, ()),
        ]
        every = await answered(
            scram.handle_describe_user_scram_credentials,
            refusing,
            by_alice(describe(every=True)),
        )
        assert (every.error_code, every.results) == (DENIED, ())

        allowed = guarded(admin_context(one), cluster_acl(Op.ALTER))  # allows DESCRIBE too
        changed = await answered(
            scram.handle_alter_user_scram_credentials,
            allowed,
            by_alice(alter([upsertion("alice")])),
        )
        assert [(r.user, r.error_code) for r in changed.results] == [("alice", E.none)]
        described = await answered(
            scram.handle_describe_user_scram_credentials, allowed, by_alice(describe("alice"))
        )
        assert described.error_code == E.none
        assert [(c.mechanism, c.iterations) for c in described.results[0].credential_infos] == [
            (1, 4096)
        ]

    run(scenario())


# --- DescribeQuorum and the controller's own APIs ------------------------------------


def test_describe_quorum_needs_describe_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        context = quorum_context(one, store=DescribedQuorum(QUORUM))
        refusing = guarded(context, cluster_acl(Op.ALTER_CONFIGS))
        answer = await answered(handle_describe_quorum, refusing, by_alice(describe_quorum(2)))
        assert (answer.error_code, answer.error_message) == (
            DENIED,
            "Cluster authorization failed.",
        )
        assert (answer.topics, answer.nodes) == ((), ())
        v0 = await answered(handle_describe_quorum, refusing, by_alice(describe_quorum(0)))
        assert (v0.error_code, v0.topics) == (DENIED, ())

        for allowed in (guarded(context, cluster_acl(Op.DESCRIBE)), context):
            answer = await answered(handle_describe_quorum, allowed, by_alice(describe_quorum(2)))
            assert answer.error_code == E.none and answer.topics[0].partitions[0].leader_id == 1

    run(scenario())


def test_the_controller_s_apis_need_cluster_action(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        cluster_id = one.metadata.image.cluster_id
        refusing = guarded(quorum_context(one), cluster_acl(Op.ALTER), cluster_acl(Op.DESCRIBE))
        asked = [
            (handle_broker_registration, registration(2, cluster_id)),
            (handle_broker_heartbeat, heartbeat(2, 1, 0)),
            (handle_allocate_producer_ids, allocation(2, 1)),
            (
                handle_alter_partition,
                alter_partition(
                    2, 1, uuid.UUID(int=7), leader_epoch=0, partition_epoch=0, isr=[(2, 1)]
                ),
            ),
        ]
        for handler, sent in asked:
            answer = await answered(handler, refusing, by_alice(sent, listener="CONTROLLER"))
            assert answer.error_code == DENIED, sent.api_key
        refused = await answered(
            handle_broker_registration, refusing, by_alice(registration(2, cluster_id))
        )
        assert refused.broker_epoch == -1 and 2 not in one.metadata.image.brokers
        beat = await answered(handle_broker_heartbeat, refusing, by_alice(heartbeat(2, 1, 0)))
        assert beat.is_fenced is True
        block = await answered(handle_allocate_producer_ids, refusing, by_alice(allocation(2, 1)))
        assert (block.producer_id_start, block.producer_id_len) == (-1, 0)

        allowed = guarded(quorum_context(one), cluster_acl(Op.CLUSTER_ACTION))
        answer = await answered(
            handle_broker_registration, allowed, by_alice(registration(2, cluster_id))
        )
        assert answer.error_code == E.none and 2 in one.metadata.image.brokers

        # This node's own request, answered in process (no listener), is not checked.
        answer = await answered(handle_broker_registration, refusing, registration(3, cluster_id))
        assert answer.error_code == E.none and 3 in one.metadata.image.brokers

    run(scenario())


# --- DescribeTopicPartitions: DESCRIBE on each topic ----------------------------------


def test_describe_topic_partitions_shows_only_describable_topics(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await answered(
            admin.handle_create_topics,
            admin_context(one),
            create_topics(("alpha", 2, 1, {}), ("beta", 3, 1, {}), ("secret", 1, 1, {})),
        )
        plain = context_of(one)
        context = replace(
            plain,
            admin=guarded(
                plain.admin,
                acl(Op.DESCRIBE, "alpha"),
                acl(Op.READ, "beta"),  # allows DESCRIBE too
                acl(Op.DESCRIBE, "ghost-seen"),
            ),
        )
        handle = handle_describe_topic_partitions
        every = await answered(handle, context, by_alice(describe_partitions()))
        assert [(t.name, t.topic_authorized_operations) for t in every.topics] == [
            ("alpha", 1 << Op.DESCRIBE),
            ("beta", 1 << Op.DESCRIBE | 1 << Op.READ),
        ]

        named = await answered(
            handle,
            context,
            by_alice(
                describe_partitions("secret", "beta", "ghost", "alpha", "ghost-seen", limit=2)
            ),
        )
        assert [(t.name, t.error_code, len(t.partitions)) for t in named.topics] == [
            ("alpha", E.none, 2),  # the page: two partitions
            ("ghost", E.topic_authorization_failed, 0),  # then the refused, outside it
            ("secret", E.topic_authorization_failed, 0),
        ]
        assert (named.next_cursor.topic_name, named.next_cursor.partition_index) == ("beta", 0)
        for refused in named.topics[1:]:
            assert refused.topic_id is None and refused.is_internal is False
            assert refused.topic_authorized_operations == OMITTED
        rest = await answered(
            handle,
            context,
            by_alice(describe_partitions("secret", "beta", "ghost-seen", cursor=("beta", 1))),
        )
        assert [(t.name, t.error_code) for t in rest.topics] == [
            ("beta", E.none),
            ("ghost-seen", E.unknown_topic_or_partition),  # describable: told it is missing
            ("secret", E.topic_authorization_failed),
        ]
        assert rest.topics[1].topic_authorized_operations == 1 << Op.DESCRIBE

        bad_cursor = await answered(
            handle, context, by_alice(describe_partitions("secret", cursor=("alpha", 0)))
        )
        assert [(t.name, t.error_code) for t in bad_cursor.topics] == [
            ("secret", E.invalid_request)
        ]

        unchanged = await answered(handle, plain, by_alice(describe_partitions()))
        assert [t.name for t in unchanged.topics] == ["alpha", "beta", "secret"]
        assert {t.topic_authorized_operations for t in unchanged.topics} == {3576}

    run(scenario())


def test_without_an_authorizer_the_cluster_apis_are_unchanged(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await created(one, factor=2)
        context = admin_context(one)
        answer = await answered(elections.handle_elect_leaders, context, by_alice(elect([0])))
        assert answer.error_code == E.none
        listed = await answered(
            reassignments.handle_list_partition_reassignments,
            context,
            by_alice(list_reassignments()),
        )
        assert listed.error_code == E.none
        described = await answered(
            scram.handle_describe_user_scram_credentials, context, by_alice(describe(every=True))
        )
        assert described.error_code == E.none
        answer = await answered(
            handle_broker_heartbeat,
            quorum_context(one),
            by_alice(heartbeat(9, 1, 0), listener="CONTROLLER"),
        )
        assert answer.error_code == E.broker_id_not_registered

    run(scenario())
