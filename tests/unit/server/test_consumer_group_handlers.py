"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848) on a real GroupService and
ConsumerGroupService: their records go to a real `__consumer_offsets` log, a new node
replays them, and each answer is read back through the codec as a client reads it."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from group_service_harness import (
    GroupNode,
    answered,
    delete_groups,
    describe_groups,
    group_node,
    join_group,
    offset_commit,
    offset_fetch,
    offsets_image,
    serving,
)
from kio.schema.errors import ErrorCode
from server_harness import TOPIC, TOPIC_ID, request, run

from strom.metadata.records import ConfigRecord, ConfigResourceType
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType
from strom.server.clock import now_ms
from strom.server.consumer_groups import ConsumerGroupService
from strom.server.handlers.consumer_groups import (
    handle_consumer_group_describe,
    handle_consumer_group_heartbeat,
)
from strom.server.handlers.groups import (
    handle_delete_groups,
    handle_describe_groups,
    handle_join_group,
    handle_list_groups,
)
from strom.server.handlers.offsets import handle_offset_commit, handle_offset_fetch
from strom.server.handlers.ports import GroupContext
from strom.server.handlers.txn_offsets import handle_txn_offset_commit

GROUP = "kip848"


@contextlib.asynccontextmanager
async def consumer_serving(node: GroupNode) -> AsyncIterator[GroupContext]:
    async with serving(node) as context:
        service = ConsumerGroupService(node.groups, lambda: node.metadata.image)
        yield dataclasses.replace(context, consumer=service)


def beat(
    member_id: str,
    epoch: int,
    *,
    version: int = 1,
    owned: list[int] | None = None,
    group: str = GROUP,
    **fields: Any,
) -> Request:
    body: dict[str, Any] = {
        "group_id": group,
        "member_id": member_id,
        "member_epoch": epoch,
        "rebalance_timeout": 30_000 if epoch == 0 else -1,
        "subscribed_topic_names": [TOPIC] if epoch == 0 else None,
        "topic_partitions": (
            None if owned is None else [{"topic_id": TOPIC_ID, "partitions": owned}]
        ),
        **fields,
    }
    if epoch == 0 and owned is None and "topic_partitions" not in fields:
        body["topic_partitions"] = []
    return request(ApiKey.CONSUMER_GROUP_HEARTBEAT, version, body)


def describe(*group_ids: str, version: int = 1) -> Request:
    return request(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        version,
        {"group_ids": group_ids, "include_authorized_operations": True},
    )


def test_a_member_joins_gets_every_partition_and_is_described(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            joined = await answered(handle_consumer_group_heartbeat, context, beat("m-1", 0))
            assert joined.error_code == ErrorCode.none
            assert (joined.member_id, joined.member_epoch) == ("m-1", 1)
            assert joined.heartbeat_interval.total_seconds() == 5
            (assigned,) = joined.assignment.topic_partitions
            assert (assigned.topic_id, list(assigned.partitions)) == (TOPIC_ID, [0])
            again = await answered(
                handle_consumer_group_heartbeat, context, beat("m-1", 1, owned=[0])
            )
            assert (again.error_code, again.member_epoch) == (ErrorCode.none, 1)
            assert again.assignment is None  # nothing changed
            found = await answered(handle_consumer_group_describe, context, describe(GROUP))
            (group,) = found.groups
            assert (group.error_code, group.group_state, group.group_epoch) == (
                ErrorCode.none,
                "Stable",
                1,
            )
            assert group.assignor_name == "uniform"
            (member,) = group.members
            assert (member.member_id, member.member_epoch, member.member_type) == ("m-1", 1, 1)
            assert member.assignment.topic_partitions[0].topic_name == TOPIC
            missing = await answered(handle_consumer_group_describe, context, describe("nope"))
            assert missing.groups[0].error_code == ErrorCode.group_id_not_found

    run(scenario())


def test_errors_of_a_heartbeat(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            await answered(handle_consumer_group_heartbeat, context, beat("m-1", 0))
            fenced = await answered(handle_consumer_group_heartbeat, context, beat("m-1", 9))
            assert fenced.error_code == ErrorCode.fenced_member_epoch
            unknown = await answered(handle_consumer_group_heartbeat, context, beat("x", 1))
            assert unknown.error_code == ErrorCode.unknown_member_id
            bad = await answered(
                handle_consumer_group_heartbeat, context, beat("m-2", 0, server_assignor="zz")
            )
            assert bad.error_code == ErrorCode.unsupported_assignor
            regex = await answered(
                handle_consumer_group_heartbeat,
                context,
                beat("m-3", 0, subscribed_topic_names=None, subscribed_topic_regex="[a-z"),
            )
            assert regex.error_code == ErrorCode.invalid_regular_expression

    run(scenario())


def test_the_group_is_rebuilt_from_its_records(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    async def first() -> None:
        async with consumer_serving(node) as context:
            await answered(handle_consumer_group_heartbeat, context, beat("m-1", 0))
            await answered(handle_consumer_group_heartbeat, context, beat("m-2", 0))

    run(first())
    before = node.groups.consumer.committed
    again = group_node(tmp_path, offsets_image())
    assert again.groups.consumer.committed == before
    assert set(before[GROUP].members) == {"m-1", "m-2"}

    async def second() -> None:
        async with consumer_serving(again) as context:
            back = await answered(
                handle_consumer_group_heartbeat, context, beat("m-1", 1, owned=[0])
            )
            assert back.error_code == ErrorCode.none

    run(second())


def test_offsets_classic_apis_and_deletion_of_a_consumer_group(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            await answered(handle_consumer_group_heartbeat, context, beat("m-1", 0))

            def commit(member: str, epoch: int) -> Request:
                asked = offset_commit(GROUP, {(TOPIC, 0): 7}, member_id=member, generation_id=epoch)
                return dataclasses.replace(asked, api_version=9)

            old = offset_commit(GROUP, {(TOPIC, 0): 7}, member_id="m-1", generation_id=1)
            refused = await answered(handle_offset_commit, context, old)  # v8
            assert refused.topics[0].partitions[0].error_code == ErrorCode.unsupported_version
            stale = await answered(handle_offset_commit, context, commit("m-1", 5))
            assert stale.topics[0].partitions[0].error_code == ErrorCode.stale_member_epoch
            done = await answered(handle_offset_commit, context, commit("m-1", 1))
            assert done.topics[0].partitions[0].error_code == ErrorCode.none
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)])
            )
            assert fetched.topics[0].partitions[0].committed_offset == 7

            def fetch_as(member_id: str | None, epoch: int) -> Request:
                group = {"group_id": GROUP, "member_id": member_id, "member_epoch": epoch}
                group["topics"] = [{"name": TOPIC, "partition_indexes": [0]}]
                body = {"groups": [group], "require_stable": False}
                return request(ApiKey.OFFSET_FETCH, 9, body)

            for member_id, epoch, error in (
                ("m-1", 1, ErrorCode.none),
                (None, -1, ErrorCode.none),
                ("m-1", 0, ErrorCode.stale_member_epoch),
                ("zz", 1, ErrorCode.unknown_member_id),
            ):
                answer = await answered(handle_offset_fetch, context, fetch_as(member_id, epoch))
                assert answer.groups[0].error_code == error, (member_id, epoch)

            listed = await answered(
                handle_list_groups,
                context,
                request(ApiKey.LIST_GROUPS, 5, {"types_filter": ["consumer"]}),
            )
            assert [(g.group_id, g.group_type, g.group_state) for g in listed.groups] == [
                (GROUP, "consumer", "Stable")
            ]
            classic = await answered(
                handle_list_groups,
                context,
                request(ApiKey.LIST_GROUPS, 5, {"types_filter": ["classic"]}),
            )
            assert classic.groups == ()
            described = await answered(handle_describe_groups, context, describe_groups(GROUP))
            assert described.groups[0].group_state == "Dead"
            join = await answered(handle_join_group, context, join_group(GROUP))
            # A classic member may join a consumer group (the protocols' migration):
            # first it gets its member id.
            assert join.error_code == ErrorCode.member_id_required
            assert join.member_id

            busy = await answered(handle_delete_groups, context, delete_groups(GROUP))
            assert busy.results[0].error_code == ErrorCode.non_empty_group
            left = await answered(handle_consumer_group_heartbeat, context, beat("m-1", -1))
            assert (left.error_code, left.member_epoch) == (ErrorCode.none, -1)
            gone = await answered(handle_delete_groups, context, delete_groups(GROUP))
            assert gone.results[0].error_code == ErrorCode.none
            fetched = await answered(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)])
            )
            assert fetched.topics[0].partitions[0].committed_offset == -1
            missing = await answered(handle_consumer_group_describe, context, describe(GROUP))
            assert missing.groups[0].error_code == ErrorCode.group_id_not_found

    run(scenario())


def test_acls_read_for_the_heartbeat_and_describe_for_describe(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())
    alice = "User:alice"

    def allow(operation: AclOperation, kind: AclResourceType, name: str) -> AclBinding:
        return AclBinding(
            kind, name, PatternType.LITERAL, alice, "*", operation, AclPermissionType.ALLOW
        )

    async def scenario() -> None:
        async with consumer_serving(node) as open_context:
            await answered(handle_consumer_group_heartbeat, open_context, beat("m-1", 0))
            authorizer = Authorizer(
                AclIndex((allow(AclOperation.DESCRIBE, AclResourceType.GROUP, GROUP),)),
                super_users=frozenset(),
                allow_if_no_acl=False,
            )
            context = dataclasses.replace(open_context, authorizer=lambda: authorizer)

            def as_alice(asked: Request) -> Request:
                return dataclasses.replace(asked, principal=alice)

            refused = await answered(
                handle_consumer_group_heartbeat, context, as_alice(beat("m-2", 0))
            )
            assert refused.error_code == ErrorCode.group_authorization_failed
            found = await answered(
                handle_consumer_group_describe, context, as_alice(describe(GROUP, "other"))
            )
            mine, other = found.groups
            assert mine.error_code == ErrorCode.none
            assert mine.members[0].assignment.topic_partitions == ()  # no DESCRIBE on TOPIC
            assert mine.authorized_operations != -2147483648
            assert other.error_code == ErrorCode.group_authorization_failed

    run(scenario())


def test_a_transactional_commit_by_a_member_of_a_consumer_group(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    def txn_commit(member_id: str, epoch: int) -> Request:
        body = {
            "transactional_id": "tx-1",
            "group_id": GROUP,
            "producer_id": 4000,
            "producer_epoch": 0,
            "generation_id": epoch,
            "member_id": member_id,
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 3,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        }
        return request(ApiKey.TXN_OFFSET_COMMIT, 3, body)

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            await answered(handle_consumer_group_heartbeat, context, beat("m-1", 0))
            stale = await answered(handle_txn_offset_commit, context, txn_commit("m-1", 4))
            assert stale.topics[0].partitions[0].error_code == ErrorCode.illegal_generation
            unknown = await answered(handle_txn_offset_commit, context, txn_commit("zz", 1))
            assert unknown.topics[0].partitions[0].error_code == ErrorCode.unknown_member_id
            done = await answered(handle_txn_offset_commit, context, txn_commit("m-1", 1))
            assert done.topics[0].partitions[0].error_code == ErrorCode.none

    run(scenario())


def test_a_groups_own_configs_set_its_heartbeat_interval_and_session(tmp_path: Path) -> None:
    image = offsets_image().replay(
        [
            ConfigRecord(ConfigResourceType.GROUP, GROUP, "consumer.heartbeat.interval.ms", "7000"),
            ConfigRecord(ConfigResourceType.GROUP, GROUP, "consumer.session.timeout.ms", "50000"),
        ]
    )
    node = group_node(tmp_path, image)

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            mine = await answered(handle_consumer_group_heartbeat, context, beat("m-1", 0))
            assert mine.heartbeat_interval.total_seconds() == 7
            other = await answered(
                handle_consumer_group_heartbeat, context, beat("m-2", 0, group="other")
            )
            assert other.heartbeat_interval.total_seconds() == 5
            sessions = node.groups.consumer._sessions  # the member's deadline: 50 s on
            assert 49_000 < sessions[(GROUP, "m-1")] - now_ms() <= 50_000
            assert 44_000 < sessions[("other", "m-2")] - now_ms() <= 45_000

    run(scenario())


def test_empty_groups_without_offsets_are_cleaned_up(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            for group in ("kept", "gone", "busy"):
                await answered(handle_consumer_group_heartbeat, context, beat("m", 0, group=group))
            await answered(
                handle_offset_commit,
                context,
                dataclasses.replace(
                    offset_commit("kept", {(TOPIC, 0): 1}, member_id="m", generation_id=1),
                    api_version=9,
                ),
            )
            for group in ("kept", "gone"):
                await answered(handle_consumer_group_heartbeat, context, beat("m", -1, group=group))
            assert context.consumer is not None
            service = context.consumer
            assert isinstance(service, ConsumerGroupService)
            assert await service.cleanup() == ["gone"]
            assert service.group_ids() == ["busy", "kept"]

    run(scenario())


def test_hostile_fields_of_heartbeat_and_describe(tmp_path: Path) -> None:
    node = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with consumer_serving(node) as context:
            # v1: the consumer makes its member id; none is INVALID_REQUEST.
            nameless = await answered(handle_consumer_group_heartbeat, context, beat("", 0))
            assert nameless.error_code == ErrorCode.invalid_request
            made = await answered(handle_consumer_group_heartbeat, context, beat("", 0, version=0))
            assert made.error_code == ErrorCode.none and made.member_id
            # A join listing a topic, even with no partitions or a null (zero) topic id.
            for topic_id in (TOPIC_ID, None):
                listed = beat("m-9", 0, topic_partitions=[{"topic_id": topic_id, "partitions": []}])
                refused = await answered(handle_consumer_group_heartbeat, context, listed)
                assert refused.error_code == ErrorCode.invalid_request
            answer = await answered(handle_consumer_group_describe, context, describe("", GROUP))
            assert [g.error_code for g in answer.groups] == [
                ErrorCode.invalid_group_id,
                ErrorCode.none,
            ]

    run(scenario())


def test_owned_partitions_of_a_topic_listed_twice_are_all_kept() -> None:
    from kio.schema.consumer_group_heartbeat.v1.request import TopicPartitions

    from strom.server.handlers.consumer_groups import ZERO_TOPIC_ID, _owned

    listed = (
        TopicPartitions(topic_id=TOPIC_ID, partitions=(0,)),
        TopicPartitions(topic_id=TOPIC_ID, partitions=(1,)),
        TopicPartitions(topic_id=None, partitions=()),
    )
    assert _owned(listed) == {TOPIC_ID: frozenset({0, 1}), ZERO_TOPIC_ID: frozenset()}
    assert _owned(None) is None
