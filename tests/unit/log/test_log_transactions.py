"""A partition log's transactions: opened by transactional batches, ended by markers,
aborted ones in each segment's `.txnindex`, kept across snapshots, truncation and
restarts (compaction: test_log_cleaner_txns.py)."""

from __future__ import annotations

import struct
from dataclasses import replace
from pathlib import Path

import crc32c
import pytest
from kio.schema.errors import ErrorCode
from txn_log_helpers import all_aborted, append, marker, open_log, plain_batch, txn_batch

from strom.log.producer_state import ProducerStateManager
from strom.log.transactions import AbortedTxn
from strom.protocol.records import RecordsError, replica_batches


def txn_indexes(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.txnindex"))


def test_a_transaction_opens_with_its_first_batch_and_ends_with_its_marker(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p")
    append(log, plain_batch(2))  # 0, 1
    append(log, txn_batch(7, 2))  # 2, 3
    append(log, txn_batch(8))  # 4
    append(log, txn_batch(7))  # 5: the same transaction goes on
    assert log.open_transactions() == {7: 2, 8: 4}
    assert log.last_stable_offset(high_watermark=6) == 2
    assert append(log, marker(7, commit=True)) == 6
    assert log.open_transactions() == {8: 4}
    assert log.last_stable_offset(high_watermark=6) == 2, "the marker is not replicated"
    assert log.last_stable_offset(high_watermark=7) == 4
    assert all_aborted(log) == []
    assert append(log, marker(8, commit=False)) == 7
    assert log.last_stable_offset(high_watermark=8) == 8
    assert all_aborted(log) == [AbortedTxn(8, 4, 7, 8)]
    assert txn_indexes(tmp_path / "p") == ["00000000000000000000.txnindex"]
    log.close()


def test_the_index_lists_only_aborted_transactions_a_range_overlaps(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, txn_batch(1), txn_batch(2))  # 0, 1
    append(log, marker(1, commit=False))  # 2: aborted while 2 is open
    append(log, txn_batch(3))  # 3
    append(log, marker(2, commit=False), marker(3, commit=False))  # 4, 5
    assert all_aborted(log) == [
        AbortedTxn(1, 0, 2, 1),
        AbortedTxn(2, 1, 4, 3),
        AbortedTxn(3, 3, 5, 6),
    ]
    assert [t.producer_id for t in log.aborted_transactions(3, 4)] == [2, 3]
    assert [t.producer_id for t in log.aborted_transactions(5, 6)] == [3]
    assert log.aborted_transactions(0, 1) == [AbortedTxn(1, 0, 2, 1)], "stops at its LSO"
    log.close()


def test_a_marker_of_an_older_epoch_is_refused_and_a_newer_one_moves_the_producer(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p")
    append(log, txn_batch(7, epoch=3, sequence=0))
    end = log.log_end_offset
    with pytest.raises(RecordsError) as refused:
        append(log, marker(7, commit=False, epoch=2))
    assert refused.value.error_code == ErrorCode.invalid_producer_epoch
    assert log.log_end_offset == end and log.open_transactions() == {7: 0}
    append(log, marker(7, commit=False, epoch=4, coordinator_epoch=5))  # a fence
    entry = log.producer_state_for(7)
    assert entry is not None and (entry.epoch, entry.coordinator_epoch) == (4, 5)
    assert entry.batches == type(entry.batches)(maxlen=5)  # a new epoch forgets them
    with pytest.raises(RecordsError) as fenced:
        append(log, txn_batch(7, epoch=3, sequence=1))
    assert fenced.value.error_code == ErrorCode.invalid_producer_epoch
    with pytest.raises(RecordsError) as zombie:
        append(log, marker(7, commit=True, epoch=4, coordinator_epoch=4))
    assert zombie.value.error_code == ErrorCode.transaction_coordinator_fenced
    log.close()


def test_a_plain_batch_of_a_producer_in_a_transaction_is_refused(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, txn_batch(7, sequence=0))
    view, header = txn_batch(7, sequence=1)
    not_transactional = replace(header, attributes=0)  # what the checks read
    with pytest.raises(RecordsError) as refused:
        log.append([(view, not_transactional)], now_ms=0, leader_epoch=0)
    assert refused.value.error_code == ErrorCode.invalid_txn_state
    log.close()


def test_a_copying_follower_tracks_what_its_leader_wrote(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    append(leader, txn_batch(1, 3), txn_batch(2))
    append(leader, marker(1, commit=False))
    follower = open_log(tmp_path / "follower")
    result = leader.read(0, 1 << 20)
    follower.append(
        replica_batches(result.read_bytes()), now_ms=0, leader_epoch=0, assign_offsets=False
    )
    assert follower.open_transactions() == leader.open_transactions() == {2: 3}
    assert all_aborted(follower) == all_aborted(leader) == [AbortedTxn(1, 0, 4, 3)]
    leader.close()
    follower.close()


def test_open_transactions_survive_a_clean_restart_from_the_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, txn_batch(1), txn_batch(2, 2))
    append(log, marker(1, commit=False))
    log.close()
    log = open_log(tmp_path / "p")
    assert log.recovery_report.producer_batches_replayed == 0
    assert log.open_transactions() == {2: 1}
    assert all_aborted(log) == [AbortedTxn(1, 0, 3, 1)]
    log.close()


def test_an_old_snapshot_without_transactions_is_still_read() -> None:
    body = struct.pack(">4sqI", b"SPS1", 10, 1) + struct.pack(">qhqB", 7, 2, 99, 1)
    body += struct.pack(">iiqqq", 0, 4, 5, 9, 99)
    producers = ProducerStateManager()
    assert producers.load_snapshot(body + struct.pack(">I", crc32c.crc32c(body))) == 10
    entry = producers.get(7)
    assert entry is not None and (entry.epoch, entry.last_seq) == (2, 4)
    assert (entry.coordinator_epoch, entry.current_txn_first_offset) == (-1, None)
    assert producers.open_transactions() == {}


def test_truncation_drops_index_entries_and_reopens_transactions(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, txn_batch(1), txn_batch(2))  # 0, 1
    append(log, marker(1, commit=False))  # 2
    append(log, marker(2, commit=True))  # 3
    log.last_stable_offset(high_watermark=2)
    log.truncate_to(3)
    assert log.open_transactions() == {2: 1}
    assert log.last_stable_offset(high_watermark=3) == 1
    log.truncate_to(2)
    assert log.open_transactions() == {1: 0, 2: 1}
    assert all_aborted(log) == [] and txn_indexes(tmp_path / "p") == []
    log.close()


def test_an_ended_transaction_stays_unstable_across_a_truncation_above_its_marker(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p", segment_bytes=200)
    append(log, txn_batch(1))  # 0
    append(log, marker(1, commit=True))  # 1
    for _ in range(4):
        append(log, plain_batch(2))  # rolls: a snapshot after the marker
    log.truncate_to(log.log_end_offset - 1)
    assert log.last_stable_offset(high_watermark=1) == 0, "its marker is still unreplicated"
    assert log.last_stable_offset(high_watermark=2) == 2
    log.close()


@pytest.mark.parametrize("lose_indexes", [False, True])
def test_a_crash_rebuilds_the_transaction_indexes(tmp_path: Path, lose_indexes: bool) -> None:
    path = tmp_path / "p"
    log = open_log(path, segment_bytes=250)
    for producer in range(1, 7):
        append(log, txn_batch(producer, 2))
        append(log, marker(producer, commit=producer % 2 == 0))
    append(log, txn_batch(9))
    expected = all_aborted(log)
    assert len(expected) == 3 and len(txn_indexes(path)) > 1
    log.flush()
    log.close(clean=False)
    if lose_indexes:
        for name in txn_indexes(path):
            (path / name).unlink()
        (path / "recovery-point").unlink()
    else:
        last = sorted(path.glob("*.txnindex"))[-1]
        last.write_bytes(last.read_bytes()[:-5])  # torn
    log = open_log(path, segment_bytes=250)
    assert all_aborted(log) == expected
    assert log.open_transactions() == {9: log.log_end_offset - 1}
    log.close()


def test_retention_deletes_a_segment_with_its_transaction_index(tmp_path: Path) -> None:
    path = tmp_path / "p"
    log = open_log(path, segment_bytes=200, retention_bytes=1)
    append(log, txn_batch(1))
    append(log, marker(1, commit=False))
    for _ in range(4):
        append(log, plain_batch(2))
    assert txn_indexes(path)
    assert log.delete_old_segments(now_ms=0)
    assert txn_indexes(path) == [] and all_aborted(log) == []
    log.close()


def test_starting_over_at_an_offset_forgets_every_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    append(log, txn_batch(1), txn_batch(2))
    append(log, marker(1, commit=False))
    log.truncate_fully_and_start_at(10)
    assert log.open_transactions() == {} and all_aborted(log) == []
    assert log.last_stable_offset(high_watermark=10) == 10
    assert txn_indexes(tmp_path / "p") == []
    log.close()
