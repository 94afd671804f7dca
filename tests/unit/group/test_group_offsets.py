"""Committed offsets: commit rules, fetch, deletion, expiry and replay."""

from __future__ import annotations

from group_harness import Harness
from kio.schema.errors import ErrorCode

from strom.group import offsets
from strom.group.consumer_protocol import encode_subscription
from strom.group.coordinator import LeavingMember
from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.records import GroupMetadataKey, OffsetCommitKey
from strom.group.state import GroupState, TopicPartition

DAY_MS = 24 * 3600 * 1000


def simple_commit(h: Harness, group: str, *items: tuple[str, int, int]) -> list[ErrorCode]:
    return h.commit(
        CommitRequest(group, offsets=tuple(OffsetToCommit(t, p, o, 3, "meta") for t, p, o in items))
    )


def test_consumer_without_a_group_protocol_commits_and_fetches() -> None:
    h = Harness()
    assert simple_commit(h, "solo", ("t", 0, 10), ("t", 1, 20)) == [ErrorCode.none] * 2
    found = offsets.fetch(h.core, "solo", None)
    assert [(tp.partition, v.offset if v else None) for tp, v in found] == [(0, 10), (1, 20)]
    assert found[0][1] is not None and found[0][1].metadata == "meta"
    assert found[0][1].leader_epoch == 3
    missing = offsets.fetch(h.core, "solo", [TopicPartition("t", 7)])
    assert missing == [(TopicPartition("t", 7), None)]
    assert offsets.fetch(h.core, "nobody", None) == []


def test_commit_becomes_visible_only_when_durable() -> None:
    h = Harness()
    errors, out = offsets.commit(
        h.core, CommitRequest("g", offsets=(OffsetToCommit("t", 0, 5),)), h.now_ms
    )
    assert errors == [ErrorCode.none]
    assert offsets.fetch(h.core, "g", None) == []
    assert h.core.durable(out.write_id) == [out.write_id]
    assert offsets.fetch(h.core, "g", None)[0][1].offset == 5  # type: ignore[union-attr]


def test_group_members_commit_with_their_generation() -> None:
    h = Harness()
    member_id, token = h.join_new()
    generation = h.joined(token).generation_id

    def commit(generation_id: int, member: str) -> ErrorCode:
        request = CommitRequest("g", generation_id, member, offsets=(OffsetToCommit("t", 0, 1),))
        return h.commit(request)[0]

    assert commit(generation, member_id) is ErrorCode.rebalance_in_progress  # not synced yet
    h.sync(member_id, generation, {member_id: b""})
    assert commit(generation, member_id) is ErrorCode.none
    assert commit(generation + 1, member_id) is ErrorCode.illegal_generation
    assert commit(generation, "ghost") is ErrorCode.unknown_member_id
    assert commit(-1, "") is ErrorCode.unknown_member_id  # group has members
    assert h.commit(CommitRequest("new", 4, "m", offsets=(OffsetToCommit("t", 0, 1),))) == [
        ErrorCode.illegal_generation
    ]


def test_oversized_metadata_is_refused_per_partition() -> None:
    h = Harness(offset_metadata_max_bytes=8)
    request = CommitRequest(
        "g", offsets=(OffsetToCommit("t", 0, 1, -1, "x" * 9), OffsetToCommit("t", 1, 1, -1, "ok"))
    )
    assert h.commit(request) == [ErrorCode.offset_metadata_too_large, ErrorCode.none]


def test_delete_groups_only_when_empty() -> None:
    h = Harness()
    simple_commit(h, "empty", ("t", 0, 1))
    _member_id, _ = h.join_new(group="busy")
    errors, out = offsets.delete_groups(h.core, ["empty", "busy", "ghost", ""], h.now_ms)
    records = h.run(out).records
    assert errors == [
        ErrorCode.none,
        ErrorCode.non_empty_group,
        ErrorCode.group_id_not_found,
        ErrorCode.invalid_group_id,
    ]
    assert (OffsetCommitKey("empty", "t", 0), None) in records
    assert (GroupMetadataKey("empty"), None) in records
    assert "empty" not in h.core.groups


def test_offset_delete_keeps_offsets_of_subscribed_topics() -> None:
    h = Harness()
    subscription = encode_subscription(["orders"])
    member_id, token = h.join_new(protocols=(("range", subscription),))
    generation = h.joined(token).generation_id
    h.sync(member_id, generation, {member_id: b""})
    h.commit(
        CommitRequest(
            "g",
            generation,
            member_id,
            offsets=(OffsetToCommit("orders", 0, 1), OffsetToCommit("old", 0, 1)),
        )
    )
    error, errors, out = offsets.delete_offsets(
        h.core, "g", [TopicPartition("orders", 0), TopicPartition("old", 0)], h.now_ms
    )
    records = h.run(out).records
    assert error is ErrorCode.none
    assert errors == [ErrorCode.group_subscribed_to_topic, ErrorCode.none]
    assert records == [(OffsetCommitKey("g", "old", 0), None)]
    assert [tp.topic for tp, _ in offsets.fetch(h.core, "g", None)] == ["orders"]
    error, _, out = offsets.delete_offsets(h.core, "ghost", [], h.now_ms)
    h.run(out)
    assert error is ErrorCode.group_id_not_found


def test_offsets_of_an_empty_group_expire_together_after_retention() -> None:
    h = Harness(offsets_retention_ms=7 * DAY_MS)
    member_id, token = h.join_new()
    generation = h.joined(token).generation_id
    h.sync(member_id, generation, {member_id: b""})
    h.commit(CommitRequest("g", generation, member_id, offsets=(OffsetToCommit("t", 0, 9),)))
    h.advance(3 * DAY_MS)  # the member is gone long ago: the group is empty since then
    h.leave(LeavingMember(member_id))
    assert h.group().state is GroupState.EMPTY
    h.now_ms += 6 * DAY_MS
    assert h.run(offsets.expire(h.core, h.now_ms)).records == []
    h.now_ms += 2 * DAY_MS
    records = h.run(offsets.expire(h.core, h.now_ms)).records
    assert (OffsetCommitKey("g", "t", 0), None) in records
    assert records[-1] == (GroupMetadataKey("g"), None)
    assert "g" not in h.core.groups


def test_standalone_offsets_expire_one_by_one() -> None:
    h = Harness(offsets_retention_ms=DAY_MS)
    simple_commit(h, "solo", ("t", 0, 1))
    h.now_ms += DAY_MS // 2
    simple_commit(h, "solo", ("t", 1, 1))
    h.now_ms += DAY_MS // 2
    expired = h.run(offsets.expire(h.core, h.now_ms)).records
    assert expired == [(OffsetCommitKey("solo", "t", 0), None)]
    assert [tp.partition for tp, _ in offsets.fetch(h.core, "solo", None)] == [1]


def test_live_group_offsets_do_not_expire_for_subscribed_topics() -> None:
    h = Harness(offsets_retention_ms=DAY_MS)
    member_id, token = h.join_new(protocols=(("range", encode_subscription(["t"])),))
    generation = h.joined(token).generation_id
    h.sync(member_id, generation, {member_id: b""})
    h.commit(CommitRequest("g", generation, member_id, offsets=(OffsetToCommit("t", 0, 1),)))
    h.now_ms += 2 * DAY_MS
    assert h.run(offsets.expire(h.core, h.now_ms)).records == []


def test_offsets_of_a_live_kip848_group_do_not_expire_for_subscribed_topics() -> None:
    """Its offsets look like those of a group without a protocol; `live` keeps them."""
    h = Harness(offsets_retention_ms=DAY_MS)
    simple_commit(h, "k", ("t", 0, 1), ("u", 0, 1))
    h.now_ms += 2 * DAY_MS
    expired = h.run(offsets.expire(h.core, h.now_ms, {"k": frozenset({"t"})})).records
    assert expired == [(OffsetCommitKey("k", "u", 0), None)]
    assert h.core.store.peek("k") is not None  # the group stays with its members' offsets


def test_replaying_the_records_rebuilds_groups_and_offsets() -> None:
    h = Harness()
    subscription = encode_subscription(["t"])
    member_id, token = h.join_new(protocols=(("range", subscription),), session_ms=30_000)
    generation = h.joined(token).generation_id
    h.sync(member_id, generation, {member_id: b"assigned"})
    h.commit(CommitRequest("g", generation, member_id, offsets=(OffsetToCommit("t", 0, 42),)))
    simple_commit(h, "solo", ("t", 1, 7))
    simple_commit(h, "gone", ("t", 1, 7))
    _, out = offsets.delete_groups(h.core, ["gone"], h.now_ms)
    h.run(out)

    fresh = Harness()
    for key, value in h.records:
        fresh.core.load(key, value, fresh.now_ms)
    group = fresh.group()
    assert group.state is GroupState.STABLE
    assert group.generation_id == generation
    assert list(group.members) == [member_id]
    assert group.members[member_id].assignment == b"assigned"
    assert offsets.fetch(fresh.core, "g", None)[0][1].offset == 42  # type: ignore[union-attr]
    assert offsets.fetch(fresh.core, "solo", None)[0][1].offset == 7  # type: ignore[union-attr]
    assert "gone" not in fresh.core.groups
    # The restored member must heartbeat within its session timeout.
    assert fresh.heartbeat(member_id, generation) is ErrorCode.none
    fresh.advance(31_000)
    assert fresh.group().members == {}
