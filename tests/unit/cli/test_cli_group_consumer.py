"""`strom group describe` of a KIP-848 group: ConsumerGroupDescribe answers made into
values and table rows, with no broker."""

from __future__ import annotations

import uuid
from types import SimpleNamespace as Answer

import pytest
from kio.schema.errors import ErrorCode

from strom.cli.common import CommandError
from strom.cli.group_consumer import (
    ConsumerGroupView,
    ConsumerMemberView,
    consumer_header,
    consumer_member_rows,
    coordinator_of,
    view_from,
)
from strom.cli.txn_model import BrokerAddress, CoordinatorMoved


def _tps(**partitions: list[int]) -> Answer:
    return Answer(
        topic_partitions=[
            Answer(topic_id=uuid.uuid4(), topic_name=name, partitions=ps)
            for name, ps in partitions.items()
        ]
    )


def _member(member_id: str, epoch: int, assigned: Answer, target: Answer) -> Answer:
    return Answer(
        member_id=member_id,
        instance_id=None,
        rack_id=None,
        member_epoch=epoch,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        subscribed_topic_names=["orders"],
        subscribed_topic_regex=None,
        assignment=assigned,
        target_assignment=target,
    )


def _group(error: ErrorCode = ErrorCode.none, message: str | None = None) -> Answer:
    return Answer(
        error_code=error,
        error_message=message,
        group_id="g",
        group_state="Reconciling",
        group_epoch=7,
        assignment_epoch=7,
        assignor_name="uniform",
        members=[
            _member("m2", 7, _tps(orders=[1]), _tps(orders=[1, 2])),
            _member("m1", 6, _tps(orders=[2, 0], audit=[0]), _tps(orders=[0], audit=[0])),
        ],
    )


def test_view_from_an_answer_sorted_by_member() -> None:
    view = view_from(Answer(groups=[_group()]), "g")
    assert (view.state, view.group_epoch, view.assignment_epoch, view.assignor) == (
        "Reconciling",
        7,
        7,
        "uniform",
    )
    assert [m.member_id for m in view.members] == ["m1", "m2"]
    first = view.members[0]
    assert first.assigned == (("audit", 0), ("orders", 0), ("orders", 2))
    assert first.target == (("audit", 0), ("orders", 0))
    assert consumer_member_rows(view.members) == [
        (
            "m1",
            "6",
            "consumer",
            "client-m1",
            "/127.0.0.1",
            "-",
            "audit:0 orders:0,2",
            "audit:0 orders:0",
        ),
        ("m2", "7", "consumer", "client-m2", "/127.0.0.1", "-", "orders:1", "orders:1,2"),
    ]


def test_header() -> None:
    view = ConsumerGroupView("g", "Stable", 3, 3, "range", ())
    assert consumer_header(view, BrokerAddress(1, "b1", 9092)) == (
        "Group: g   Type: consumer   State: Stable   Group epoch: 3   Assignment epoch: 3   "
        "Assignor: range   Coordinator: 1 (b1:9092)"
    )


def test_errors() -> None:
    with pytest.raises(CommandError, match="group 'g' does not exist"):
        view_from(Answer(groups=[_group(ErrorCode.group_id_not_found, "gone")]), "g")
    with pytest.raises(CoordinatorMoved):
        view_from(Answer(groups=[_group(ErrorCode.coordinator_load_in_progress)]), "g")
    with pytest.raises(CommandError, match="GROUP_AUTHORIZATION_FAILED"):
        view_from(Answer(groups=[_group(ErrorCode.group_authorization_failed)]), "g")
    with pytest.raises(CommandError, match="no answer"):
        view_from(Answer(groups=[]), "g")


def test_coordinator_of_both_answer_shapes() -> None:
    at_top = Answer(error_code=ErrorCode.none, node_id=2, host="h", port=1)
    assert coordinator_of(at_top, "g") == BrokerAddress(2, "h", 1)
    per_key = Answer(coordinators=[at_top])
    assert coordinator_of(per_key, "g") == BrokerAddress(2, "h", 1)
    moved = Answer(error_code=ErrorCode.not_coordinator, error_message=None)
    with pytest.raises(CoordinatorMoved):
        coordinator_of(moved, "g")


def test_member_view_rows_show_instance_id() -> None:
    member = ConsumerMemberView("m", 1, "i-1", "", "", (), ())
    assert consumer_member_rows([member]) == [("m", "1", "consumer", "-", "-", "i-1", "-", "-")]
    classic = ConsumerMemberView("c", 3, None, "old", "/h", (), (), protocol="classic")
    assert consumer_member_rows([classic]) == [("c", "3", "classic", "old", "/h", "-", "-", "-")]
