"""CreateAcls, DescribeAcls and DeleteAcls (handlers/acls.py) around a real
ControllerService on the in-memory metadata store: SECURITY_DISABLED with Kafka's texts
without an authorizer, CLUSTER_AUTHORIZATION_FAILED without ALTER (create, delete) or
DESCRIBE (describe) on the cluster, checked before anything is validated or forwarded,
and with the permission a binding created, described and deleted; invalid bindings and
filters get INVALID_REQUEST each. No socket, no sleep."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from acl_admin_helpers import (
    ALICE,
    AUTHORIZER,
    DENY,
    PREFIXED,
    Kind,
    Op,
    by_alice,
    cluster_acl,
    guarded,
)
from admin_harness import controller_with_brokers
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to
from server_harness import request, run
from test_acl_cluster_admin import says_who

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.server.handlers import acls

E = ErrorCode
ALLOW, LITERAL = AclPermissionType.ALLOW, PatternType.LITERAL
BOB = "User:bob"

READ_ORDERS = AclBinding(Kind.TOPIC, "orders", LITERAL, BOB, "*", Op.READ, ALLOW)
"""The binding alice creates, describes and deletes (for bob)."""
WRITE_PREFIX = AclBinding(Kind.TOPIC, "ord", PREFIXED, BOB, "10.0.0.9", Op.WRITE, DENY)


def creation(binding: AclBinding) -> dict[str, Any]:
    return {
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "resource_pattern_type": int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission_type": int(binding.permission_type),
    }


def create_acls(*creations: AclBinding | dict[str, Any]) -> Request:
    """CreateAcls v3, each binding (or raw entry, for codes strom has no member for)."""
    entries = [c if isinstance(c, dict) else creation(c) for c in creations]
    return by_alice(request(ApiKey.CREATE_ACLS, 3, {"creations": entries}))


def acl_filter(
    kind: int = Kind.ANY,
    name: str | None = None,
    pattern: int = PatternType.ANY,
    principal: str | None = None,
    host: str | None = None,
    operation: int = Op.ANY,
    permission: int = AclPermissionType.ANY,
) -> dict[str, Any]:
    return {
        "resource_type_filter": int(kind),
        "resource_name_filter": name,
        "pattern_type_filter": int(pattern),
        "principal_filter": principal,
        "host_filter": host,
        "operation": int(operation),
        "permission_type": int(permission),
    }


def describe_acls(**fields: Any) -> Request:
    return by_alice(request(ApiKey.DESCRIBE_ACLS, 3, acl_filter(**fields)))


def delete_acls(*filters: dict[str, Any]) -> Request:
    return by_alice(request(ApiKey.DELETE_ACLS, 3, {"filters": list(filters)}))


def described(answer: Any) -> list[AclBinding]:
    """The bindings a DescribeAcls answer lists."""
    return [
        AclBinding(
            Kind(r.resource_type),
            r.resource_name,
            PatternType(r.pattern_type),
            a.principal,
            a.host,
            Op(a.operation),
            AclPermissionType(a.permission_type),
        )
        for r in answer.resources
        for a in r.acls
    ]


def matched(result: Any) -> list[AclBinding]:
    """The bindings one DeleteAcls filter result lists."""
    return [
        AclBinding(
            Kind(m.resource_type),
            m.resource_name,
            PatternType(m.pattern_type),
            m.principal,
            m.host,
            Op(m.operation),
            AclPermissionType(m.permission_type),
        )
        for m in result.matching_acls
    ]


def results(answer: Any) -> list[tuple[ErrorCode, str | None]]:
    entries: Sequence[Any] = getattr(answer, "results", None) or answer.filter_results
    return [(E(r.error_code), r.error_message) for r in entries]


# --- without an authorizer ----------------------------------------------------------------


def test_without_an_authorizer_every_acl_api_is_security_disabled(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        plain = admin_context(one)
        created = await answered(
            acls.handle_create_acls, plain, create_acls(READ_ORDERS, WRITE_PREFIX)
        )
        assert results(created) == [(E.security_disabled, "No Authorizer is configured.")] * 2
        described_ = await answered(acls.handle_describe_acls, plain, describe_acls())
        assert (described_.error_code, described_.error_message, described_.resources) == (
            E.security_disabled,
            "No Authorizer is configured on the broker",
            (),
        )
        deleted = await answered(
            acls.handle_delete_acls, plain, delete_acls(acl_filter(), acl_filter())
        )
        assert results(deleted) == [(E.security_disabled, "No Authorizer is configured.")] * 2
        assert [r.matching_acls for r in deleted.filter_results] == [(), ()]
        assert one.metadata.image.acls == {}  # nothing reached the controller

    run(scenario())


# --- without the cluster permission -------------------------------------------------------


def test_each_acl_api_needs_its_operation_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        plain = admin_context(one)
        # DESCRIBE, or ALTER denied beside ALL: no creating or deleting.
        for context in (
            guarded(plain, cluster_acl(Op.DESCRIBE), cluster_acl(Op.CREATE)),
            guarded(plain, cluster_acl(Op.ALL), cluster_acl(Op.ALTER, permission=DENY)),
        ):
            invalid = {**creation(READ_ORDERS), "resource_pattern_type": int(PatternType.ANY)}
            created = await answered(
                acls.handle_create_acls, context, create_acls(READ_ORDERS, invalid)
            )
            assert [code for code, _ in results(created)] == [E.cluster_authorization_failed] * 2
            for _, message in results(created):
                assert message is not None
                says_who(message, "CREATE_ACLS")
            deleted = await answered(
                acls.handle_delete_acls, context, delete_acls(acl_filter(name="orders"))
            )
            ((code, message),) = results(deleted)
            assert code == E.cluster_authorization_failed and message is not None
            says_who(message, "DELETE_ACLS")
        assert one.metadata.image.acls == {}

        # ALTER, or anything but DESCRIBE (which ALTER implies): no describing.
        for context in (
            guarded(plain, cluster_acl(Op.CREATE), cluster_acl(Op.CLUSTER_ACTION)),
            guarded(plain, cluster_acl(Op.ALTER), cluster_acl(Op.DESCRIBE, permission=DENY)),
        ):
            refused = await answered(acls.handle_describe_acls, context, describe_acls())
            assert (refused.error_code, refused.resources) == (E.cluster_authorization_failed, ())
            says_who(refused.error_message, "DESCRIBE_ACLS")

    run(scenario())


def test_a_refused_create_or_delete_is_not_forwarded(tmp_path: Path) -> None:
    async def scenario() -> None:
        # The controller checks a forwarded request again: there alice is a super user.
        one, two = await controller_with_brokers(
            tmp_path, 1, 2, config=[AUTHORIZER, f"super.users={ALICE}"]
        )
        link = loopback_to(one)
        at_two = guarded(admin_context(two, channel=link), cluster_acl(Op.DESCRIBE))
        created = await answered(acls.handle_create_acls, at_two, create_acls(READ_ORDERS))
        assert [code for code, _ in results(created)] == [E.cluster_authorization_failed]
        deleted = await answered(acls.handle_delete_acls, at_two, delete_acls(acl_filter()))
        assert [code for code, _ in results(deleted)] == [E.cluster_authorization_failed]
        assert link.sent == []

        allowed = guarded(admin_context(two, channel=link), cluster_acl(Op.ALTER))
        created = await answered(acls.handle_create_acls, allowed, create_acls(READ_ORDERS))
        assert results(created) == [(E.none, None)]
        assert len(link.sent) == 1
        assert list(two.metadata.image.acls.values()) == [READ_ORDERS]

    run(scenario())


# --- with the permission -------------------------------------------------------------------


def test_a_created_binding_is_described_then_deleted(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        plain = admin_context(one)
        admin = guarded(plain, cluster_acl(Op.ALTER))  # ALTER implies DESCRIBE
        created = await answered(
            acls.handle_create_acls, admin, create_acls(READ_ORDERS, WRITE_PREFIX)
        )
        assert results(created) == [(E.none, None), (E.none, None)]
        assert sorted(one.metadata.image.acls.values()) == sorted([READ_ORDERS, WRITE_PREFIX])

        every = await answered(acls.handle_describe_acls, admin, describe_acls())
        assert (every.error_code, every.error_message) == (E.none, None)
        assert sorted(described(every)) == sorted([READ_ORDERS, WRITE_PREFIX])
        reader = guarded(plain, cluster_acl(Op.DESCRIBE))  # enough to describe
        matching = await answered(
            acls.handle_describe_acls,
            reader,
            describe_acls(kind=Kind.TOPIC, name="orders", pattern=PatternType.MATCH),
        )
        assert sorted(described(matching)) == sorted([READ_ORDERS, WRITE_PREFIX])
        literal = await answered(
            acls.handle_describe_acls, reader, describe_acls(pattern=PatternType.LITERAL)
        )
        assert described(literal) == [READ_ORDERS]

        deleted = await answered(
            acls.handle_delete_acls,
            admin,
            delete_acls(
                acl_filter(Kind.TOPIC, "orders", LITERAL, BOB, operation=Op.READ),
                acl_filter(principal=ALICE),  # matches nothing
            ),
        )
        assert results(deleted) == [(E.none, None), (E.none, None)]
        first, second = deleted.filter_results
        assert (matched(first), matched(second)) == ([READ_ORDERS], [])
        assert list(one.metadata.image.acls.values()) == [WRITE_PREFIX]
        left = await answered(acls.handle_describe_acls, reader, describe_acls())
        assert described(left) == [WRITE_PREFIX]

    run(scenario())


def test_invalid_bindings_and_filters_are_invalid_requests_each(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        admin = guarded(admin_context(one), cluster_acl(Op.ALTER))
        any_pattern = {**creation(READ_ORDERS), "resource_pattern_type": int(PatternType.ANY)}
        unknown_operation = {**creation(READ_ORDERS), "operation": 99}
        any_operation = {**creation(READ_ORDERS), "operation": int(Op.ANY)}
        created = await answered(
            acls.handle_create_acls,
            admin,
            create_acls(any_pattern, WRITE_PREFIX, unknown_operation, any_operation),
        )
        assert results(created) == [
            (E.invalid_request, "Invalid patternType ANY"),
            (E.none, None),  # the valid one beside them is created
            (E.invalid_request, "Invalid operation UNKNOWN"),
            (E.invalid_request, "Invalid operation ANY"),
        ]
        assert list(one.metadata.image.acls.values()) == [WRITE_PREFIX]

        unknown = await answered(acls.handle_describe_acls, admin, describe_acls(operation=99))
        assert (unknown.error_code, unknown.error_message, unknown.resources) == (
            E.invalid_request,
            "Unknown entryFilter.",
            (),
        )
        deleted = await answered(
            acls.handle_delete_acls,
            admin,
            delete_acls(acl_filter(pattern=PatternType.UNKNOWN), acl_filter(kind=Kind.TOPIC)),
        )
        assert results(deleted) == [
            (E.invalid_request, "Unknown patternFilter."),
            (E.none, None),
        ]
        assert [matched(r) for r in deleted.filter_results] == [[], [WRITE_PREFIX]]
        assert one.metadata.image.acls == {}

    run(scenario())
