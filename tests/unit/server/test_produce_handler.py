"""The Produce and InitProducerId handlers on real partition logs, without a broker."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from server_harness import (
    NODE_ID,
    TOPIC,
    Node,
    batch,
    change_partition,
    fetch_request,
    image_of,
    node,
    produce_request,
    request,
    run,
    turns,
)

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers.fetch import handle_fetch
from strom.server.handlers.produce import handle_init_producer_id, handle_produce


async def produce(at: Node, produced: Request) -> Any:
    return await handle_produce(at.produce, produced)


def answer(response: Any) -> Any:
    """The one partition's answer."""
    (topic,) = response.responses
    (partition,) = topic.partition_responses
    return partition


def test_acks_1_appends_and_answers_with_the_offset(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    first = answer(run(produce(at, produce_request(batch(b"a", b"b"), acks=1))))
    second = answer(run(produce(at, produce_request(batch(b"c"), acks=1))))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 2)
    assert at.partition().log.log_end_offset == 3
    assert at.partition().log.flushed_offset == 3  # acks=1 waits for the fsync
    at.close()


def test_acks_0_appends_and_sends_no_answer(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    assert run(produce(at, produce_request(batch(b"a"), acks=0))) is None
    assert at.partition().log.log_end_offset == 1
    at.close()


def test_acks_all_on_a_single_replica_waits_for_the_high_watermark(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    entry = answer(run(produce(at, produce_request(batch(b"a", b"b"), acks=-1))))
    assert (entry.error_code, entry.base_offset) == (ErrorCode.none, 0)
    assert at.partition().high_watermark == 2
    at.close()


def test_acks_all_answers_once_the_follower_has_fetched_past_the_records(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))

    async def scenario() -> Any:
        waiting = asyncio.create_task(produce(at, produce_request(batch(b"a"), acks=-1)))
        await turns()  # appended; now waits for replica 2
        assert at.partition().log.log_end_offset == 1 and not waiting.done()
        assert at.partition().high_watermark == 0
        await handle_fetch(at.fetch, fetch_request(0, replica_id=2))  # it reads the record
        assert not waiting.done()
        await handle_fetch(at.fetch, fetch_request(1, replica_id=2))  # and holds it
        return await waiting

    entry = answer(run(scenario()))
    assert (entry.error_code, entry.base_offset) == (ErrorCode.none, 0)
    assert at.partition().high_watermark == 1
    at.close()


def test_acks_all_times_out_when_the_follower_never_fetches(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    entry = answer(run(produce(at, produce_request(batch(b"a"), acks=-1, timeout_ms=0))))
    assert entry.error_code == ErrorCode.request_timed_out
    at.close()


def test_acks_all_below_min_isr_is_refused_before_appending(tmp_path: Path) -> None:
    image = image_of(replicas=(1, 2), isr=(1,), configs={"min.insync.replicas": "2"})
    at = node(tmp_path, image)
    entry = answer(run(produce(at, produce_request(batch(b"a"), acks=-1))))
    assert entry.error_code == ErrorCode.not_enough_replicas
    assert entry.error_message
    assert at.partition().log.log_end_offset == 0
    # acks=1 does not need the ISR.
    entry = answer(run(produce(at, produce_request(batch(b"a"), acks=1))))
    assert entry.error_code == ErrorCode.none
    # Once replica 2 is back in the ISR, acks=all is admitted again.
    at.apply(change_partition(image, isr=(1, 2)))
    assert at.partition().isr == (1, 2)
    entry = answer(run(produce(at, produce_request(batch(b"b"), acks=-1, timeout_ms=0))))
    assert entry.error_code == ErrorCode.request_timed_out  # admitted; replica 2 is idle
    at.close()


def test_an_unknown_topic_or_partition_is_refused(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    entry = answer(run(produce(at, produce_request(batch(b"a"), topic="nope"))))
    assert entry.error_code == ErrorCode.unknown_topic_or_partition
    entry = answer(run(produce(at, produce_request(batch(b"a"), index=5))))
    assert entry.error_code == ErrorCode.unknown_topic_or_partition
    at.close()


def test_a_follower_refuses_produces_with_not_leader(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2), leader=2))
    entry = answer(run(produce(at, produce_request(batch(b"a")))))
    assert entry.error_code == ErrorCode.not_leader_or_follower
    assert at.partition().log.log_end_offset == 0
    at.close()


def test_a_partition_on_other_brokers_only_is_not_led_here(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(2, 3), leader=2))
    assert at.partitions.get(TOPIC, 0) is None
    entry = answer(run(produce(at, produce_request(batch(b"a")))))
    assert entry.error_code == ErrorCode.not_leader_or_follower
    at.close()


def test_a_malformed_batch_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    corrupt = bytearray(batch(b"hello"))
    corrupt[-1] ^= 0xFF  # the CRC no longer matches
    entry = answer(run(produce(at, produce_request(bytes(corrupt)))))
    assert entry.error_code == ErrorCode.corrupt_message
    assert entry.error_message
    entry = answer(run(produce(at, produce_request(b"\x00\x01\x02"))))
    assert entry.error_code != ErrorCode.none
    entry = answer(run(produce(at, produce_request(None))))
    assert entry.error_code == ErrorCode.corrupt_message
    assert at.partition().log.log_end_offset == 0
    at.close()


def test_invalid_acks_are_refused(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    entry = answer(run(produce(at, produce_request(batch(b"a"), acks=2))))
    assert entry.error_code == ErrorCode.invalid_required_acks
    assert at.partition().log.log_end_offset == 0
    at.close()


def test_an_idempotent_retry_is_answered_with_the_first_offsets(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    run(produce(at, produce_request(batch(b"x"))))
    records = batch(b"a", b"b", producer_id=1000, producer_epoch=0, base_sequence=0)
    first = answer(run(produce(at, produce_request(records))))
    retry = answer(run(produce(at, produce_request(records))))
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 1)
    assert (retry.error_code, retry.base_offset) == (ErrorCode.none, 1)
    assert at.partition().log.log_end_offset == 3  # written once
    skipped = batch(b"c", producer_id=1000, producer_epoch=0, base_sequence=5)
    entry = answer(run(produce(at, produce_request(skipped))))
    assert entry.error_code == ErrorCode.out_of_order_sequence_number
    at.close()


def test_a_retry_of_a_written_batch_is_not_told_it_was_refused_below_min_isr(
    tmp_path: Path,
) -> None:
    """An idempotent batch already in the log, sent again after its answer timed out
    while the ISR shrank below min.insync.replicas, must not get NOT_ENOUGH_REPLICAS:
    that error says "not written", the client then renumbers what follows under a new
    producer epoch (KIP-360) and the batch that was written goes in again, a duplicate.
    It is answered as the batch it is: written, waiting for the ISR."""
    image = image_of(replicas=(1, 2), configs={"min.insync.replicas": "2"})
    at = node(tmp_path, image)
    records = batch(b"a", producer_id=1000, producer_epoch=0, base_sequence=0)
    first = answer(run(produce(at, produce_request(records, acks=-1, timeout_ms=0))))
    assert (first.error_code, first.base_offset) == (ErrorCode.request_timed_out, 0)
    shrunk = change_partition(image, isr=(1,))
    at.apply(shrunk)
    retry = answer(run(produce(at, produce_request(records, acks=-1, timeout_ms=0))))
    assert retry.error_code == ErrorCode.not_enough_replicas_after_append  # may be written
    assert retry.base_offset == 0
    following = batch(b"b", producer_id=1000, producer_epoch=0, base_sequence=1)
    refused = answer(run(produce(at, produce_request(following, acks=-1, timeout_ms=0))))
    assert refused.error_code == ErrorCode.not_enough_replicas  # truly not written
    assert at.partition().log.log_end_offset == 1

    async def regrown() -> Any:
        waiting = asyncio.create_task(produce(at, produce_request(records, acks=-1)))
        await turns()
        at.apply(change_partition(shrunk, isr=(1, 2)))
        await handle_fetch(at.fetch, fetch_request(1, replica_id=2))
        return await waiting

    acknowledged = answer(run(regrown()))
    assert (acknowledged.error_code, acknowledged.base_offset) == (ErrorCode.none, 0)
    assert at.partition().log.log_end_offset == 1  # written once
    at.close()


def test_a_batch_after_one_refused_below_min_isr_is_not_told_it_skipped_a_sequence(
    tmp_path: Path,
) -> None:
    """A pipelining producer's batches 1-3 are refused while the ISR is below
    min.insync.replicas; the ISR grows back before batch 4 is handled. Batch 4 continues
    no written sequence, but OUT_OF_ORDER_SEQUENCE_NUMBER would make librdkafka bump the
    producer epoch and write again every batch of other partitions whose answer it lacks
    (the duplicates of the seed-8 network soak). The leader made the gap, so batch 4 is
    told what batch 1 was: NOT_ENOUGH_REPLICAS, nothing written, retry in order."""
    image = image_of(replicas=(1, 2), isr=(1,), configs={"min.insync.replicas": "2"})
    at = node(tmp_path, image)

    def idempotent(value: bytes, sequence: int, epoch: int = 0) -> bytes:
        return batch(value, producer_id=1000, producer_epoch=epoch, base_sequence=sequence)

    def send(records: bytes) -> Any:
        return answer(run(produce(at, produce_request(records, acks=-1, timeout_ms=0))))

    for sequence in range(3):
        refused = send(idempotent(b"r", sequence))
        assert refused.error_code == ErrorCode.not_enough_replicas
    grown = change_partition(image, isr=(1, 2))
    at.apply(grown)
    after_gap = send(idempotent(b"d", 3))
    assert after_gap.error_code == ErrorCode.not_enough_replicas
    assert "sequence 0" in after_gap.error_message
    assert at.partition().log.log_end_offset == 0
    # The producer retries in order; each batch is written once, the gap is closed.
    for sequence in range(4):
        written = send(idempotent(b"w", sequence))
        assert (written.error_code, written.base_offset) == (ErrorCode.request_timed_out, sequence)
    assert at.partition().log.log_end_offset == 4
    # A gap the leader did not make is still what the log says it is.
    skipped = send(idempotent(b"s", 9))
    assert skipped.error_code == ErrorCode.out_of_order_sequence_number
    # A new producer epoch's first batch refused: its gap is that epoch's only.
    shrunk = change_partition(grown, isr=(1,))
    at.apply(shrunk)
    assert send(idempotent(b"n", 0, epoch=1)).error_code == ErrorCode.not_enough_replicas
    at.apply(change_partition(shrunk, isr=(1, 2)))
    assert send(idempotent(b"o", 5)).error_code == ErrorCode.out_of_order_sequence_number
    assert send(idempotent(b"p", 2, epoch=1)).error_code == ErrorCode.not_enough_replicas
    assert at.partition().log.log_end_offset == 4
    at.close()


def test_a_batch_after_one_refused_as_not_leader_by_the_new_leader_is_told_the_same(
    tmp_path: Path,
) -> None:
    """The seed-8 soak again: a follower refused a pipelined producer's batches 0-1 as
    NOT_LEADER_OR_FOLLOWER (requests are decided as they arrive, answered in order), then
    became the leader before batch 2 arrived. Batch 2 is told NOT_LEADER_OR_FOLLOWER too,
    not that it skipped a sequence; the producer retries from batch 0."""
    image = image_of(replicas=(1, 2), leader=2)
    at = node(tmp_path, image)

    def send(sequence: int) -> Any:
        records = batch(b"v", producer_id=1000, producer_epoch=0, base_sequence=sequence)
        return answer(run(produce(at, produce_request(records, acks=1))))

    assert send(0).error_code == ErrorCode.not_leader_or_follower
    assert send(1).error_code == ErrorCode.not_leader_or_follower
    at.apply(change_partition(image, leader=1))
    after_gap = send(2)
    assert after_gap.error_code == ErrorCode.not_leader_or_follower
    assert "sequence 0" in after_gap.error_message
    assert [send(sequence).base_offset for sequence in range(3)] == [0, 1, 2]
    assert at.partition().log.log_end_offset == 3
    at.close()


def test_leadership_lost_while_waiting_answers_not_leader(tmp_path: Path) -> None:
    image = image_of(replicas=(1, 2))
    at = node(tmp_path, image)

    async def scenario() -> Any:
        waiting = asyncio.create_task(produce(at, produce_request(batch(b"a"), acks=-1)))
        await turns()
        at.apply(change_partition(image, leader=2))
        return await waiting

    entry = answer(run(scenario()))
    assert entry.error_code == ErrorCode.not_leader_or_follower
    at.close()


def test_init_producer_id_hands_out_ids_and_bumps_epochs(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())

    def init(**fields: Any) -> Any:
        body = {"transactional_id": None, "transaction_timeout": 60_000} | fields
        return run(handle_init_producer_id(at.produce, request(ApiKey.INIT_PRODUCER_ID, 4, body)))

    fresh = init(producer_id=-1, producer_epoch=-1)
    assert (fresh.error_code, fresh.producer_id, fresh.producer_epoch) == (ErrorCode.none, 1000, 0)
    bumped = init(producer_id=1000, producer_epoch=0)
    assert (bumped.producer_id, bumped.producer_epoch) == (1000, 1)
    # a transactional id goes to its coordinator (test_txn_handlers.py); there is none here
    refused = init(transactional_id="tx", producer_id=-1, producer_epoch=-1)
    assert refused.error_code == ErrorCode.coordinator_not_available
    assert at.producer_ids.handed_out == [1000]
    assert at.produce.node_id == NODE_ID
    at.close()
