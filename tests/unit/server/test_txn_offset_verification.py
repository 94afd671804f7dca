"""TxnOffsetCommit asks the transaction's coordinator first (KIP-890): is the group's
`__consumer_offsets` partition in the producer's transaction (v5: add it)? Against the
real coordinator core (txn_harness.CoreTxns) through the real TxnVerifier, and against
a scripted verifier for the error translations."""

from __future__ import annotations

from pathlib import Path

import pytest
from group_service_harness import Verified, answered, group_node, offsets_image, serving
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, TOPIC, run
from test_txn_offset_handlers import GROUP, PRODUCER, errors_of, txn_offset_commit
from txn_harness import CoreTxns

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.server.handlers.txn_offsets import handle_txn_offset_commit
from strom.server.txn_verifier import TxnVerifier, VerifierPorts, VerifyOperation

E = ErrorCode
TX = "tx-1"  # test_txn_offset_handlers' transactional id


@pytest.mark.parametrize(
    ("version", "outside"),
    [(0, E.invalid_txn_state), (3, E.invalid_txn_state), (4, E.transaction_abortable)],
)
def test_offsets_of_a_transaction_without_the_groups_partition_are_refused(
    tmp_path: Path, version: int, outside: ErrorCode
) -> None:
    at = group_node(tmp_path, offsets_image())
    core = CoreTxns()
    verifier = TxnVerifier(VerifierPorts(NODE_ID, lambda: at.metadata.image, core))

    async def scenario() -> None:
        producer_id, epoch = await core.begin(TX, (TOPIC, 0))
        async with serving(at, verifier) as context:
            asked = txn_offset_commit(
                GROUP, {(TOPIC, 0): 5}, producer_id=producer_id, epoch=epoch, version=version
            )
            refused = await answered(handle_txn_offset_commit, context, asked)
            assert errors_of(refused) == {(TOPIC, 0): outside}
            offsets = (OFFSETS_TOPIC, partition_for(GROUP, at.groups.num_partitions))
            added = await core.add_partitions(
                TX, producer_id, epoch, [offsets], transaction_version=0
            )  # what AddOffsetsToTxn does
            assert added.error == E.none
            accepted = await answered(handle_txn_offset_commit, context, asked)
            assert errors_of(accepted) == {(TOPIC, 0): E.none}

    run(scenario())


def test_offsets_v5_add_the_groups_partition_to_the_transaction(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())
    core = CoreTxns()
    verifier = TxnVerifier(VerifierPorts(NODE_ID, lambda: at.metadata.image, core))

    async def scenario() -> None:
        producer_id, epoch = await core.begin(TX)  # version 2 clients send no AddOffsetsToTxn
        async with serving(at, verifier) as context:
            asked = txn_offset_commit(
                GROUP, {(TOPIC, 0): 5}, producer_id=producer_id, epoch=epoch, version=5
            )
            answer = await answered(handle_txn_offset_commit, context, asked)
            assert errors_of(answer) == {(TOPIC, 0): E.none}
        offsets = (OFFSETS_TOPIC, partition_for(GROUP, at.groups.num_partitions))
        assert core.asked[-1] == ("add", (TX, [offsets], 2))
        assert core.core.entries[TX].value.partitions == {offsets}

    run(scenario())


@pytest.mark.parametrize(
    ("verified", "version", "told"),
    [
        (E.network_exception, 3, E.coordinator_load_in_progress),
        (E.network_exception, 1, E.coordinator_not_available),  # before v2: not "loading"
        (E.coordinator_not_available, 3, E.coordinator_not_available),
        (E.invalid_producer_epoch, 3, E.invalid_producer_epoch),
        (E.concurrent_transactions, 5, E.concurrent_transactions),
    ],
)
def test_a_failed_verification_is_every_offsets_error(
    tmp_path: Path, verified: ErrorCode, version: int, told: ErrorCode
) -> None:
    at = group_node(tmp_path, offsets_image())
    offsets = (OFFSETS_TOPIC, partition_for(GROUP, at.groups.num_partitions))
    verifier = Verified({offsets: verified})

    async def scenario() -> None:
        async with serving(at, verifier) as context:
            asked = txn_offset_commit(GROUP, {(TOPIC, 0): 5}, version=version)
            answer = await answered(handle_txn_offset_commit, context, asked)
            assert errors_of(answer) == {(TOPIC, 0): told}
        ((txn_id, producer_id, _, partitions, operation),) = verifier.asked
        assert (txn_id, producer_id, partitions) == (TX, PRODUCER, [offsets])
        assert operation is VerifyOperation.for_txn_offset_commit(version)

    run(scenario())
