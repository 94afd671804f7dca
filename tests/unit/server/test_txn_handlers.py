"""FindCoordinator for transactional ids, InitProducerId with one, AddPartitionsToTxn (the
producers' v0-v3 and the brokers' batched v4-v5), AddOffsetsToTxn and EndTxn, each
answered by the real coordinator core behind the TxnCoordination port and read back
through the codec as a client reads it."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from quorum_harness import answered
from server_harness import TOPIC, request, run
from txn_harness import (
    add_offsets,
    add_partitions,
    broker_add_partitions,
    end_txn,
    init_producer_id,
    txn_image,
    txn_node,
)

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.protocol.apis import ApiKey
from strom.server.handlers.coordinator import handle_find_coordinator
from strom.server.handlers.produce import handle_init_producer_id
from strom.server.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
)
from strom.txn.state import TxnState

E = ErrorCode
TX = "payments"
ORDERS = [(TOPIC, 0), (TOPIC, 1)]


def find_transaction_coordinator(*keys: str, version: int = 4) -> object:
    if version >= 4:
        return request(ApiKey.FIND_COORDINATOR, version, {"key_type": 1, "coordinator_keys": keys})
    (key,) = keys
    return request(ApiKey.FIND_COORDINATOR, version, {"key": key, "key_type": 1})


# --- FindCoordinator ----------------------------------------------------------------------


def test_find_coordinator_answers_the_transaction_state_partitions_leader(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(), leader=2)

    async def scenario() -> None:
        found = await answered(
            handle_find_coordinator, node.context, find_transaction_coordinator(TX, "other")
        )
        assert [(c.key, c.error_code, c.node_id, c.port) for c in found.coordinators] == [
            (TX, E.none, 2, 9002),
            ("other", E.none, 2, 9002),
        ]
        single = await answered(
            handle_find_coordinator, node.context, find_transaction_coordinator(TX, version=3)
        )
        assert (single.error_code, single.node_id, single.host, single.port) == (
            E.none,
            2,
            "localhost",
            9002,
        )

    run(scenario())
    node.close()


def test_find_coordinator_of_a_transactional_id_tells_why_none_is_there(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(), leader=-1)

    async def scenario() -> None:
        found = await answered(
            handle_find_coordinator, node.context, find_transaction_coordinator(TX)
        )
        (entry,) = found.coordinators
        assert (entry.error_code, entry.node_id, entry.host, entry.port) == (
            E.coordinator_not_available,
            -1,
            "",
            -1,
        )
        assert entry.error_message == "The coordinator is not available."
        node.txns.unavailable = E.coordinator_load_in_progress  # the topic cannot be made now
        found = await answered(
            handle_find_coordinator, node.context, find_transaction_coordinator(TX, version=2)
        )
        assert (found.error_code, found.error_message) == (
            E.coordinator_load_in_progress,
            "The coordinator is loading and hence can't process requests.",
        )

    run(scenario())
    node.close()


# --- InitProducerId -----------------------------------------------------------------------


def test_init_producer_id_with_a_transactional_id_asks_its_coordinator(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        first = await answered(handle_init_producer_id, node.produce, init_producer_id(TX))
        assert (first.error_code, first.producer_id, first.producer_epoch) == (E.none, 1000, 0)
        again = await answered(handle_init_producer_id, node.produce, init_producer_id(TX))
        assert (again.error_code, again.producer_id, again.producer_epoch) == (E.none, 1000, 1)
        # v3+: a producer recovering names the id and epoch it had
        recovered = await answered(
            handle_init_producer_id,
            node.produce,
            init_producer_id(TX, producer_id=1000, epoch=1, version=3),
        )
        assert (recovered.producer_id, recovered.producer_epoch) == (1000, 2)
        assert node.txns.asked[-1] == ("init", (TX, 60_000, (1000, 1)))
        assert node.at.producer_ids.handed_out == []  # the coordinator allocated

    run(scenario())
    node.close()


@pytest.mark.parametrize(
    ("version", "fenced"), [(3, E.invalid_producer_epoch), (4, E.producer_fenced)]
)
def test_init_producer_id_fenced_as_each_version_understands(
    tmp_path: Path, version: int, fenced: ErrorCode
) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        await node.txns.begin(TX)
        stranger = await answered(
            handle_init_producer_id,
            node.produce,
            init_producer_id(TX, producer_id=77, epoch=3, version=version),
        )
        assert (stranger.error_code, stranger.producer_id, stranger.producer_epoch) == (
            fenced,
            -1,
            -1,
        )

    run(scenario())
    node.close()


def test_init_producer_id_refuses_a_half_given_producer_or_an_empty_id(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        for asked in (
            init_producer_id(TX, producer_id=5, epoch=-1, version=3),
            init_producer_id(TX, producer_id=-1, epoch=2, version=3),
            init_producer_id(""),
        ):
            refused = await answered(handle_init_producer_id, node.produce, asked)
            assert refused.error_code == E.invalid_request
        timeout = await answered(
            handle_init_producer_id, node.produce, init_producer_id(TX, timeout_ms=0)
        )
        assert timeout.error_code == E.invalid_transaction_timeout
        node.txns.unavailable = E.not_coordinator
        away = await answered(handle_init_producer_id, node.produce, init_producer_id(TX))
        assert (away.error_code, away.producer_id) == (E.not_coordinator, -1)
        # the half-given producers were refused here; the empty id by the coordinator
        assert node.txns.asked == [("init", ("", 60_000, None)), ("init", (TX, 0, None))]

    run(scenario())
    node.close()


def test_init_producer_id_without_a_transactional_id_stays_idempotent(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        plain = await answered(handle_init_producer_id, node.produce, init_producer_id(None))
        assert (plain.error_code, plain.producer_id, plain.producer_epoch) == (E.none, 1000, 0)
        assert node.at.producer_ids.handed_out == [1000]
        assert node.txns.asked == []

    run(scenario())
    node.close()


# --- AddPartitionsToTxn: producers -----------------------------------------------------------


def _errors(answer: object) -> dict[tuple[str, int], ErrorCode]:
    topics = answer.results_by_topic_v3_and_below  # type: ignore[attr-defined]
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in topics
        for p in t.results_by_partition
    }


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_add_partitions_to_txn_adds_them_for_each_client_version(
    tmp_path: Path, version: int
) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        added = await answered(
            handle_add_partitions_to_txn,
            node.context,
            add_partitions(TX, producer_id, epoch, ORDERS, version=version),
        )
        assert _errors(added) == dict.fromkeys(ORDERS, E.none)
        entry = node.txns.core.entries[TX]
        assert (entry.value.state, entry.value.partitions) == (TxnState.ONGOING, set(ORDERS))
        assert node.txns.asked[-1] == ("add", (TX, ORDERS, 0))  # before transaction version 2

    run(scenario())
    node.close()


@pytest.mark.parametrize(
    ("version", "fenced"),
    [(0, E.invalid_producer_epoch), (1, E.invalid_producer_epoch), (2, E.producer_fenced)],
)
def test_add_partitions_to_txn_fenced_as_each_version_understands(
    tmp_path: Path, version: int, fenced: ErrorCode
) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        await node.txns.begin(TX)  # a new instance bumps the epoch
        added = await answered(
            handle_add_partitions_to_txn,
            node.context,
            add_partitions(TX, producer_id, epoch, ORDERS, version=version),
        )
        assert _errors(added) == dict.fromkeys(ORDERS, fenced)

    run(scenario())
    node.close()


def test_one_partition_that_cannot_be_added_fails_the_request(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        asked = [(TOPIC, 0), (TOPIC, 9), ("nope", 0), (OFFSETS_TOPIC, 0)]
        added = await answered(
            handle_add_partitions_to_txn,
            node.context,
            add_partitions(TX, producer_id, epoch, asked),
        )
        assert _errors(added) == {
            (TOPIC, 0): E.operation_not_attempted,
            (TOPIC, 9): E.unknown_topic_or_partition,
            ("nope", 0): E.unknown_topic_or_partition,
            # the brokers' own topics: a producer adds offsets with AddOffsetsToTxn
            (OFFSETS_TOPIC, 0): E.topic_authorization_failed,
        }
        assert node.txns.asked[-1][0] == "init"  # the coordinator was not asked
        assert node.txns.core.entries[TX].value.state is TxnState.EMPTY

    run(scenario())
    node.close()


def test_add_partitions_away_from_the_coordinator_tells_every_partition(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2), unavailable=E.not_coordinator)

    async def scenario() -> None:
        added = await answered(
            handle_add_partitions_to_txn, node.context, add_partitions(TX, 1000, 0, ORDERS)
        )
        assert _errors(added) == dict.fromkeys(ORDERS, E.not_coordinator)

    run(scenario())
    node.close()


# --- AddPartitionsToTxn: brokers ------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5])
def test_the_brokers_form_verifies_and_adds_several_transactions(
    tmp_path: Path, version: int
) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        first = await node.txns.begin("first", (TOPIC, 0))
        second = await node.txns.begin("second")
        answer = await answered(
            handle_add_partitions_to_txn,
            node.context,
            broker_add_partitions(
                [
                    ("first", *first, ORDERS, True),
                    ("second", *second, [(TOPIC, 1), (OFFSETS_TOPIC, 2)], False),
                    ("unknown", 5, 0, [(TOPIC, 0)], True),
                ],
                version=version,
            ),
        )
        assert answer.error_code == E.none
        results = {
            r.transactional_id: {
                (t.name, p.partition_index): p.partition_error_code
                for t in r.topic_results
                for p in t.results_by_partition
            }
            for r in answer.results_by_transaction
        }
        assert results == {
            "first": {(TOPIC, 0): E.none, (TOPIC, 1): E.transaction_abortable},
            "second": {(TOPIC, 1): E.none, (OFFSETS_TOPIC, 2): E.none},
            "unknown": {(TOPIC, 0): E.invalid_producer_id_mapping},
        }
        assert node.txns.core.entries["first"].value.partitions == {(TOPIC, 0)}  # verified only
        # Kafka's rule: AddPartitionsToTxn above v3 is transaction version 2
        assert ("add", ("second", [(OFFSETS_TOPIC, 2), (TOPIC, 1)], 2)) in node.txns.asked

    run(scenario())
    node.close()


# --- AddOffsetsToTxn ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_add_offsets_adds_the_groups_offsets_partition(tmp_path: Path, version: int) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        added = await answered(
            handle_add_offsets_to_txn,
            node.context,
            add_offsets(TX, producer_id, epoch, "billing", version=version),
        )
        assert added.error_code == E.none
        offsets = (OFFSETS_TOPIC, partition_for("billing", node.groups.num_partitions))
        assert node.txns.core.entries[TX].value.partitions == {offsets}
        stale = await answered(
            handle_add_offsets_to_txn,
            node.context,
            add_offsets(TX, producer_id, epoch - 1, "billing", version=version),
        )
        fenced = E.invalid_producer_epoch if version < 2 else E.producer_fenced
        assert stale.error_code == fenced

    run(scenario())
    node.close()


# --- EndTxn ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_end_txn_before_v5_keeps_the_epoch(tmp_path: Path, version: int) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        ended = await answered(
            handle_end_txn, node.context, end_txn(TX, producer_id, epoch, version=version)
        )
        assert ended.error_code == E.none
        value = node.txns.core.entries[TX].value
        assert (value.state, value.producer_epoch) == (TxnState.COMPLETE_COMMIT, epoch)
        assert node.txns.markers[-1].commit and node.txns.markers[-1].transaction_version == 0
        old = await answered(
            handle_end_txn, node.context, end_txn(TX, producer_id, epoch - 1, version=version)
        )
        assert old.error_code == (E.invalid_producer_epoch if version < 2 else E.producer_fenced)

    run(scenario())
    node.close()


def test_end_txn_v5_bumps_the_epoch_and_answers_it(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0), transaction_version=2)
        ended = await answered(
            handle_end_txn, node.context, end_txn(TX, producer_id, epoch, commit=False, version=5)
        )
        assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (
            E.none,
            producer_id,
            epoch + 1,
        )
        assert node.txns.asked[-1] == ("end", (TX, False, 2))
        assert node.txns.markers[-1].producer_epoch == epoch + 1  # the markers fence the old one
        value = node.txns.core.entries[TX].value
        assert (value.state, value.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 1)

    run(scenario())
    node.close()


def test_end_txn_while_markers_are_written_is_concurrent(tmp_path: Path) -> None:
    node = txn_node(tmp_path, complete_markers=False)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        first = await answered(handle_end_txn, node.context, end_txn(TX, producer_id, epoch))
        assert first.error_code == E.none
        again = await answered(handle_end_txn, node.context, end_txn(TX, producer_id, epoch))
        assert again.error_code == E.concurrent_transactions
        node.txns.finish_markers(TX)
        retried = await answered(handle_end_txn, node.context, end_txn(TX, producer_id, epoch))
        assert retried.error_code == E.none
        node.txns.unavailable = E.coordinator_load_in_progress
        away = await answered(handle_end_txn, node.context, end_txn(TX, producer_id, epoch))
        assert away.error_code == E.coordinator_load_in_progress

    run(scenario())
    node.close()
