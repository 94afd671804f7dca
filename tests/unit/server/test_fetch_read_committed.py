"""Transactions at a partition's shell: markers appended as leader, the last stable
offset, and read_committed Fetch and ListOffsets on real partition logs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from server_harness import (
    TOPIC,
    Node,
    change_partition,
    fetch_request,
    image_of,
    node,
    request,
    run,
    turns,
)

from strom.protocol.apis import ApiKey
from strom.protocol.records import (
    NewRecord,
    RecordsError,
    decode_batch,
    encode_batch,
    iter_batches,
    validate_batches,
)
from strom.server.handlers.fetch import handle_fetch, handle_list_offsets
from strom.server.partition import LeadershipMoved

PAIR = image_of(replicas=(1, 2))
"""Led here, followed by broker 2: the high watermark waits for its fetches."""


def transactional(at: Node, producer_id: int, *values: bytes, epoch: int = 0) -> int:
    """Append a transactional batch as leader (as helper C's produce path will)."""
    data = encode_batch(
        [NewRecord(key=None, value=v) for v in values],
        base_timestamp_ms=1_000,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=-1,
        is_transactional=True,
    )
    batches = validate_batches(data, max_batch_bytes=1 << 20)
    return at.partition().append(batches, now_ms=0).base_offset


def plain(at: Node, *values: bytes) -> int:
    data = encode_batch([NewRecord(key=None, value=v) for v in values], base_timestamp_ms=1_000)
    batches = validate_batches(data, max_batch_bytes=1 << 20)
    return at.partition().append(batches, now_ms=0).base_offset


def settle(at: Node) -> None:
    """Flush, and let follower 2 catch up: the high watermark reaches the log end."""
    partition = at.partition()
    partition.log.flush()
    partition.on_flushed()
    partition.follower_fetch(2, partition.log.log_end_offset, now_ms=0)
    assert partition.high_watermark == partition.log.log_end_offset


def fetched(at: Node, offset: int, **kwargs: Any) -> Any:
    response = run(handle_fetch(at.fetch, fetch_request(offset, **kwargs)))
    return response.responses[0].partitions[0]


def values(records: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    for pos, header in iter_batches(records):
        if not header.is_control:
            out += [r.value for r in decode_batch(records[pos : pos + header.size_bytes])[1]]
    return out


def test_the_last_stable_offset_waits_for_the_marker_to_be_committed(tmp_path: Path) -> None:
    at = node(tmp_path, PAIR)
    partition = at.partition()
    plain(at, b"a")
    assert transactional(at, 7, b"t1", b"t2") == 1
    settle(at)
    assert partition.open_transactions() == {7: 1}
    assert (partition.high_watermark, partition.last_stable_offset) == (3, 1)
    result = partition.append_marker(7, 0, 0, commit=True, now_ms=0)
    assert result.base_offset == result.last_offset == 3
    assert partition.open_transactions() == {}
    assert partition.last_stable_offset == 1, "the marker is not below the high watermark"
    settle(at)
    assert partition.last_stable_offset == partition.high_watermark == 4
    at.close()


def test_the_last_stable_offset_is_never_below_the_log_start(tmp_path: Path) -> None:
    at = node(tmp_path, PAIR)
    partition = at.partition()
    transactional(at, 7, b"t1", b"t2")
    plain(at, b"a", b"b")
    settle(at)
    assert (partition.high_watermark, partition.last_stable_offset) == (4, 0)
    partition.log.delete_records_before(3)  # into the open transaction's records
    assert partition.last_stable_offset == 3
    partition.log.delete_records_before(4)
    assert partition.last_stable_offset == 4
    at.close()


def test_a_marker_of_an_older_epoch_is_refused(tmp_path: Path) -> None:
    at = node(tmp_path, PAIR)
    transactional(at, 7, b"t", epoch=5)
    with pytest.raises(RecordsError) as refused:
        at.partition().append_marker(7, 4, 0, commit=False, now_ms=0)
    assert refused.value.error_code == ErrorCode.invalid_producer_epoch
    assert at.partition().open_transactions() == {7: 0}
    at.partition().append_marker(7, 6, 0, commit=False, now_ms=0)  # a newer one: a fence
    settle(at)
    assert at.partition().aborted_transactions(0, 2)[0].producer_id == 7
    at.close()


def test_only_the_leader_appends_markers(tmp_path: Path) -> None:
    image = image_of(replicas=(1, 2))
    at = node(tmp_path, image)
    at.apply(change_partition(image, leader=2))
    with pytest.raises(LeadershipMoved):
        at.partition().append_marker(7, 0, 0, commit=True, now_ms=0)
    at.close()


def test_markers_need_min_insync_replicas(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2), isr=(1,), configs={"min.insync.replicas": "2"}))
    with pytest.raises(RecordsError) as refused:
        at.partition().append_marker(7, 0, 0, commit=True, now_ms=0)
    assert refused.value.error_code == ErrorCode.not_enough_replicas
    at.close()


def test_read_committed_stops_at_the_last_stable_offset_and_lists_aborts(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, PAIR)
    partition = at.partition()
    plain(at, b"a")  # 0
    transactional(at, 7, b"aborted")  # 1
    transactional(at, 8, b"open")  # 2
    partition.append_marker(7, 0, 0, commit=False, now_ms=0)  # 3
    plain(at, b"b")  # 4
    settle(at)
    uncommitted = fetched(at, 0)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (5, 2)
    assert uncommitted.aborted_transactions is None
    assert values(uncommitted.records) == [b"a", b"aborted", b"open", b"b"]
    committed = fetched(at, 0, isolation_level=1)
    assert committed.last_stable_offset == 2
    assert values(committed.records) == [b"a", b"aborted"]
    assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(7, 1)]
    nothing = fetched(at, 2, isolation_level=1)
    assert (nothing.records, nothing.aborted_transactions) == (b"", ())
    partition.append_marker(8, 0, 0, commit=True, now_ms=0)  # 5
    settle(at)
    rest = fetched(at, 2, isolation_level=1)
    assert rest.last_stable_offset == 6 and values(rest.records) == [b"open", b"b"]
    assert [(t.producer_id, t.first_offset) for t in rest.aborted_transactions] == [(7, 1)]
    assert fetched(at, 4, isolation_level=1).aborted_transactions == ()
    at.close()


def test_a_read_committed_long_poll_waits_for_the_last_stable_offset(tmp_path: Path) -> None:
    at = node(tmp_path, PAIR)
    transactional(at, 7, b"t")
    settle(at)

    async def scenario() -> Any:
        polling = asyncio.create_task(
            handle_fetch(
                at.fetch, fetch_request(0, max_wait_ms=60_000, min_bytes=1, isolation_level=1)
            )
        )
        await turns()
        assert not polling.done(), "the open transaction's record is not stable"
        at.partition().append_marker(7, 0, 0, commit=True, now_ms=0)
        await turns()
        assert not polling.done(), "the marker is not yet below the high watermark"
        settle(at)
        return await asyncio.wait_for(polling, 5)

    response = run(scenario())
    assert values(response.responses[0].partitions[0].records) == [b"t"]
    at.close()


def list_latest(at: Node, isolation_level: int) -> int:
    body = {
        "replica_id": -1,
        "isolation_level": isolation_level,
        "topics": [
            {
                "name": TOPIC,
                "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}],
            }
        ],
    }
    response = run(handle_list_offsets(at.fetch, request(ApiKey.LIST_OFFSETS, 7, body)))
    return int(response.topics[0].partitions[0].offset)


def test_list_offsets_latest_is_the_last_stable_offset_for_read_committed(
    tmp_path: Path,
) -> None:
    at = node(tmp_path, PAIR)
    plain(at, b"a")
    transactional(at, 7, b"t")
    settle(at)
    assert (list_latest(at, 0), list_latest(at, 1)) == (2, 1)
    at.close()
