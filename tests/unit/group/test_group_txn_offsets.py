"""Transactional offsets: TxnOffsetCommit's checks, pending offsets, markers, their mix
with plain commits, deletion, expiry, require_stable and replay (Kafka's
OffsetMetadataManager semantics)."""

from __future__ import annotations

from typing import Any

from group_harness import stable_group
from kio.schema.errors import ErrorCode
from txn_group_harness import TxnHarness, assert_matches_replay

from strom.group import offsets, txn_offsets
from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.records import GroupMetadataKey, OffsetCommitKey
from strom.group.state import GroupState, TopicPartition

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)
DAY_MS = 24 * 3600 * 1000


def committed(h: TxnHarness, group: str = "g") -> dict[TopicPartition, int]:
    return {tp: v.offset for tp, v in offsets.fetch(h.core, group, None) if v is not None}


def plain_commit(h: TxnHarness, *items: tuple[str, int, int], group: str = "g") -> None:
    request = CommitRequest(group, offsets=tuple(OffsetToCommit(t, p, o) for t, p, o in items))
    assert h.commit(request) == [ErrorCode.none] * len(items)


def stable(h: TxnHarness, group: str = "g", partitions: list[TopicPartition] | None = None) -> Any:
    found, out = txn_offsets.stable_fetch(h.core, group, partitions, h.now_ms)
    h.run(out)
    return found


# --- pending until the marker -------------------------------------------------------------


def test_offsets_are_pending_until_the_commit_marker() -> None:
    h = TxnHarness()
    assert h.txn_commit(7, ("t", 0, 10), ("t", 1, 20)) == [ErrorCode.none] * 2
    assert committed(h) == {}
    group = h.group()
    assert group.state is GroupState.EMPTY and group.protocol_type is None  # a simple group
    assert set(group.pending_offsets) == {T0, T1}
    assert h.marker(7, commit=True).completed
    assert committed(h) == {T0: 10, T1: 20}
    assert not h.group().pending_offsets
    assert_matches_replay(h)


def test_an_abort_marker_drops_the_pending_offsets() -> None:
    h = TxnHarness()
    plain_commit(h, ("t", 0, 5))
    h.txn_commit(7, ("t", 0, 10), ("t", 1, 20))
    h.marker(7, commit=False)
    assert committed(h) == {T0: 5}
    assert not h.group().pending_offsets
    assert_matches_replay(h)


def test_markers_are_idempotent_and_other_producers_untouched() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 10))
    h.txn_commit(8, ("t", 1, 30))
    assert h.complete_marker(h.marker(9, commit=True, complete=False)) == []  # nothing pending
    assert h.complete_marker(h.marker(7, commit=True, complete=False)) == ["g"]
    assert h.complete_marker(h.marker(7, commit=False, complete=False)) == []  # a retry
    assert committed(h) == {T0: 10}
    assert list(h.group().pending_offsets) == [T1]
    assert_matches_replay(h)


def test_a_marker_ends_the_producers_offsets_in_every_group_it_selects() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 1), group="a")
    h.txn_commit(7, ("t", 0, 2), group="b")
    ended = txn_offsets.end_transaction(h.core, 7, commit=True, belongs=lambda g: g == "a")
    assert ended == ["a"]
    assert committed(h, "a") == {T0: 1} and committed(h, "b") == {}
    assert h.core.groups["b"].pending_offsets


def test_a_producer_writing_a_partition_again_keeps_its_last_offset() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 10))
    h.txn_commit(7, ("t", 0, 11))
    h.marker(7, commit=True)
    assert committed(h) == {T0: 11}
    assert_matches_replay(h)


# --- plain and transactional commits of one partition: the newest write wins ---------------


def test_a_plain_commit_after_the_pending_offset_wins() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 10))
    plain_commit(h, ("t", 0, 99))
    assert committed(h) == {T0: 99}
    assert h.group().pending_offsets[T0][7].superseded
    h.marker(7, commit=True)
    assert committed(h) == {T0: 99}  # the transaction's offset is older than 99's
    assert_matches_replay(h)


def test_a_pending_offset_written_after_a_plain_commit_wins_at_the_commit_marker() -> None:
    h = TxnHarness()
    plain_commit(h, ("t", 0, 99))
    h.txn_commit(7, ("t", 0, 10))
    assert committed(h) == {T0: 99}
    h.marker(7, commit=True)
    assert committed(h) == {T0: 10}
    assert_matches_replay(h)


def test_two_producers_on_one_partition_the_later_written_wins() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 10))
    h.txn_commit(8, ("t", 0, 20))
    h.marker(8, commit=True)
    assert committed(h) == {T0: 20}
    h.marker(7, commit=True)  # written before 20: it does not take its place
    assert committed(h) == {T0: 20}
    assert_matches_replay(h)
    h.txn_commit(7, ("t", 0, 30))
    h.txn_commit(8, ("t", 0, 40))
    h.marker(7, commit=True)  # written first, committed first: 30 until 40 commits
    assert committed(h) == {T0: 30}
    h.marker(8, commit=True)
    assert committed(h) == {T0: 40}
    assert_matches_replay(h)


# --- the checks --------------------------------------------------------------------------


def test_txn_commit_checks_group_membership_as_kafka_does() -> None:
    h = TxnHarness()
    ids, generation = stable_group(h, 1)
    (member,) = ids
    ok = [ErrorCode.none]
    # No member id and no generation (v0-v2): taken even by a Stable group.
    assert h.txn_commit(7, ("t", 0, 1)) == ok
    assert h.txn_commit(7, ("t", 0, 1), generation=generation, member=member) == ok
    assert h.txn_commit(7, ("t", 0, 1), generation=generation + 1, member=member) == [
        ErrorCode.illegal_generation
    ]
    assert h.txn_commit(7, ("t", 0, 1), generation=generation, member="ghost") == [
        ErrorCode.unknown_member_id
    ]
    assert h.txn_commit(7, ("t", 0, 1), generation=-1, member=member) == [
        ErrorCode.illegal_generation
    ]
    assert h.txn_commit(7, ("t", 0, 1), generation=generation, member=member, instance="i") == [
        ErrorCode.unknown_member_id  # no static member "i"
    ]
    # A group that does not exist: only a commit without a generation creates it.
    assert h.txn_commit(7, ("t", 0, 1), group="new", generation=3, member="m") == [
        ErrorCode.illegal_generation
    ]
    assert "new" not in h.core.groups
    assert h.txn_commit(7, ("t", 0, 1), group="") == [ErrorCode.invalid_group_id]


def test_txn_commit_is_taken_during_a_rebalance_and_fences_static_members() -> None:
    h = TxnHarness()
    token = h.join(instance="i1")
    first = h.joined(token)
    h.sync(first.member_id, first.generation_id, {first.member_id: b""}, instance="i1")
    # The static member restarts with a new id: the old one is fenced.
    h.join(instance="i1")
    current = h.group().static_members["i1"]
    assert current != first.member_id
    assert h.txn_commit(
        7, ("t", 0, 1), generation=first.generation_id, member=first.member_id, instance="i1"
    ) == [ErrorCode.fenced_instance_id]
    # CompletingRebalance refuses a plain commit, not a transactional one.
    h.join_new(group="r")
    group = h.group("r")
    (member_id,) = group.members
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert h.txn_commit(
        7, ("t", 0, 1), group="r", generation=group.generation_id, member=member_id
    ) == [ErrorCode.none]


def test_oversized_metadata_is_refused_per_partition() -> None:
    h = TxnHarness(offset_metadata_max_bytes=4)
    request = txn_offsets.TxnCommitRequest(
        "g",
        7,
        0,
        offsets=(OffsetToCommit("t", 0, 1, -1, "12345"), OffsetToCommit("t", 1, 1, -1, None)),
    )
    errors, out = txn_offsets.txn_commit(h.core, request, h.now_ms)
    assert errors == [ErrorCode.offset_metadata_too_large, ErrorCode.none]
    assert [key for key, _ in out.records] == [OffsetCommitKey("g", "t", 1)]
    h.run(out)
    assert list(h.group().pending_offsets) == [T1]


# --- deletion, expiry ---------------------------------------------------------------------


def test_offset_delete_drops_pending_offsets_too() -> None:
    h = TxnHarness()
    plain_commit(h, ("t", 1, 5))
    h.txn_commit(7, ("t", 0, 10), ("t", 1, 20))
    error, errors, out = offsets.delete_offsets(h.core, "g", [T0], h.now_ms)
    h.run(out)
    assert (error, errors) == (ErrorCode.none, [ErrorCode.none])
    h.marker(7, commit=True)
    assert committed(h) == {T1: 20}
    assert_matches_replay(h)


def test_deleting_a_group_tombstones_its_pending_only_partitions() -> None:
    h = TxnHarness()
    plain_commit(h, ("t", 0, 5))
    h.txn_commit(7, ("t", 0, 10), ("t", 1, 20))
    errors, out = offsets.delete_groups(h.core, ["g"], h.now_ms)
    assert errors == [ErrorCode.none]
    assert out.records == [
        (OffsetCommitKey("g", "t", 0), None),
        (OffsetCommitKey("g", "t", 1), None),
        (GroupMetadataKey("g"), None),
    ]
    h.run(out)
    assert "g" not in h.core.groups
    assert h.marker(7, commit=True).completed
    assert "g" not in h.core.groups  # the marker finds nothing left to commit
    assert_matches_replay(h)


def test_expiry_spares_offsets_and_groups_with_pending_offsets() -> None:
    h = TxnHarness(offsets_retention_ms=DAY_MS)
    plain_commit(h, ("t", 0, 5), ("t", 1, 6))
    h.txn_commit(7, ("t", 0, 10), group="g")
    h.txn_commit(7, ("u", 0, 10), group="only-pending")
    h.now_ms += 2 * DAY_MS
    h.run(offsets.expire(h.core, h.now_ms))
    assert committed(h) == {T0: 5}  # t-1 expired; t-0 awaits the transaction
    assert "only-pending" in h.core.groups
    h.advance(60_000)  # a group that never formed stays while offsets are pending
    assert "only-pending" in h.core.groups
    h.marker(7, commit=False)
    h.run(offsets.expire(h.core, h.now_ms))
    assert "g" not in h.core.groups and "only-pending" not in h.core.groups
    assert_matches_replay(h)


# --- OffsetFetch with require_stable -------------------------------------------------------


def test_require_stable_answers_unstable_partitions() -> None:
    h = TxnHarness()
    plain_commit(h, ("t", 0, 5), ("t", 1, 6))
    h.txn_commit(7, ("t", 0, 10), ("u", 3, 1))
    found = stable(h, "g", [T0, T1, TopicPartition("u", 3), TopicPartition("x", 0)])
    assert found.unstable == {T0, TopicPartition("u", 3)}
    values = {tp: v.offset if v else None for tp, v in found.offsets}
    assert values == {T0: None, T1: 6, TopicPartition("u", 3): None, TopicPartition("x", 0): None}
    every = stable(h, "g")  # every committed partition; pending-only ones are not listed
    assert [tp for tp, _ in every.offsets] == [T0, T1]
    assert every.unstable == {T0}
    # Without require_stable, the committed offsets as if no transaction were open.
    assert committed(h) == {T0: 5, T1: 6}
    h.marker(7, commit=True)
    assert stable(h, "g", [T0]).unstable == frozenset()


def test_require_stable_waits_for_the_groups_earlier_writes() -> None:
    h = TxnHarness()
    h.hold = True
    h.txn_commit(7, ("t", 0, 10))
    (pending_write,) = h.held
    found, out = txn_offsets.stable_fetch(h.core, "g", [T0], h.now_ms)
    assert found.unstable == {T0}  # decided on the newest state: the pending write's
    assert h.core.durable(out.write_id) == []  # no records, yet answered after the write
    assert h.fail(pending_write) == (pending_write, out.write_id)  # and failed with it
    h.hold = False
    found, out = txn_offsets.stable_fetch(h.core, "g", [T0], h.now_ms)
    assert found.unstable == frozenset()
    assert h.core.durable(out.write_id) == [out.write_id]


# --- writes that fail, markers while writes are pending -----------------------------------


def test_a_failed_txn_commit_leaves_nothing_pending() -> None:
    h = TxnHarness()
    h.hold = True
    h.txn_commit(7, ("t", 0, 10))
    h.fail(h.held[0])
    assert "g" not in h.core.groups
    h.hold = False
    h.marker(7, commit=True)
    assert committed(h) == {}
    assert_matches_replay(h)


def test_a_marker_reaches_the_pending_writes_of_its_groups() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 10))
    h.hold = True
    plain_commit_request = CommitRequest("g", offsets=(OffsetToCommit("t", 1, 3),))
    h.commit(plain_commit_request)  # held: a layer holding its own copy of "g"
    h.marker(7, commit=True)
    assert committed(h) == {T0: 10}
    h.complete(h.held[0])
    assert committed(h) == {T0: 10, T1: 3}  # the promoted layer kept the marker's work
    assert_matches_replay(h)


def test_a_marker_survives_a_failed_write_of_its_group() -> None:
    h = TxnHarness()
    h.txn_commit(7, ("t", 0, 10))
    h.hold = True
    h.commit(CommitRequest("g", offsets=(OffsetToCommit("t", 1, 3),)))
    h.marker(7, commit=True)
    h.fail(h.held[0])
    assert committed(h) == {T0: 10}
    assert_matches_replay(h)
