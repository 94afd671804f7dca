"""strom's ACLs as values: a binding (who may or may not do what, on which resources, from
where), a filter over bindings (what DescribeAcls and DeleteAcls carry), and the checks
CreateAcls makes before it stores a binding.

Pure: no I/O. The codes are Kafka's, so the wire's numbers map straight onto these enums
(`from_code` turns a code strom does not know into UNKNOWN, as Kafka's `fromCode` does).

A binding names its resources by a pattern: LITERAL (one name, or every name when the
name is the wildcard `*`) or PREFIXED (every name that starts with it). Its host is the
wildcard `*`, one IPv4 or IPv6 address, or a CIDR range (`10.0.0.0/8`, `2001:db8::/32`,
as Kafka's KIP-1276 writes them); addresses are compared as addresses, so `::1` and
`0:0:0:0:0:0:0:1` name one host, and an IPv4-mapped IPv6 address is its IPv4 address.
A host that is none of these (a host name) is kept as text and matches a client only
by equal text: strom, like Kafka, sees a client's address, never its name.

The host parsing and the ACL rules are written here by hand: no Python library knows
Kafka's ACL model; the addresses themselves are the standard library's `ipaddress`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from kio.schema.errors import ErrorCode

from strom.security.operations import (
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
    from_code,
)

__all__ = [
    "CLUSTER_NAME",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclPermissionType",
    "AclRefusal",
    "Address",
    "HostPattern",
    "PatternType",
    "client_address",
    "from_code",
    "validate_binding",
    "validate_filter",
]

WILDCARD = "*"
"""The resource name of a LITERAL binding for every resource, and the host of every host."""
WILDCARD_PRINCIPAL = "User:*"
"""The principal of a binding for every principal (of any type, as Kafka matches it)."""
CLUSTER_NAME = "kafka-cluster"
"""The one name a CLUSTER resource has (Kafka's, so its clients and tools agree)."""

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: `principal` (`Type:name`) from `host` may (ALLOW) or may not (DENY) do
    `operation` on the resources of `resource_type` that `resource_name` names by
    `pattern_type`."""

    resource_type: AclResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Which bindings a DescribeAcls or DeleteAcls asks for; the defaults match every one.

    None (a name, principal or host) and ANY (a type, operation or permission) match any
    value; any other value matches only an equal one, so the filter host `*` matches only
    bindings for every host. The pattern type MATCH with a name matches the bindings that
    would apply to a resource of that name: its LITERAL binding, the wildcard `*` LITERAL
    binding and every PREFIXED binding whose name starts it. This is Kafka's rule.
    """

    resource_type: AclResourceType = AclResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding) and self.matches_entry(binding)

    def matches_pattern(self, binding: AclBinding) -> bool:
        """Whether the resource half (type, name, pattern type) matches."""
        wanted = self.resource_type
        if wanted != AclResourceType.ANY and wanted != binding.resource_type:
            return False
        pattern = self.pattern_type
        if pattern not in (PatternType.ANY, PatternType.MATCH, binding.pattern_type):
            return False
        name = self.resource_name
        if name is None:
            return True
        if pattern != PatternType.MATCH:
            return name == binding.resource_name
        if binding.pattern_type == PatternType.LITERAL:
            return binding.resource_name in (name, WILDCARD)
        if binding.pattern_type == PatternType.PREFIXED:
            return name.startswith(binding.resource_name)
        return False

    def matches_entry(self, binding: AclBinding) -> bool:
        """Whether the entry half (principal, host, operation, permission) matches."""
        return (
            (self.principal is None or self.principal == binding.principal)
            and (self.host is None or self.host == binding.host)
            and self.operation in (AclOperation.ANY, binding.operation)
            and self.permission_type in (AclPermissionType.ANY, binding.permission_type)
        )


# --- hosts ------------------------------------------------------------------------------


def _plain(address: Address) -> Address:
    """An IPv4-mapped IPv6 address as its IPv4 address (as Java's InetAddress has it)."""
    if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@lru_cache(maxsize=4096)
def client_address(host: str) -> Address | str:
    """A client's address as strom compares it: the address `host` writes (IPv4-mapped
    IPv6 as IPv4), or `host` itself when it writes no address."""
    try:
        return _plain(ip_address(host))
    except ValueError:
        return host


def _network(text: str) -> Network | None:
    """The CIDR range `text` writes (`address/bits`; host bits may be set), or None."""
    address, _, bits = text.partition("/")
    if not (bits.isascii() and bits.isdigit()):
        return None
    try:
        return ip_network(f"{address}/{int(bits)}", strict=False)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class HostPattern:
    """A binding's host, parsed once: the wildcard, a CIDR range, one address, or text.

    A host with a `/` that is no valid range matches no client (CreateAcls refuses it).
    """

    text: str
    network: Network | None = None
    address: Address | None = None

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        if text == WILDCARD:
            return cls(text)
        if "/" in text:
            return cls(text, network=_network(text))
        address = client_address(text)
        return cls(text, address=address if not isinstance(address, str) else None)

    @property
    def any_host(self) -> bool:
        return self.text == WILDCARD

    def matches(self, client: Address | str) -> bool:
        """Whether a client at `client` (as `client_address` gives it) is from this host."""
        if self.text == WILDCARD:
            return True
        if isinstance(client, str):
            return self.address is None and "/" not in self.text and client == self.text
        if self.network is not None:
            return client in self.network
        return client == self.address


# --- what CreateAcls, DescribeAcls and DeleteAcls refuse -------------------------------


@dataclass(frozen=True, slots=True)
class AclRefusal:
    """Why a binding or filter is refused: the error code and message the response carries."""

    error_code: ErrorCode
    message: str


def _invalid(message: str) -> AclRefusal:
    return AclRefusal(ErrorCode.invalid_request, message)


def validate_binding(binding: AclBinding) -> AclRefusal | None:
    """Why CreateAcls refuses to store `binding`, or None to store it.

    As Kafka's broker and controller do, in their order: a CLUSTER binding must name
    `kafka-cluster`; the name must not be empty; the resource type, pattern type,
    operation and permission must be concrete (not UNKNOWN, ANY or MATCH); the host must
    not be empty and, when it holds a `/`, must be a CIDR range. strom also refuses a
    principal without the `:` of `Type:name`, which Kafka's tools refuse but its broker
    stores (and then cannot match). Like Kafka, strom accepts an operation the resource
    type has no use for (READ on the cluster): such a binding is stored and never applies.
    """
    kind, name = binding.resource_type, binding.resource_name
    if kind == AclResourceType.CLUSTER and name != CLUSTER_NAME:
        return _invalid(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not name:
        return _invalid("Invalid empty resource name")
    if kind in (AclResourceType.UNKNOWN, AclResourceType.ANY):
        return _invalid(f"Invalid resourceType {kind.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return _invalid(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return _invalid(f"Invalid operation {binding.operation.name}")
    if binding.permission_type not in (AclPermissionType.DENY, AclPermissionType.ALLOW):
        return _invalid(f"Invalid permissionType {binding.permission_type.name}")
    host = binding.host
    if not host:
        return _invalid("Invalid empty host")
    if "/" in host and _network(host) is None:
        return _invalid(f"Invalid CIDR notation for host {host!r}: expected address/bits")
    if ":" not in binding.principal:
        return _invalid(
            f"Invalid principal {binding.principal!r}: expected principalType:principalName"
        )
    return None


def validate_filter(acl_filter: AclBindingFilter) -> AclRefusal | None:
    """Why DescribeAcls or DeleteAcls refuses `acl_filter` (a field is UNKNOWN), or None."""
    pattern_unknown = acl_filter.resource_type == AclResourceType.UNKNOWN or (
        acl_filter.pattern_type == PatternType.UNKNOWN
    )
    if pattern_unknown:
        return _invalid("Unknown patternFilter.")
    entry_unknown = acl_filter.operation == AclOperation.UNKNOWN or (
        acl_filter.permission_type == AclPermissionType.UNKNOWN
    )
    if entry_unknown:
        return _invalid("Unknown entryFilter.")
    return None
