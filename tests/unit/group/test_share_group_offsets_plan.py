"""AlterShareGroupOffsets' and DeleteShareGroupOffsets' decisions (strom.group.share.offsets
and the coordinator): which partitions are initialized again, at which epoch, and how
record 15 moves; refusals for groups with members or of another type."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from strom.group.share.coordinator import ShareCoordinator
from strom.group.share.heartbeat import ShareGroupConfig, ShareTopic
from strom.group.share.namespace import GroupType
from strom.group.share.offsets import plan_alter, plan_delete, without_deleting
from strom.group.share.records import (
    ShareGroupEpochKey,
    ShareGroupEpochValue,
    ShareMemberKey,
    ShareMemberValue,
    ShareStatePartitionsValue,
    ShareStateTopic,
)

T = uuid.UUID(int=7)
TOPICS = {"jobs": ShareTopic(T, 2)}


def test_alter_initializes_the_named_partitions_at_the_new_epoch() -> None:
    state = ShareStatePartitionsValue(initialized=(ShareStateTopic(T, "jobs", frozenset({0, 1})),))
    plan = plan_alter(
        "g", state, 5, [("jobs", [(0, 4), (1, 9), (2, 0)]), ("gone", [(0, 1)])], TOPICS
    )
    assert [(r.topic, r.partition, r.error) for r in plan.results] == [
        ("jobs", 0, ErrorCode.none),
        ("jobs", 1, ErrorCode.none),
        ("jobs", 2, ErrorCode.unknown_topic_or_partition),
        ("gone", 0, ErrorCode.unknown_topic_or_partition),
    ]
    assert plan.initialize is not None and plan.initialize.group_epoch == 5
    assert {(t.start_offset, t.partitions) for t in plan.initialize.topics} == {
        (4, frozenset({0})),
        (9, frozenset({1})),
    }
    assert plan.state.initializing == (ShareStateTopic(T, "jobs", frozenset({0, 1})),)
    assert plan_alter("g", state, 5, [("gone", [(0, 1)])], TOPICS).initialize is None


def test_delete_moves_initialized_topics_to_deleting_then_forgets_them() -> None:
    state = ShareStatePartitionsValue(initialized=(ShareStateTopic(T, "jobs", frozenset({1})),))
    plan = plan_delete(state, ["jobs", "gone"], TOPICS)
    assert plan.deletes == (("jobs", T, frozenset({1})),)
    assert [(e.topic, e.error) for e in plan.errors] == [
        ("gone", ErrorCode.unknown_topic_or_partition)
    ]
    assert plan.state.initialized == () and plan.state.deleting == (
        ShareStateTopic(T, "jobs", None),
    )
    again = plan_delete(plan.state, ["jobs"], TOPICS)
    assert again.deletes == (("jobs", T, frozenset({0, 1})),)
    assert without_deleting(plan.state, frozenset({T})).deleting == ()
    nothing = plan_delete(ShareStatePartitionsValue(), ["jobs"], TOPICS)
    assert (
        nothing.deletes == ()
        and nothing.errors[0].message == "There is no offset information to delete."
    )


def _coordinator(epoch: int, members: tuple[str, ...] = ()) -> ShareCoordinator:
    """A coordinator that loaded group "g" at `epoch` with `members`."""
    coordinator = ShareCoordinator(ShareGroupConfig())
    coordinator.load(ShareGroupEpochKey("g"), ShareGroupEpochValue(epoch, 0), 0)
    for member in members:
        coordinator.load(ShareMemberKey("g", member), ShareMemberValue(None, "", "", ("jobs",)), 0)
    return coordinator


def test_alter_bumps_the_epoch_of_an_empty_group_and_creates_an_unknown_one() -> None:
    coordinator = _coordinator(3)
    error, _, plan, decision = coordinator.alter_offsets(
        "g", [("jobs", [(0, 1)])], TOPICS, lambda g: None, 0
    )
    assert error is ErrorCode.none and plan is not None and plan.initialize is not None
    assert plan.initialize.group_epoch == 4 and decision.records
    error, _, plan, _ = coordinator.alter_offsets(
        "new", [("jobs", [(0, 1)])], TOPICS, lambda g: None, 0
    )
    assert error is ErrorCode.none and coordinator.group("new") is not None


def test_groups_with_members_or_of_another_type_are_refused() -> None:
    coordinator = _coordinator(1, ("m",))
    assert (
        coordinator.alter_offsets("g", [], TOPICS, lambda g: None, 0)[0]
        is ErrorCode.non_empty_group
    )
    assert (
        coordinator.delete_offsets("g", [], TOPICS, lambda g: None)[0] is ErrorCode.non_empty_group
    )
    other = lambda g: GroupType.CLASSIC  # noqa: E731
    error, message, _, _ = coordinator.alter_offsets("c", [], TOPICS, other, 0)
    assert (error, message) == (ErrorCode.group_id_not_found, "Group c is not a share group.")
    assert coordinator.delete_offsets("x", [], TOPICS, lambda g: None)[:2] == (
        ErrorCode.group_id_not_found,
        "Group x not found.",
    )
