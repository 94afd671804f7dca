"""The Fetch, ListOffsets and OffsetForLeaderEpoch handlers on real partition logs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from server_harness import (
    LEADER_EPOCH,
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
from strom.protocol.records import decode_batch, iter_batches
from strom.server.handlers.fetch import (
    handle_fetch,
    handle_list_offsets,
    handle_offset_for_leader_epoch,
)
from strom.server.handlers.produce import handle_produce


def produced(at: Node, *values: bytes, acks: int = 1) -> None:
    response = run(handle_produce(at.produce, produce_request(batch(*values), acks=acks)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def fetched(at: Node, offset: int, **kwargs: Any) -> Any:
    response = run(handle_fetch(at.fetch, fetch_request(offset, **kwargs)))
    assert response.error_code == ErrorCode.none
    (topic,) = response.responses
    (partition,) = topic.partitions
    return partition


def values(records: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    for pos, header in iter_batches(records):
        out += [r.value for r in decode_batch(records[pos : pos + header.size_bytes])[1]]
    return out


def test_consumers_read_below_the_high_watermark_only(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    produced(at, b"a", b"b")
    entry = fetched(at, 0)
    assert entry.error_code == ErrorCode.none
    assert (entry.high_watermark, entry.records) == (0, b"")  # written, not committed
    follower = fetched(at, 0, replica_id=2)  # followers read up to the log end
    assert values(follower.records) == [b"a", b"b"]
    fetched(at, 2, replica_id=2)  # replica 2 now holds both: the high watermark moves
    entry = fetched(at, 0)
    assert entry.high_watermark == 2 and entry.log_start_offset == 0
    assert values(entry.records) == [b"a", b"b"]
    assert fetched(at, 2).records == b""
    at.close()


def test_a_follower_fetch_moves_the_high_watermark_and_releases_acks_all(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2, 3)))
    produced(at, b"a")
    assert fetched(at, 1, replica_id=2).high_watermark == 0  # replica 3 lacks it
    assert fetched(at, 1, replica_id=3).high_watermark == 1
    assert at.partition().high_watermark == 1
    at.close()


def test_a_fetch_from_an_unknown_replica_is_refused(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    response = run(handle_fetch(at.fetch, fetch_request(0, replica_id=3)))
    assert response.responses[0].partitions[0].error_code != ErrorCode.none
    at.close()


def test_a_diverging_follower_is_told_where_its_epoch_ends(tmp_path: Path) -> None:
    image = image_of(replicas=(1, 2))
    at = node(tmp_path, image)
    produced(at, b"a", b"b")  # offsets 0, 1 at LEADER_EPOCH
    newer = change_partition(image, leader=2)
    at.apply(newer)
    at.apply(change_partition(newer, leader=1))  # led again, at LEADER_EPOCH + 2
    produced(at, b"c")  # offset 2
    # A follower that fetched offsets 0..3 under LEADER_EPOCH: its log left ours at 2.
    entry = fetched(at, 4, replica_id=2, last_fetched_epoch=LEADER_EPOCH)
    assert entry.error_code == ErrorCode.none
    assert (entry.diverging_epoch.epoch, entry.diverging_epoch.end_offset) == (LEADER_EPOCH, 2)
    assert entry.records == b""
    # One in step is answered with records.
    entry = fetched(at, 2, replica_id=2, last_fetched_epoch=LEADER_EPOCH)
    assert entry.diverging_epoch.epoch == -1
    assert values(entry.records) == [b"c"]
    at.close()


def test_an_offset_past_the_log_end_is_out_of_range(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    produced(at, b"a", acks=-1)
    assert fetched(at, 100).error_code == ErrorCode.offset_out_of_range
    assert fetched(at, 1).error_code == ErrorCode.none
    at.close()


def test_stale_and_unknown_leader_epochs_are_fenced(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    stale = fetched(at, 0, current_leader_epoch=LEADER_EPOCH - 1)
    assert stale.error_code == ErrorCode.fenced_leader_epoch
    newer = fetched(at, 0, current_leader_epoch=LEADER_EPOCH + 1)
    assert newer.error_code == ErrorCode.unknown_leader_epoch
    at.close()


def test_a_fetch_at_a_follower_gets_not_leader(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2), leader=2))
    assert fetched(at, 0).error_code == ErrorCode.not_leader_or_follower
    at.close()


def test_a_long_poll_answers_when_records_are_committed(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())

    async def scenario() -> Any:
        polling = asyncio.create_task(
            handle_fetch(at.fetch, fetch_request(0, max_wait_ms=60_000, min_bytes=1))
        )
        await turns()
        assert not polling.done()
        await handle_produce(at.produce, produce_request(batch(b"late"), acks=-1))
        return await polling

    response = run(scenario())
    assert values(response.responses[0].partitions[0].records) == [b"late"]
    at.close()


def test_a_long_poll_answers_at_once_while_stopping(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    at.stopping = True
    entry = fetched(at, 0, max_wait_ms=60_000)
    assert entry.records == b""
    at.close()


def list_offsets(at: Node, timestamp: int, *, topic: str = TOPIC) -> Any:
    body = {
        "replica_id": -1,
        "isolation_level": 0,
        "topics": [
            {
                "name": topic,
                "partitions": [
                    {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}
                ],
            }
        ],
    }
    response = run(handle_list_offsets(at.fetch, request(ApiKey.LIST_OFFSETS, 7, body)))
    return response.topics[0].partitions[0]


def test_list_offsets_latest_earliest_and_by_time(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    produced(at, b"a", b"b")
    fetched(at, 2, replica_id=2)
    produced(at, b"c")  # not committed: ListOffsets does not show it
    latest = list_offsets(at, -1)
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (
        ErrorCode.none,
        2,
        LEADER_EPOCH,
    )
    assert list_offsets(at, -2).offset == 0
    by_time = list_offsets(at, 1_000)
    assert (by_time.offset, by_time.timestamp) == (0, 1_000)
    assert list_offsets(at, 5_000).offset == -1
    assert list_offsets(at, -9).error_code == ErrorCode.invalid_request
    assert list_offsets(at, -1, topic="nope").error_code == ErrorCode.unknown_topic_or_partition
    at.close()


def test_offset_for_leader_epoch_says_where_an_epoch_ends(tmp_path: Path) -> None:
    image = image_of(replicas=(1, 2))
    at = node(tmp_path, image)
    produced(at, b"a", b"b")
    newer = change_partition(image, leader=2)
    at.apply(newer)
    at.apply(change_partition(newer, leader=1))
    produced(at, b"c")

    def asked(epoch: int) -> Any:
        body = {
            "replica_id": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [
                        {"partition": 0, "current_leader_epoch": -1, "leader_epoch": epoch}
                    ],
                }
            ],
        }
        response = run(
            handle_offset_for_leader_epoch(
                at.fetch, request(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, body)
            )
        )
        return response.topics[0].partitions[0]

    old = asked(LEADER_EPOCH)
    assert (old.error_code, old.leader_epoch, old.end_offset) == (ErrorCode.none, LEADER_EPOCH, 2)
    current = asked(LEADER_EPOCH + 2)
    assert (current.leader_epoch, current.end_offset) == (LEADER_EPOCH + 2, 3)
    at.close()
