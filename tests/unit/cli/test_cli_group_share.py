"""`strom group describe` and `list` of a KIP-932 share group: ShareGroupDescribe and
DescribeShareGroupOffsets answers made into values and table rows, with no broker."""

from __future__ import annotations

import uuid
from types import SimpleNamespace as Answer

import pytest
from kio.schema.errors import ErrorCode

from strom.cli.common import CommandError
from strom.cli.group_share import (
    NotAShareGroup,
    share_header,
    share_list_row,
    share_member_rows,
    share_partition_rows,
    share_partitions_from,
    share_view_from,
    total_share_lag,
)
from strom.cli.txn_model import BrokerAddress, CoordinatorMoved


def _tps(**partitions: list[int]) -> Answer:
    return Answer(
        topic_partitions=[
            Answer(topic_id=uuid.uuid4(), topic_name=name, partitions=ps)
            for name, ps in partitions.items()
        ]
    )


def _member(member_id: str, epoch: int, assigned: Answer) -> Answer:
    return Answer(
        member_id=member_id,
        rack_id=None,
        member_epoch=epoch,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        subscribed_topic_names=["orders"],
        assignment=assigned,
    )


def _described(error: ErrorCode = ErrorCode.none, message: str | None = None) -> Answer:
    group = Answer(
        error_code=error,
        error_message=message,
        group_id="s",
        group_state="Stable",
        group_epoch=4,
        assignment_epoch=4,
        assignor_name="simple",
        members=[
            _member("m2", 4, _tps(orders=[1])),
            _member("m1", 3, _tps(orders=[2, 0], audit=[0])),
        ],
    )
    return Answer(groups=[group])


def _partition(index: int, start: int, lag: int, error: ErrorCode = ErrorCode.none) -> Answer:
    return Answer(
        partition_index=index,
        start_offset=start,
        leader_epoch=0,
        lag=lag,
        error_code=error,
        error_message=None,
    )


def _offsets(error: ErrorCode = ErrorCode.none) -> Answer:
    topics = [
        Answer(
            topic_name="orders",
            topic_id=uuid.uuid4(),
            partitions=[_partition(1, -1, -1), _partition(0, 5, 2)],
        ),
        Answer(
            topic_name="audit",
            topic_id=uuid.uuid4(),
            partitions=[_partition(0, 0, 0, ErrorCode.topic_authorization_failed)],
        ),
    ]
    group = Answer(group_id="s", topics=topics, error_code=error, error_message=None)
    return Answer(groups=[group])


def test_members_sorted_with_their_assignment_per_topic() -> None:
    view = share_view_from(_described(), "s")
    assert share_member_rows(view.members) == [
        ("m1", "3", "client-m1", "/127.0.0.1", "audit:0 orders:0,2"),
        ("m2", "4", "client-m2", "/127.0.0.1", "orders:1"),
    ]
    where = BrokerAddress(1, "localhost", 9092)
    assert share_header(view, where) == (
        "Group: s   Type: share   State: Stable   Group epoch: 4   Assignment epoch: 4   "
        "Assignor: simple   Coordinator: 1 (localhost:9092)"
    )


def test_share_partitions_show_start_offset_and_lag_or_why_not() -> None:
    partitions = share_partitions_from(_offsets(), "s")
    assert share_partition_rows(partitions) == [
        ("audit", "0", "TOPIC_AUTHORIZATION_FAILED", "-"),
        ("orders", "0", "5", "2"),
        ("orders", "1", "-", "-"),
    ]
    assert total_share_lag(partitions) == 2
    assert total_share_lag(()) is None


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        (ErrorCode.group_id_not_found, NotAShareGroup),
        (ErrorCode.unsupported_version, NotAShareGroup),
        (ErrorCode.not_coordinator, CoordinatorMoved),
        (ErrorCode.group_authorization_failed, CommandError),
    ],
)
def test_group_errors(error: ErrorCode, raised: type[CommandError]) -> None:
    with pytest.raises(raised):
        share_view_from(_described(error, "no"), "s")
    with pytest.raises(raised):
        share_partitions_from(_offsets(error), "s")


def test_a_missing_answer_is_an_error() -> None:
    with pytest.raises(CommandError, match="no answer"):
        share_view_from(_described(), "other")


def test_list_row_says_share_type_and_protocol() -> None:
    assert share_list_row("s", "Empty", None) == ("s", "share", "Empty", "share", "-")
    assert share_list_row("s", "Stable", 2) == ("s", "share", "Stable", "share", "2")
