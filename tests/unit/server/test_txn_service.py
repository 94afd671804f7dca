"""TxnService on real partition logs: each decision's record is written to
`__transaction_state` and answered once committed, the markers follow a durable end,
the completion record follows the markers, and a new leader loads it all again."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, image_of, run, turns
from txn_service_harness import (
    TXN_EPOCH,
    Markers,
    txn_image,
    txn_leader_moved,
    txn_node,
)

from strom.metadata.controller import NewTopic, TopicResult
from strom.server.transactions import TxnUnavailable
from strom.txn.placement import TRANSACTION_STATE_TOPIC
from strom.txn.state import TxnState

TX = "payments"
ORDERS = [("orders", 0)]


def test_a_transaction_is_written_committed_and_completed(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image())
    service = node.service

    async def scenario() -> None:
        init = await service.init_producer_id(TX, 60_000, None)
        assert (init.error, init.producer_id, init.producer_epoch) == (ErrorCode.none, 1000, 0)
        added = await service.add_partitions(TX, 1000, 0, ORDERS, transaction_version=0)
        assert added.error is ErrorCode.none
        verified = await service.verify_partitions(TX, 1000, 0, [*ORDERS, ("orders", 1)])
        assert verified.partition_errors == {
            ("orders", 0): ErrorCode.none,
            ("orders", 1): ErrorCode.transaction_abortable,
        }
        ended = await service.end_txn(TX, 1000, 0, True, transaction_version=0)
        assert ended.error is ErrorCode.none
        await turns(5)
        [(job, epoch)] = node.markers.jobs
        assert (job.txn_id, job.commit, job.partitions, epoch) == (
            TX,
            True,
            frozenset(ORDERS),
            TXN_EPOCH,
        )

    run(scenario())
    states = [(txn_id, v.state if v else None) for txn_id, v in node.records()]
    assert states == [
        (TX, TxnState.EMPTY),
        (TX, TxnState.ONGOING),
        (TX, TxnState.PREPARE_COMMIT),
        (TX, TxnState.COMPLETE_COMMIT),
    ]
    entry = node.service.entry(TX)
    assert entry is not None and entry.value.state is TxnState.COMPLETE_COMMIT
    assert [e.txn_id for e in node.service.entries()] == [TX]
    assert node.producer_ids.handed_out == [1000], "one producer id, for the new id only"


def test_a_new_leader_loads_the_ids_and_completes_a_prepared_transaction(
    tmp_path: Path,
) -> None:
    held = Markers(hold=asyncio.Event())
    first = txn_node(tmp_path / "first", txn_image(), markers=held)

    async def prepare() -> None:
        await first.service.init_producer_id(TX, 60_000, None)
        await first.service.add_partitions(TX, 1000, 0, ORDERS, transaction_version=0)
        ended = await first.service.end_txn(TX, 1000, 0, False, transaction_version=0)
        assert ended.error is ErrorCode.none
        await turns(3)
        assert len(held.jobs) == 1, "the markers are under way"
        first.service.close()

    run(prepare())
    assert [v.state for _, v in first.records() if v][-1] is TxnState.PREPARE_ABORT

    async def resume() -> None:
        # the same logs, a new service: as a broker that leads the partition after a restart
        second = txn_node(tmp_path / "first", txn_image(), partitions=first.partitions)
        await turns(5)
        [(job, _)] = second.markers.jobs
        assert (job.txn_id, job.commit) == (TX, False)
        entry = second.service.entry(TX)
        assert entry is not None and entry.value.state is TxnState.COMPLETE_ABORT
        again = await second.service.init_producer_id(TX, 60_000, None)
        assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.none, 1000, 1)

    run(resume())


def test_ids_of_a_partition_led_elsewhere_or_not_loaded_are_refused(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(leader=2))

    async def scenario() -> None:
        with pytest.raises(TxnUnavailable) as refused:
            await node.service.init_producer_id(TX, 60_000, None)
        assert refused.value.error_code is ErrorCode.not_coordinator
        # led here in the image, but not loaded (its partition is not open yet)
        node.metadata.image = txn_image()
        with pytest.raises(TxnUnavailable) as loading:
            await node.service.end_txn(TX, 1000, 0, True, transaction_version=2)
        assert loading.value.error_code is ErrorCode.coordinator_load_in_progress

    run(scenario())


def test_leadership_lost_forgets_the_ids(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image())

    async def scenario() -> None:
        await node.service.init_producer_id(TX, 60_000, None)
        assert node.service.coordinator_epoch(0) == TXN_EPOCH
        moved = txn_leader_moved(node.metadata.image, 2)
        node.follow(moved)
        assert node.service.entries() == []
        assert node.service.coordinator_epoch(0) is None
        with pytest.raises(TxnUnavailable) as refused:
            node.service.entry(TX)
        assert refused.value.error_code is ErrorCode.not_coordinator
        back = txn_leader_moved(moved, NODE_ID)
        node.follow(back)
        assert node.service.coordinator_epoch(0) == TXN_EPOCH + 2, "loaded at the new epoch"
        entry = node.service.entry(TX)
        assert entry is not None and entry.value.producer_id == 1000

    run(scenario())


def test_a_write_below_min_isr_is_coordinator_not_available(tmp_path: Path) -> None:
    image = txn_image(isr=(NODE_ID,), min_isr=2)
    node = txn_node(tmp_path, image)

    async def scenario() -> None:
        answer = await node.service.init_producer_id(TX, 60_000, None)
        assert answer.error is ErrorCode.coordinator_not_available
        assert node.service.entries() == [], "a new id whose first record failed is gone"

    run(scenario())
    assert node.records() == []


def test_timers_abort_a_timed_out_transaction_and_expire_an_idle_id(tmp_path: Path) -> None:
    node = txn_node(
        tmp_path,
        txn_image(),
        overrides=[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=10",
            "transaction.remove.expired.transaction.cleanup.interval.ms=10",
            "transactional.id.expiration.ms=1",
        ],
    )

    async def scenario() -> None:
        await node.service.init_producer_id(TX, 1, None)
        await node.service.add_partitions(TX, 1000, 0, ORDERS, transaction_version=0)
        timers = asyncio.create_task(node.service.run_timers())
        try:  # polled up to a bound far above the 1 s timeout: a loaded machine is slow
            deadline = time.monotonic() + 30
            while node.service.entries() != [] and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        finally:
            timers.cancel()
        [(job, _)] = node.markers.jobs
        assert not job.commit, "the timed-out transaction was aborted"

    run(scenario())
    states = [v.state if v else None for _, v in node.records()]
    assert states == [
        TxnState.EMPTY,
        TxnState.ONGOING,
        TxnState.PREPARE_ABORT,
        TxnState.COMPLETE_ABORT,
        None,
    ]


def test_requests_waiting_for_a_write_hear_not_coordinator_when_it_is_abandoned(
    tmp_path: Path,
) -> None:
    # broker 2 is in the ISR but never fetches: a record is appended and never committed
    node = txn_node(tmp_path, txn_image(isr=(NODE_ID, 2)))

    async def scenario() -> None:
        first = asyncio.create_task(node.service.init_producer_id(TX, 60_000, None))
        await turns(3)
        assert not first.done(), "waiting for the follower"
        moved = txn_leader_moved(node.metadata.image, 2)
        node.follow(moved)
        assert (await first).error is ErrorCode.not_coordinator, "its partition moved away"
        node.follow(txn_leader_moved(moved, NODE_ID, isr=(NODE_ID, 2)))
        second = asyncio.create_task(node.service.init_producer_id("other", 60_000, None))
        await turns(3)
        assert not second.done()
        node.service.close()
        assert (await second).error is ErrorCode.not_coordinator, "the broker is stopping"

    run(scenario())


def test_the_topic_is_created_on_first_use_as_kafka_creates_it(tmp_path: Path) -> None:
    asked: list[NewTopic] = []

    async def create(topics: list[NewTopic]) -> list[TopicResult]:
        asked.extend(topics)
        return [TopicResult(t.name, ErrorCode.policy_violation, "no") for t in topics]

    node = txn_node(tmp_path, image_of(), create_topics=create)

    async def scenario() -> None:
        with pytest.raises(TxnUnavailable) as refused:
            await node.service.init_producer_id(TX, 60_000, None)
        assert refused.value.error_code is ErrorCode.coordinator_not_available

    run(scenario())
    [topic] = asked
    # three brokers are live in the image: replication 3 (Kafka's default), min ISR 2
    assert (topic.name, topic.num_partitions, topic.replication_factor) == (
        TRANSACTION_STATE_TOPIC,
        50,
        3,
    )
    assert topic.configs["cleanup.policy"] == "compact"
    assert topic.configs["min.insync.replicas"] == "2"
    assert topic.configs["unclean.leader.election.enable"] == "false"


def test_end_txn_answers_once_the_transaction_is_completed(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image())
    service = node.service

    async def scenario() -> None:
        init = await service.init_producer_id(TX, 60_000, None)
        await service.add_partitions(TX, init.producer_id, 0, ORDERS, transaction_version=0)
        ended = await service.end_txn(TX, init.producer_id, 0, True, transaction_version=0)
        assert ended.error is ErrorCode.none
        # No turn in between: the producer's next transaction waits for the completion
        # record instead of being told CONCURRENT_TRANSACTIONS.
        again = await service.add_partitions(TX, init.producer_id, 0, ORDERS, transaction_version=0)
        assert again.error is ErrorCode.none
        entry = service.entry(TX)
        assert entry is not None and entry.value.state is TxnState.ONGOING

    run(scenario())


def test_end_txn_waits_for_the_markers_and_the_next_request_for_the_completion(
    tmp_path: Path,
) -> None:
    node = txn_node(tmp_path, txn_image())
    node.markers.hold = asyncio.Event()
    service = node.service

    async def scenario() -> None:
        init = await service.init_producer_id(TX, 60_000, None)
        pid = init.producer_id
        await service.add_partitions(TX, pid, 0, ORDERS, transaction_version=0)
        ending = asyncio.ensure_future(service.end_txn(TX, pid, 0, True, transaction_version=0))
        await turns(10)
        next_one = asyncio.ensure_future(
            service.add_partitions(TX, pid, 0, ORDERS, transaction_version=0)
        )
        await turns(10)
        assert not ending.done(), "answered before its markers were written"
        assert not next_one.done(), "decided while the last transaction was completing"
        assert node.markers.hold is not None
        node.markers.hold.set()
        assert (await ending).error is ErrorCode.none
        assert (await next_one).error is ErrorCode.none
        entry = service.entry(TX)
        assert entry is not None and entry.value.state is TxnState.ONGOING
        assert entry.value.partitions == frozenset(ORDERS)

    run(scenario())


def test_end_txn_does_not_wait_for_markers_that_are_held_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("strom.server.transactions.END_TXN_COMPLETION_WAIT_S", 0.01)
    node = txn_node(tmp_path, txn_image())
    node.markers.hold = asyncio.Event()
    service = node.service

    async def scenario() -> None:
        init = await service.init_producer_id(TX, 60_000, None)
        await service.add_partitions(TX, init.producer_id, 0, ORDERS, transaction_version=0)
        ended = await service.end_txn(TX, init.producer_id, 0, True, transaction_version=0)
        assert ended.error is ErrorCode.none, "the end is durable: the answer goes out"
        entry = service.entry(TX)
        assert entry is not None and entry.value.state is TxnState.PREPARE_COMMIT
        busy = await service.add_partitions(TX, init.producer_id, 0, ORDERS, transaction_version=0)
        assert busy.error is ErrorCode.concurrent_transactions
        assert node.markers.hold is not None
        node.markers.hold.set()
        await turns(10)
        entry = service.entry(TX)
        assert entry is not None and entry.value.state is TxnState.COMPLETE_COMMIT

    run(scenario())
