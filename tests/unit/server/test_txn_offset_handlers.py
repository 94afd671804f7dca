"""TxnOffsetCommit and OffsetFetch's require_stable on a real GroupService: the offsets
go to `__consumer_offsets` as a transactional batch, stay pending until a marker on that
partition is durable and `complete_txn` is told, and a new node loading the log ends in
the same state. The marker is appended here as the WriteTxnMarkers handler does."""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from group_service_harness import (
    GroupNode,
    answered,
    group_node,
    offset_fetch,
    offsets_image,
    serving,
)
from kio.schema.errors import ErrorCode
from server_harness import TOPIC, run

from strom.group.placement import OFFSETS_TOPIC
from strom.protocol.codec import Request, build, request_class
from strom.protocol.markers import encode_marker_batch
from strom.protocol.records import decode_batch, iter_batches, parse_batch_header
from strom.server.handlers.offsets import handle_offset_fetch
from strom.server.handlers.ports import GroupContext
from strom.server.handlers.txn_offsets import handle_txn_offset_commit

GROUP = "billing"
TXN_OFFSET_COMMIT = 28
PRODUCER = 4000


def txn_offset_commit(
    group_id: str,
    offsets: dict[tuple[str, int], int],
    *,
    producer_id: int = PRODUCER,
    epoch: int = 0,
    version: int = 3,
) -> Request:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), offset in offsets.items():
        partition: dict[str, Any] = {
            "partition_index": index,
            "committed_offset": offset,
            "committed_metadata": f"txn {offset}",
        }
        if version >= 2:
            partition["committed_leader_epoch"] = 5
        by_topic.setdefault(topic, []).append(partition)
    body: dict[str, Any] = {
        "transactional_id": "tx-1",
        "group_id": group_id,
        "producer_id": producer_id,
        "producer_epoch": epoch,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    if version >= 3:
        body.update(generation_id=-1, member_id="", group_instance_id=None)
    payload = build(request_class(TXN_OFFSET_COMMIT, version), body)
    return Request(TXN_OFFSET_COMMIT, version, 1, "test", payload)  # type: ignore[arg-type]


def errors_of(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


async def fetched(
    context: GroupContext, partitions: list[tuple[str, int]], *, stable: bool, version: int = 7
) -> dict[tuple[str, int], tuple[int, ErrorCode]]:
    asked = offset_fetch(GROUP, partitions, version=version)
    if stable:  # v7+ only
        body = dataclasses.replace(asked.body, require_stable=True)
        asked = Request(asked.api_key, version, 1, "test", body)
    answer = await answered(handle_offset_fetch, context, asked)
    topics = answer.groups[0].topics if version >= 8 else answer.topics
    return {
        (t.name, p.partition_index): (p.committed_offset, p.error_code)
        for t in topics
        for p in t.partitions
    }


async def write_marker(node: GroupNode, *, commit: bool, epoch: int = 0) -> None:
    """What the WriteTxnMarkers handler does on a `__consumer_offsets` partition: append
    the marker, wait until it is committed, tell the group coordinator."""
    partition = node.partitions.get(OFFSETS_TOPIC, 0)
    assert partition is not None
    batch = encode_marker_batch(
        producer_id=PRODUCER,
        producer_epoch=epoch,
        commit=commit,
        coordinator_epoch=0,
        timestamp_ms=1_000,
    )
    view = memoryview(batch)
    result = partition.append(
        [(view, parse_batch_header(view))], now_ms=1_000, producer_check=False
    )
    await partition.committed(result.last_offset + 1, 5.0)
    node.groups.complete_txn(0, PRODUCER, commit=commit)


def test_txn_offsets_are_pending_until_the_commit_marker(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            answer = await answered(
                handle_txn_offset_commit,
                context,
                txn_offset_commit(GROUP, {(TOPIC, 0): 42, ("missing", 0): 7, (TOPIC, 9): 1}),
            )
            assert errors_of(answer) == {
                (TOPIC, 0): ErrorCode.none,
                ("missing", 0): ErrorCode.unknown_topic_or_partition,
                (TOPIC, 9): ErrorCode.unknown_topic_or_partition,
            }
            # Written as one transactional batch of the producer.
            partition = at.partitions.get(OFFSETS_TOPIC, 0)
            assert partition is not None
            view = memoryview(partition.log.read(0, 1 << 20).read_bytes())
            ((position, header),) = list(iter_batches(view))
            assert header.is_transactional and not header.is_control
            assert (header.producer_id, header.producer_epoch) == (PRODUCER, 0)
            assert len(decode_batch(view[position : position + header.size_bytes])[1]) == 1

            wanted = [(TOPIC, 0)]
            assert await fetched(context, wanted, stable=True) == {
                (TOPIC, 0): (-1, ErrorCode.unstable_offset_commit)
            }
            assert await fetched(context, wanted, stable=True, version=8) == {
                (TOPIC, 0): (-1, ErrorCode.unstable_offset_commit)
            }
            # Not asking for stable offsets (or before v7): the committed one, none yet.
            assert await fetched(context, wanted, stable=False) == {
                (TOPIC, 0): (-1, ErrorCode.none)
            }
            assert await fetched(context, wanted, stable=False, version=6) == {
                (TOPIC, 0): (-1, ErrorCode.none)
            }
            await write_marker(at, commit=True)
            assert await fetched(context, wanted, stable=True) == {(TOPIC, 0): (42, ErrorCode.none)}
            at.groups.complete_txn(0, PRODUCER, commit=False)  # a retried marker: nothing
            assert await fetched(context, wanted, stable=True) == {(TOPIC, 0): (42, ErrorCode.none)}

            # The next transaction is aborted; the one after stays open.
            for offset, ends in ((50, False), (60, None)):
                answer = await answered(
                    handle_txn_offset_commit,
                    context,
                    txn_offset_commit(GROUP, {(TOPIC, 0): offset}),
                )
                assert errors_of(answer) == {(TOPIC, 0): ErrorCode.none}
                if ends is not None:
                    await write_marker(at, commit=ends)
            assert await fetched(context, wanted, stable=True) == {
                (TOPIC, 0): (-1, ErrorCode.unstable_offset_commit)
            }
            assert await fetched(context, wanted, stable=False) == {
                (TOPIC, 0): (42, ErrorCode.none)
            }

    async def reopen() -> None:
        # A new node on the same directory loads the batches and the markers.
        node = group_node(tmp_path, offsets_image())
        async with serving(node) as context:
            wanted = [(TOPIC, 0)]
            assert await fetched(context, wanted, stable=False) == {
                (TOPIC, 0): (42, ErrorCode.none)
            }
            assert await fetched(context, wanted, stable=True) == {
                (TOPIC, 0): (-1, ErrorCode.unstable_offset_commit)
            }
            await write_marker(node, commit=True)  # the open one, marked after the load
            assert await fetched(context, wanted, stable=True) == {(TOPIC, 0): (60, ErrorCode.none)}

    run_all(scenario(), reopen())


def test_a_fenced_epoch_and_bad_requests_are_refused(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            answer = await answered(
                handle_txn_offset_commit,
                context,
                txn_offset_commit(GROUP, {(TOPIC, 0): 1}, epoch=3),
            )
            assert errors_of(answer) == {(TOPIC, 0): ErrorCode.none}
            await write_marker(at, commit=True, epoch=3)
            zombie = await answered(
                handle_txn_offset_commit,
                context,
                txn_offset_commit(GROUP, {(TOPIC, 0): 9}, epoch=2),
            )
            assert errors_of(zombie) == {(TOPIC, 0): ErrorCode.invalid_producer_epoch}
            nameless = await answered(
                handle_txn_offset_commit, context, txn_offset_commit("", {(TOPIC, 0): 1}, epoch=3)
            )
            assert errors_of(nameless) == {(TOPIC, 0): ErrorCode.invalid_group_id}
            old = await answered(
                handle_txn_offset_commit,
                context,
                txn_offset_commit(GROUP, {(TOPIC, 0): 2, ("missing", 1): 1}, epoch=3, version=0),
            )
            assert errors_of(old) == {
                (TOPIC, 0): ErrorCode.none,
                ("missing", 1): ErrorCode.unknown_topic_or_partition,
            }

    run_all(scenario())


def test_a_loading_coordinator_is_not_available_to_old_clients(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image(), loaded=False)

    async def scenario() -> None:
        async with serving(at) as context:
            for version, error in (
                (1, ErrorCode.coordinator_not_available),
                (2, ErrorCode.coordinator_load_in_progress),
            ):
                answer = await answered(
                    handle_txn_offset_commit,
                    context,
                    txn_offset_commit(GROUP, {(TOPIC, 0): 1}, version=version),
                )
                assert errors_of(answer) == {(TOPIC, 0): error}

    run_all(scenario())


def run_all(*scenarios: Coroutine[Any, Any, None]) -> None:
    for scenario in scenarios:
        run(scenario)
