"""ACL checks of the transaction APIs, handler by handler over the real coordinator core
(txn_harness): what each needs (WRITE or DESCRIBE on the transactional id, WRITE or
READ on topics, READ on the group, IDEMPOTENT_WRITE, CLUSTER_ACTION or ALTER on the
cluster), the errors and their shape when denied, what is hidden, and that without an
authorizer nothing changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from quorum_harness import answered, wire
from server_harness import TOPIC, image_of, run
from test_txn_admin_handlers import (
    describe_producers,
    describe_transactions,
    described,
    list_transactions,
)
from test_txn_markers import FakePartition, appender, markers_request, with_offsets
from txn_harness import (
    TxnNode,
    add_offsets,
    add_partitions,
    broker_add_partitions,
    end_txn,
    init_producer_id,
    txn_image,
    txn_node,
)

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.protocol.codec import Request
from strom.security.acls import CLUSTER_NAME, AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.ports import ProduceContext, TxnContext
from strom.server.handlers.produce import handle_init_producer_id
from strom.server.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
)
from strom.server.handlers.txn_admin import (
    handle_describe_producers,
    handle_list_transactions,
)
from strom.server.handlers.txn_markers import TxnMarkersContext, handle_write_txn_markers
from strom.server.txn_markers import WRITE_TXN_MARKERS, TxnMarker
from strom.txn.state import TxnState

E = ErrorCode
Op = AclOperation
Kind = AclResourceType
ALICE = "User:alice"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TX = "payments"
GROUP = "billing"


def acl(
    operation: AclOperation,
    kind: AclResourceType = Kind.TOPIC,
    name: str = TOPIC,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(kind, name, pattern, ALICE, "*", operation, permission)


def txn_acl(operation: AclOperation, name: str = TX, **kwargs: Any) -> AclBinding:
    return acl(operation, Kind.TRANSACTIONAL_ID, name, **kwargs)


def cluster_acl(operation: AclOperation, **kwargs: Any) -> AclBinding:
    return acl(operation, Kind.CLUSTER, CLUSTER_NAME, **kwargs)


def authorizer(*bindings: AclBinding, super_users: frozenset[str] = frozenset()) -> Authorizer:
    return Authorizer(AclIndex(bindings), super_users=super_users, allow_if_no_acl=False)


def as_alice(asked: Request) -> Request:
    return dataclasses.replace(asked, principal=ALICE, client_host="10.0.0.7")


def txns(node: TxnNode, acls: Authorizer | None) -> TxnContext:
    return dataclasses.replace(node.context, authorizer=lambda: acls)


def producing(node: TxnNode, acls: Authorizer | None) -> ProduceContext:
    return dataclasses.replace(node.produce, authorizer=lambda: acls)


def errors_v3(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    """A producer's AddPartitionsToTxn answer, per partition."""
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def added(node: TxnNode) -> list[Any]:
    """What the coordinator was asked to add or verify."""
    return [asked for asked in node.txns.asked if asked[0] in ("add", "verify")]


# --- InitProducerId -----------------------------------------------------------------------


def test_init_producer_id_with_a_transactional_id_needs_write_on_it(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def init(acls: Authorizer | None, **kwargs: Any) -> Any:
        asked = as_alice(init_producer_id(TX, **kwargs))
        return await answered(handle_init_producer_id, producing(node, acls), asked)

    async def scenario() -> None:
        for refusing in (
            authorizer(),
            authorizer(txn_acl(Op.DESCRIBE)),
            authorizer(acl(Op.WRITE), cluster_acl(Op.IDEMPOTENT_WRITE)),
            authorizer(txn_acl(Op.ALL), txn_acl(Op.WRITE, permission=DENY)),
        ):
            denied = await init(refusing)
            assert (denied.error_code, denied.producer_id, denied.producer_epoch) == (
                E.transactional_id_authorization_failed,
                -1,
                -1,
            )
        # checked before the request is: a half-given producer is not INVALID_REQUEST yet
        half = await init(authorizer(), producer_id=5, epoch=-1, version=3)
        assert half.error_code == E.transactional_id_authorization_failed
        assert node.txns.asked == []  # the coordinator never heard of them
        allowed = await init(authorizer(txn_acl(Op.WRITE)))
        assert (allowed.error_code, allowed.producer_id, allowed.producer_epoch) == (
            E.none,
            1000,
            0,
        )
        prefixed = authorizer(txn_acl(Op.WRITE, "pay", pattern=PatternType.PREFIXED))
        assert (await init(prefixed)).error_code == E.none
        admin = authorizer(super_users=frozenset({ALICE}))
        assert (await init(admin)).error_code == E.none
        unchanged = await init(None)
        assert (unchanged.error_code, unchanged.producer_epoch) == (E.none, 3)

    run(scenario())
    node.close()


def test_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(
    tmp_path: Path,
) -> None:
    node = txn_node(tmp_path)

    async def init(acls: Authorizer | None) -> Any:
        asked = as_alice(init_producer_id(None))
        return await answered(handle_init_producer_id, producing(node, acls), asked)

    async def scenario() -> None:
        for refusing in (
            authorizer(),
            authorizer(acl(Op.READ), acl(Op.DESCRIBE)),
            authorizer(txn_acl(Op.WRITE), cluster_acl(Op.CLUSTER_ACTION)),
            # a topic's WRITE a PREFIXED DENY of it overrides
            authorizer(
                acl(Op.WRITE),
                acl(Op.WRITE, name="ord", permission=DENY, pattern=PatternType.PREFIXED),
            ),
            authorizer(acl(Op.WRITE), acl(Op.WRITE, name="*", permission=DENY)),
        ):
            denied = await init(refusing)
            assert (denied.error_code, denied.producer_id, denied.producer_epoch) == (
                E.cluster_authorization_failed,
                -1,
                -1,
            )
        assert node.at.producer_ids.handed_out == []
        for allowing in (
            authorizer(cluster_acl(Op.IDEMPOTENT_WRITE)),
            authorizer(cluster_acl(Op.ALL)),
            authorizer(acl(Op.WRITE, name="any-topic-at-all")),
            authorizer(acl(Op.WRITE, name="logs-", pattern=PatternType.PREFIXED)),
            authorizer(acl(Op.ALL, name="*")),
            # DENY of WRITE on the topic, yet WRITE on another one
            authorizer(acl(Op.WRITE, permission=DENY), acl(Op.WRITE, name="other")),
        ):
            assert (await init(allowing)).error_code == E.none
        unchanged = await init(None)
        assert (unchanged.error_code, unchanged.producer_epoch) == (E.none, 0)
        assert node.txns.asked == []

    run(scenario())
    node.close()


# --- AddPartitionsToTxn: producers --------------------------------------------------------


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_needs_write_on_the_transactional_id_first(
    tmp_path: Path, version: int
) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        partitions = [(TOPIC, 0), (TOPIC, 1), ("missing", 0)]
        asked = as_alice(add_partitions(TX, producer_id, epoch, partitions, version=version))
        only_topics = authorizer(acl(Op.WRITE, name="*"), txn_acl(Op.DESCRIBE))
        answer = await answered(handle_add_partitions_to_txn, txns(node, only_topics), asked)
        assert errors_v3(answer) == dict.fromkeys(
            partitions, E.transactional_id_authorization_failed
        )
        assert added(node) == []

    run(scenario())
    node.close()


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_with_a_topic_denied_adds_nothing(tmp_path: Path, version: int) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        partitions = [(TOPIC, 0), (TOPIC, 1), ("secret", 0), ("missing", 0)]
        asked = as_alice(add_partitions(TX, producer_id, epoch, partitions, version=version))
        acls = authorizer(
            txn_acl(Op.WRITE),
            acl(Op.WRITE),
            acl(Op.WRITE, name="missing"),
            acl(Op.READ, name="secret"),
        )
        answer = await answered(handle_add_partitions_to_txn, txns(node, acls), asked)
        assert errors_v3(answer) == {
            (TOPIC, 0): E.operation_not_attempted,
            (TOPIC, 1): E.operation_not_attempted,
            ("secret", 0): E.topic_authorization_failed,  # whether or not it exists
            ("missing", 0): E.unknown_topic_or_partition,
        }
        assert added(node) == []
        assert node.txns.core.entries[TX].value.state is TxnState.EMPTY

    run(scenario())
    node.close()


def test_add_partitions_never_lets_a_producer_add_an_internal_topic(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        partitions = [(TOPIC, 0), (OFFSETS_TOPIC, 0)]
        asked = as_alice(add_partitions(TX, producer_id, epoch, partitions))
        everything = authorizer(acl(Op.ALL, Kind.TOPIC, "*"), txn_acl(Op.ALL))
        answer = await answered(handle_add_partitions_to_txn, txns(node, everything), asked)
        assert errors_v3(answer) == {
            (TOPIC, 0): E.operation_not_attempted,
            (OFFSETS_TOPIC, 0): E.topic_authorization_failed,
        }

    run(scenario())
    node.close()


@pytest.mark.parametrize("acls", [authorizer(txn_acl(Op.WRITE), acl(Op.ALL)), None])
def test_add_partitions_allowed_adds_them(tmp_path: Path, acls: Authorizer | None) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        partitions = [(TOPIC, 0), (TOPIC, 1)]
        asked = as_alice(add_partitions(TX, producer_id, epoch, partitions))
        answer = await answered(handle_add_partitions_to_txn, txns(node, acls), asked)
        assert errors_v3(answer) == dict.fromkeys(partitions, E.none)
        assert added(node) == [("add", (TX, partitions, 0))]

    run(scenario())
    node.close()


# --- AddPartitionsToTxn: brokers ----------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_a_brokers_add_partitions_needs_cluster_action(tmp_path: Path, version: int) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        node.txns.asked.clear()
        asked = as_alice(
            broker_add_partitions([(TX, producer_id, epoch, [(TOPIC, 0)], True)], version=version)
        )
        producer_rights = authorizer(txn_acl(Op.ALL), acl(Op.ALL), cluster_acl(Op.ALTER))
        denied = await answered(handle_add_partitions_to_txn, txns(node, producer_rights), asked)
        assert (denied.error_code, denied.results_by_transaction) == (
            E.cluster_authorization_failed,
            (),
        )
        assert added(node) == []
        for allowing in (authorizer(cluster_acl(Op.CLUSTER_ACTION)), None):
            answer = await answered(handle_add_partitions_to_txn, txns(node, allowing), asked)
            assert answer.error_code == E.none
            (result,) = answer.results_by_transaction
            assert result.transactional_id == TX
            (topic,) = result.topic_results
            assert [p.partition_error_code for p in topic.results_by_partition] == [E.none]
        assert added(node) == [("verify", (TX, [(TOPIC, 0)]))] * 2

    run(scenario())
    node.close()


# --- AddOffsetsToTxn ----------------------------------------------------------------------


def test_add_offsets_needs_write_on_the_transactional_id_then_read_on_the_group(
    tmp_path: Path,
) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        asked = as_alice(add_offsets(TX, producer_id, epoch, GROUP))

        async def error(acls: Authorizer | None) -> Any:
            answer = await answered(handle_add_offsets_to_txn, txns(node, acls), asked)
            return answer.error_code

        group_read = acl(Op.READ, Kind.GROUP, GROUP)
        assert await error(authorizer(group_read)) == E.transactional_id_authorization_failed
        assert await error(authorizer()) == E.transactional_id_authorization_failed
        assert await error(authorizer(txn_acl(Op.WRITE))) == E.group_authorization_failed
        group_describe = acl(Op.DESCRIBE, Kind.GROUP, GROUP)
        assert await error(authorizer(txn_acl(Op.WRITE), group_describe)) == (
            E.group_authorization_failed
        )
        assert added(node) == []
        assert await error(authorizer(txn_acl(Op.WRITE), group_read)) == E.none
        assert await error(None) == E.none
        offsets = (OFFSETS_TOPIC, partition_for(GROUP, node.groups.num_partitions))
        assert added(node) == [("add", (TX, [offsets], 0))] * 2

    run(scenario())
    node.close()


# --- EndTxn -------------------------------------------------------------------------------


def test_end_txn_needs_write_on_the_transactional_id(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0), transaction_version=2)
        asked = as_alice(end_txn(TX, producer_id, epoch, version=5))
        for refusing in (authorizer(txn_acl(Op.DESCRIBE)), authorizer(acl(Op.ALL, name="*"))):
            denied = await answered(handle_end_txn, txns(node, refusing), asked)
            assert (denied.error_code, denied.producer_id, denied.producer_epoch) == (
                E.transactional_id_authorization_failed,
                -1,
                -1,
            )
        assert node.txns.core.entries[TX].value.state is TxnState.ONGOING
        allowed = await answered(handle_end_txn, txns(node, authorizer(txn_acl(Op.WRITE))), asked)
        assert (allowed.error_code, allowed.producer_id) == (E.none, producer_id)
        assert node.txns.core.entries[TX].value.state is TxnState.COMPLETE_COMMIT

    run(scenario())
    node.close()


def test_end_txn_without_an_authorizer_is_unchanged(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        asked = as_alice(end_txn(TX, producer_id, epoch, commit=False))
        answer = await answered(handle_end_txn, txns(node, None), asked)
        assert answer.error_code == E.none
        assert node.txns.core.entries[TX].value.state is TxnState.COMPLETE_ABORT

    run(scenario())
    node.close()


# --- DescribeProducers --------------------------------------------------------------------


def test_describe_producers_needs_read_on_each_topic(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def producers(acls: Authorizer | None, topic: str, *indexes: int) -> list[Any]:
        asked = as_alice(describe_producers(topic, *indexes))
        answer = await answered(handle_describe_producers, txns(node, acls), asked)
        (described_topic,) = answer.topics
        assert described_topic.name == topic
        return list(described_topic.partitions)

    async def scenario() -> None:
        for refusing in (
            authorizer(),
            authorizer(acl(Op.DESCRIBE), acl(Op.WRITE)),
            authorizer(acl(Op.ALL), acl(Op.READ, permission=DENY)),
        ):
            denied = await producers(refusing, TOPIC, 0, 1)
            assert [(p.partition_index, p.error_code, p.error_message) for p in denied] == [
                (0, E.topic_authorization_failed, "Topic authorization failed."),
                (1, E.topic_authorization_failed, "Topic authorization failed."),
            ]
            assert [p.active_producers for p in denied] == [(), ()]
        # a topic that does not exist is not told apart from one that does
        (nowhere,) = await producers(authorizer(), "nope", 0)
        assert nowhere.error_code == E.topic_authorization_failed
        (known_absent,) = await producers(authorizer(acl(Op.READ, name="nope")), "nope", 0)
        assert known_absent.error_code == E.unknown_topic_or_partition
        # the name is checked first
        (bad,) = await producers(authorizer(), "a/b", 0)
        assert bad.error_code == E.invalid_topic_exception
        for allowing in (authorizer(acl(Op.READ)), None):
            allowed = await producers(allowing, TOPIC, 0, 1)
            assert [(p.error_code, p.error_message) for p in allowed] == [(E.none, None)] * 2

    run(scenario())
    node.close()


# --- DescribeTransactions -----------------------------------------------------------------


def test_describe_transactions_needs_describe_on_each_id_and_hides_topics(
    tmp_path: Path,
) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        await node.txns.begin(TX, (TOPIC, 0), (OFFSETS_TOPIC, 1))
        await node.txns.begin("hidden", (TOPIC, 1))
        asked = as_alice(describe_transactions(TX, "hidden", "missing", ""))
        acls = authorizer(
            txn_acl(Op.WRITE),  # WRITE allows DESCRIBE too
            txn_acl(Op.DESCRIBE, "missing"),
            txn_acl(Op.DESCRIBE, "hidden", permission=DENY),
            txn_acl(Op.ALL, "hidden"),
            acl(Op.DESCRIBE),
        )
        answer = await described(txns(node, acls), asked)
        mine, hidden, missing, blank = answer.transaction_states
        assert (mine.error_code, mine.transaction_state) == (E.none, "Ongoing")
        assert [(t.topic, list(t.partitions)) for t in mine.topics] == [(TOPIC, [0])]
        assert (hidden.error_code, hidden.transactional_id) == (
            E.transactional_id_authorization_failed,
            "hidden",
        )
        assert (hidden.transaction_state, hidden.producer_id, list(hidden.topics)) == ("", -1, [])
        assert missing.error_code == E.transactional_id_not_found
        # as Kafka: the empty id is checked like any other before it is found invalid
        assert blank.error_code == E.transactional_id_authorization_failed
        everyone = authorizer(txn_acl(Op.DESCRIBE, "*"))
        (blank,) = (
            await described(txns(node, everyone), as_alice(describe_transactions("")))
        ).transaction_states
        assert blank.error_code == E.invalid_request

        unchanged = await described(txns(node, None), asked)
        mine, hidden, missing, blank = unchanged.transaction_states
        assert [(t.topic, list(t.partitions)) for t in mine.topics] == [
            (OFFSETS_TOPIC, [1]),
            (TOPIC, [0]),
        ]
        assert (hidden.error_code, missing.error_code, blank.error_code) == (
            E.none,
            E.transactional_id_not_found,
            E.invalid_request,
        )

    run(scenario())
    node.close()


# --- ListTransactions ---------------------------------------------------------------------


def test_list_transactions_lists_only_the_ids_the_principal_may_describe(
    tmp_path: Path,
) -> None:
    node = txn_node(tmp_path)

    async def listed(acls: Authorizer | None, *args: Any) -> set[str]:
        asked = as_alice(list_transactions(*args))
        answer = await answered(handle_list_transactions, txns(node, acls), asked)
        assert answer.error_code == E.none
        return {t.transactional_id for t in answer.transaction_states}

    async def scenario() -> None:
        for txn_id in (TX, "payroll", "orders-tx"):
            await node.txns.begin(txn_id)
        await node.txns.begin("open", (TOPIC, 0))
        assert await listed(authorizer()) == set()
        assert await listed(authorizer(acl(Op.ALL, name="*"))) == set()  # topics, not ids
        acls = authorizer(
            txn_acl(Op.DESCRIBE, "pay", pattern=PatternType.PREFIXED),
            txn_acl(Op.DESCRIBE, "payroll", permission=DENY),
            txn_acl(Op.WRITE, "open"),
        )
        assert await listed(acls) == {TX, "open"}
        assert await listed(acls, ("Ongoing",)) == {"open"}  # the filters still apply
        assert await listed(authorizer(txn_acl(Op.DESCRIBE, "*"))) == {
            TX,
            "payroll",
            "orders-tx",
            "open",
        }
        assert await listed(None) == {TX, "payroll", "orders-tx", "open"}

    run(scenario())
    node.close()


# --- WriteTxnMarkers ----------------------------------------------------------------------


def test_write_txn_markers_needs_cluster_action_or_alter_on_the_cluster() -> None:
    image = with_offsets(image_of(partitions=2))
    orders = FakePartition()
    offsets = FakePartition()
    markers, groups = appender(lambda: image, {(TOPIC, 0): orders, (OFFSETS_TOPIC, 0): offsets})
    asked = as_alice(
        markers_request(
            TxnMarker(7, 2, True, 5, ((TOPIC, 0), (TOPIC, 1), ("gone", 0))),
            TxnMarker(8, 0, False, 5, ((OFFSETS_TOPIC, 0),)),
        )
    )

    def errors(acls: Authorizer | None) -> dict[tuple[int, str, int], ErrorCode]:
        context = TxnMarkersContext(markers, authorizer=lambda: acls)
        answer = wire(WRITE_TXN_MARKERS, 1, run(handle_write_txn_markers(context, asked)))
        return {
            (int(m.producer_id), str(t.name), int(p.partition_index)): ErrorCode(p.error_code)
            for m in answer.markers
            for t in m.topics
            for p in t.partitions
        }

    every = [(7, TOPIC, 0), (7, TOPIC, 1), (7, "gone", 0), (8, OFFSETS_TOPIC, 0)]
    for refusing in (
        authorizer(),
        authorizer(cluster_acl(Op.DESCRIBE), cluster_acl(Op.IDEMPOTENT_WRITE)),
        authorizer(acl(Op.ALL, name="*"), txn_acl(Op.ALL, "*")),
        authorizer(
            cluster_acl(Op.ALL),
            cluster_acl(Op.ALTER, permission=DENY),
            cluster_acl(Op.CLUSTER_ACTION, permission=DENY),
        ),
    ):
        assert errors(refusing) == dict.fromkeys(every, E.cluster_authorization_failed)
    assert (orders.markers, offsets.markers, groups.completed) == ([], [], [])
    written = {
        (7, TOPIC, 0): E.none,
        (7, TOPIC, 1): E.unknown_topic_or_partition,  # no replica here
        (7, "gone", 0): E.unknown_topic_or_partition,
        (8, OFFSETS_TOPIC, 0): E.none,
    }
    for allowing in (
        authorizer(cluster_acl(Op.CLUSTER_ACTION)),
        authorizer(cluster_acl(Op.ALTER)),  # Admin.abortTransaction (KIP-664)
        authorizer(cluster_acl(Op.ALTER), cluster_acl(Op.CLUSTER_ACTION, permission=DENY)),
        None,
    ):
        assert errors(allowing) == written
    assert len(orders.markers) == len(offsets.markers) == len(groups.completed) == 4
