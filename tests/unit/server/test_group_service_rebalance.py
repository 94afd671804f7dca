"""`GroupService.rebalance` (strom.testing's "trigger a rebalance") on a real GroupService:
only the coordinator of the group acts, and the member finds out through its Heartbeat
and rejoins into the next generation, all through the real handlers."""

from __future__ import annotations

from pathlib import Path

from group_service_harness import (
    answered,
    group_node,
    heartbeat,
    join_group,
    offsets_image,
    serving,
    sync_group,
)
from kio.schema.errors import ErrorCode
from server_harness import image_of, run

from strom.group.coordinator import RebalanceResult
from strom.group.state import GroupState
from strom.server.handlers.groups import (
    handle_heartbeat,
    handle_join_group,
    handle_sync_group,
)
from strom.server.handlers.ports import GroupContext

GROUP = "reports"


async def consumer(context: GroupContext, member_id: str = "") -> tuple[str, int]:
    """A lone consumer (re)joins `GROUP` and syncs: (member id, generation)."""
    if not member_id:
        first = await answered(handle_join_group, context, join_group(GROUP))
        assert first.error_code == ErrorCode.member_id_required
        member_id = first.member_id
    join = await answered(handle_join_group, context, join_group(GROUP, member_id))
    assert (join.error_code, join.leader) == (ErrorCode.none, member_id)
    generation = join.generation_id
    assignment = f"orders-{generation}".encode()
    sync = await answered(
        handle_sync_group,
        context,
        sync_group(GROUP, member_id, generation, {member_id: assignment}),
    )
    assert (sync.error_code, sync.assignment) == (ErrorCode.none, assignment)
    return member_id, generation


def test_the_coordinator_rebalances_a_stable_group(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            member_id, generation = await consumer(context)
            result = await at.groups.rebalance(GROUP, "test asked")
            assert result == RebalanceResult(ErrorCode.none, True, GroupState.STABLE)
            described = at.groups.describe(GROUP)
            assert described is not None
            assert described.state is GroupState.PREPARING_REBALANCE
            beat = await answered(
                handle_heartbeat, context, heartbeat(GROUP, member_id, generation)
            )
            assert beat.error_code == ErrorCode.rebalance_in_progress
            again = await at.groups.rebalance(GROUP, "twice")
            assert again == RebalanceResult(ErrorCode.none, False, GroupState.PREPARING_REBALANCE)
            assert await consumer(context, member_id) == (member_id, generation + 1)
            beat = await answered(
                handle_heartbeat, context, heartbeat(GROUP, member_id, generation + 1)
            )
            assert beat.error_code == ErrorCode.none

    run(scenario())


def test_an_unknown_group_is_not_found(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at):
            result = await at.groups.rebalance("nobody", "test asked")
            assert result == RebalanceResult(ErrorCode.group_id_not_found)

    run(scenario())


def test_only_the_groups_coordinator_rebalances_it(tmp_path: Path) -> None:
    elsewhere = group_node(tmp_path / "elsewhere", offsets_image(leader=2))
    loading = group_node(tmp_path / "loading", offsets_image(), loaded=False)
    no_topic = group_node(tmp_path / "no-topic", image_of())  # creating it would fail

    async def scenario() -> None:
        async with serving(elsewhere), serving(loading), serving(no_topic):
            assert await elsewhere.groups.rebalance(GROUP, "test asked") == RebalanceResult(
                ErrorCode.not_coordinator
            )
            assert await loading.groups.rebalance(GROUP, "test asked") == RebalanceResult(
                ErrorCode.coordinator_load_in_progress
            )
            assert await no_topic.groups.rebalance(GROUP, "test asked") == RebalanceResult(
                ErrorCode.not_coordinator
            )

    run(scenario())
