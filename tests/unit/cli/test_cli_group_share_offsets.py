"""`strom group reset-offsets` and `delete` of a KIP-932 share group: the messages, the
AlterShareGroupOffsets request and what its answers become, and the calls with fake
sessions, with no broker."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace as Answer
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from typer.testing import CliRunner

from strom.cli.common import CommandError, ExitCode
from strom.cli.group_model import PlannedOffset, ResetMode, ResetTarget
from strom.cli.group_share import (
    DESCRIBE_SHARE_GROUP_OFFSETS,
    SHARE_GROUP_DESCRIBE,
    ShareGroupView,
    SharePartitionView,
    describe_share_group,
)
from strom.cli.group_share_offsets import (
    ALTER_SHARE_GROUP_OFFSETS,
    ShareGroupBusy,
    alter_failures,
    alter_request,
    alter_share_group_offsets,
    check_share_target,
    not_share_message,
    share_member_count,
    share_members_message,
    start_offsets,
)
from strom.cli.main import app
from strom.cli.txn_model import BrokerAddress, CoordinatorMoved
from strom.cli.wire import ApiNotSupported

FIND_COORDINATOR = 10
runner = CliRunner()


# --- messages ---------------------------------------------------------------------------


def test_a_busy_share_group_is_told_how_many_members_it_has() -> None:
    assert share_members_message("s", 1) == "share group 's' has 1 active member; stop it first"
    assert share_members_message("s", 3) == (
        "share group 's' has 3 active members; stop them first"
    )
    # Not known (or gone since the broker refused): no count.
    for unknown in (None, 0):
        assert share_members_message("s", unknown) == (
            "share group 's' has active members; stop them first"
        )


def test_a_group_of_another_type_is_named_by_its_type() -> None:
    assert not_share_message("g", "classic") == "group 'g' is a classic group, not a share group"
    assert not_share_message("g", "consumer") == (
        "group 'g' is a consumer group, not a share group"
    )
    assert not_share_message("g", "unknown") == "group 'g' is not a share group"
    assert not_share_message("g", "") == "group 'g' is not a share group"


@pytest.mark.parametrize("mode", [m for m in ResetMode if m is not ResetMode.SHIFT])
def test_share_groups_reset_to_every_target_but_a_shift(mode: ResetMode) -> None:
    check_share_target(ResetTarget(mode, 3))


def test_a_shift_is_a_usage_error_for_a_share_group() -> None:
    with pytest.raises(CommandError) as raised:
        check_share_target(ResetTarget(ResetMode.SHIFT, -2))
    assert raised.value.exit_code is ExitCode.USAGE
    assert raised.value.message == (
        "--shift-by is not supported for share groups (they have start offsets, not "
        "committed offsets); choose --to-earliest, --to-latest, --to-datetime or --to-offset"
    )


# --- the plan and the request -------------------------------------------------------------


def _view(*partitions: SharePartitionView) -> ShareGroupView:
    return ShareGroupView("s", "Empty", 3, 3, "simple", members=(), partitions=partitions)


def test_start_offsets_are_those_of_initialized_share_partitions() -> None:
    view = _view(
        SharePartitionView("jobs", 0, 7, 2),
        SharePartitionView("jobs", 1, None, None),
        SharePartitionView("audit", 0, None, None, "TOPIC_AUTHORIZATION_FAILED"),
    )
    assert start_offsets(view) == {("jobs", 0): 7}
    assert start_offsets(None) == {}


def test_the_request_names_each_topic_once() -> None:
    plan = [
        PlannedOffset("jobs", 0, 7, 0),
        PlannedOffset("audit", 2, None, 5),
        PlannedOffset("jobs", 3, None, 4),
    ]
    assert alter_request("s", plan) == {
        "group_id": "s",
        "topics": [
            {
                "topic_name": "jobs",
                "partitions": [
                    {"partition_index": 0, "start_offset": 0},
                    {"partition_index": 3, "start_offset": 4},
                ],
            },
            {"topic_name": "audit", "partitions": [{"partition_index": 2, "start_offset": 5}]},
        ],
    }


# --- the answer -------------------------------------------------------------------------------


def _altered(
    error: ErrorCode = ErrorCode.none,
    message: str | None = None,
    partitions: Mapping[str, list[tuple[int, ErrorCode, str | None]]] | None = None,
) -> Answer:
    return Answer(
        error_code=error,
        error_message=message,
        responses=[
            Answer(
                topic_name=topic,
                partitions=[
                    Answer(partition_index=p, error_code=e, error_message=m) for p, e, m in ps
                ],
            )
            for topic, ps in (partitions or {}).items()
        ],
    )


def test_a_partition_refused_is_named_with_its_error() -> None:
    answer = _altered(
        partitions={
            "jobs": [
                (0, ErrorCode.none, None),
                (1, ErrorCode.unknown_topic_or_partition, "This server does not host it."),
            ],
            "audit": [(0, ErrorCode.topic_authorization_failed, None)],
        }
    )
    assert [f.message for f in alter_failures(answer, "s")] == [
        "jobs:1: UNKNOWN_TOPIC_OR_PARTITION (This server does not host it.)",
        "audit:0: TOPIC_AUTHORIZATION_FAILED",
    ]
    assert alter_failures(_altered(partitions={"jobs": [(0, ErrorCode.none, None)]}), "s") == []


@pytest.mark.parametrize(
    ("error", "raised", "message"),
    [
        (ErrorCode.non_empty_group, ShareGroupBusy, "share group 's' has active members"),
        (ErrorCode.group_id_not_found, CommandError, "group 's' is not a share group"),
        (ErrorCode.not_coordinator, CoordinatorMoved, "NOT_COORDINATOR"),
        (
            ErrorCode.group_authorization_failed,
            CommandError,
            "cannot reset the start offsets of share group 's': GROUP_AUTHORIZATION_FAILED "
            "(denied)",
        ),
    ],
)
def test_the_groups_error(error: ErrorCode, raised: type[CommandError], message: str) -> None:
    with pytest.raises(raised) as failed:
        alter_failures(_altered(error, "denied"), "s")
    assert message in failed.value.message


# --- the calls, with fake sessions ---------------------------------------------------------


class ShareSession:
    """Answers by API key, in turn (the last one again once the others are used)."""

    def __init__(self, answers: Mapping[int, list[Any]]) -> None:
        self.answers = {k: list(v) for k, v in answers.items()}
        self.asked: list[tuple[int, dict[str, Any]]] = []

    async def call(
        self, api_key: int, name: str, fields: Mapping[str, Any], **bounds: int | None
    ) -> tuple[int, Any]:
        self.asked.append((api_key, dict(fields)))
        queue = self.answers[api_key]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return 0, answer


class ShareCluster:
    timeout_s = 1.0

    def __init__(self, coordinator: ShareSession) -> None:
        found = Answer(coordinators=[Answer(error_code=0, node_id=1, host="h", port=1)])
        self.bootstrap = ShareSession({FIND_COORDINATOR: [found]})
        self.coordinator = coordinator

    def session(self, broker: BrokerAddress) -> ShareSession:
        assert broker == BrokerAddress(1, "h", 1)
        return self.coordinator


def _described(members: int) -> Answer:
    member = Answer(member_id="m", member_epoch=1, client_id="c", client_host="/h", assignment=None)
    group = Answer(
        error_code=0,
        error_message=None,
        group_id="s",
        group_state="Stable" if members else "Empty",
        group_epoch=2,
        assignment_epoch=2,
        assignor_name="simple",
        members=[member] * members,
    )
    return Answer(groups=[group])


OFFSETS = Answer(groups=[Answer(group_id="s", error_code=0, error_message=None, topics=[])])


def test_a_member_that_joined_before_the_alter_is_counted() -> None:
    coordinator = ShareSession(
        {
            ALTER_SHARE_GROUP_OFFSETS: [_altered(ErrorCode.non_empty_group)],
            SHARE_GROUP_DESCRIBE: [_described(2)],
            DESCRIBE_SHARE_GROUP_OFFSETS: [OFFSETS],
        }
    )
    cluster: Any = ShareCluster(coordinator)
    plan = [PlannedOffset("jobs", 0, None, 4)]
    with pytest.raises(CommandError) as failed:
        asyncio.run(alter_share_group_offsets(cluster, "s", plan))
    assert failed.value.message == "share group 's' has 2 active members; stop them first"
    assert coordinator.asked[0] == (ALTER_SHARE_GROUP_OFFSETS, alter_request("s", plan))


def test_an_alter_answers_the_partitions_refused() -> None:
    refused = _altered(partitions={"jobs": [(0, ErrorCode.unknown_topic_or_partition, None)]})
    cluster: Any = ShareCluster(ShareSession({ALTER_SHARE_GROUP_OFFSETS: [refused]}))
    plan = [PlannedOffset("jobs", 0, None, 4)]
    [failure] = asyncio.run(alter_share_group_offsets(cluster, "s", plan))
    assert failure.message == "jobs:0: UNKNOWN_TOPIC_OR_PARTITION"


def test_a_broker_without_share_groups_has_no_share_group() -> None:
    cannot = ApiNotSupported("ShareGroupDescribe: the broker at h:1 cannot: no version")
    cluster: Any = ShareCluster(ShareSession({SHARE_GROUP_DESCRIBE: [cannot]}))
    assert asyncio.run(describe_share_group(cluster, "s")) is None
    assert asyncio.run(share_member_count(cluster, "s")) is None


def test_members_are_counted_for_delete() -> None:
    coordinator = ShareSession(
        {SHARE_GROUP_DESCRIBE: [_described(1)], DESCRIBE_SHARE_GROUP_OFFSETS: [OFFSETS]}
    )
    cluster: Any = ShareCluster(coordinator)
    assert asyncio.run(share_member_count(cluster, "s")) == 1
    gone = ShareSession({SHARE_GROUP_DESCRIBE: [Answer(groups=[])]})
    assert asyncio.run(share_member_count(ShareCluster(gone), "s")) is None  # type: ignore[arg-type]


# --- the command line, before it connects -----------------------------------------------------


def test_share_is_an_option_of_reset_offsets() -> None:
    result = runner.invoke(app, ["group", "reset-offsets", "--help"])
    assert result.exit_code == 0
    assert "--share" in result.output


def test_share_with_shift_is_a_usage_error_before_connecting() -> None:
    # Port 1 refuses connections: the usage error must be reported before trying it.
    args = ["group", "reset-offsets", "s", "-t", "t", "--shift-by", "1", "--share"]
    result = runner.invoke(app, [*args, "-b", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert result.stderr.startswith("strom: --shift-by is not supported for share groups")
