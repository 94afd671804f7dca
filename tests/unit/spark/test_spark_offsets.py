"""The connector's offset decisions: parsing, resolving, planning, admission control."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.spark.errors import OptionError, StromSparkError
from strom.spark.offsets import (
    AvailableOffsets,
    Boundary,
    DataLoss,
    GlobalTimestamp,
    IsolationLevel,
    LossKind,
    OffsetRange,
    PartitionTimestamps,
    Side,
    SpecificOffsets,
    TimestampStrategy,
    TopicPartition,
    clamp_range,
    next_end,
    offsets_from_json,
    offsets_to_json,
    parse_offsets,
    parse_partition_timestamps,
    parse_timestamp,
    plan_batch,
    plan_micro_batch,
    resolve,
    share_limit,
    split_ranges,
    timestamp_lookups,
)

A0, A1, A2 = (TopicPartition("a", p) for p in range(3))
B0 = TopicPartition("b", 0)


def states(**bounds: tuple[int, int]) -> dict[TopicPartition, AvailableOffsets]:
    """states(a0=(0, 10)) -> {a-0: AvailableOffsets(0, 10)}"""
    return {
        TopicPartition(name[:-1], int(name[-1])): AvailableOffsets(*pair)
        for name, pair in bounds.items()
    }


# ---- parsing -----------------------------------------------------------------------------


def test_parse_words_and_json() -> None:
    assert parse_offsets("startingOffsets", " Earliest ", Side.START) is Boundary.EARLIEST
    assert parse_offsets("endingOffsets", "latest", Side.END) is Boundary.LATEST
    parsed = parse_offsets("startingOffsets", '{"a": {"0": 5, "1": -2, "2": -1}}', Side.START)
    assert parsed == SpecificOffsets({A0: 5, A1: -2, A2: -1})


@pytest.mark.parametrize(
    ("text", "side", "fragment"),
    [
        ("earliest", Side.END, "cannot be 'earliest'"),
        ('{"a": {"0": -2}}', Side.END, "-1 (latest)"),
        ('{"a": {"0": -3}}', Side.START, "is not an offset"),
        ("{not json", Side.START, "expected 'earliest', 'latest' or JSON"),
        ("[1, 2]", Side.START, "non-empty JSON object"),
        ("{}", Side.START, "non-empty JSON object"),
        ('{"a": 5}', Side.START, "needs an object"),
        ('{"a": {"x": 5}}', Side.START, "is not a partition"),
        ('{"a": {"-1": 5}}', Side.START, "is not a partition"),
        ('{"a": {"0": "5"}}', Side.START, "must be a whole number"),
        ('{"a": {"0": true}}', Side.START, "must be a whole number"),
        ('{"a": {"0": 1.5}}', Side.START, "must be a whole number"),
    ],
)
def test_bad_offsets_name_the_option(text: str, side: Side, fragment: str) -> None:
    with pytest.raises(OptionError, match="option 'opt'") as caught:
        parse_offsets("opt", text, side)
    assert fragment in str(caught.value)
    assert caught.value.option == "opt"


def test_parse_timestamps() -> None:
    assert parse_timestamp("startingTimestamp", " 1700000000000 ") == GlobalTimestamp(
        1_700_000_000_000
    )
    assert parse_partition_timestamps("x", '{"a": {"1": 7}}') == PartitionTimestamps({A1: 7})
    for bad in ("-5", "soon", "1.5", ""):
        with pytest.raises(OptionError, match="startingTimestamp"):
            parse_timestamp("startingTimestamp", bad)
    with pytest.raises(OptionError, match="negative"):
        parse_partition_timestamps("x", '{"a": {"1": -7}}')


def test_checkpoint_json_is_sorted_and_round_trips() -> None:
    offsets = {TopicPartition("b", 10): 1, TopicPartition("b", 2): 2, A0: 3}
    data = offsets_to_json(offsets)
    assert json.dumps(data) == '{"a": {"0": 3}, "b": {"2": 2, "10": 1}}'
    assert offsets_from_json(json.loads(json.dumps(data))) == offsets
    with pytest.raises(StromSparkError, match="not strom's"):
        offsets_from_json({"a": 5})


# ---- resolving ---------------------------------------------------------------------------


def test_resolve_boundaries_and_specific_offsets() -> None:
    bounds = states(a0=(3, 10), a1=(0, 4))
    assert resolve(Boundary.EARLIEST, "o", Side.START, bounds, {}) == {A0: 3, A1: 0}
    assert resolve(Boundary.LATEST, "o", Side.START, bounds, {}) == {A0: 10, A1: 4}
    specific = SpecificOffsets({A0: -2, A1: -1})
    assert resolve(specific, "o", Side.START, bounds, {}) == {A0: 3, A1: 4}
    assert resolve(SpecificOffsets({A0: 7, A1: 2}), "o", Side.START, bounds, {}) == {A0: 7, A1: 2}


def test_specific_offsets_must_match_the_subscription() -> None:
    bounds = states(a0=(0, 10), a1=(0, 4))
    with pytest.raises(OptionError, match="missing a-1"):
        resolve(SpecificOffsets({A0: 1}), "startingOffsets", Side.START, bounds, {})
    with pytest.raises(OptionError, match="names b-0, which the subscription does not have"):
        resolve(SpecificOffsets({A0: 1, A1: 1, B0: 1}), "startingOffsets", Side.START, bounds, {})


def test_resolve_timestamps() -> None:
    bounds = states(a0=(0, 10), a1=(0, 4))
    request = GlobalTimestamp(1000)
    assert timestamp_lookups(request, bounds) == {A0: 1000, A1: 1000}
    found = {A0: 6, A1: 2}
    assert resolve(request, "startingTimestamp", Side.START, bounds, found) == found
    # No record at or after the timestamp: an error at the start unless told latest...
    with pytest.raises(OptionError, match="startingOffsetsByTimestampStrategy"):
        resolve(request, "startingTimestamp", Side.START, bounds, {A0: 6, A1: -1})
    latest = TimestampStrategy.LATEST
    assert resolve(request, "t", Side.START, bounds, {A0: 6, A1: -1}, latest) == {A0: 6, A1: 4}
    # ...and latest at the end.
    assert resolve(request, "endingTimestamp", Side.END, bounds, {A0: 6}) == {A0: 6, A1: 4}
    per_partition = PartitionTimestamps({A0: 5, A1: 9})
    assert timestamp_lookups(per_partition, [A0]) == {A0: 5}
    with pytest.raises(OptionError, match="missing a-1"):
        resolve(PartitionTimestamps({A0: 5}), "x", Side.START, bounds, {A0: 1})


# ---- batch plans -------------------------------------------------------------------------


def test_plan_batch_ranges_and_data_loss() -> None:
    bounds = states(a0=(0, 10), a1=(5, 9), a2=(0, 0))
    ranges, losses = plan_batch(
        {A0: 2, A1: 1, A2: 0}, {A0: 8, A1: 9, A2: 0}, bounds, start_option="s", end_option="e"
    )
    assert ranges == [OffsetRange(A0, 2, 8), OffsetRange(A1, 5, 9)]
    assert losses == [DataLoss(LossKind.DELETED, A1, 1, 5)]
    assert "records 1..4 of a-1 were deleted" in losses[0].message()


def test_plan_batch_refuses_impossible_ranges() -> None:
    bounds = states(a0=(0, 10))
    with pytest.raises(OptionError, match="option 'e': a-0 ends at 10; it has no offset 11"):
        plan_batch({A0: 0}, {A0: 11}, bounds, start_option="s", end_option="e")
    with pytest.raises(OptionError, match="option 's': a-0 ends at 10; it has no offset 12"):
        plan_batch({A0: 12}, {A0: 10}, bounds, start_option="s", end_option="e")
    with pytest.raises(OptionError, match="would end at 3, before its start 5"):
        plan_batch({A0: 5}, {A0: 3}, bounds, start_option="s", end_option="e")


def test_read_committed_plans_up_to_the_last_stable_offset() -> None:
    # a-0: a transaction open from offset 6 to the end (10); a-1: none open (LSO = end).
    bounds = {A0: AvailableOffsets(0, 6, 10), A1: AvailableOffsets(0, 4, 4)}
    assert bounds[A0].log_end == 10 and bounds[A1].log_end == 4
    end = resolve(Boundary.LATEST, "e", Side.END, bounds, {})
    ranges, losses = plan_batch(
        {A0: 0, A1: 0},
        end,
        bounds,
        start_option="s",
        end_option="e",
        isolation=IsolationLevel.READ_COMMITTED,
    )
    assert ranges == [OffsetRange(A0, 0, 6), OffsetRange(A1, 0, 4)]
    assert losses == []
    with pytest.raises(
        OptionError, match=r"a-0 can be read up to its last stable offset 6 with kafka\.isolation"
    ):
        plan_batch(
            {A0: 0, A1: 0},
            {A0: 8, A1: 4},
            bounds,
            start_option="s",
            end_option="e",
            isolation=IsolationLevel.READ_COMMITTED,
        )


# ---- streaming ---------------------------------------------------------------------------


def test_read_committed_micro_batches_stop_at_the_last_stable_offset() -> None:
    bounds = {A0: AvailableOffsets(0, 6, 10)}
    end, _ = next_end({A0: 2}, bounds, max_records=None)
    assert end == {A0: 6}
    end, _ = next_end({A0: 6}, bounds, max_records=None, target={A0: 6})
    assert end == {A0: 6}  # AvailableNow's target is the LSO: reached, the query stops


def test_a_start_between_the_last_stable_offset_and_the_end_waits() -> None:
    # Checkpointed at 8 by a read_uncommitted run, now read_committed with the LSO at 6:
    # not a rewound log (that would re-read from the start); nothing to read until the
    # transaction ends.
    bounds = {A0: AvailableOffsets(0, 6, 10)}
    end, losses = next_end({A0: 8}, bounds, max_records=100)
    assert (end, losses) == ({A0: 8}, [])
    assert plan_micro_batch({A0: 8}, end, {A0: 0}) == ([], [])
    end, _ = next_end({A0: 12}, bounds, max_records=None)
    assert end == {A0: 6}  # past the log's end: rewound, reported when planned


def test_next_end_reads_everything_without_a_limit() -> None:
    end, losses = next_end({A0: 3, A1: 0}, states(a0=(0, 10), a1=(0, 0)), max_records=None)
    assert end == {A0: 10, A1: 0}
    assert losses == []


def test_new_partitions_start_at_zero_and_vanished_ones_are_reported() -> None:
    end, losses = next_end({A0: 3, B0: 4}, states(a0=(0, 5), a1=(0, 2)), max_records=None)
    assert end == {A0: 5, A1: 2}
    assert losses == [DataLoss(LossKind.VANISHED, B0, 4, 4)]
    assert "is gone (deleted, or no longer subscribed)" in losses[0].message()


def test_next_end_counts_from_the_log_start_after_retention() -> None:
    end, _ = next_end({A0: 3}, states(a0=(50, 100)), max_records=10)
    assert end == {A0: 60}
    ranges, losses = plan_micro_batch({A0: 3}, end, {A0: 50})
    assert ranges == [OffsetRange(A0, 50, 60)]
    assert losses == [DataLoss(LossKind.DELETED, A0, 3, 50)]


def test_a_rewound_partition_is_read_from_its_new_start() -> None:
    end, _ = next_end({A0: 80}, states(a0=(0, 20)), max_records=None)
    assert end == {A0: 20}
    ranges, losses = plan_micro_batch({A0: 80}, end, {A0: 0})
    assert ranges == [OffsetRange(A0, 0, 20)]
    assert losses == [DataLoss(LossKind.REWOUND, A0, 80, 20)]
    assert "deleted and created again" in losses[0].message()


def test_available_now_target_caps_and_hides_later_partitions() -> None:
    target = {A0: 7}
    bounds = states(a0=(0, 100), a1=(0, 5))
    end, _ = next_end({A0: 2}, bounds, max_records=None, target=target)
    assert end == {A0: 7}
    end, _ = next_end({A0: 7}, bounds, max_records=None, target=target)
    assert end == {A0: 7}  # reached: the same offsets, so the query stops


def test_plan_micro_batch_new_partition_and_empty_ranges() -> None:
    ranges, losses = plan_micro_batch({A0: 5}, {A0: 5, A1: 3}, {A0: 0, A1: 0})
    assert ranges == [OffsetRange(A1, 0, 3)]
    assert losses == []


def test_clamp_range() -> None:
    rng = OffsetRange(A0, 10, 20)
    assert clamp_range(rng, 0, 30) == (rng, [])
    clamped, losses = clamp_range(rng, 15, 30)
    assert clamped == OffsetRange(A0, 15, 20)
    assert losses == [DataLoss(LossKind.DELETED, A0, 10, 15)]
    clamped, losses = clamp_range(rng, 0, 12)
    assert clamped == OffsetRange(A0, 10, 12)
    assert losses == [DataLoss(LossKind.TRUNCATED, A0, 20, 12)]
    assert "records up to 19 were planned" in losses[0].message()
    clamped, _ = clamp_range(rng, 25, 30)
    assert clamped.size == 0


partition_keys = st.builds(TopicPartition, st.sampled_from("abc"), st.integers(0, 5))
backlogs = st.dictionaries(partition_keys, st.integers(0, 10_000), max_size=12)


@settings(max_examples=300, deadline=None)
@given(backlogs, st.integers(1, 20_000))
def test_share_limit_is_exact_and_proportional(
    backlog: dict[TopicPartition, int], limit: int
) -> None:
    granted = share_limit(backlog, limit)
    total = sum(backlog.values())
    assert set(granted) == set(backlog)
    assert sum(granted.values()) == min(limit, total)
    for tp, count in granted.items():
        assert 0 <= count <= backlog[tp]
    waiting = [tp for tp, n in backlog.items() if n > 0]
    if total > limit >= len(waiting):
        assert all(granted[tp] >= 1 for tp in waiting)  # nobody starves
        if all(backlog[tp] * limit >= total for tp in waiting):
            for tp in waiting:  # nobody is below one record: plain proportion
                assert abs(granted[tp] - backlog[tp] * limit / total) < 1


def test_share_limit_examples() -> None:
    assert share_limit({A0: 900, A1: 100}, 100) == {A0: 90, A1: 10}
    assert share_limit({A0: 5, A1: 0}, 100) == {A0: 5, A1: 0}
    assert share_limit({A0: 10_000, A1: 1, A2: 1}, 3) == {A0: 1, A1: 1, A2: 1}
    assert share_limit({A0: 10_000, A1: 10, A2: 1}, 100) == {A0: 98, A1: 1, A2: 1}
    assert share_limit({A0: 600, A1: 300, A2: 100}, 11) == {A0: 7, A1: 3, A2: 1}
    assert share_limit({A0: 10, A1: 10, A2: 10}, 2) == {A0: 1, A1: 1, A2: 0}
    with pytest.raises(ValueError, match="positive"):
        share_limit({A0: 1}, 0)


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(partition_keys, st.integers(0, 300), min_size=1, max_size=6),
    st.integers(1, 200),
)
def test_available_now_with_a_limit_reaches_the_target_and_stops(
    latest: dict[TopicPartition, int], limit: int
) -> None:
    bounds = {tp: AvailableOffsets(0, n) for tp, n in latest.items()}
    start: dict[TopicPartition, int] = {}
    read = 0
    for _ in range(2_000):
        end, losses = next_end(start, bounds, max_records=limit, target=latest)
        assert not losses
        if end == start:
            break
        planned, _ = plan_micro_batch(start, end, dict.fromkeys(bounds, 0))
        batch = sum(r.size for r in planned)
        assert batch <= limit
        read += batch
        start = end
    assert start == latest
    assert read == sum(latest.values())


ranges = st.lists(
    st.builds(
        lambda tp, a, n: OffsetRange(tp, a, a + n),
        partition_keys,
        st.integers(0, 1000),
        st.integers(0, 500),
    ),
    max_size=6,
    unique_by=lambda r: r.topic_partition,
)


@settings(max_examples=200, deadline=None)
@given(ranges, st.none() | st.integers(1, 40), st.none() | st.integers(1, 300))
def test_split_ranges_covers_every_offset_once(
    given_ranges: list[OffsetRange], min_partitions: int | None, max_records: int | None
) -> None:
    pieces = split_ranges(given_ranges, min_partitions=min_partitions, max_records=max_records)
    covered = sorted((p.topic_partition, o) for p in pieces for o in range(p.start, p.until))
    wanted = sorted((r.topic_partition, o) for r in given_ranges for o in range(r.start, r.until))
    assert covered == wanted
    assert all(p.size > 0 for p in pieces)
    if max_records is not None:
        assert all(p.size <= max_records for p in pieces)
    total = len(wanted)
    if min_partitions is not None and total >= min_partitions:
        assert len(pieces) >= min_partitions
