"""strom's ACL authorizer: whether a principal, from a host, may do an operation on a
resource, decided from the cluster's ACL bindings as Kafka's StandardAuthorizer decides.

Pure: no I/O, no clock. The shell builds an `Authorizer` from the bindings in the metadata
image and the `super.users` and `allow.everyone.if.no.acl.found` settings, and builds a
new one when they change (a change to the bindings costs copies of dictionaries, not a
fresh index). The rules, as Kafka's:

- A super user may do everything.
- The bindings that apply to a resource are its LITERAL binding, the wildcard `*`
  LITERAL binding of its type, and every PREFIXED binding whose name starts its name.
  If there are none at all (for any principal, host or operation), the answer is
  `allow.everyone.if.no.acl.found` (false by default). Otherwise the action is allowed
  when a binding for the principal (or `User:*`), the client's host and the operation
  ALLOWs it and none DENYs it: DENY wins.
- An ALLOW of READ, WRITE, DELETE or ALTER allows DESCRIBE too, and an ALLOW of
  ALTER_CONFIGS allows DESCRIBE_CONFIGS; a DENY denies only its own operation. ALL, in
  either, is every operation.

Cost, for n bindings: `authorize` looks up the resource's literal name and the wildcard
in a dictionary, and each prefix length that PREFIXED bindings of the resource type use
(O(p) lookups for p distinct lengths, not a scan of the n bindings), then checks only the
k bindings found: O(p + k). `authorized_operations` is the same lookup, O(p + k).
`authorize_by_resource_type` scans the bindings of one resource type, as Kafka does;
`describe` scans all n.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from strom.security.acls import (
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclPermissionType,
    Address,
    HostPattern,
    PatternType,
    client_address,
)
from strom.security.operations import SUPPORTED_OPERATIONS, AclOperation, AclResourceType

__all__ = [
    "ALLOW_IF_NO_ACL_KEY",
    "AUTHORIZER_CLASS_NAMES",
    "IMPLIED_OPERATIONS",
    "PROBE_RESOURCE_NAME",
    "SUPER_USERS_KEY",
    "AclIndex",
    "Authorizer",
    "is_authorizer_class",
    "parse_super_users",
]

AUTHORIZER_CLASS_NAMES = (
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
)
"""The `authorizer.class.name` values that turn strom's authorizer on (Kafka's names, so
a Kafka broker's properties file works unchanged)."""
SUPER_USERS_KEY = "super.users"
ALLOW_IF_NO_ACL_KEY = "allow.everyone.if.no.acl.found"
PROBE_RESOURCE_NAME = "hardcode"
"""The resource name `authorize_by_resource_type` asks about first, as Kafka does: a super
user, or a resource type without ACLs under allow.everyone.if.no.acl.found, passes there."""

_Op = AclOperation
IMPLIED_OPERATIONS: Mapping[AclOperation, frozenset[AclOperation]] = MappingProxyType(
    {
        _Op.READ: frozenset({_Op.READ, _Op.DESCRIBE}),
        _Op.WRITE: frozenset({_Op.WRITE, _Op.DESCRIBE}),
        _Op.DELETE: frozenset({_Op.DELETE, _Op.DESCRIBE}),
        _Op.ALTER: frozenset({_Op.ALTER, _Op.DESCRIBE}),
        _Op.ALTER_CONFIGS: frozenset({_Op.ALTER_CONFIGS, _Op.DESCRIBE_CONFIGS}),
        _Op.ALL: frozenset(AclOperation),
    }
)
"""The operations an ALLOW binding of an operation allows, where more than itself."""


def is_authorizer_class(class_name: str) -> bool:
    """Whether `authorizer.class.name` names strom's authorizer ("" names none)."""
    return class_name.strip() in AUTHORIZER_CLASS_NAMES


def parse_super_users(text: str) -> frozenset[str]:
    """The principals of a `super.users` value, as Kafka reads it: separated by `;`,
    each trimmed, empty ones skipped; ValueError for a principal without `Type:` (the
    config names the key)."""
    users: set[str] = set()
    for part in text.split(";"):
        principal = part.strip()
        if not principal:
            continue
        if ":" not in principal:
            raise ValueError(f"{principal!r} is not a principal: write Type:name, e.g. User:admin")
        users.add(principal)
    return frozenset(users)


# --- the index --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Acl:
    """A binding with what a decision needs worked out once: its parsed host and the
    operations it covers."""

    binding: AclBinding
    host: HostPattern
    covers: frozenset[AclOperation]
    any_principal: bool
    allow: bool
    """ALLOW; anything else (only DENY is ever stored) denies, failing closed as Kafka does."""

    @classmethod
    def of(cls, binding: AclBinding) -> _Acl:
        allow = binding.permission_type == AclPermissionType.ALLOW
        operation = binding.operation
        if operation == AclOperation.ALL or allow:
            covers = IMPLIED_OPERATIONS.get(operation, frozenset({operation}))
        else:
            covers = frozenset({operation})
        return cls(
            binding,
            HostPattern.parse(binding.host),
            covers,
            binding.principal == WILDCARD_PRINCIPAL,
            allow,
        )

    def applies_to(self, principal: str, client: Address | str) -> bool:
        """Whether the binding is for `principal` at `client` (any operation)."""
        if not (self.any_principal or self.binding.principal == principal):
            return False
        return self.host.matches(client)


class AclIndex:
    """The cluster's ACL bindings, indexed for decisions: by (resource type, name) for
    LITERAL ones, by resource type and prefix for PREFIXED ones. A binding is held once.

    Immutable: `with_changes` makes a new index and leaves this one as it was. Building
    one from n bindings is O(n); a change copies the index's dictionaries (no binding is
    parsed again) and so costs far less than building anew.
    """

    __slots__ = ("_acls", "_by_type", "_literal", "_prefix_lengths", "_prefixed")

    def __init__(self, bindings: Iterable[AclBinding] = ()) -> None:
        self._acls: dict[AclBinding, _Acl] = {}
        self._by_type: dict[AclResourceType, dict[AclBinding, _Acl]] = {}
        self._literal: dict[tuple[AclResourceType, str], tuple[_Acl, ...]] = {}
        self._prefixed: dict[AclResourceType, dict[str, tuple[_Acl, ...]]] = {}
        self._prefix_lengths: dict[AclResourceType, tuple[int, ...]] = {}
        self._change(bindings, ())

    def with_changes(
        self, added: Iterable[AclBinding] = (), removed: Iterable[AclBinding] = ()
    ) -> AclIndex:
        """A new index without `removed` and then with `added` (a binding already held,
        or not held, is no change)."""
        index = AclIndex.__new__(AclIndex)
        index._acls = dict(self._acls)
        index._by_type = dict(self._by_type)
        index._literal = dict(self._literal)
        index._prefixed = dict(self._prefixed)
        index._prefix_lengths = dict(self._prefix_lengths)
        index._change(added, removed)
        return index

    def _change(self, added: Iterable[AclBinding], removed: Iterable[AclBinding]) -> None:
        touched: set[AclResourceType] = set()

        def own(kind: AclResourceType) -> None:
            """Copies a resource type's inner dictionaries before their first change:
            another index may share them."""
            if kind not in touched:
                touched.add(kind)
                self._by_type[kind] = dict(self._by_type.get(kind, {}))
                self._prefixed[kind] = dict(self._prefixed.get(kind, {}))

        for binding in removed:
            acl = self._acls.pop(binding, None)
            if acl is not None:
                own(binding.resource_type)
                self._unindex(acl)
        for binding in added:
            if binding not in self._acls:
                acl = _Acl.of(binding)
                self._acls[binding] = acl
                own(binding.resource_type)
                self._index(acl)
        for kind in touched:
            if not self._by_type[kind]:
                del self._by_type[kind]
            lengths = tuple(sorted({len(prefix) for prefix in self._prefixed[kind]}))
            if lengths:
                self._prefix_lengths[kind] = lengths
            else:
                del self._prefixed[kind]
                self._prefix_lengths.pop(kind, None)

    def _index(self, acl: _Acl) -> None:
        binding = acl.binding
        kind, name = binding.resource_type, binding.resource_name
        self._by_type[kind][binding] = acl
        if binding.pattern_type == PatternType.LITERAL:
            self._literal[kind, name] = (*self._literal.get((kind, name), ()), acl)
        elif binding.pattern_type == PatternType.PREFIXED:
            prefixed = self._prefixed[kind]
            prefixed[name] = (*prefixed.get(name, ()), acl)

    def _unindex(self, acl: _Acl) -> None:
        binding = acl.binding
        kind, name = binding.resource_type, binding.resource_name
        del self._by_type[kind][binding]
        if binding.pattern_type == PatternType.LITERAL:
            left = tuple(other for other in self._literal[kind, name] if other is not acl)
            if left:
                self._literal[kind, name] = left
            else:
                del self._literal[kind, name]
        elif binding.pattern_type == PatternType.PREFIXED:
            prefixed = self._prefixed[kind]
            left = tuple(other for other in prefixed[name] if other is not acl)
            if left:
                prefixed[name] = left
            else:
                del prefixed[name]

    def __len__(self) -> int:
        return len(self._acls)

    def __iter__(self) -> Iterator[AclBinding]:
        return iter(self._acls)

    def __contains__(self, binding: object) -> bool:
        return binding in self._acls

    def matching(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings `acl_filter` matches, sorted (what DescribeAcls lists and DeleteAcls
        deletes). O(n)."""
        kind = acl_filter.resource_type
        if kind == AclResourceType.ANY:
            held: Iterable[AclBinding] = self._acls
        else:
            held = self._by_type.get(kind, {})
        return sorted(binding for binding in held if acl_filter.matches(binding))

    def _for_resource(self, kind: AclResourceType, name: str) -> list[_Acl]:
        """The bindings that apply to the resource `name` of type `kind`, for anyone."""
        found = list(self._literal.get((kind, name), ()))
        if name != WILDCARD:
            found += self._literal.get((kind, WILDCARD), ())
        lengths = self._prefix_lengths.get(kind)
        if lengths:
            prefixed = self._prefixed[kind]
            for length in lengths:
                if length > len(name):
                    break
                found += prefixed.get(name[:length], ())
        return found

    def _of_type(self, kind: AclResourceType) -> Iterable[_Acl]:
        return self._by_type.get(kind, {}).values()


# --- the decisions ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Authorizer:
    """The bindings and the settings a decision takes. Immutable: a change of either is a
    new Authorizer (`with_changes`, or `dataclasses.replace` for the settings)."""

    acls: AclIndex = field(default_factory=AclIndex)
    super_users: frozenset[str] = frozenset()
    """Principals (`User:admin`) that may do everything: `super.users`."""
    allow_if_no_acl: bool = False
    """`allow.everyone.if.no.acl.found`: allow actions on resources no binding applies to."""

    def with_changes(
        self, added: Iterable[AclBinding] = (), removed: Iterable[AclBinding] = ()
    ) -> Authorizer:
        """This authorizer with `removed` gone and then `added` held."""
        return replace(self, acls=self.acls.with_changes(added, removed))

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: AclResourceType,
        resource_name: str,
    ) -> bool:
        """Whether `principal` (`User:alice`) at the address `host` may do `operation` on
        the resource `resource_name` of `resource_type`."""
        if principal in self.super_users:
            return True
        acls = self.acls._for_resource(resource_type, resource_name)
        if not acls:
            return self.allow_if_no_acl
        client = client_address(host)
        allowed = False
        for acl in acls:
            if operation in acl.covers and acl.applies_to(principal, client):
                if not acl.allow:
                    return False
                allowed = True
        return allowed

    def authorized_operations(
        self,
        principal: str,
        host: str,
        resource_type: AclResourceType,
        resource_name: str,
    ) -> frozenset[AclOperation]:
        """The operations of those `resource_type` supports that `authorize` allows
        `principal` at `host` on `resource_name` (the `authorized_operations` that
        Metadata, DescribeCluster and DescribeGroups report)."""
        supported = SUPPORTED_OPERATIONS.get(resource_type, frozenset())
        if principal in self.super_users:
            return supported
        acls = self.acls._for_resource(resource_type, resource_name)
        if not acls:
            return supported if self.allow_if_no_acl else frozenset()
        client = client_address(host)
        allowed: set[AclOperation] = set()
        denied: set[AclOperation] = set()
        for acl in acls:
            if acl.applies_to(principal, client):
                (allowed if acl.allow else denied).update(acl.covers)
        return frozenset((allowed - denied) & supported)

    def authorize_by_resource_type(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: AclResourceType,
    ) -> bool:
        """Whether `principal` at `host` may do `operation` on at least one resource of
        `resource_type` (the check for IDEMPOTENT_WRITE, and for "any transactional id"),
        by Kafka's rule:

        - allowed if `authorize` allows it on the resource named PROBE_RESOURCE_NAME (a
          super user; no bindings and allow.everyone.if.no.acl.found; a binding for it);
        - of the bindings of `resource_type` for the principal (or `User:*`) and host
          whose operation is `operation` itself or ALL (no implied operations here):
          a DENY of the wildcard `*` denies; an ALLOW of the wildcard allows;
        - otherwise allowed when some ALLOW survives the DENYs: a LITERAL name survives
          unless it is DENYed literally or by a PREFIXED DENY of a prefix of it; a
          PREFIXED name survives unless a PREFIXED DENY of a prefix of it (itself too)
          covers it. A LITERAL DENY never covers a PREFIXED ALLOW.

        Raises ValueError for an ANY or UNKNOWN operation or resource type.
        """
        if resource_type in (AclResourceType.ANY, AclResourceType.UNKNOWN):
            raise ValueError(f"a resource type to check, not {resource_type.name}")
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"an operation to check, not {operation.name}")
        if self.authorize(principal, host, operation, resource_type, PROBE_RESOURCE_NAME):
            return True
        client = client_address(host)
        denied_literal: set[str] = set()
        denied_prefixes: set[str] = set()
        allowed_literal: set[str] = set()
        allowed_prefixes: set[str] = set()
        wildcard_allowed = False
        for acl in self.acls._of_type(resource_type):
            binding = acl.binding
            if binding.operation not in (operation, AclOperation.ALL):
                continue
            if not acl.applies_to(principal, client):
                continue
            name, pattern = binding.resource_name, binding.pattern_type
            if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
                continue
            literal = pattern == PatternType.LITERAL
            if binding.permission_type == AclPermissionType.DENY:
                if literal and name == WILDCARD:
                    return False
                (denied_literal if literal else denied_prefixes).add(name)
            elif binding.permission_type == AclPermissionType.ALLOW:
                if literal and name == WILDCARD:
                    wildcard_allowed = True
                else:
                    (allowed_literal if literal else allowed_prefixes).add(name)
        if wildcard_allowed:
            return True
        lengths = sorted({len(prefix) for prefix in denied_prefixes})

        def covered(name: str) -> bool:
            """Whether a PREFIXED DENY covers every resource `name` starts."""
            return any(name[:length] in denied_prefixes for length in lengths if length)

        return any(
            name not in denied_literal and not covered(name) for name in allowed_literal
        ) or any(not covered(name) for name in allowed_prefixes)

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings `acl_filter` matches, sorted: what DescribeAcls lists and
        DeleteAcls deletes."""
        return self.acls.matching(acl_filter)
