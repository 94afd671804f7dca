"""ACL checks of OffsetCommit, OffsetFetch, OffsetDelete and TxnOffsetCommit on a real
GroupService, as Kafka's KafkaApis makes them: the group first (READ to commit, DESCRIBE to
fetch, DELETE to delete offsets; WRITE on the transactional id before it for a
transactional commit), then each topic (READ, or DESCRIBE to fetch) before whether it
exists is told; an all-topics fetch leaves out the topics the principal may not describe.
Without an authorizer nothing changes."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from group_service_harness import (
    Verified,
    answered,
    group_node,
    offset_commit,
    offset_delete,
    offset_fetch,
    offsets_image,
    serving,
)
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, TOPIC, run
from test_txn_offset_handlers import errors_of, txn_offset_commit

from strom.metadata.image import MetadataImage
from strom.metadata.records import PartitionRecord, TopicRecord
from strom.protocol.codec import Request
from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.offsets import (
    handle_offset_commit,
    handle_offset_delete,
    handle_offset_fetch,
)
from strom.server.handlers.ports import GroupContext
from strom.server.handlers.txn_offsets import handle_txn_offset_commit

ALICE = "User:alice"
GROUP = "billing"
HIDDEN = "payroll"
"""A topic that exists, which alice may not see."""
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op, Kind = AclOperation, AclResourceType


def acl(
    operation: AclOperation,
    name: str = GROUP,
    kind: AclResourceType = Kind.GROUP,
    permission: AclPermissionType = ALLOW,
) -> AclBinding:
    return AclBinding(kind, name, PatternType.LITERAL, ALICE, "*", operation, permission)


def topic_acl(operation: AclOperation, name: str = TOPIC) -> AclBinding:
    return acl(operation, name, Kind.TOPIC)


def guarded(context: GroupContext, *bindings: AclBinding) -> GroupContext:
    authorizer = Authorizer(AclIndex(bindings), super_users=frozenset(), allow_if_no_acl=False)
    return dataclasses.replace(context, authorizer=lambda: authorizer)


def as_alice(asked: Request) -> Request:
    return dataclasses.replace(asked, principal=ALICE, client_host="/10.0.0.7")


async def asked_by_alice(
    handler: Callable[[GroupContext, Request], Any], context: GroupContext, asked: Request
) -> Any:
    return await answered(handler, context, as_alice(asked))


def two_topics() -> MetadataImage:
    """offsets_image with a second one-partition topic, HIDDEN, led here."""
    topic_id = uuid.UUID(int=0x9A7)
    return offsets_image().replay(
        [
            TopicRecord(HIDDEN, topic_id),
            PartitionRecord(topic_id, 0, (NODE_ID,), (NODE_ID,), NODE_ID, 0, 0),
        ]
    )


def commit_errors(answer: Any) -> dict[tuple[str, int], ErrorCode]:
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def offsets_of(topics: Any) -> list[tuple[str, int, int, ErrorCode]]:
    return [
        (t.name, p.partition_index, p.committed_offset, p.error_code)
        for t in topics
        for p in t.partitions
    ]


async def commit_as_admin(context: GroupContext, offsets: dict[tuple[str, int], int]) -> None:
    done = await answered(handle_offset_commit, context, offset_commit(GROUP, offsets))
    assert set(commit_errors(done).values()) == {ErrorCode.none}


# --- OffsetCommit ---------------------------------------------------------------------------


def test_offset_commit_without_read_on_the_group_refuses_every_partition(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, two_topics())
    asked = offset_commit(GROUP, {(TOPIC, 0): 5, ("missing", 0): 1})

    async def scenario() -> None:
        async with serving(at) as plain:
            for context in (
                guarded(plain, acl(Op.DESCRIBE), topic_acl(Op.READ)),
                guarded(plain, acl(Op.ALL), acl(Op.READ, permission=DENY), topic_acl(Op.READ)),
            ):
                answer = await asked_by_alice(handle_offset_commit, context, asked)
                assert commit_errors(answer) == {
                    (TOPIC, 0): ErrorCode.group_authorization_failed,
                    ("missing", 0): ErrorCode.group_authorization_failed,
                }
            assert at.groups.describe(GROUP) is None  # nothing was committed

    run(scenario())


def test_offset_commit_needs_read_on_each_topic_before_its_existence_is_told(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, two_topics())
    asked = offset_commit(
        GROUP, {(TOPIC, 0): 5, (HIDDEN, 0): 6, ("missing", 0): 7, ("unknown", 0): 8}
    )

    async def scenario() -> None:
        async with serving(at) as plain:
            context = guarded(
                plain, acl(Op.READ), topic_acl(Op.READ), topic_acl(Op.READ, "unknown")
            )
            answer = await asked_by_alice(handle_offset_commit, context, asked)
            assert commit_errors(answer) == {
                (TOPIC, 0): ErrorCode.none,
                (HIDDEN, 0): ErrorCode.topic_authorization_failed,
                ("missing", 0): ErrorCode.topic_authorization_failed,
                ("unknown", 0): ErrorCode.unknown_topic_or_partition,
            }
            fetched = await answered(handle_offset_fetch, plain, offset_fetch(GROUP, None))
            assert offsets_of(fetched.topics) == [(TOPIC, 0, 5, ErrorCode.none)]

    run(scenario())


def test_an_offset_commit_of_only_refused_topics_makes_no_group(tmp_path: Path) -> None:
    at = group_node(tmp_path, two_topics())
    asked = offset_commit(GROUP, {(HIDDEN, 0): 6, ("missing", 0): 7})

    async def scenario() -> None:
        async with serving(at) as plain:
            answer = await asked_by_alice(handle_offset_commit, guarded(plain, acl(Op.READ)), asked)
            assert set(commit_errors(answer).values()) == {ErrorCode.topic_authorization_failed}
            assert at.groups.describe(GROUP) is None

    run(scenario())


def test_offset_commit_without_an_authorizer_is_unchanged(tmp_path: Path) -> None:
    at = group_node(tmp_path, two_topics())

    async def scenario() -> None:
        async with serving(at) as plain:
            asked = offset_commit(GROUP, {(TOPIC, 0): 5, (HIDDEN, 0): 6, ("missing", 0): 7})
            answer = await asked_by_alice(handle_offset_commit, plain, asked)
            assert commit_errors(answer) == {
                (TOPIC, 0): ErrorCode.none,
                (HIDDEN, 0): ErrorCode.none,
                ("missing", 0): ErrorCode.unknown_topic_or_partition,
            }

    run(scenario())


# --- OffsetFetch ----------------------------------------------------------------------------


def test_offset_fetch_without_describe_on_the_group_is_refused_per_version(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, two_topics())

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, {(TOPIC, 0): 5})
            context = guarded(plain, topic_acl(Op.DESCRIBE), acl(Op.DESCRIBE, "other"))
            v7 = await asked_by_alice(handle_offset_fetch, context, offset_fetch(GROUP, None))
            assert (v7.error_code, v7.topics) == (ErrorCode.group_authorization_failed, ())
            named = await asked_by_alice(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)], version=2)
            )
            assert (named.error_code, named.topics) == (ErrorCode.group_authorization_failed, ())
            # v1 has no top-level error: the client gets no topics and no error, as from Kafka
            v1 = await asked_by_alice(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)], version=1)
            )
            assert v1.topics == ()
            v8 = await asked_by_alice(
                handle_offset_fetch, context, offset_fetch(GROUP, [(TOPIC, 0)], version=8)
            )
            (group,) = v8.groups
            assert (group.error_code, group.topics) == (ErrorCode.group_authorization_failed, ())

    run(scenario())


def test_offset_fetch_reports_named_topics_it_may_not_describe(tmp_path: Path) -> None:
    at = group_node(tmp_path, two_topics())
    asked = [(HIDDEN, 0), (TOPIC, 0), ("missing", 3)]

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, {(TOPIC, 0): 5, (HIDDEN, 0): 6})
            # READ on the group and the topic imply DESCRIBE
            context = guarded(plain, acl(Op.READ), topic_acl(Op.READ))
            for version in (7, 8):
                answer = await asked_by_alice(
                    handle_offset_fetch, context, offset_fetch(GROUP, asked, version=version)
                )
                if version >= 8:
                    (group,) = answer.groups
                    error, topics = group.error_code, group.topics
                else:
                    error, topics = answer.error_code, answer.topics
                assert error == ErrorCode.none
                # the denied topics after the others, whether they exist or not
                assert offsets_of(topics) == [
                    (TOPIC, 0, 5, ErrorCode.none),
                    (HIDDEN, 0, -1, ErrorCode.topic_authorization_failed),
                    ("missing", 3, -1, ErrorCode.topic_authorization_failed),
                ]

    run(scenario())


def test_offset_fetch_of_every_topic_leaves_out_those_it_may_not_describe(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, two_topics())

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, {(TOPIC, 0): 5, (HIDDEN, 0): 6})
            context = guarded(plain, acl(Op.DESCRIBE), topic_acl(Op.DESCRIBE))
            for version in (2, 7, 8):
                answer = await asked_by_alice(
                    handle_offset_fetch, context, offset_fetch(GROUP, None, version=version)
                )
                topics = answer.groups[0].topics if version >= 8 else answer.topics
                assert offsets_of(topics) == [(TOPIC, 0, 5, ErrorCode.none)]
            unguarded = await asked_by_alice(handle_offset_fetch, plain, offset_fetch(GROUP, None))
            assert sorted(offsets_of(unguarded.topics)) == [
                (TOPIC, 0, 5, ErrorCode.none),
                (HIDDEN, 0, 6, ErrorCode.none),
            ]

    run(scenario())


def test_offset_fetch_passes_a_coordinator_error_on_without_the_denied_topics(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, offsets_image(leader=2))  # another broker coordinates

    async def scenario() -> None:
        async with serving(at) as plain:
            context = guarded(plain, acl(Op.DESCRIBE), topic_acl(Op.DESCRIBE))
            asked = offset_fetch(GROUP, [(TOPIC, 0), (HIDDEN, 0)])
            answer = await asked_by_alice(handle_offset_fetch, context, asked)
            assert answer.error_code == ErrorCode.not_coordinator
            assert offsets_of(answer.topics) == [(TOPIC, 0, -1, ErrorCode.not_coordinator)]

    run(scenario())


# --- OffsetDelete ---------------------------------------------------------------------------


def test_offset_delete_needs_delete_on_the_group_then_read_on_each_topic(
    tmp_path: Path,
) -> None:
    at = group_node(tmp_path, two_topics())

    async def scenario() -> None:
        async with serving(at) as plain:
            await commit_as_admin(plain, {(TOPIC, 0): 5, (HIDDEN, 0): 6})
            asked = offset_delete(GROUP, (TOPIC, 0), (HIDDEN, 0), ("missing", 0))
            refused = await asked_by_alice(
                handle_offset_delete, guarded(plain, acl(Op.READ), topic_acl(Op.READ)), asked
            )
            assert (refused.error_code, refused.topics) == (
                ErrorCode.group_authorization_failed,
                (),
            )
            context = guarded(
                plain, acl(Op.DELETE), topic_acl(Op.READ), topic_acl(Op.READ, "missing")
            )
            answer = await asked_by_alice(handle_offset_delete, context, asked)
            assert answer.error_code == ErrorCode.none
            assert commit_errors(answer) == {
                (TOPIC, 0): ErrorCode.none,
                (HIDDEN, 0): ErrorCode.topic_authorization_failed,
                ("missing", 0): ErrorCode.unknown_topic_or_partition,
            }
            left = await answered(handle_offset_fetch, plain, offset_fetch(GROUP, None))
            assert offsets_of(left.topics) == [(HIDDEN, 0, 6, ErrorCode.none)]
            # A group-level error answers alone, without the partitions.
            other = offset_delete("no-such-group", (TOPIC, 0), ("missing", 0))
            alone = await answered(handle_offset_delete, plain, other)
            assert (alone.error_code, alone.topics) == (ErrorCode.group_id_not_found, ())

    run(scenario())


# --- TxnOffsetCommit ------------------------------------------------------------------------


TXN = acl(Op.WRITE, "tx-1", Kind.TRANSACTIONAL_ID)
"""What txn_offset_commit's transactional id needs."""


def test_txn_offset_commit_checks_the_transactional_id_then_the_group(tmp_path: Path) -> None:
    at = group_node(tmp_path, two_topics())
    verifier = Verified()
    asked = txn_offset_commit(GROUP, {(TOPIC, 0): 5, ("missing", 0): 1})

    async def scenario() -> None:
        async with serving(at, verifier) as plain:
            for bindings, error in (
                (
                    (acl(Op.READ), topic_acl(Op.READ)),
                    ErrorCode.transactional_id_authorization_failed,
                ),
                ((TXN, acl(Op.DESCRIBE), topic_acl(Op.READ)), ErrorCode.group_authorization_failed),
                ((topic_acl(Op.READ),), ErrorCode.transactional_id_authorization_failed),
            ):
                answer = await asked_by_alice(
                    handle_txn_offset_commit, guarded(plain, *bindings), asked
                )
                assert errors_of(answer) == {(TOPIC, 0): error, ("missing", 0): error}
            assert verifier.asked == []  # refused before the transaction was asked

    run(scenario())


def test_txn_offset_commit_needs_read_on_each_topic(tmp_path: Path) -> None:
    at = group_node(tmp_path, two_topics())
    verifier = Verified()
    asked = txn_offset_commit(GROUP, {(TOPIC, 0): 5, (HIDDEN, 0): 6, ("missing", 0): 1})

    async def scenario() -> None:
        async with serving(at, verifier) as plain:
            context = guarded(plain, TXN, acl(Op.READ), topic_acl(Op.READ))
            answer = await asked_by_alice(handle_txn_offset_commit, context, asked)
            assert errors_of(answer) == {
                (TOPIC, 0): ErrorCode.none,
                (HIDDEN, 0): ErrorCode.topic_authorization_failed,
                ("missing", 0): ErrorCode.topic_authorization_failed,
            }
            assert len(verifier.asked) == 1
            # only the allowed topic, and nothing at all when none is allowed
            hidden = txn_offset_commit(GROUP, {(HIDDEN, 0): 6})
            answer = await asked_by_alice(handle_txn_offset_commit, context, hidden)
            assert errors_of(answer) == {(HIDDEN, 0): ErrorCode.topic_authorization_failed}
            assert len(verifier.asked) == 1

    run(scenario())


def test_txn_offset_commit_without_an_authorizer_is_unchanged(tmp_path: Path) -> None:
    at = group_node(tmp_path, two_topics())

    async def scenario() -> None:
        async with serving(at) as plain:
            asked = txn_offset_commit(GROUP, {(TOPIC, 0): 5, (HIDDEN, 0): 6, ("missing", 0): 1})
            answer = await asked_by_alice(handle_txn_offset_commit, plain, asked)
            assert errors_of(answer) == {
                (TOPIC, 0): ErrorCode.none,
                (HIDDEN, 0): ErrorCode.none,
                ("missing", 0): ErrorCode.unknown_topic_or_partition,
            }

    run(scenario())
