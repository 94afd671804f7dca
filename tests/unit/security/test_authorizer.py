"""The authorizer's rules, one table per rule: super users, DENY over ALLOW, implied
operations, the principal wildcard, literal, wildcard and prefixed resources, hosts (with
CIDR ranges), allow.everyone.if.no.acl.found, and the operations a principal may do."""

from __future__ import annotations

import pytest
from acl_helpers import ALLOW, DENY, LITERAL, PREFIXED, Kind, Op, acl

from strom.config import load_config
from strom.config.errors import ConfigError
from strom.security.acls import AclBinding, AclBindingFilter, AclPermissionType, PatternType
from strom.security.authorizer import (
    AUTHORIZER_CLASS_NAMES,
    AclIndex,
    Authorizer,
    is_authorizer_class,
    parse_super_users,
)
from strom.security.operations import SUPPORTED_OPERATIONS, AclOperation

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.1"


def allowed(
    bindings: list[AclBinding],
    operation: AclOperation = Op.READ,
    name: str = "orders",
    *,
    principal: str = ALICE,
    host: str = HOST,
    kind: Kind = Kind.TOPIC,
    allow_if_no_acl: bool = False,
) -> bool:
    authorizer = Authorizer(AclIndex(bindings), allow_if_no_acl=allow_if_no_acl)
    return authorizer.authorize(principal, host, operation, kind, name)


def test_without_bindings_everything_is_denied_by_default() -> None:
    assert not allowed([])
    assert allowed([], allow_if_no_acl=True)


def test_super_users_may_do_anything_despite_a_deny() -> None:
    authorizer = Authorizer(AclIndex([acl("*", Op.ALL, DENY, principal="User:*")]))
    root = Authorizer(authorizer.acls, super_users=frozenset({"User:root"}))
    assert not root.authorize(ALICE, HOST, Op.READ, Kind.TOPIC, "orders")
    assert root.authorize("User:root", HOST, Op.ALTER, Kind.CLUSTER, "kafka-cluster")
    # a super user is a principal, type and all
    assert not root.authorize("Group:root", HOST, Op.READ, Kind.TOPIC, "orders")


@pytest.mark.parametrize(
    ("bindings", "expected"),
    [
        ([acl()], True),
        ([acl(permission=DENY)], False),
        ([acl(), acl(permission=DENY)], False),  # DENY wins
        ([acl(), acl("*", permission=DENY)], False),  # whichever pattern it comes by
        ([acl("*"), acl("ord", permission=DENY, pattern=PREFIXED)], False),
        ([acl(), acl(permission=DENY, principal=BOB)], True),  # not alice's
        ([acl(), acl(permission=DENY, host="10.0.0.2")], True),  # not her host
        ([acl(), acl("orders", Op.WRITE, DENY)], True),  # not her operation
        ([acl(), acl("orders", Op.ALL, DENY)], False),
    ],
)
def test_deny_wins_over_allow(bindings: list[AclBinding], expected: bool) -> None:
    assert allowed(bindings) is expected


@pytest.mark.parametrize(
    ("held", "asked", "expected"),
    [
        (Op.READ, Op.DESCRIBE, True),
        (Op.WRITE, Op.DESCRIBE, True),
        (Op.DELETE, Op.DESCRIBE, True),
        (Op.ALTER, Op.DESCRIBE, True),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.ALL, Op.IDEMPOTENT_WRITE, True),
        (Op.ALL, Op.DESCRIBE_TOKENS, True),
        (Op.CREATE, Op.DESCRIBE, False),
        (Op.ALTER_CONFIGS, Op.DESCRIBE, False),
        (Op.ALTER, Op.DESCRIBE_CONFIGS, False),
        (Op.DESCRIBE, Op.READ, False),  # implication runs one way
        (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
        (Op.WRITE, Op.READ, False),
    ],
)
def test_implied_operations(held: AclOperation, asked: AclOperation, expected: bool) -> None:
    assert allowed([acl(operation=held)], asked) is expected


@pytest.mark.parametrize(
    ("denied", "asked", "expected"),
    [
        (Op.READ, Op.DESCRIBE, True),  # a DENY implies nothing: DESCRIBE stays allowed
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
        (Op.DESCRIBE, Op.DESCRIBE, False),
        (Op.DESCRIBE, Op.READ, True),
        (Op.ALL, Op.DESCRIBE, False),
    ],
)
def test_a_deny_denies_only_its_own_operation(
    denied: AclOperation, asked: AclOperation, expected: bool
) -> None:
    bindings = [acl(operation=Op.ALL), acl(operation=denied, permission=DENY)]
    assert allowed(bindings, asked) is expected


@pytest.mark.parametrize(
    ("principal", "asking", "expected"),
    [
        (ALICE, ALICE, True),
        (ALICE, BOB, False),
        ("User:*", BOB, True),
        ("User:*", "Group:ops", True),  # Kafka's wildcard matches every principal type
        ("Group:*", "Group:ops", False),  # only User:* is a wildcard
        ("User:Alice", ALICE, False),  # names are case-sensitive
    ],
)
def test_principals(principal: str, asking: str, expected: bool) -> None:
    assert allowed([acl(principal=principal)], principal=asking) is expected


@pytest.mark.parametrize(
    ("name", "pattern", "asked", "expected"),
    [
        ("orders", LITERAL, "orders", True),
        ("orders", LITERAL, "orders-eu", False),
        ("orders", LITERAL, "order", False),
        ("*", LITERAL, "anything", True),
        ("*", LITERAL, "*", True),
        ("ord", PREFIXED, "orders", True),
        ("orders", PREFIXED, "orders", True),  # a prefix names itself too
        ("orders-", PREFIXED, "orders", False),
        ("ord", PREFIXED, "Orders", False),
        ("*", PREFIXED, "orders", False),  # a PREFIXED "*" is a prefix, not a wildcard
        ("*", PREFIXED, "*x", True),
        ("x", PREFIXED, "orders", False),
    ],
)
def test_resource_patterns(name: str, pattern: PatternType, asked: str, expected: bool) -> None:
    assert allowed([acl(name, pattern=pattern)], name=asked) is expected


def test_resource_types_do_not_mix() -> None:
    bindings = [acl("*", Op.ALL, kind=Kind.GROUP)]
    assert allowed(bindings, name="g", kind=Kind.GROUP)
    assert not allowed(bindings, name="g", kind=Kind.TOPIC)
    # the topic has no ACL of its own type: allow.everyone.if.no.acl.found applies
    assert allowed(bindings, name="g", kind=Kind.TOPIC, allow_if_no_acl=True)


def test_many_prefixes_find_every_applicable_one() -> None:
    bindings = [acl(f"o{'r' * n}", Op.WRITE, pattern=PREFIXED) for n in range(6)]
    bindings += [acl("orders-x", Op.READ, pattern=PREFIXED), acl("ords", Op.READ, DENY)]
    assert allowed(bindings, Op.WRITE, "orrrrrr")
    assert allowed(bindings, Op.WRITE, "o")
    assert not allowed(bindings, Op.READ, "orders")
    assert allowed(bindings, Op.READ, "orders-xy")
    assert not allowed(bindings, Op.READ, "ords")


@pytest.mark.parametrize(
    ("acl_host", "client", "expected"),
    [
        ("*", "192.168.9.9", True),
        ("10.0.0.1", "10.0.0.1", True),
        ("10.0.0.1", "10.0.0.2", False),
        ("10.0.0.0/24", "10.0.0.77", True),
        ("10.0.0.0/24", "10.0.1.1", False),
        ("2001:db8::/32", "2001:db8::1", True),
        ("2001:db8::/32", "10.0.0.1", False),
        ("0:0:0:0:0:0:0:1", "::1", True),
        ("10.0.0.1", "::ffff:10.0.0.1", True),
    ],
)
def test_hosts(acl_host: str, client: str, expected: bool) -> None:
    assert allowed([acl(host=acl_host)], host=client) is expected


def test_a_deny_for_a_range_carves_out_of_an_allow() -> None:
    bindings = [acl(host="192.168.1.0/24"), acl(permission=DENY, host="192.168.1.128/25")]
    assert allowed(bindings, host="192.168.1.5")
    assert not allowed(bindings, host="192.168.1.200")
    assert not allowed(bindings, host="192.168.2.1")


@pytest.mark.parametrize(
    ("bindings", "expected"),
    [
        ([], True),
        ([acl("other")], True),  # no binding names this resource
        ([acl("orders", principal=BOB)], False),  # bob's binding names it: no default
        ([acl("*", Op.WRITE)], False),  # so does a wildcard binding
        ([acl("ord", Op.WRITE, pattern=PREFIXED)], False),  # and a prefix
        ([acl("orders", Op.READ, DENY, principal=BOB)], False),  # a DENY counts too
        ([acl("orders", Op.READ, host="10.9.9.9")], False),  # whatever its host
        ([acl("orders", kind=Kind.GROUP)], True),  # another type's binding does not
        ([acl("orders", Op.WRITE, DENY, principal=ALICE)], False),
    ],
)
def test_allow_everyone_if_no_acl_found(bindings: list[AclBinding], expected: bool) -> None:
    # a resource named by any binding at all is decided by the bindings alone
    assert allowed(bindings, allow_if_no_acl=True) is expected


# --- authorized operations --------------------------------------------------------------


def operations(
    bindings: list[AclBinding],
    name: str = "orders",
    kind: Kind = Kind.TOPIC,
    *,
    principal: str = ALICE,
    allow_if_no_acl: bool = False,
    super_users: frozenset[str] = frozenset(),
) -> frozenset[AclOperation]:
    authorizer = Authorizer(AclIndex(bindings), super_users, allow_if_no_acl)
    return authorizer.authorized_operations(principal, HOST, kind, name)


def test_authorized_operations() -> None:
    topic = SUPPORTED_OPERATIONS[Kind.TOPIC]
    assert operations([]) == frozenset()
    assert operations([], allow_if_no_acl=True) == topic
    assert operations([acl("x")], allow_if_no_acl=True) == topic
    assert operations([acl(principal=BOB)], allow_if_no_acl=True) == frozenset()
    assert operations([], super_users=frozenset({ALICE})) == topic
    assert operations([acl()]) == {Op.READ, Op.DESCRIBE}
    assert operations([acl(operation=Op.ALTER_CONFIGS)]) == {
        Op.ALTER_CONFIGS,
        Op.DESCRIBE_CONFIGS,
    }
    assert operations([acl(operation=Op.ALL)]) == topic
    assert operations([acl(operation=Op.ALL), acl(operation=Op.DELETE, permission=DENY)]) == (
        topic - {Op.DELETE}
    )
    assert operations([acl(operation=Op.ALL), acl("*", Op.ALL, DENY, principal=BOB)]) == topic
    # only what the resource type supports: IDEMPOTENT_WRITE is the cluster's
    cluster = [acl("kafka-cluster", Op.ALL, kind=Kind.CLUSTER)]
    assert operations(cluster, "kafka-cluster", Kind.CLUSTER) == SUPPORTED_OPERATIONS[Kind.CLUSTER]
    assert operations(
        [acl("t", Op.ALL, kind=Kind.TRANSACTIONAL_ID)], "t", Kind.TRANSACTIONAL_ID
    ) == {
        Op.DESCRIBE,
        Op.WRITE,
    }


# --- describe, the index, settings ------------------------------------------------------


def test_describe_lists_sorted_and_changes_make_new_indexes() -> None:
    first, second = acl("b"), acl("a", pattern=PREFIXED)
    authorizer = Authorizer(AclIndex([first, second, first]))
    assert len(authorizer.acls) == 2 and first in authorizer.acls
    assert authorizer.describe(AclBindingFilter()) == sorted([first, second])
    later = authorizer.with_changes(added=[acl("c")], removed=[first, acl("never")])
    assert set(later.acls) == {second, acl("c")}
    assert set(authorizer.acls) == {first, second}
    assert later.authorize(ALICE, HOST, Op.READ, Kind.TOPIC, "az")
    assert not later.authorize(ALICE, HOST, Op.READ, Kind.TOPIC, "b")
    assert authorizer.authorize(ALICE, HOST, Op.READ, Kind.TOPIC, "b")
    # removing and adding one binding in one change keeps it
    assert first in authorizer.with_changes(added=[first], removed=[first]).acls
    emptied = later.with_changes(removed=list(later.acls))
    assert len(emptied.acls) == 0 and emptied.describe(AclBindingFilter()) == []
    assert not emptied.authorize(ALICE, HOST, Op.READ, Kind.TOPIC, "az")


def test_describe_by_type_and_match() -> None:
    held = [acl("orders"), acl("ord", pattern=PREFIXED), acl("orders", kind=Kind.GROUP)]
    authorizer = Authorizer(AclIndex(held))
    assert authorizer.describe(AclBindingFilter(Kind.GROUP)) == [held[2]]
    assert authorizer.describe(AclBindingFilter(Kind.TOPIC, "orders-eu", PatternType.MATCH)) == [
        held[1]
    ]
    assert authorizer.describe(AclBindingFilter(Kind.USER)) == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", frozenset()),
        ("User:admin", {"User:admin"}),
        (" User:admin ; User:CN=broker,O=strom ;; ", {"User:admin", "User:CN=broker,O=strom"}),
        ("User:a;User:a", {"User:a"}),
        ("User:", {"User:"}),
    ],
)
def test_super_users_are_read_as_kafka_reads_them(text: str, expected: set[str]) -> None:
    assert parse_super_users(text) == expected


def test_a_super_user_without_a_type_is_refused() -> None:
    with pytest.raises(ValueError, match="'admin' is not a principal"):
        parse_super_users("User:root;admin")
    with pytest.raises(ConfigError, match="'admin' is not a principal") as raised:
        load_config(
            overrides=[
                "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                "super.users=User:root;admin",
            ]
        )
    assert raised.value.key == "super.users"


def test_kafka_s_authorizer_class_names_mean_strom_s() -> None:
    assert AUTHORIZER_CLASS_NAMES == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
    )
    assert is_authorizer_class(" kafka.security.authorizer.AclAuthorizer ")
    assert not is_authorizer_class("")
    assert not is_authorizer_class("com.example.MyAuthorizer")


# --- by resource type -------------------------------------------------------------------

TX = Kind.TRANSACTIONAL_ID


def tx(
    name: str,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = LITERAL,
    **given: object,
) -> AclBinding:
    return acl(name, Op.WRITE, permission, pattern=pattern, kind=TX, **given)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bindings", "expected"),
    [
        ([], False),
        ([tx("tx1")], True),
        ([tx("tx", pattern=PREFIXED)], True),
        ([tx("tx1"), tx("tx1", DENY)], False),
        ([tx("tx1"), tx("tx", DENY, PREFIXED)], False),
        ([tx("tx"), tx("tx", DENY, PREFIXED)], False),  # a prefix covers its own name
        ([tx("tx1", pattern=PREFIXED), tx("tx", DENY, PREFIXED)], False),
        ([tx("tx", pattern=PREFIXED), tx("tx", DENY, PREFIXED)], False),
        ([tx("tx", pattern=PREFIXED), tx("tx1", DENY, PREFIXED)], True),  # tx2 is left
        ([tx("tx", pattern=PREFIXED), tx("tx", DENY)], True),  # a literal covers one name
        ([tx("tx1"), tx("tx2"), tx("tx1", DENY)], True),
        ([tx("*")], True),
        ([tx("*"), tx("tx1", DENY), tx("t", DENY, PREFIXED)], True),
        ([tx("tx1"), tx("*", DENY)], False),
        ([tx("*"), tx("*", DENY)], False),
        ([tx("*", DENY, PREFIXED), tx("tx1")], True),  # a PREFIXED "*" is no wildcard
        ([tx("tx1", principal=BOB)], False),
        ([tx("tx1", principal="User:*")], True),
        ([tx("tx1"), tx("*", DENY, principal=BOB)], True),
        ([tx("tx1", host="10.0.0.0/8")], True),
        ([tx("tx1", host="192.168.0.0/16")], False),
        ([tx("tx1"), tx("tx1", DENY, host="10.0.0.1")], False),
        ([acl("tx1", Op.ALL, kind=TX)], True),
        ([acl("tx1", Op.DESCRIBE, kind=TX)], False),
        ([acl("tx1", Op.WRITE, kind=Kind.TOPIC)], False),
        ([tx("tx1"), acl("*", Op.ALL, DENY, kind=TX)], False),
        ([tx("hard", pattern=PREFIXED), tx("tx", DENY, PREFIXED)], True),
    ],
)
def test_authorize_by_resource_type(bindings: list[AclBinding], expected: bool) -> None:
    authorizer = Authorizer(AclIndex(bindings))
    assert authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TX) is expected


def test_by_resource_type_implies_no_operation() -> None:
    # READ allows DESCRIBE of that topic, yet counts for no topic in the by-type check
    authorizer = Authorizer(AclIndex([acl("orders", Op.READ)]))
    assert authorizer.authorize(ALICE, HOST, Op.DESCRIBE, Kind.TOPIC, "orders")
    assert not authorizer.authorize_by_resource_type(ALICE, HOST, Op.DESCRIBE, Kind.TOPIC)


def test_by_resource_type_asks_about_one_name_first() -> None:
    # "hardcode" has no binding: allow.everyone.if.no.acl.found allows it, whatever else
    bindings = [tx("tx1"), tx("tx", DENY, PREFIXED)]
    authorizer = Authorizer(AclIndex(bindings), allow_if_no_acl=True)
    assert authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TX)
    root = Authorizer(AclIndex([tx("*", DENY)]), super_users=frozenset({ALICE}))
    assert root.authorize_by_resource_type(ALICE, HOST, Op.WRITE, TX)


def test_idempotent_write_on_the_cluster() -> None:
    granted = acl("kafka-cluster", Op.IDEMPOTENT_WRITE, kind=Kind.CLUSTER)
    authorizer = Authorizer(AclIndex([granted]))
    assert authorizer.authorize_by_resource_type(ALICE, HOST, Op.IDEMPOTENT_WRITE, Kind.CLUSTER)
    assert not authorizer.authorize_by_resource_type(BOB, HOST, Op.IDEMPOTENT_WRITE, Kind.CLUSTER)


@pytest.mark.parametrize(
    ("operation", "kind"),
    [(Op.ANY, TX), (Op.UNKNOWN, TX), (Op.WRITE, Kind.ANY), (Op.WRITE, Kind.UNKNOWN)],
)
def test_by_resource_type_needs_a_concrete_question(operation: AclOperation, kind: Kind) -> None:
    with pytest.raises(ValueError, match="to check"):
        Authorizer().authorize_by_resource_type(ALICE, HOST, operation, kind)
