"""Bindings for the ACL tests, Hypothesis strategies over a small world (few names, so
prefixes and wildcards collide often), and the reference model: the rules written as a
plain scan over every binding, with nothing indexed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

from hypothesis import strategies as st

from strom.security.acls import AclBinding, AclBindingFilter, AclPermissionType, PatternType
from strom.security.operations import SUPPORTED_OPERATIONS, AclOperation, AclResourceType

Op = AclOperation
Kind = AclResourceType
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Request = tuple[str, str, AclOperation, AclResourceType, str]
"""What `authorize` is asked: principal, host, operation, resource type and name."""


def acl(
    name: str = "orders",
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    *,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = LITERAL,
    kind: AclResourceType = Kind.TOPIC,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


# --- the reference model ----------------------------------------------------------------


def _address(text: str) -> IPv4Address | IPv6Address:
    address = ip_address(text)
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def model_host(acl_host: str, client: str) -> bool:
    """Whether a binding's host covers a client at the address `client`."""
    if acl_host == "*":
        return True
    if "/" in acl_host:
        network = ip_network(acl_host, strict=False)
        return _address(client) in network
    try:
        return _address(acl_host) == _address(client)
    except ValueError:
        return acl_host == client


def model_names(binding: AclBinding, name: str) -> bool:
    """Whether `binding`'s pattern names the resource `name`."""
    if binding.pattern_type == LITERAL:
        return binding.resource_name in (name, "*")
    return binding.pattern_type == PREFIXED and name.startswith(binding.resource_name)


def model_covers(binding: AclBinding, operation: AclOperation) -> bool:
    if binding.operation in (Op.ALL, operation):
        return True
    if binding.permission_type != ALLOW:
        return False
    if operation == Op.DESCRIBE:
        return binding.operation in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER)
    return operation == Op.DESCRIBE_CONFIGS and binding.operation == Op.ALTER_CONFIGS


def model_for(binding: AclBinding, principal: str, host: str) -> bool:
    return binding.principal in (principal, "User:*") and model_host(binding.host, host)


def model_authorize(
    bindings: Iterable[AclBinding],
    super_users: frozenset[str],
    allow_if_no_acl: bool,
    request: Request,
) -> bool:
    principal, host, operation, kind, name = request
    if principal in super_users:
        return True
    on_resource = [b for b in bindings if b.resource_type == kind and model_names(b, name)]
    if not on_resource:
        return allow_if_no_acl
    applying = [
        b for b in on_resource if model_for(b, principal, host) and model_covers(b, operation)
    ]
    if any(b.permission_type == DENY for b in applying):
        return False
    return any(b.permission_type == ALLOW for b in applying)


def model_operations(
    bindings: Iterable[AclBinding],
    super_users: frozenset[str],
    allow_if_no_acl: bool,
    request: tuple[str, str, AclResourceType, str],
) -> frozenset[AclOperation]:
    principal, host, kind, name = request
    bindings = list(bindings)
    return frozenset(
        operation
        for operation in SUPPORTED_OPERATIONS[kind]
        if model_authorize(
            bindings, super_users, allow_if_no_acl, (principal, host, operation, kind, name)
        )
    )


def model_by_resource_type(
    bindings: Iterable[AclBinding],
    super_users: frozenset[str],
    allow_if_no_acl: bool,
    request: tuple[str, str, AclOperation, AclResourceType],
) -> bool:
    """Kafka's rule, read as: some ALLOW pattern names a resource that no DENY pattern
    names (a DENY LITERAL `*` names all; a DENY prefix names all a longer pattern names)."""
    principal, host, operation, kind = request
    bindings = list(bindings)
    probe = (principal, host, operation, kind, "hardcode")
    if model_authorize(bindings, super_users, allow_if_no_acl, probe):
        return True
    relevant = [
        b
        for b in bindings
        if b.resource_type == kind
        and b.operation in (operation, Op.ALL)
        and model_for(b, principal, host)
    ]
    denies = [b for b in relevant if b.permission_type == DENY]
    allows = [b for b in relevant if b.permission_type == ALLOW]
    if any(b.pattern_type == LITERAL and b.resource_name == "*" for b in denies):
        return False
    if any(b.pattern_type == LITERAL and b.resource_name == "*" for b in allows):
        return True

    def denied(allow: AclBinding) -> bool:
        for deny in denies:
            if deny.pattern_type == PREFIXED and allow.resource_name.startswith(deny.resource_name):
                return True
            if (deny.pattern_type, allow.pattern_type) == (LITERAL, LITERAL) and (
                deny.resource_name == allow.resource_name
            ):
                return True
        return False

    return any(not denied(allow) for allow in allows)


def model_filter(acl_filter: AclBindingFilter, binding: AclBinding) -> bool:
    f, b = acl_filter, binding
    if f.resource_type not in (Kind.ANY, b.resource_type):
        return False
    if f.pattern_type == PatternType.MATCH:
        name_ok = f.resource_name is None or model_names(b, f.resource_name)
    elif f.pattern_type == PatternType.ANY:
        name_ok = f.resource_name in (None, b.resource_name)
    else:
        name_ok = f.pattern_type == b.pattern_type and f.resource_name in (None, b.resource_name)
    return (
        name_ok
        and f.principal in (None, b.principal)
        and f.host in (None, b.host)
        and f.operation in (Op.ANY, b.operation)
        and f.permission_type in (AclPermissionType.ANY, b.permission_type)
    )


# --- strategies -------------------------------------------------------------------------

KINDS = (Kind.TOPIC, Kind.GROUP, Kind.TRANSACTIONAL_ID)
NAMES = st.sampled_from(("a", "ab", "abb", "b", "ba", "*", "*a", "h", "hardcode"))
"""Few names, so that prefixes, literals and the wildcard meet; "h" and "hardcode" reach
the name authorize_by_resource_type asks about first."""
ASKED_NAMES = st.sampled_from(("a", "ab", "abb", "abba", "b", "bab", "*", "*a", "hardcode", "x"))
PRINCIPALS = ("User:alice", "User:bob", "Group:alice", "User:*")
ACL_HOSTS = (
    "*",
    "10.0.0.1",
    "10.0.0.0/30",
    "10.0.0.0/8",
    "10.0.0.1/32",
    "192.168.1.7",
    "::1",
    "0:0:0:0:0:0:0:1",
    "2001:db8::/32",
    "2001:db8::5",
    "::ffff:10.0.0.1",
    "::/0",
    "0.0.0.0/0",
)
CLIENT_HOSTS = (
    "10.0.0.1",
    "10.0.0.3",
    "10.0.0.9",
    "192.168.1.7",
    "::1",
    "2001:db8::5",
    "2001:db9::1",
    "::ffff:10.0.0.1",
)
OPERATIONS = tuple(op for op in Op if op not in (Op.ANY, Op.UNKNOWN))
COMMON_OPERATIONS = (Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS)
"""Most bindings hold one of these, so that bindings meet on an operation and imply."""

bindings = st.builds(
    AclBinding,
    st.sampled_from(KINDS),
    NAMES,
    st.sampled_from((LITERAL, PREFIXED)),
    st.sampled_from(PRINCIPALS),
    st.just("*") | st.sampled_from(ACL_HOSTS),
    st.sampled_from(COMMON_OPERATIONS) | st.sampled_from(OPERATIONS),
    st.sampled_from((ALLOW, DENY)),
)
binding_sets = st.lists(bindings, max_size=12)
super_user_sets = st.frozensets(st.sampled_from(("User:alice", "User:root")), max_size=1)
requests = st.tuples(
    st.sampled_from(PRINCIPALS[:3]),
    st.sampled_from(CLIENT_HOSTS),
    st.sampled_from(COMMON_OPERATIONS[1:]) | st.sampled_from(OPERATIONS),
    st.sampled_from(KINDS),
    ASKED_NAMES,
)
filters = st.builds(
    AclBindingFilter,
    st.sampled_from((Kind.ANY, *KINDS)),
    st.none() | NAMES | ASKED_NAMES,
    st.sampled_from((PatternType.ANY, PatternType.MATCH, LITERAL, PREFIXED)),
    st.none() | st.sampled_from(PRINCIPALS),
    st.none() | st.sampled_from(ACL_HOSTS[:4]),
    st.sampled_from((Op.ANY, *OPERATIONS)),
    st.sampled_from((AclPermissionType.ANY, ALLOW, DENY)),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[AclBinding], Request]:
    """Bindings and a request that, more often than chance, is about what they name: the
    type, a name, the principal, a host and the operation of one of them."""
    held = list(draw(binding_sets))
    for _ in range(draw(st.integers(0, 3)) if held else 0):
        # a rival of one binding: the opposite permission, on an overlapping pattern
        rival = draw(st.sampled_from(held))
        held.append(
            replace(
                rival,
                permission_type=ALLOW if rival.permission_type == DENY else DENY,
                resource_name=draw(
                    st.sampled_from((rival.resource_name, rival.resource_name[:1], "*"))
                ),
                pattern_type=draw(st.sampled_from((LITERAL, PREFIXED))),
                host=draw(st.just(rival.host) | st.sampled_from(ACL_HOSTS)),
                operation=draw(st.just(rival.operation) | st.sampled_from(COMMON_OPERATIONS)),
            )
        )
    principal, host, operation, kind, name = draw(requests)
    if held and draw(st.integers(0, 3)):
        seed = draw(st.sampled_from(held))
        kind = seed.resource_type
        if draw(st.booleans()):
            name = seed.resource_name + draw(st.sampled_from(("", "", "a", "b")))
        if seed.principal != "User:*" and draw(st.integers(0, 3)):
            principal = seed.principal
        if seed.operation != Op.ALL and draw(st.integers(0, 3)):
            operation = seed.operation
        if seed.host != "*" and "/" not in seed.host and draw(st.integers(0, 3)):
            host = seed.host
    return held, (principal, host, operation, kind, name)
