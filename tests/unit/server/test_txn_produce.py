"""Transactional produces: the request-wide checks, and KIP-890's verification of a
partition with the transaction's coordinator before a batch opens a transaction there:
in process when this broker coordinates the id, else over the wire (a real strom
Connection serving the coordinator's handlers at the other end of a socket pair, dialed
by the verifier's client). The coordinator is the real core (txn_harness.CoreTxns)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from server_harness import TOPIC, batch, change_partition, request, run
from txn_harness import CoreTxns, Setting, TxnNode, transactional_produce, txn_image, txn_node

from strom.client.dial import dialing_with
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.protocol.records import NewRecord, encode_batch
from strom.server.connection import Connection, api_versions_body
from strom.server.handlers.produce import handle_produce
from strom.server.handlers.transactions import handle_add_partitions_to_txn
from strom.server.txn_verifier import VerifyOperation
from strom.txn.placement import TRANSACTION_STATE_TOPIC

E = ErrorCode
TX = "payments"


def txn_batch(
    *values: bytes, producer_id: int, epoch: int, sequence: int = 0, transactional: bool = True
) -> bytes:
    return encode_batch(
        [NewRecord(key=None, value=v) for v in values],
        base_timestamp_ms=1_000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=transactional,
    )


async def produce(node: TxnNode, asked: Request) -> dict[int, Any]:
    """Each partition's answer, by index."""
    answer = await handle_produce(node.produce, asked)
    (topic,) = answer.responses
    return {p.index: p for p in topic.partition_responses}


# --- the request as a whole --------------------------------------------------------------


def test_transactional_records_need_a_transactional_id(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        records = txn_batch(b"a", producer_id=1000, epoch=0)
        answers = await produce(
            node, transactional_produce(records, txn_id=None, partitions=(0, 1))
        )
        assert {i: a.error_code for i, a in answers.items()} == {
            0: E.transactional_id_authorization_failed,
            1: E.transactional_id_authorization_failed,
        }
        assert node.at.partition(0).log.log_end_offset == 0
        assert node.txns.asked == []

    run(scenario())
    node.close()


def test_transactional_records_of_two_producers_are_refused(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        first = txn_batch(b"a", producer_id=1000, epoch=0)
        second = txn_batch(b"b", producer_id=1001, epoch=0)
        answers = await produce(node, _two_partitions(first, second))
        assert {a.error_code for a in answers.values()} == {E.invalid_producer_id_mapping}
        assert node.txns.asked == []

    run(scenario())
    node.close()


def _two_partitions(first: bytes, second: bytes) -> Request:
    return request(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": TX,
            "acks": -1,
            "timeout": 1_000,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [
                        {"index": 0, "records": first},
                        {"index": 1, "records": second},
                    ],
                }
            ],
        },
    )


def test_only_the_brokers_write_the_transaction_log(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        answers = await produce(
            node, transactional_produce(batch(b"x"), txn_id=None, topic=TRANSACTION_STATE_TOPIC)
        )
        assert answers[0].error_code == E.invalid_topic_exception
        assert answers[0].error_message

    run(scenario())
    node.close()


def test_a_transactional_id_with_plain_records_is_a_plain_produce(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        answers = await produce(node, transactional_produce(batch(b"x"), txn_id=TX))
        assert (answers[0].error_code, answers[0].base_offset) == (E.none, 0)
        assert node.txns.asked == []

    run(scenario())
    node.close()


# --- verification here ---------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 9, 10, 11, 12])
def test_a_partition_in_the_transaction_is_written(tmp_path: Path, version: int) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        records = txn_batch(b"a", b"b", producer_id=producer_id, epoch=epoch)
        answers = await produce(node, transactional_produce(records, txn_id=TX, version=version))
        assert (answers[0].error_code, answers[0].base_offset) == (E.none, 0)
        assert node.at.partition().log.log_end_offset == 2
        kind = "add" if version >= 12 else "verify"
        assert node.txns.asked[-1][0] == kind

    run(scenario())
    node.close()


@pytest.mark.parametrize(
    ("version", "error"),
    [(9, E.invalid_txn_state), (10, E.invalid_txn_state), (11, E.transaction_abortable)],
)
def test_a_partition_outside_the_transaction_is_refused_as_the_version_knows(
    tmp_path: Path, version: int, error: ErrorCode
) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        asked = transactional_produce(records, txn_id=TX, partitions=(1,), version=version)
        answers = await produce(node, asked)
        assert answers[1].error_code == error
        assert answers[1].error_message
        assert node.at.partition(1).log.log_end_offset == 0
        assert node.txns.asked[-1] == ("verify", (TX, [(TOPIC, 1)]))

    run(scenario())
    node.close()


@pytest.mark.parametrize("version", [3, 11])
def test_without_verification_the_batch_is_written_unasked(tmp_path: Path, version: int) -> None:
    """`transaction.partition.verification.enable=false`: as before KIP-890, the partition
    takes the batch (and opens a transaction) without asking the coordinator; turned on
    again at run time, the next producer's batch is asked about and refused."""
    verification = Setting(on=False)
    node = txn_node(tmp_path, txn_image(partitions=3), verification=verification)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        asked_before = len(node.txns.asked)
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        asked = transactional_produce(records, txn_id=TX, partitions=(1,), version=version)
        answers = await produce(node, asked)
        assert answers[1].error_code == E.none
        assert node.at.partition(1).log.log_end_offset == 1
        assert len(node.txns.asked) == asked_before
        verification.on = True
        asked = transactional_produce(records, txn_id=TX, partitions=(2,), version=version)
        answers = await produce(node, asked)
        assert answers[2].error_code != E.none
        assert node.at.partition(2).log.log_end_offset == 0
        assert node.txns.asked[-1] == ("verify", (TX, [(TOPIC, 2)]))

    run(scenario())
    node.close()


def test_without_verification_produce_v12_still_adds_its_partition(tmp_path: Path) -> None:
    """Transaction version 2 sends no AddPartitionsToTxn: the produce is what adds the
    partition, so it asks the coordinator whatever the setting (as Kafka's broker)."""
    node = txn_node(tmp_path, txn_image(partitions=2), verification=Setting(on=False))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        asked = transactional_produce(records, txn_id=TX, partitions=(1,), version=12)
        answers = await produce(node, asked)
        assert answers[1].error_code == E.none
        assert node.txns.asked[-1] == ("add", (TX, [(TOPIC, 1)], 2))
        assert node.txns.core.entries[TX].value.partitions == {(TOPIC, 1)}

    run(scenario())
    node.close()


def test_produce_v12_adds_its_partition_to_the_transaction(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)  # nothing added: version 2 adds
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        asked = transactional_produce(records, txn_id=TX, partitions=(0, 1), version=12)
        answers = await produce(node, asked)
        assert [a.error_code for a in answers.values()] == [E.none, E.none]
        assert node.txns.asked[-1] == ("add", (TX, [(TOPIC, 0), (TOPIC, 1)], 2))
        value = node.txns.core.entries[TX].value
        assert value.partitions == {(TOPIC, 0), (TOPIC, 1)}
        assert value.client_transaction_version == 2

    run(scenario())
    node.close()


@pytest.mark.parametrize(
    ("unavailable", "version"),
    [
        (E.not_coordinator, 9),
        (E.coordinator_load_in_progress, 11),
        (E.coordinator_not_available, 12),
    ],
)
def test_a_coordinator_in_trouble_is_told_as_not_enough_replicas(
    tmp_path: Path, unavailable: ErrorCode, version: int
) -> None:
    node = txn_node(tmp_path, unavailable=unavailable)

    async def scenario() -> None:
        records = txn_batch(b"a", producer_id=1000, epoch=0)
        answers = await produce(node, transactional_produce(records, txn_id=TX, version=version))
        assert answers[0].error_code == E.not_enough_replicas  # producers retry it quietly
        assert unavailable.name.upper() in answers[0].error_message
        assert node.at.partition().log.log_end_offset == 0

    run(scenario())
    node.close()


def test_a_fenced_producer_is_told_invalid_producer_epoch(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        await node.txns.begin(TX)  # a new instance of the producer
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        answers = await produce(node, transactional_produce(records, txn_id=TX))
        assert answers[0].error_code == E.invalid_producer_epoch

    run(scenario())
    node.close()


def test_an_epoch_older_than_the_partitions_is_refused_without_asking(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        newer = txn_batch(b"a", producer_id=1000, epoch=3, transactional=False)
        first = await produce(node, transactional_produce(newer, txn_id=None))
        assert first[0].error_code == E.none
        older = txn_batch(b"b", producer_id=1000, epoch=2)
        answers = await produce(node, transactional_produce(older, txn_id=TX))
        assert answers[0].error_code == E.invalid_producer_epoch
        assert "older than its epoch 3" in answers[0].error_message  # refused before the log
        assert node.txns.asked == []

    run(scenario())
    node.close()


def test_a_producer_with_a_transaction_open_here_is_not_asked_again(tmp_path: Path) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0))
        first = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        await produce(node, transactional_produce(first, txn_id=TX))
        assert node.at.partition().open_transactions() == {producer_id: 0}
        asked = len(node.txns.asked)
        second = txn_batch(b"b", producer_id=producer_id, epoch=epoch, sequence=1)
        answers = await produce(node, transactional_produce(second, txn_id=TX))
        assert (answers[0].error_code, answers[0].base_offset) == (E.none, 1)
        assert len(node.txns.asked) == asked
        # its marker closes the transaction here: the next batch opens one and is asked
        node.at.partition().append_marker(producer_id, epoch, 0, commit=True, now_ms=0)
        third = txn_batch(b"c", producer_id=producer_id, epoch=epoch, sequence=2)
        answers = await produce(node, transactional_produce(third, txn_id=TX))
        assert node.txns.asked[-1][0] == "verify"

    run(scenario())
    node.close()


class SlowTxns(CoreTxns):
    """Verifications wait until the test lets them answer."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def verify_partitions(self, *args: Any, **kwargs: Any) -> Any:
        await self.release.wait()
        return await CoreTxns.verify_partitions(self, *args, **kwargs)


def test_a_marker_during_the_verification_refuses_the_append(tmp_path: Path) -> None:
    node = txn_node(tmp_path)
    slow = SlowTxns()
    node.txns = slow
    node.verifier._ports = type(node.verifier._ports)(1, lambda: node.at.metadata.image, slow)

    async def scenario() -> None:
        producer_id, epoch = await slow.begin(TX, (TOPIC, 0))
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        waiting = asyncio.create_task(produce(node, transactional_produce(records, txn_id=TX)))
        for _ in range(3):
            await asyncio.sleep(0)
        node.verifier.on_marker(TOPIC, 0, producer_id)  # the transaction ended meanwhile
        slow.release.set()
        answers = await waiting
        assert answers[0].error_code == E.invalid_txn_state
        assert node.at.partition().log.log_end_offset == 0
        assert node.verifier._guards == {}

    run(scenario())
    node.close()


# --- verification at another broker ----------------------------------------------------------


@contextlib.asynccontextmanager
async def coordinator_at(other: TxnNode, asked: list[Request]) -> AsyncIterator[None]:
    """Connections dialed inside reach `other`'s AddPartitionsToTxn handler through a
    real strom Connection; each request it gets is added to `asked`."""
    served: list[asyncio.Task[None]] = []

    async def dispatch(request: Request) -> Any:
        if request.api_key == ApiKey.API_VERSIONS:
            return api_versions_body(request.api_version)
        asked.append(request)
        if request.api_key != ApiKey.ADD_PARTITIONS_TO_TXN:
            raise AssertionError(f"unexpected {request.api_key!r}")
        return await handle_add_partitions_to_txn(other.context, request)

    async def dial(host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        ours, theirs = socket.socketpair()
        server_reader, server_writer = await asyncio.open_connection(sock=theirs)
        connection = Connection(
            server_reader,
            server_writer,
            dispatch,
            max_request_bytes=1 << 20,
            idle_timeout_s=60,
            node_id=2,
        )
        served.append(asyncio.create_task(connection.serve()))
        return await asyncio.open_connection(sock=ours)

    with dialing_with(dial):
        yield
    for task in served:
        task.cancel()
    await asyncio.gather(*served, return_exceptions=True)


def two_nodes(tmp_path: Path) -> tuple[TxnNode, TxnNode]:
    """Node 1 leads the topic; broker 2 coordinates every transactional id."""
    here = txn_node(tmp_path / "one", txn_image(partitions=2), leader=2)
    there = txn_node(tmp_path / "two", txn_image(partitions=2))
    return here, there


@pytest.mark.parametrize("version", [9, 11, 12])
def test_the_coordinators_broker_is_asked_over_the_wire(tmp_path: Path, version: int) -> None:
    here, there = two_nodes(tmp_path)
    asked: list[Request] = []

    async def scenario() -> None:
        async with coordinator_at(there, asked):
            producer_id, epoch = await there.txns.begin(TX, (TOPIC, 0))
            records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
            request = transactional_produce(records, txn_id=TX, partitions=(0, 1), version=version)
            answers = await produce(here, request)
            await here.verifier.stop()
        (sent,) = asked
        assert sent.api_version == 5
        (transaction,) = sent.body.transactions
        assert transaction.verify_only is (version < 12)
        if version < 12:
            outside = E.invalid_txn_state if version < 11 else E.transaction_abortable
            assert [answers[0].error_code, answers[1].error_code] == [E.none, outside]
        else:
            assert [answers[0].error_code, answers[1].error_code] == [E.none, E.none]
            assert there.txns.core.entries[TX].value.partitions == {(TOPIC, 0), (TOPIC, 1)}
        assert here.txns.asked == []  # not coordinated here
        assert here.at.partition(0).log.log_end_offset == 1

    run(scenario())
    here.close()
    there.close()


async def spin_until(condition: Any) -> None:
    """Let the loop run (socket pair I/O included) until `condition()`; no clock."""
    for _ in range(10_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def test_verifications_waiting_for_one_coordinator_go_in_one_request(tmp_path: Path) -> None:
    here, there = two_nodes(tmp_path)
    slow = SlowTxns()
    there.txns = slow
    asked: list[Request] = []

    async def scenario() -> None:
        async with coordinator_at(there, asked):
            ids = [await slow.begin(f"tx-{n}", (TOPIC, 0)) for n in range(5)]
            verify = VerifyOperation.DEFAULT_ERROR

            def verifying(n: int) -> asyncio.Task[Any]:
                pid, epoch = ids[n]
                return asyncio.create_task(
                    here.verifier.verify(f"tx-{n}", pid, epoch, [(TOPIC, 0)], verify)
                )

            together = [verifying(0), verifying(1)]  # asked in the same turn: one request
            await spin_until(lambda: len(asked) == 1)
            waiting = [verifying(2), verifying(3), verifying(4)]  # while that one is out
            for _ in range(100):
                await asyncio.sleep(0)
            assert len(asked) == 1
            slow.release.set()
            answers = await asyncio.gather(*together, *waiting)
            await here.verifier.stop()
        assert answers == [{}] * 5
        assert [len(r.body.transactions) for r in asked] == [2, 3]

    run(scenario())
    here.close()
    there.close()


def test_a_second_verification_of_one_id_replaces_the_waiting_one(tmp_path: Path) -> None:
    here, there = two_nodes(tmp_path)
    asked: list[Request] = []

    async def scenario() -> None:
        async with coordinator_at(there, asked):
            first = await there.txns.begin("first", (TOPIC, 0))
            pid, epoch = await there.txns.begin(TX, (TOPIC, 0))
            verify = VerifyOperation.DEFAULT_ERROR
            answers = await asyncio.gather(
                here.verifier.verify("first", *first, [(TOPIC, 0)], verify),
                here.verifier.verify(TX, pid, epoch, [(TOPIC, 0)], verify),  # replaced:
                here.verifier.verify(TX, pid, epoch, [(TOPIC, 0)], verify),  # a retry
                here.verifier.verify(TX, pid, epoch - 1, [(TOPIC, 0)], verify),  # fenced
            )
            await here.verifier.stop()
        assert answers == [
            {},
            {(TOPIC, 0): E.network_exception},
            {},
            {(TOPIC, 0): E.invalid_producer_epoch},
        ]

    run(scenario())
    here.close()
    there.close()


def test_an_unreachable_coordinator_is_told_as_not_enough_replicas(tmp_path: Path) -> None:
    here, _ = two_nodes(tmp_path)

    async def refuse(host: str, port: int) -> Any:
        raise ConnectionRefusedError(f"{host}:{port} refused")

    async def scenario() -> None:
        with dialing_with(refuse):
            records = txn_batch(b"a", producer_id=1000, epoch=0)
            answers = await produce(here, transactional_produce(records, txn_id=TX))
            await here.verifier.stop()
        assert answers[0].error_code == E.not_enough_replicas
        assert "NETWORK_EXCEPTION" in answers[0].error_message

    run(scenario())
    here.close()


def test_no_live_coordinator_is_coordinator_not_available(tmp_path: Path) -> None:
    node = txn_node(tmp_path, leader=-1)

    async def scenario() -> None:
        errors = await node.verifier.verify(
            TX, 1000, 0, [(TOPIC, 0)], VerifyOperation.GENERIC_ERROR_SUPPORTED
        )
        assert errors == {(TOPIC, 0): E.coordinator_not_available}

    run(scenario())
    node.close()


def test_produce_v12_tries_again_while_the_previous_transaction_completes(
    tmp_path: Path,
) -> None:
    node = txn_node(tmp_path, complete_markers=False)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0), transaction_version=2)
        ended = await node.txns.end_txn(TX, producer_id, epoch, True, transaction_version=2)
        assert ended.producer_epoch == epoch + 1  # the markers are still being written
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch + 1)
        producing = asyncio.create_task(
            produce(node, transactional_produce(records, txn_id=TX, version=12))
        )
        await spin_until(lambda: node.txns.asked[-1][0] == "add")
        assert not producing.done()  # CONCURRENT_TRANSACTIONS: it waits and asks again
        node.txns.finish_markers(TX)
        answers = await producing
        assert answers[0].error_code == E.none
        assert node.txns.core.entries[TX].value.partitions == {(TOPIC, 0)}

    run(scenario())
    node.close()


def test_produce_v12_gives_up_with_concurrent_transactions(tmp_path: Path) -> None:
    node = txn_node(tmp_path, complete_markers=False)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 0), transaction_version=2)
        await node.txns.end_txn(TX, producer_id, epoch, True, transaction_version=2)
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch + 1)
        answers = await produce(node, transactional_produce(records, txn_id=TX, version=12))
        # version 2 clients hear it as is; older ones as NOT_ENOUGH_REPLICAS
        assert answers[0].error_code == E.concurrent_transactions
        assert [kind for kind, _ in node.txns.asked].count("add") > 1
        older = await produce(node, transactional_produce(records, txn_id=TX, version=11))
        assert older[0].error_code == E.not_enough_replicas

    run(scenario())
    node.close()


def test_a_partition_that_changed_leader_during_the_verification_is_not_written(
    tmp_path: Path,
) -> None:
    image = txn_image(replicas=(1, 2))
    node = txn_node(tmp_path, image)
    slow = SlowTxns()
    node.txns = slow
    node.verifier._ports = type(node.verifier._ports)(1, lambda: node.at.metadata.image, slow)

    async def scenario() -> None:
        producer_id, epoch = await slow.begin(TX, (TOPIC, 0))
        records = txn_batch(b"a", producer_id=producer_id, epoch=epoch)
        waiting = asyncio.create_task(produce(node, transactional_produce(records, txn_id=TX)))
        await spin_until(lambda: bool(node.verifier._guards))
        node.at.apply(change_partition(image, leader=2))
        slow.release.set()
        answers = await waiting
        assert answers[0].error_code == E.not_leader_or_follower
        assert node.at.partition().log.log_end_offset == 0

    run(scenario())
    node.close()
