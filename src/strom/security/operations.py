"""Kafka's ACL operations and resource types, and the operations a principal may perform
on a resource, as the `authorized_operations` bit fields of Metadata, DescribeCluster and
DescribeGroups report them.

Pure. Without an authorizer Kafka reports every operation a resource type supports (its
AclEntry.supportedOperations), and so does strom; an authorizer will narrow these sets.
A client that did not ask for the field gets OMITTED (the schema's default, INT32_MIN).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import TypeVar

__all__ = [
    "OMITTED",
    "SUPPORTED_OPERATIONS",
    "AclOperation",
    "AclResourceType",
    "authorized_operations",
    "operations_field",
]

OMITTED = -(2**31)


class AclOperation(IntEnum):
    """Kafka's AclOperation codes (the bit each sets in an operations field)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclResourceType(IntEnum):
    """Kafka's ResourceType codes, as ACL requests carry them."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    """Kafka's PatternType codes: how a binding's resource name names resources. ANY and
    MATCH exist only in filters."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    """Kafka's AclPermissionType codes. ANY exists only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


_Code = TypeVar("_Code", PatternType, AclPermissionType, AclOperation, AclResourceType)


def from_code(kind: type[_Code], code: int) -> _Code:
    """The member of `kind` with `code`, or its UNKNOWN (code 0) for a code strom does not
    know: a newer client's value is refused as unknown rather than failing the request."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


_Op = AclOperation
SUPPORTED_OPERATIONS: Mapping[AclResourceType, frozenset[AclOperation]] = MappingProxyType(
    {
        AclResourceType.TOPIC: frozenset(
            {
                _Op.READ,
                _Op.WRITE,
                _Op.CREATE,
                _Op.DESCRIBE,
                _Op.DELETE,
                _Op.ALTER,
                _Op.DESCRIBE_CONFIGS,
                _Op.ALTER_CONFIGS,
            }
        ),
        AclResourceType.GROUP: frozenset(
            {_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
        ),
        AclResourceType.CLUSTER: frozenset(
            {
                _Op.CREATE,
                _Op.CLUSTER_ACTION,
                _Op.DESCRIBE_CONFIGS,
                _Op.ALTER_CONFIGS,
                _Op.IDEMPOTENT_WRITE,
                _Op.ALTER,
                _Op.DESCRIBE,
            }
        ),
        AclResourceType.TRANSACTIONAL_ID: frozenset({_Op.DESCRIBE, _Op.WRITE}),
        AclResourceType.DELEGATION_TOKEN: frozenset({_Op.DESCRIBE}),
        AclResourceType.USER: frozenset({_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS}),
    }
)


def operations_field(operations: Iterable[AclOperation]) -> int:
    """The 32-bit field with the bit of each operation set."""
    return sum(1 << operation for operation in set(operations))


def authorized_operations(resource_type: AclResourceType, *, asked: bool) -> int:
    """The `authorized_operations` a response carries for a resource of `resource_type`:
    every supported operation (no authorizer yet), or OMITTED when the client did not ask."""
    return operations_field(SUPPORTED_OPERATIONS[resource_type]) if asked else OMITTED
