"""FindCoordinator, the classic group APIs and the offset APIs on a real GroupService: its
GroupCoordinator core decides, its writes go to a real `__consumer_offsets` log, and each
answer is read back through the codec as a client reads it."""

from __future__ import annotations

from pathlib import Path

from group_service_harness import (
    SUBSCRIPTION,
    answered,
    delete_groups,
    describe_groups,
    find_coordinator,
    follow,
    group_node,
    heartbeat,
    join_group,
    leader_moved,
    leave_group,
    list_groups,
    offset_commit,
    offset_delete,
    offset_fetch,
    offsets_image,
    serving,
    sync_group,
)
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, TOPIC, request, run

from strom.protocol.apis import ApiKey
from strom.server.handlers.coordinator import handle_find_coordinator
from strom.server.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_heartbeat,
    handle_join_group,
    handle_leave_group,
    handle_list_groups,
    handle_sync_group,
)
from strom.server.handlers.offsets import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from strom.server.handlers.ports import GroupContext

GROUP = "billing"


async def joined(context: GroupContext, group_id: str = GROUP) -> tuple[str, int]:
    """A lone consumer in `group_id`, through JoinGroup and SyncGroup: (member id,
    generation)."""
    first = await answered(handle_join_group, context, join_group(group_id))
    assert first.error_code == ErrorCode.member_id_required
    member_id = first.member_id
    assert member_id
    join = await answered(handle_join_group, context, join_group(group_id, member_id))
    assert join.error_code == ErrorCode.none
    sync = await answered(
        handle_sync_group,
        context,
        sync_group(group_id, member_id, join.generation_id, {member_id: b"orders-0"}),
    )
    assert (sync.error_code, sync.assignment) == (ErrorCode.none, b"orders-0")
    return member_id, join.generation_id


# --- FindCoordinator ----------------------------------------------------------------------


def test_find_coordinator_answers_the_offsets_partitions_leader(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image(leader=2))

    async def scenario() -> None:
        async with serving(at) as context:
            answer = await answered(handle_find_coordinator, context, find_coordinator(GROUP))
            (entry,) = answer.coordinators
            assert (entry.key, entry.error_code) == (GROUP, ErrorCode.none)
            # Broker 2's registered endpoint, not this node's own listener.
            assert (entry.node_id, entry.host, entry.port) == (2, "localhost", 9002)
            old = await answered(
                handle_find_coordinator, context, find_coordinator(GROUP, version=3)
            )
            assert (old.error_code, old.node_id, old.host, old.port) == (
                ErrorCode.none,
                2,
                "localhost",
                9002,
            )

    run(scenario())


def test_find_coordinator_reads_the_leader_at_each_request(tmp_path: Path) -> None:
    image = offsets_image(leader=NODE_ID)
    at = group_node(tmp_path, image)

    async def scenario() -> None:
        async with serving(at) as context:
            answer = await answered(handle_find_coordinator, context, find_coordinator(GROUP))
            assert answer.coordinators[0].node_id == NODE_ID
            assert answer.coordinators[0].port == 9000 + NODE_ID
            follow(at, leader_moved(image, 2))  # the same context, the next image
            answer = await answered(handle_find_coordinator, context, find_coordinator(GROUP))
            assert (answer.coordinators[0].node_id, answer.coordinators[0].port) == (2, 9002)
            join = await answered(handle_join_group, context, join_group(GROUP))
            assert join.error_code == ErrorCode.not_coordinator

    run(scenario())


def test_find_coordinator_without_a_live_leader_is_not_available(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image(leader=2, fenced=(2,)))

    async def scenario() -> None:
        async with serving(at) as context:
            answer = await answered(handle_find_coordinator, context, find_coordinator(GROUP))
            (entry,) = answer.coordinators
            assert entry.error_code == ErrorCode.coordinator_not_available
            assert (entry.node_id, entry.host, entry.port) == (-1, "", -1)
            assert entry.error_message == "The coordinator is not available."

    run(scenario())


def test_find_coordinator_refuses_unknown_key_types(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            answer = await answered(
                handle_find_coordinator, context, find_coordinator(GROUP, key_type=7)
            )
            assert answer.coordinators[0].error_code == ErrorCode.invalid_request
            assert (answer.coordinators[0].node_id, answer.coordinators[0].port) == (-1, -1)

    run(scenario())


# --- not the coordinator --------------------------------------------------------------------


def test_group_requests_away_from_the_coordinator_get_not_coordinator(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image(leader=2))
    refused = ErrorCode.not_coordinator

    async def scenario() -> None:
        async with serving(at) as context:
            join = await answered(handle_join_group, context, join_group(GROUP, "m-1"))
            assert (join.error_code, join.member_id) == (refused, "m-1")
            sync = await answered(handle_sync_group, context, sync_group(GROUP, "m-1", 1, {}))
            assert sync.error_code == refused
            beat = await answered(handle_heartbeat, context, heartbeat(GROUP, "m-1", 1))
            assert beat.error_code == refused
            leave = await answered(handle_leave_group, context, leave_group(GROUP, "m-1"))
            assert (leave.error_code, leave.members) == (refused, ())
            commit = await answered(
                handle_offset_commit, context, offset_commit(GROUP, {(TOPIC, 0): 5})
            )
            assert commit.topics[0].partitions[0].error_code == refused
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)])
            )
            assert fetched.error_code == refused
            assert fetched.topics[0].partitions[0].error_code == refused
            assert fetched.topics[0].partitions[0].committed_offset == -1
            described = await answered(handle_describe_groups, context, describe_groups(GROUP))
            assert described.groups[0].error_code == refused
            deleted = await answered(handle_delete_groups, context, delete_groups(GROUP))
            assert deleted.results[0].error_code == refused
            dropped = await answered(
                handle_offset_delete, context, offset_delete(GROUP, (TOPIC, 0))
            )
            assert dropped.error_code == refused

    run(scenario())


def test_a_partition_not_loaded_yet_answers_load_in_progress(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image(), loaded=False)
    loading = ErrorCode.coordinator_load_in_progress

    async def scenario() -> None:
        async with serving(at) as context:
            join = await answered(handle_join_group, context, join_group(GROUP))
            assert join.error_code == loading
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, None, version=8)
            )
            assert fetched.groups[0].error_code == loading

    run(scenario())


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups -------------


def test_join_group_refuses_what_the_coordinator_refuses(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            empty_id = await answered(handle_join_group, context, join_group(""))
            assert empty_id.error_code == ErrorCode.invalid_group_id
            no_type = await answered(
                handle_join_group, context, join_group(GROUP, protocol_type="")
            )
            assert no_type.error_code == ErrorCode.inconsistent_group_protocol
            no_protocols = await answered(
                handle_join_group, context, join_group(GROUP, protocols=())
            )
            assert no_protocols.error_code == ErrorCode.inconsistent_group_protocol
            too_short = await answered(
                handle_join_group, context, join_group(GROUP, session_timeout_ms=1)
            )
            assert too_short.error_code == ErrorCode.invalid_session_timeout
            unknown = await answered(handle_join_group, context, join_group(GROUP, "nobody"))
            assert (unknown.error_code, unknown.member_id) == (
                ErrorCode.unknown_member_id,
                "nobody",
            )

    run(scenario())


def test_a_consumer_joins_syncs_heartbeats_and_leaves(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            member_id, generation = await joined(context)
            assert generation == 1
            beat = await answered(handle_heartbeat, context, heartbeat(GROUP, member_id, 1))
            assert beat.error_code == ErrorCode.none
            stale = await answered(handle_heartbeat, context, heartbeat(GROUP, member_id, 0))
            assert stale.error_code == ErrorCode.illegal_generation
            other_type = await answered(
                handle_join_group, context, join_group(GROUP, protocol_type="connect")
            )
            assert other_type.error_code == ErrorCode.inconsistent_group_protocol

            described = await answered(handle_describe_groups, context, describe_groups(GROUP))
            (group,) = described.groups
            assert (group.error_code, group.group_state) == (ErrorCode.none, "Stable")
            assert (group.protocol_type, group.protocol_data) == ("consumer", "range")
            (member,) = group.members
            assert (member.member_id, member.client_id) == (member_id, "test")
            assert (member.member_metadata, member.member_assignment) == (
                SUBSCRIPTION,
                b"orders-0",
            )

            listed = await answered(handle_list_groups, context, list_groups())
            assert [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups] == [
                (GROUP, "consumer", "Stable")
            ]
            only_empty = await answered(handle_list_groups, context, list_groups("Empty"))
            assert only_empty.groups == ()

            busy = await answered(handle_delete_groups, context, delete_groups(GROUP))
            assert busy.results[0].error_code == ErrorCode.non_empty_group
            commit = await answered(
                handle_offset_commit,
                context,
                offset_commit(GROUP, {(TOPIC, 0): 9}, member_id=member_id, generation_id=1),
            )
            assert commit.topics[0].partitions[0].error_code == ErrorCode.none
            stale = await answered(
                handle_offset_commit,
                context,
                offset_commit(GROUP, {(TOPIC, 0): 10}, member_id=member_id, generation_id=0),
            )
            assert stale.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
            in_use = await answered(handle_offset_delete, context, offset_delete(GROUP, (TOPIC, 0)))
            assert in_use.error_code == ErrorCode.none
            assert in_use.topics[0].partitions[0].error_code == ErrorCode.group_subscribed_to_topic
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)])
            )
            assert fetched.topics[0].partitions[0].committed_offset == 9

            left = await answered(
                handle_leave_group, context, leave_group(GROUP, member_id, "stranger")
            )
            assert left.error_code == ErrorCode.none
            assert [(m.member_id, m.error_code) for m in left.members] == [
                (member_id, ErrorCode.none),
                ("stranger", ErrorCode.unknown_member_id),
            ]
            listed = await answered(handle_list_groups, context, list_groups("empty"))
            assert [(g.group_id, g.group_state) for g in listed.groups] == [(GROUP, "Empty")]

    run(scenario())


def test_describing_an_unknown_group(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            old = await answered(handle_describe_groups, context, describe_groups("nope"))
            assert (old.groups[0].error_code, old.groups[0].group_state) == (
                ErrorCode.none,
                "Dead",
            )
            asked = request(
                ApiKey.DESCRIBE_GROUPS,
                6,
                {"groups": ["nope"], "include_authorized_operations": False},
            )
            new = await answered(handle_describe_groups, context, asked)
            assert new.groups[0].error_code == ErrorCode.group_id_not_found

    run(scenario())


# --- OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups --------------------------------


def test_committed_offsets_are_fetched_and_unknown_topics_refused(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            commit = await answered(
                handle_offset_commit,
                context,
                offset_commit(GROUP, {(TOPIC, 0): 42, ("missing", 0): 7, (TOPIC, 9): 1}),
            )
            errors = {
                (t.name, p.partition_index): p.error_code
                for t in commit.topics
                for p in t.partitions
            }
            assert errors == {
                (TOPIC, 0): ErrorCode.none,
                ("missing", 0): ErrorCode.unknown_topic_or_partition,
                (TOPIC, 9): ErrorCode.unknown_topic_or_partition,
            }
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0), ("missing", 0)])
            )
            assert fetched.error_code == ErrorCode.none
            found = {
                (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
                for t in fetched.topics
                for p in t.partitions
            }
            assert found == {
                (TOPIC, 0): (42, "at 42", ErrorCode.none),
                ("missing", 0): (-1, "", ErrorCode.none),  # never committed: no offset
            }
            every = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, None, version=8)
            )
            (group,) = every.groups
            assert (group.group_id, group.error_code) == (GROUP, ErrorCode.none)
            assert [(t.name, [p.committed_offset for p in t.partitions]) for t in group.topics] == [
                (TOPIC, [42])
            ]

    run(scenario())


def test_an_unknown_group_has_no_offsets(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch("nobody", [("unknown-topic", 3)])
            )
            assert fetched.error_code == ErrorCode.none
            (topic,) = fetched.topics
            (partition,) = topic.partitions
            assert (topic.name, partition.partition_index) == ("unknown-topic", 3)
            assert (partition.committed_offset, partition.error_code) == (-1, ErrorCode.none)
            every = await answered(handle_offset_fetch, context, offset_fetch("nobody", None))
            assert every.topics == ()

    run(scenario())


def test_committed_offsets_are_durable(tmp_path: Path) -> None:
    async def commit() -> None:
        async with serving(group_node(tmp_path, offsets_image())) as context:
            answer = await answered(
                handle_offset_commit, context, offset_commit(GROUP, {(TOPIC, 0): 42})
            )
            assert answer.topics[0].partitions[0].error_code == ErrorCode.none

    async def reopen() -> None:
        # A new node on the same directory loads the group from __consumer_offsets.
        async with serving(group_node(tmp_path, offsets_image())) as context:
            fetched = await answered(handle_offset_fetch, context, offset_fetch(GROUP, None))
            assert fetched.topics[0].partitions[0].committed_offset == 42
            listed = await answered(handle_list_groups, context, list_groups())
            assert [(g.group_id, g.group_state) for g in listed.groups] == [(GROUP, "Empty")]

    run(commit())
    run(reopen())


def test_offsets_and_empty_groups_are_deleted(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as context:
            await answered(handle_offset_commit, context, offset_commit(GROUP, {(TOPIC, 0): 42}))
            dropped = await answered(
                handle_offset_delete, context, offset_delete(GROUP, (TOPIC, 0))
            )
            assert dropped.error_code == ErrorCode.none
            assert dropped.topics[0].partitions[0].error_code == ErrorCode.none
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)])
            )
            assert fetched.topics[0].partitions[0].committed_offset == -1
            unknown = await answered(
                handle_offset_delete, context, offset_delete("nobody", (TOPIC, 0))
            )
            assert unknown.error_code == ErrorCode.group_id_not_found

            deleted = await answered(
                handle_delete_groups, context, delete_groups(GROUP, "nobody", "")
            )
            assert [(r.group_id, r.error_code) for r in deleted.results] == [
                (GROUP, ErrorCode.none),
                ("nobody", ErrorCode.group_id_not_found),
                ("", ErrorCode.invalid_group_id),
            ]
            listed = await answered(handle_list_groups, context, list_groups())
            assert listed.groups == ()

    run(scenario())
