"""ACL checks of FindCoordinator and the classic group APIs on a real GroupService, as
Kafka's KafkaApis makes them: READ on the group for a member's requests, DESCRIBE per
group for DescribeGroups (and its authorized_operations), DESCRIBE on the cluster or the
group for ListGroups (a filter, never an error), DELETE per group for DeleteGroups,
DESCRIBE on the group or transactional id for FindCoordinator (before any topic is
created). Without an authorizer nothing changes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from group_service_harness import (
    answered,
    delete_groups,
    describe_groups,
    find_coordinator,
    group_node,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offsets_image,
    serving,
    sync_group,
)
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, TOPIC, request, run

from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.security.acls import CLUSTER_NAME, AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import (
    OMITTED,
    SUPPORTED_OPERATIONS,
    AclOperation,
    AclResourceType,
    operations_field,
)
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
from strom.server.handlers.offsets import handle_offset_commit
from strom.server.handlers.ports import GroupContext, TxnContext

ALICE = "User:alice"
GROUP, SECRET = "billing", "secret"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op, Kind = AclOperation, AclResourceType
DENIED = ErrorCode.group_authorization_failed


def acl(
    operation: AclOperation,
    name: str = GROUP,
    kind: AclResourceType = Kind.GROUP,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = PatternType.LITERAL,
) -> AclBinding:
    return AclBinding(kind, name, pattern, ALICE, "*", operation, permission)


def guarded(context: Any, *bindings: AclBinding) -> Any:
    """`context` with an authorizer holding `bindings` (no super users, default deny)."""
    authorizer = Authorizer(AclIndex(bindings), super_users=frozenset(), allow_if_no_acl=False)
    return dataclasses.replace(context, authorizer=lambda: authorizer)


def as_alice(asked: Request) -> Request:
    return dataclasses.replace(asked, principal=ALICE, client_host="/10.0.0.7")


async def asked_by_alice(
    handler: Callable[[Any, Request], Any], context: Any, asked: Request
) -> Any:
    return await answered(handler, context, as_alice(asked))


async def commit_as_admin(context: GroupContext, *group_ids: str) -> None:
    """Empty groups holding an offset, made without an authorizer."""
    for group_id in group_ids:
        done = await answered(
            handle_offset_commit, context, offset_commit(group_id, {(TOPIC, 0): 1})
        )
        assert done.topics[0].partitions[0].error_code == ErrorCode.none


# --- FindCoordinator ----------------------------------------------------------------------


@dataclass(slots=True)
class _Coordinators:
    """A group or transaction coordinator's topic: one partition led by NODE_ID; notes
    each time it is asked to create its topic."""

    ensured: int = 0
    num_partitions: int = 1

    async def ensure_topic(self) -> None:
        self.ensured += 1

    def leader_of(self, index: int) -> int:
        return NODE_ID


@dataclass(frozen=True, slots=True)
class _Metadata:
    image: MetadataImage


@dataclass(slots=True)
class _Lookup:
    groups: _Coordinators = field(default_factory=_Coordinators)
    txns: _Coordinators = field(default_factory=_Coordinators)

    def context(self, *bindings: AclBinding) -> Any:
        plain = TxnContext(NODE_ID, _Metadata(offsets_image()), None, self.groups, self.txns)  # type: ignore[arg-type]
        return guarded(plain, *bindings)


def test_find_coordinator_needs_describe_on_each_group_key() -> None:
    lookup = _Lookup()
    context = lookup.context(acl(Op.READ))  # READ implies DESCRIBE
    answer = run(asked_by_alice(handle_find_coordinator, context, find_coordinator(GROUP, SECRET)))
    found, refused = answer.coordinators
    assert (found.key, found.error_code, found.node_id, found.port) == (
        GROUP,
        ErrorCode.none,
        NODE_ID,
        9000 + NODE_ID,
    )
    assert (refused.key, refused.error_code) == (SECRET, DENIED)
    assert (found.error_message, refused.error_message) == ("NONE", "Group authorization failed.")
    assert (refused.node_id, refused.host, refused.port) == (-1, "", -1)
    assert lookup.groups.ensured == 1  # the refused key created nothing


def test_find_coordinator_before_v4_refuses_at_the_top_level_with_kafkas_text() -> None:
    lookup = _Lookup()
    asked = find_coordinator(SECRET, version=3)
    answer = run(asked_by_alice(handle_find_coordinator, lookup.context(acl(Op.READ)), asked))
    assert (answer.error_code, answer.error_message) == (DENIED, "Group authorization failed.")
    assert (answer.node_id, answer.host, answer.port) == (-1, "", -1)
    assert lookup.groups.ensured == 0


def test_find_coordinator_needs_describe_on_a_transactional_id() -> None:
    lookup = _Lookup()
    context = lookup.context(acl(Op.DESCRIBE, "tx-1", Kind.TRANSACTIONAL_ID))
    asked = find_coordinator("tx-1", "tx-2", key_type=1)
    allowed, refused = run(asked_by_alice(handle_find_coordinator, context, asked)).coordinators
    assert (allowed.error_code, allowed.node_id) == (ErrorCode.none, NODE_ID)
    assert (refused.key, refused.error_code) == (
        "tx-2",
        ErrorCode.transactional_id_authorization_failed,
    )
    assert lookup.txns.ensured == 1
    # a group ACL of the same name is no transactional id's
    old = find_coordinator("tx-1", key_type=1, version=2)
    answer = run(asked_by_alice(handle_find_coordinator, lookup.context(acl(Op.ALL, "tx-1")), old))
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed
    assert answer.error_message == "Transactional Id authorization failed."


def test_find_coordinator_for_a_share_group_needs_cluster_action() -> None:
    lookup = _Lookup()
    asked = find_coordinator("shares", key_type=2, version=6)
    (refused,) = run(asked_by_alice(handle_find_coordinator, lookup.context(), asked)).coordinators
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.cluster_authorization_failed,
        "Cluster authorization failed.",
    )
    allowed = lookup.context(acl(Op.CLUSTER_ACTION, CLUSTER_NAME, Kind.CLUSTER))
    (entry,) = run(asked_by_alice(handle_find_coordinator, allowed, asked)).coordinators
    assert entry.error_code == ErrorCode.invalid_request  # not "group:topic id:partition"


def test_find_coordinator_without_an_authorizer_answers_everyone() -> None:
    lookup = _Lookup()
    plain = dataclasses.replace(lookup.context(), authorizer=lambda: None)
    answer = run(asked_by_alice(handle_find_coordinator, plain, find_coordinator(GROUP, SECRET)))
    assert [(c.error_code, c.node_id) for c in answer.coordinators] == [
        (ErrorCode.none, NODE_ID),
        (ErrorCode.none, NODE_ID),
    ]


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -------------------------------------------


async def alice_joins(context: GroupContext) -> tuple[str, int]:
    first = await asked_by_alice(handle_join_group, context, join_group(GROUP))
    assert first.error_code == ErrorCode.member_id_required
    join = await asked_by_alice(handle_join_group, context, join_group(GROUP, first.member_id))
    assert join.error_code == ErrorCode.none
    sync = await asked_by_alice(
        handle_sync_group,
        context,
        sync_group(GROUP, join.member_id, join.generation_id, {join.member_id: b"a"}),
    )
    assert (sync.error_code, sync.assignment) == (ErrorCode.none, b"a")
    return join.member_id, join.generation_id


def test_a_member_with_read_on_its_group_joins_syncs_heartbeats_and_leaves(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as plain:
            context = guarded(plain, acl(Op.READ))
            member_id, generation = await alice_joins(context)
            beat = await asked_by_alice(
                handle_heartbeat, context, heartbeat(GROUP, member_id, generation)
            )
            assert beat.error_code == ErrorCode.none
            leave = await asked_by_alice(handle_leave_group, context, leave_group(GROUP, member_id))
            assert leave.error_code == ErrorCode.none
            assert [m.error_code for m in leave.members] == [ErrorCode.none]

    run(scenario())


def test_a_members_requests_without_read_on_the_group_are_refused_whole(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as plain:
            member_id, generation = await alice_joins(guarded(plain, acl(Op.READ)))
            # DESCRIBE is not READ, and a DENY beats an ALLOW
            for context in (
                guarded(plain, acl(Op.DESCRIBE)),
                guarded(plain, acl(Op.READ), acl(Op.READ, permission=DENY)),
            ):
                join = await asked_by_alice(
                    handle_join_group, context, join_group(GROUP, member_id)
                )
                assert (join.error_code, join.generation_id, join.member_id) == (DENIED, -1, "")
                assert (join.leader, join.members) == ("", ())
                sync = await asked_by_alice(
                    handle_sync_group,
                    context,
                    sync_group(GROUP, member_id, generation, {member_id: b"b"}),
                )
                assert (sync.error_code, sync.assignment) == (DENIED, b"")
                beat = await asked_by_alice(
                    handle_heartbeat, context, heartbeat(GROUP, member_id, generation)
                )
                assert beat.error_code == DENIED
                leave = await asked_by_alice(
                    handle_leave_group, context, leave_group(GROUP, member_id)
                )
                assert (leave.error_code, leave.members) == (DENIED, ())
            # the member is still there, in the same generation
            described = at.groups.describe(GROUP)
            assert described is not None
            assert [m.member_id for m in described.members] == [member_id]
            assert at.groups.describe(SECRET) is None
            refused = await asked_by_alice(
                handle_join_group, guarded(plain, acl(Op.READ)), join_group(SECRET)
            )
            assert refused.error_code == DENIED
            assert at.groups.describe(SECRET) is None  # no group was made

    run(scenario())


def test_join_group_v7_refused_has_a_null_protocol_name(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())
    body = dataclasses.asdict(join_group(GROUP).body) | {"reason": None}
    asked = request(ApiKey.JOIN_GROUP, 8, body)

    async def scenario() -> None:
        async with serving(at) as plain:
            join = await asked_by_alice(handle_join_group, guarded(plain), asked)
            assert (join.error_code, join.protocol_name, join.protocol_type) == (
                DENIED,
                None,
                None,
            )

    run(scenario())


def test_sync_group_v5_without_its_protocol_is_inconsistent_before_any_acl(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, offsets_image())
    body = dataclasses.asdict(sync_group(GROUP, "m-1", 1, {}).body)

    def v5(protocol_type: str | None, protocol_name: str | None) -> Request:
        fields = body | {"protocol_type": protocol_type, "protocol_name": protocol_name}
        return request(ApiKey.SYNC_GROUP, 5, fields)

    async def scenario() -> None:
        async with serving(at) as plain:
            denied = guarded(plain)
            missing = await asked_by_alice(handle_sync_group, denied, v5("consumer", None))
            assert missing.error_code == ErrorCode.inconsistent_group_protocol
            named = await asked_by_alice(handle_sync_group, denied, v5("consumer", "range"))
            assert named.error_code == DENIED

    run(scenario())


# --- DescribeGroups -------------------------------------------------------------------------


def described(version: int, *group_ids: str, operations: bool = True) -> Request:
    asked = describe_groups(*group_ids)
    body = dataclasses.asdict(asked.body) | {"include_authorized_operations": operations}
    return request(ApiKey.DESCRIBE_GROUPS, version, body)


def test_describe_groups_answers_the_refused_groups_first(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())
    read_bits = operations_field({Op.READ, Op.DESCRIBE})

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, GROUP, SECRET)
            context = guarded(plain, acl(Op.READ), acl(Op.DESCRIBE, "nobody"))
            answer = await asked_by_alice(
                handle_describe_groups, context, described(5, GROUP, SECRET, "nobody")
            )
            refused, billing, nobody = answer.groups
            assert (refused.group_id, refused.error_code) == (SECRET, DENIED)
            assert (refused.group_state, refused.protocol_type, refused.protocol_data) == (
                "",
                "",
                "",
            )
            assert (refused.members, refused.authorized_operations) == ((), OMITTED)
            assert (billing.group_id, billing.error_code, billing.group_state) == (
                GROUP,
                ErrorCode.none,
                "Empty",
            )
            assert billing.authorized_operations == read_bits
            # before v6 an unknown group is described Dead, without error: told too
            assert (nobody.group_id, nobody.error_code, nobody.group_state) == (
                "nobody",
                ErrorCode.none,
                "Dead",
            )
            assert nobody.authorized_operations == operations_field({Op.DESCRIBE})
            v6 = await asked_by_alice(
                handle_describe_groups, context, described(6, "nobody", SECRET)
            )
            refused, unknown = v6.groups
            assert (refused.error_code, refused.error_message) == (DENIED, None)
            assert (unknown.error_code, unknown.authorized_operations) == (
                ErrorCode.group_id_not_found,
                OMITTED,
            )
            unasked = await asked_by_alice(
                handle_describe_groups, context, described(5, GROUP, operations=False)
            )
            assert unasked.groups[0].authorized_operations == OMITTED

    run(scenario())


def test_describe_groups_without_an_authorizer_tells_every_group_operation(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, offsets_image())
    every = operations_field(SUPPORTED_OPERATIONS[Kind.GROUP])

    async def scenario() -> None:
        async with serving(at) as context:
            await commit_as_admin(context, GROUP)
            answer = await asked_by_alice(
                handle_describe_groups, context, described(5, SECRET, GROUP)
            )
            assert [(g.group_id, g.error_code, g.authorized_operations) for g in answer.groups] == [
                (SECRET, ErrorCode.none, every),
                (GROUP, ErrorCode.none, every),
            ]
            assert every == 3400

    run(scenario())


# --- ListGroups -----------------------------------------------------------------------------


def test_list_groups_shows_only_the_groups_the_principal_may_describe(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def listed(context: GroupContext, *states: str) -> list[str]:
        answer = await asked_by_alice(handle_list_groups, context, list_groups(*states))
        assert answer.error_code == ErrorCode.none  # never refused
        return sorted(g.group_id for g in answer.groups)

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, GROUP, SECRET, "billing-eu")
            assert await listed(guarded(plain)) == []
            assert await listed(guarded(plain, acl(Op.DELETE))) == [GROUP]
            prefixed = acl(Op.DESCRIBE, "bill", pattern=PatternType.PREFIXED)
            assert await listed(guarded(plain, prefixed)) == [GROUP, "billing-eu"]
            denied_one = acl(Op.DESCRIBE, "billing-eu", permission=DENY)
            assert await listed(guarded(plain, prefixed, denied_one)) == [GROUP]
            cluster = acl(Op.DESCRIBE, CLUSTER_NAME, Kind.CLUSTER)
            everything = [GROUP, "billing-eu", SECRET]
            assert await listed(guarded(plain, cluster)) == everything
            # the coordinator's state filter, then the ACLs
            assert await listed(guarded(plain, prefixed), "Stable") == []
            assert await listed(plain) == everything

    run(scenario())


# --- DeleteGroups ---------------------------------------------------------------------------


def test_delete_groups_needs_delete_on_each_group(tmp_path: Path) -> None:
    at = group_node(tmp_path, offsets_image())

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, GROUP, SECRET)
            context = guarded(plain, acl(Op.DELETE), acl(Op.READ, SECRET), acl(Op.DELETE, "nobody"))
            answer = await asked_by_alice(
                handle_delete_groups, context, delete_groups(SECRET, GROUP, "nobody", GROUP)
            )
            # each group once, the refused ones after the others
            assert [(r.group_id, r.error_code) for r in answer.results] == [
                (GROUP, ErrorCode.none),
                ("nobody", ErrorCode.group_id_not_found),
                (SECRET, DENIED),
            ]
            assert at.groups.describe(GROUP) is None
            assert at.groups.describe(SECRET) is not None
            unguarded = await asked_by_alice(handle_delete_groups, plain, delete_groups(SECRET))
            assert [(r.group_id, r.error_code) for r in unguarded.results] == [
                (SECRET, ErrorCode.none)
            ]

    run(scenario())
