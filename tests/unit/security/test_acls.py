"""ACLs as values: the codes, hosts, filters (DescribeAcls, DeleteAcls) and what CreateAcls
refuses; filter matching is checked against a brute-force model with Hypothesis."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address

import pytest
from acl_helpers import (
    ALLOW,
    DENY,
    LITERAL,
    PREFIXED,
    Kind,
    Op,
    acl,
    binding_sets,
    bindings,
    filters,
    model_filter,
)
from hypothesis import given, settings
from kio.schema.errors import ErrorCode

from strom.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclPermissionType,
    AclRefusal,
    HostPattern,
    PatternType,
    client_address,
    from_code,
    validate_binding,
    validate_filter,
)
from strom.security.authorizer import AclIndex

MATCH, ANY_PATTERN = PatternType.MATCH, PatternType.ANY


def test_the_codes_are_kafka_s() -> None:
    assert [(p.name, int(p)) for p in PatternType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("MATCH", 2),
        ("LITERAL", 3),
        ("PREFIXED", 4),
    ]
    assert [(p.name, int(p)) for p in AclPermissionType] == [
        ("UNKNOWN", 0),
        ("ANY", 1),
        ("DENY", 2),
        ("ALLOW", 3),
    ]


@pytest.mark.parametrize(
    ("kind", "code", "expected"),
    [
        (PatternType, 4, PatternType.PREFIXED),
        (PatternType, 9, PatternType.UNKNOWN),
        (AclPermissionType, 3, AclPermissionType.ALLOW),
        (AclPermissionType, -1, AclPermissionType.UNKNOWN),
        (Op, 12, Op.IDEMPOTENT_WRITE),
        (Op, 99, Op.UNKNOWN),
        (Kind, 5, Kind.TRANSACTIONAL_ID),
        (Kind, 8, Kind.UNKNOWN),
    ],
)
def test_a_code_strom_does_not_know_is_unknown(kind: type, code: int, expected: object) -> None:
    assert from_code(kind, code) is expected


# --- hosts ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10.0.0.1", IPv4Address("10.0.0.1")),
        ("::1", IPv6Address("::1")),
        ("0:0:0:0:0:0:0:1", IPv6Address("::1")),
        ("::ffff:10.0.0.1", IPv4Address("10.0.0.1")),  # as Java's InetAddress has it
        ("localhost", "localhost"),
        ("", ""),
    ],
)
def test_a_client_address_is_read_once_as_an_address(text: str, expected: object) -> None:
    assert client_address(text) == expected


@pytest.mark.parametrize(
    ("acl_host", "client", "matches"),
    [
        ("*", "10.0.0.1", True),
        ("*", "localhost", True),
        ("10.0.0.1", "10.0.0.1", True),
        ("10.0.0.1", "10.0.0.2", False),
        ("0:0:0:0:0:0:0:1", "::1", True),  # Java writes IPv6 in full; the same address
        ("::1", "0:0:0:0:0:0:0:1", True),
        ("10.0.0.1", "::ffff:10.0.0.1", True),  # a dual-stack socket's IPv4 client
        ("::ffff:10.0.0.1", "10.0.0.1", True),
        ("10.0.0.0/8", "10.255.1.2", True),
        ("10.0.0.0/8", "11.0.0.1", False),
        ("10.0.0.0/30", "10.0.0.3", True),
        ("10.0.0.0/30", "10.0.0.4", False),
        ("10.1.2.3/8", "10.9.9.9", True),  # host bits set: the range all the same
        ("0.0.0.0/0", "192.168.1.1", True),
        ("0.0.0.0/0", "::1", False),  # an IPv4 range holds no IPv6 address
        ("::/0", "10.0.0.1", False),
        ("10.0.0.0/8", "::ffff:10.0.0.1", True),
        ("2001:db8::/32", "2001:db8:ffff::1", True),
        ("2001:db8::/32", "2001:db9::1", False),
        ("10.0.0.0/33", "10.0.0.1", False),  # no range: matches no one
        ("10.0.0.0/33", "10.0.0.0/33", False),
        ("broker.example", "broker.example", True),  # text only ever equals text
        ("broker.example", "10.0.0.1", False),
        ("10.0.0.1", "broker.example", False),
        ("10.0.0.0/8", "broker.example", False),
    ],
)
def test_host_patterns(acl_host: str, client: str, matches: bool) -> None:
    assert HostPattern.parse(acl_host).matches(client_address(client)) is matches


# --- filters ----------------------------------------------------------------------------

TOPIC_ORDERS = acl("orders")
TOPIC_WILDCARD = acl("*")
TOPIC_ORD_PREFIX = acl("ord", pattern=PREFIXED)
TOPIC_ORDERS_PREFIX = acl("orders", pattern=PREFIXED)
TOPIC_OTHER = acl("other")
GROUP_ORDERS = acl("orders", kind=Kind.GROUP)
ALL_BINDINGS = (
    TOPIC_ORDERS,
    TOPIC_WILDCARD,
    TOPIC_ORD_PREFIX,
    TOPIC_ORDERS_PREFIX,
    TOPIC_OTHER,
    GROUP_ORDERS,
)


@pytest.mark.parametrize(
    ("acl_filter", "expected"),
    [
        (AclBindingFilter(), set(ALL_BINDINGS)),
        (AclBindingFilter(Kind.GROUP), {GROUP_ORDERS}),
        (AclBindingFilter(Kind.TOPIC, "orders"), {TOPIC_ORDERS, TOPIC_ORDERS_PREFIX}),
        (AclBindingFilter(Kind.TOPIC, "orders", LITERAL), {TOPIC_ORDERS}),
        (AclBindingFilter(Kind.TOPIC, "orders", PREFIXED), {TOPIC_ORDERS_PREFIX}),
        (AclBindingFilter(Kind.TOPIC, None, PREFIXED), {TOPIC_ORD_PREFIX, TOPIC_ORDERS_PREFIX}),
        # MATCH: every binding that applies to a topic named "orders"
        (
            AclBindingFilter(Kind.TOPIC, "orders", MATCH),
            {TOPIC_ORDERS, TOPIC_WILDCARD, TOPIC_ORD_PREFIX, TOPIC_ORDERS_PREFIX},
        ),
        (AclBindingFilter(Kind.TOPIC, "ord", MATCH), {TOPIC_WILDCARD, TOPIC_ORD_PREFIX}),
        (AclBindingFilter(Kind.ANY, None, MATCH), set(ALL_BINDINGS)),
        # a filter's "*" is a name like any other: only the wildcard binding has it
        (AclBindingFilter(Kind.TOPIC, "*", LITERAL), {TOPIC_WILDCARD}),
        (AclBindingFilter(Kind.TOPIC, "*", ANY_PATTERN), {TOPIC_WILDCARD}),
        (AclBindingFilter(Kind.ANY, "orders", MATCH), set(ALL_BINDINGS) - {TOPIC_OTHER}),
        (AclBindingFilter(pattern_type=PatternType.UNKNOWN), set()),
    ],
)
def test_resource_filters(acl_filter: AclBindingFilter, expected: set[AclBinding]) -> None:
    assert {b for b in ALL_BINDINGS if acl_filter.matches(b)} == expected


def test_entry_filters() -> None:
    held = acl("t", Op.WRITE, DENY, principal="User:bob", host="10.0.0.0/8")
    assert AclBindingFilter(principal="User:bob", host="10.0.0.0/8").matches(held)
    assert not AclBindingFilter(principal="User:*").matches(held)  # no wildcard in filters
    assert not AclBindingFilter(host="*").matches(held)
    assert not AclBindingFilter(host="10.0.0.1").matches(held)  # no range either
    assert AclBindingFilter(operation=Op.WRITE, permission_type=DENY).matches(held)
    assert not AclBindingFilter(operation=Op.ALL).matches(held)
    assert not AclBindingFilter(permission_type=ALLOW).matches(held)


@settings(max_examples=400, deadline=None)
@given(binding=bindings, acl_filter=filters)
def test_filter_matching_agrees_with_the_model(
    binding: AclBinding, acl_filter: AclBindingFilter
) -> None:
    assert acl_filter.matches(binding) is model_filter(acl_filter, binding)


@settings(max_examples=300, deadline=None)
@given(held=binding_sets, acl_filter=filters)
def test_describe_then_delete_round_trip(
    held: list[AclBinding], acl_filter: AclBindingFilter
) -> None:
    index = AclIndex(held)
    described = index.matching(acl_filter)
    assert described == sorted({b for b in held if model_filter(acl_filter, b)})
    left = index.with_changes(removed=described)
    assert set(left) == set(held) - set(described)
    assert left.matching(acl_filter) == []
    assert index.matching(acl_filter) == described  # the old index is as it was


@settings(max_examples=200, deadline=None)
@given(binding=bindings, others=binding_sets)
def test_a_filter_of_every_field_finds_exactly_its_binding(
    binding: AclBinding, others: list[AclBinding]
) -> None:
    exact = AclBindingFilter(
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )
    assert AclIndex([*others, binding, binding]).matching(exact) == [binding]


# --- what CreateAcls refuses ------------------------------------------------------------

GOOD = acl("orders", host="10.0.0.0/24")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"resource_type": Kind.CLUSTER}, "The only valid name for the CLUSTER resource is"),
        ({"resource_name": ""}, "Invalid empty resource name"),
        ({"resource_type": Kind.ANY}, "Invalid resourceType ANY"),
        ({"resource_type": Kind.UNKNOWN}, "Invalid resourceType UNKNOWN"),
        ({"pattern_type": PatternType.MATCH}, "Invalid patternType MATCH"),
        ({"pattern_type": PatternType.ANY}, "Invalid patternType ANY"),
        ({"pattern_type": PatternType.UNKNOWN}, "Invalid patternType UNKNOWN"),
        ({"operation": Op.ANY}, "Invalid operation ANY"),
        ({"operation": Op.UNKNOWN}, "Invalid operation UNKNOWN"),
        ({"permission_type": AclPermissionType.ANY}, "Invalid permissionType ANY"),
        ({"permission_type": AclPermissionType.UNKNOWN}, "Invalid permissionType UNKNOWN"),
        ({"host": ""}, "Invalid empty host"),
        ({"host": "10.0.0.0/33"}, "Invalid CIDR notation"),
        ({"host": "2001:db8::/129"}, "Invalid CIDR notation"),
        ({"host": "10.0.0.0/255.0.0.0"}, "Invalid CIDR notation"),  # bits, not a mask
        ({"host": "example.com/test"}, "Invalid CIDR notation"),
        ({"principal": "alice"}, "Invalid principal 'alice'"),
        ({"principal": ""}, "Invalid principal ''"),
    ],
)
def test_create_acls_refuses(changes: dict[str, object], message: str) -> None:
    fields = {
        "resource_type": GOOD.resource_type,
        "resource_name": GOOD.resource_name,
        "pattern_type": GOOD.pattern_type,
        "principal": GOOD.principal,
        "host": GOOD.host,
        "operation": GOOD.operation,
        "permission_type": GOOD.permission_type,
        **changes,
    }
    refusal = validate_binding(AclBinding(**fields))  # type: ignore[arg-type]
    assert isinstance(refusal, AclRefusal)
    assert refusal.error_code == ErrorCode.invalid_request
    assert refusal.message.startswith(message), refusal.message


def test_kafka_s_order_of_checks() -> None:
    # the broker's cluster-name check comes before the controller's type checks
    odd = AclBinding(Kind.CLUSTER, "x", PatternType.ANY, "alice", "", Op.ANY, DENY)
    assert validate_binding(odd) == AclRefusal(
        ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is kafka-cluster"
    )


@pytest.mark.parametrize(
    "binding",
    [
        GOOD,
        acl("kafka-cluster", Op.IDEMPOTENT_WRITE, kind=Kind.CLUSTER),
        acl("*", Op.ALL, DENY, principal="User:*"),
        acl("tx-", Op.WRITE, pattern=PREFIXED, kind=Kind.TRANSACTIONAL_ID),
        acl("orders", host="2001:db8::/32"),
        acl("orders", host="10.1.2.3/8"),  # host bits set, as Kafka's range parser takes
        acl("orders", host="0:0:0:0:0:0:0:1"),
        acl("orders", host="broker.example"),  # stored as Kafka stores it; matches no one
        acl("orders", principal="User:"),  # Type:name with an empty name parses in Kafka
        acl("kafka-cluster", Op.READ, kind=Kind.CLUSTER),  # no use, but Kafka stores it
    ],
)
def test_create_acls_stores(binding: AclBinding) -> None:
    assert validate_binding(binding) is None


@pytest.mark.parametrize(
    ("acl_filter", "message"),
    [
        (AclBindingFilter(Kind.UNKNOWN), "Unknown patternFilter."),
        (AclBindingFilter(pattern_type=PatternType.UNKNOWN), "Unknown patternFilter."),
        (AclBindingFilter(operation=Op.UNKNOWN), "Unknown entryFilter."),
        (AclBindingFilter(permission_type=AclPermissionType.UNKNOWN), "Unknown entryFilter."),
    ],
)
def test_filters_with_unknown_fields_are_refused(
    acl_filter: AclBindingFilter, message: str
) -> None:
    assert validate_filter(acl_filter) == AclRefusal(ErrorCode.invalid_request, message)


def test_filters_of_any_and_match_are_fine() -> None:
    assert validate_filter(AclBindingFilter()) is None
    assert validate_filter(AclBindingFilter(Kind.TOPIC, "t", MATCH, "User:a", "*")) is None
