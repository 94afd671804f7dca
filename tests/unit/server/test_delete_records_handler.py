"""The DeleteRecords handler on real partition logs: offsets checked, the start moved,
and the answer held until every in-sync follower starts there too."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from server_harness import (
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

from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.server.handlers.delete_records import handle_delete_records
from strom.server.handlers.fetch import handle_fetch, handle_list_offsets
from strom.server.handlers.produce import handle_produce


def produced(at: Node, count: int) -> None:
    values = [f"v{i}".encode() for i in range(count)]
    response = run(handle_produce(at.produce, produce_request(batch(*values), acks=1)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def delete_request(
    offsets: dict[int, int], *, topic: str = TOPIC, timeout_ms: int = 5_000, version: int = 2
) -> Any:
    body = {
        "topics": [
            {
                "name": topic,
                "partitions": [{"partition_index": p, "offset": o} for p, o in offsets.items()],
            }
        ],
        "timeout": timeout_ms,
    }
    return request(ApiKey.DELETE_RECORDS, version, body)


def answers(response: Any) -> dict[int, tuple[ErrorCode, int]]:
    (topic,) = response.topics
    return {p.partition_index: (p.error_code, p.low_watermark) for p in topic.partitions}


def delete(at: Node, offsets: dict[int, int], **kwargs: Any) -> dict[int, tuple[ErrorCode, int]]:
    return answers(run(handle_delete_records(at.fetch, delete_request(offsets, **kwargs))))


def fetch_error(at: Node, offset: int) -> tuple[ErrorCode, int]:
    response = run(handle_fetch(at.fetch, fetch_request(offset)))
    (partition,) = response.responses[0].partitions
    return partition.error_code, partition.log_start_offset


def earliest(at: Node) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}],
            }
        ],
    }
    response = run(handle_list_offsets(at.fetch, request(ApiKey.LIST_OFFSETS, 7, body)))
    return int(response.topics[0].partitions[0].offset)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_a_single_replica_starts_at_the_offset_at_once(tmp_path: Path, version: int) -> None:
    at = node(tmp_path, image_of())
    produced(at, 5)
    assert delete(at, {0: 3}, version=version) == {0: (ErrorCode.none, 3)}
    assert fetch_error(at, 2) == (ErrorCode.offset_out_of_range, 3)
    assert fetch_error(at, 3)[0] == ErrorCode.none
    assert earliest(at) == 3
    assert delete(at, {0: 1}) == {0: (ErrorCode.none, 3)}  # below the start: nothing moves
    assert delete(at, {0: -1}) == {0: (ErrorCode.none, 5)}  # -1: the high watermark
    at.close()


def test_offsets_past_the_high_watermark_and_unknown_partitions_are_refused(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2), partitions=2))
    produced(at, 4)  # not replicated yet: the high watermark is 0
    got = delete(at, {0: 1, 1: -2})
    assert got == {0: (ErrorCode.offset_out_of_range, -1), 1: (ErrorCode.offset_out_of_range, -1)}
    assert at.partition().log.log_start_offset == 0
    got = answers(run(handle_delete_records(at.fetch, delete_request({0: 0}, topic="nope"))))
    assert got == {0: (ErrorCode.unknown_topic_or_partition, -1)}
    at.apply(change_partition(at.metadata.image, leader=2))
    assert delete(at, {0: 0}) == {0: (ErrorCode.not_leader_or_follower, -1)}
    at.close()


def test_a_compacted_topic_refuses_with_policy_violation(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(configs={"cleanup.policy": "compact"}))
    assert delete(at, {0: 0}) == {0: (ErrorCode.policy_violation, -1)}
    at.close()


def test_the_answer_waits_for_the_in_sync_follower_to_start_there(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    produced(at, 6)

    async def scenario() -> dict[int, tuple[ErrorCode, int]]:
        await handle_fetch(at.fetch, fetch_request(6, replica_id=2, log_start_offset=0))
        assert at.partition().high_watermark == 6
        waiting = asyncio.create_task(handle_delete_records(at.fetch, delete_request({0: 4})))
        await turns()
        assert not waiting.done()
        assert at.partition().log.log_start_offset == 4  # the leader's start moved at once
        await handle_fetch(at.fetch, fetch_request(6, replica_id=2, log_start_offset=2))
        await turns()
        assert not waiting.done()  # the follower still starts at 2
        await handle_fetch(at.fetch, fetch_request(6, replica_id=2, log_start_offset=4))
        return answers(await waiting)

    assert run(scenario()) == {0: (ErrorCode.none, 4)}
    at.close()


def test_a_follower_that_never_follows_times_the_partition_out(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    produced(at, 3)
    run(handle_fetch(at.fetch, fetch_request(3, replica_id=2, log_start_offset=0)))
    assert delete(at, {0: 2}, timeout_ms=0) == {0: (ErrorCode.request_timed_out, -1)}
    assert at.partition().log.log_start_offset == 2  # the deletion stands
    at.close()


def answer_after(at: Node, change: MetadataImage) -> dict[int, tuple[ErrorCode, int]]:
    """DeleteRecords to offset 2 of a 3-record partition whose follower (2) started at 0;
    `change` applied while the answer waits for that follower. The answer then."""
    produced(at, 3)

    async def scenario() -> dict[int, tuple[ErrorCode, int]]:
        await handle_fetch(at.fetch, fetch_request(3, replica_id=2, log_start_offset=0))
        waiting = asyncio.create_task(handle_delete_records(at.fetch, delete_request({0: 2})))
        await turns()
        at.apply(change)
        return answers(await waiting)

    return run(scenario())  # type: ignore[no-any-return]


def test_a_leadership_moving_away_ends_the_wait(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    moved = change_partition(at.metadata.image, leader=2)
    assert answer_after(at, moved) == {0: (ErrorCode.not_leader_or_follower, -1)}
    at.close()


def test_a_smaller_isr_releases_the_wait(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    shrunk = change_partition(at.metadata.image, isr=(1,))
    assert answer_after(at, shrunk) == {0: (ErrorCode.none, 2)}
    at.close()
