"""`strom group`: option parsing, lag, tables and reset plans, with no broker."""

from __future__ import annotations

from datetime import UTC, timedelta, timezone

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, Node, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ConsumerGroupDescription,
    ConsumerGroupListing,
    MemberAssignment,
    MemberDescription,
)
from typer.testing import CliRunner

from strom.cli.common import CommandError, ExitCode
from strom.cli.group_model import (
    PartitionBounds,
    PartitionProgress,
    ResetMode,
    ResetTarget,
    TopicSelection,
    describe_header,
    format_assignment,
    group_error_message,
    group_progress,
    lag,
    list_rows,
    member_rows,
    merge_selections,
    parse_datetime_ms,
    parse_topic_selection,
    partition_owners,
    plan_reset,
    reset_target,
    selected_partitions,
    state_name,
    total_lag,
)
from strom.cli.main import app

runner = CliRunner()


def usage_message(caught: pytest.ExceptionInfo[CommandError]) -> str:
    assert caught.value.exit_code == ExitCode.USAGE
    return caught.value.message


# --- --topic ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "selection"),
    [
        ("events", TopicSelection("events")),
        ("events:0", TopicSelection("events", frozenset({0}))),
        ("events:2,0,5", TopicSelection("events", frozenset({0, 2, 5}))),
        (" my.topic_1 : 3, 4 ", TopicSelection("my.topic_1", frozenset({3, 4}))),
    ],
)
def test_topic_selection_parses(text: str, selection: TopicSelection) -> None:
    assert parse_topic_selection(text) == selection


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (":1", "--topic expects TOPIC or TOPIC:PARTITION,..., got ':1'"),
        ("", "--topic expects TOPIC or TOPIC:PARTITION,..., got ''"),
        ("t:", "--topic 't:': partitions are numbers separated by commas, got ''"),
        ("t:a", "--topic 't:a': partitions are numbers separated by commas, got 'a'"),
        ("t:-1", "--topic 't:-1': partitions are numbers separated by commas, got '-1'"),
        ("t:1,,2", "--topic 't:1,,2': partitions are numbers separated by commas, got ''"),
        (
            "t:\u00b2",
            "--topic 't:\u00b2': partitions are numbers separated by commas, got '\u00b2'",
        ),
    ],
)
def test_bad_topic_selection_is_a_usage_error(text: str, message: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_topic_selection(text)
    assert usage_message(caught) == message


def test_selections_of_one_topic_merge_and_all_partitions_wins() -> None:
    merged = merge_selections(
        [
            TopicSelection("a", frozenset({1})),
            TopicSelection("b", frozenset({0})),
            TopicSelection("a", frozenset({0})),
            TopicSelection("b"),
        ]
    )
    assert merged == [TopicSelection("a", frozenset({0, 1})), TopicSelection("b")]


def test_selected_partitions_are_checked_against_the_topic() -> None:
    assert selected_partitions(TopicSelection("t"), 3) == [("t", 0), ("t", 1), ("t", 2)]
    assert selected_partitions(TopicSelection("t", frozenset({2, 0})), 3) == [("t", 0), ("t", 2)]
    with pytest.raises(CommandError) as caught:
        selected_partitions(TopicSelection("t", frozenset({1, 7, 3})), 3)
    assert usage_message(caught) == "topic 't' has no partition 3 (it has 3)"


# --- --to-datetime -----------------------------------------------------------------------

MAY_1_NOON_UTC_MS = 1_714_564_800_000


@pytest.mark.parametrize(
    "text",
    [
        "2024-05-01T12:00:00Z",
        "2024-05-01T12:00:00+00:00",
        "2024-05-01T14:00+02:00",
        "2024-05-01 12:00:00.000Z",
        "20240501T120000Z",
    ],
)
def test_datetimes_with_a_zone(text: str) -> None:
    assert parse_datetime_ms(text) == MAY_1_NOON_UTC_MS


def test_datetime_without_a_zone_is_local_time() -> None:
    two_hours_east = timezone(timedelta(hours=2))
    assert parse_datetime_ms("2024-05-01T14:00", two_hours_east) == MAY_1_NOON_UTC_MS
    assert parse_datetime_ms("2024-05-01", UTC) == MAY_1_NOON_UTC_MS - 12 * 3600 * 1000
    assert parse_datetime_ms("2024-05-01T12:00:00.250", UTC) == MAY_1_NOON_UTC_MS + 250


def test_datetime_before_1970_means_the_start() -> None:
    assert parse_datetime_ms("1960-01-01T00:00Z") == 0


@pytest.mark.parametrize("text", ["yesterday", "2024-13-01", "1714564800000", "", "12:00"])
def test_bad_datetime_is_a_usage_error_with_examples(text: str) -> None:
    with pytest.raises(CommandError) as caught:
        parse_datetime_ms(text)
    assert usage_message(caught) == (
        "--to-datetime expects an ISO 8601 date and time such as 2024-05-01T12:00:00Z, "
        f"2024-05-01T14:00+02:00 or 2024-05-01; got {text!r}"
    )


# --- where to reset to ---------------------------------------------------------------------


def test_exactly_one_reset_target() -> None:
    assert reset_target(True, False, None, None, None) == ResetTarget(ResetMode.EARLIEST)
    assert reset_target(False, True, None, None, None) == ResetTarget(ResetMode.LATEST)
    assert reset_target(False, False, None, 0, None) == ResetTarget(ResetMode.OFFSET, 0)
    assert reset_target(False, False, None, None, -3) == ResetTarget(ResetMode.SHIFT, -3)
    assert reset_target(False, False, "2024-05-01T12:00Z", None, None) == ResetTarget(
        ResetMode.DATETIME, MAY_1_NOON_UTC_MS
    )
    with pytest.raises(CommandError) as caught:
        reset_target(False, False, None, None, None)
    assert usage_message(caught) == (
        "choose where to reset to: --to-earliest, --to-latest, --to-datetime, --to-offset "
        "or --shift-by"
    )
    with pytest.raises(CommandError) as caught:
        reset_target(True, False, None, 5, None)
    assert usage_message(caught) == (
        "choose one of --to-earliest, --to-latest, --to-datetime, --to-offset and --shift-by"
    )


BOUNDS = {("t", 0): PartitionBounds(10, 50, at_time=20), ("t", 1): PartitionBounds(0, 0)}
BOTH = [("t", 0), ("t", 1)]


@pytest.mark.parametrize(
    ("target", "new"),
    [
        (ResetTarget(ResetMode.EARLIEST), [10, 0]),
        (ResetTarget(ResetMode.LATEST), [50, 0]),
        (ResetTarget(ResetMode.DATETIME, 123), [20, 0]),  # no record after it in t:1: the end
        (ResetTarget(ResetMode.OFFSET, 30), [30, 0]),
    ],
)
def test_reset_plan(target: ResetTarget, new: list[int]) -> None:
    plan, _ = plan_reset(target, BOTH, {("t", 0): 40}, BOUNDS)
    assert [p.new for p in plan] == new
    assert plan[0].row()[:3] == ("t", "0", "40")
    assert plan[1].row() == ("t", "1", "-", str(new[1]))


def test_reset_plan_moves_offsets_outside_the_log_to_its_ends_and_says_so() -> None:
    plan, warnings = plan_reset(ResetTarget(ResetMode.OFFSET, 5), BOTH, {}, BOUNDS)
    assert [p.new for p in plan] == [10, 0]
    assert warnings == [
        "offset 5 is outside t:0 (10 to 50); using its log start, 10",
        "offset 5 is outside t:1 (0 to 0); using its log end, 0",
    ]
    plan, warnings = plan_reset(
        ResetTarget(ResetMode.SHIFT, 25), [("t", 0)], {("t", 0): 40}, BOUNDS
    )
    assert plan[0].new == 50
    assert warnings == ["offset 65 is outside t:0 (10 to 50); using its log end, 50"]
    plan, warnings = plan_reset(
        ResetTarget(ResetMode.SHIFT, -5), [("t", 0)], {("t", 0): 40}, BOUNDS
    )
    assert (plan[0].new, warnings) == (35, [])


def test_shift_needs_a_committed_offset() -> None:
    with pytest.raises(CommandError) as caught:
        plan_reset(ResetTarget(ResetMode.SHIFT, 1), BOTH, {("t", 0): 40}, BOUNDS)
    assert caught.value.exit_code == ExitCode.KAFKA_ERROR
    assert "there is none for t:1;" in caught.value.message


# --- describe ------------------------------------------------------------------------------


def test_lag_is_log_end_minus_committed_when_both_are_known() -> None:
    assert lag(7, 10) == 3
    assert lag(10, 10) == 0
    assert lag(12, 10) == -2  # committed past the end: shown, not hidden
    assert lag(None, 10) is None
    assert lag(3, None) is None


def member(
    member_id: str, *partitions: tuple[str, int], instance: str | None = None
) -> MemberDescription:
    return MemberDescription(
        member_id,
        "client-" + member_id,
        "/10.0.0.1",
        MemberAssignment([TopicPartition(t, p) for t, p in partitions]),
        group_instance_id=instance,
    )


def test_progress_covers_committed_and_assigned_partitions() -> None:
    members = [member("m2", ("b", 0)), member("m1", ("a", 1), ("a", 0))]
    owners = partition_owners(members)
    assert owners == {("a", 0): "m1", ("a", 1): "m1", ("b", 0): "m2"}
    committed = {("a", 0): 5, ("old", 0): 3}
    log_ends = {("a", 0): 9, ("a", 1): 4, ("b", 0): 0}
    progress = group_progress(committed, log_ends, owners)
    assert progress == [
        PartitionProgress("a", 0, 5, 9, "m1"),
        PartitionProgress("a", 1, None, 4, "m1"),
        PartitionProgress("b", 0, None, 0, "m2"),
        PartitionProgress("old", 0, 3, None, None),  # topic gone: no log end, no lag
    ]
    assert [p.row() for p in progress] == [
        ("a", "0", "5", "9", "4", "m1"),
        ("a", "1", "-", "4", "-", "m1"),
        ("b", "0", "-", "0", "-", "m2"),
        ("old", "0", "3", "-", "-", "-"),
    ]
    assert total_lag(progress) == 4
    assert total_lag(progress[1:]) is None


def test_member_rows() -> None:
    members = [
        member("m2", instance="i-2"),
        member("m1", ("b", 2), ("a", 1), ("a", 0)),
    ]
    assert member_rows(members) == [
        ("m1", "client-m1", "/10.0.0.1", "-", "a:0,1 b:2"),
        ("m2", "client-m2", "/10.0.0.1", "i-2", "-"),
    ]
    assert format_assignment([]) == "-"


def test_list_rows_sorted_with_kafka_state_names() -> None:
    listings = [
        ConsumerGroupListing(
            "orders", False, ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER
        ),
        ConsumerGroupListing("audit", True, ConsumerGroupState.EMPTY, ConsumerGroupType.CLASSIC),
        ConsumerGroupListing("gone", False, ConsumerGroupState.PREPARING_REBALANCING),
    ]
    assert list_rows(listings, {"orders": 3, "audit": 0}) == [
        ("audit", "classic", "Empty", "-", "0"),
        ("gone", "unknown", "PreparingRebalance", "consumer", "-"),
        ("orders", "consumer", "Stable", "consumer", "3"),
    ]
    assert state_name(ConsumerGroupState.COMPLETING_REBALANCING) == "CompletingRebalance"
    # librdkafka has no name for a KIP-848 group's Reconciling: the broker's is shown.
    reconciling = ConsumerGroupListing(
        "kip848", False, ConsumerGroupState.UNKNOWN, ConsumerGroupType.CONSUMER
    )
    assert list_rows([reconciling], {}) == [("kip848", "consumer", "Unknown", "consumer", "-")]
    assert list_rows([reconciling], {"kip848": 2}, {"kip848": "Reconciling"}) == [
        ("kip848", "consumer", "Reconciling", "consumer", "2")
    ]


def test_describe_header() -> None:
    description = ConsumerGroupDescription(
        "orders",
        False,
        [],
        "range",
        ConsumerGroupState.STABLE,
        Node(1, "broker-1", 9092),
    )
    assert describe_header(description) == (
        "Group: orders   State: Stable   Assignor: range   Coordinator: 1 (broker-1:9092)"
    )


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("NON_EMPTY_GROUP", "group 'g' has active members; stop them first"),
        ("ILLEGAL_GENERATION", "group 'g' has active members; stop them first"),
        ("UNKNOWN_MEMBER_ID", "group 'g' has active members; stop them first"),
        ("REBALANCE_IN_PROGRESS", "group 'g' has active members; stop them first"),
        ("GROUP_ID_NOT_FOUND", "group 'g' does not exist"),
        ("COORDINATOR_NOT_AVAILABLE", None),
    ],
)
def test_group_errors_in_plain_words(error: str, message: str | None) -> None:
    assert group_error_message("g", error) == message


# --- the command line, before it connects -------------------------------------------------


def test_group_commands_are_listed() -> None:
    result = runner.invoke(app, ["group", "--help"])
    assert result.exit_code == 0
    for command in ("list", "describe", "delete", "reset-offsets"):
        assert command in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["group", "reset-offsets", "g", "--topic", "t"],
            "choose where to reset to: --to-earliest, --to-latest, --to-datetime, "
            "--to-offset or --shift-by",
        ),
        (
            ["group", "reset-offsets", "g", "--to-earliest"],
            "choose the partitions to reset with --topic or --all-topics",
        ),
        (
            ["group", "reset-offsets", "g", "--topic", "t", "--all-topics", "--to-latest"],
            "choose one of --topic and --all-topics",
        ),
        (
            ["group", "reset-offsets", "g", "-t", "t:x", "--to-latest"],
            "--topic 't:x': partitions are numbers separated by commas, got 'x'",
        ),
        (
            ["group", "reset-offsets", "g", "-t", "t", "--to-latest", "--execute", "--dry-run"],
            "choose one of --execute and --dry-run",
        ),
        (
            ["group", "reset-offsets", "g", "-t", "t", "--to-datetime", "noon"],
            "--to-datetime expects an ISO 8601 date and time such as 2024-05-01T12:00:00Z, "
            "2024-05-01T14:00+02:00 or 2024-05-01; got 'noon'",
        ),
    ],
)
def test_usage_errors_exit_2_before_connecting(args: list[str], message: str) -> None:
    # Port 1 refuses connections: a usage error must be reported before trying it.
    result = runner.invoke(app, [*args, "-b", "127.0.0.1:1"])
    assert (result.exit_code, result.stderr) == (2, f"strom: {message}\n")


@pytest.mark.parametrize(
    "args",
    [
        ["group", "describe"],  # a group is required
        ["group", "delete"],
        ["group", "reset-offsets", "g", "-t", "t", "--to-offset", "-1"],
    ],
)
def test_bad_arguments_exit_2(args: list[str]) -> None:
    assert runner.invoke(app, args).exit_code == 2
