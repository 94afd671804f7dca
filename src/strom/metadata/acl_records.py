"""ACL bindings as metadata records, and back.

    binding_of(AccessControlEntryRecord) -> AclBinding
    acl_record(binding, record_id) -> AccessControlEntryRecord
    acl_id(binding) -> uuid.UUID     the id of a binding that has none of its own

Kafka's AccessControlEntryRecord names its binding by an id, which its controller draws
at random when it creates the binding; RemoveAccessControlEntryRecord names only the id.
ZooKeeper keeps bindings without ids (one znode per resource pattern holds the bindings
of that pattern), so a binding read from ZooKeeper gets `acl_id(binding)`: a version-5
UUID (SHA-1, RFC 9562) of the binding's seven fields under strom's own namespace
ACL_ID_NAMESPACE. Every broker, and every controller after a takeover, computes the
same id for the same binding, and two different bindings never share one. A controller
that gives new bindings `acl_id` too (on any store) can never hold one binding under two
ids either, which the image relies on for its common case (see image.py).

Pure: no I/O. The record's codes go through `from_code`, so a code strom does not know
becomes UNKNOWN rather than failing the replay.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from strom.metadata.records import AccessControlEntryRecord
from strom.security.acls import AclBinding, AclPermissionType, PatternType, from_code
from strom.security.operations import AclOperation, AclResourceType

__all__ = [
    "ACL_ID_NAMESPACE",
    "ResourcePattern",
    "acl_id",
    "acl_record",
    "binding_of",
]

ACL_ID_NAMESPACE = uuid.UUID("5f0c8a4e-2d7b-5c61-9a3e-7b1d04c2e9f8")
"""The namespace of `acl_id`'s version-5 UUIDs. Fixed forever: changing it changes the id
of every binding stored in ZooKeeper."""


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    """The resources a binding names (Kafka's ResourcePattern): a resource type, a name and
    how the name names resources (LITERAL or PREFIXED). ZooKeeper keeps one znode per
    pattern."""

    resource_type: AclResourceType
    name: str
    pattern_type: PatternType

    @classmethod
    def of(cls, binding: AclBinding) -> ResourcePattern:
        return cls(binding.resource_type, binding.resource_name, binding.pattern_type)


def acl_id(binding: AclBinding) -> uuid.UUID:
    """The id of `binding` wherever none was chosen for it: a version-5 UUID of its fields
    (their codes and texts, as one JSON array with non-ASCII characters escaped, so any
    text has one form) under ACL_ID_NAMESPACE."""
    fields = [
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission_type),
    ]
    return uuid.uuid5(ACL_ID_NAMESPACE, json.dumps(fields, separators=(",", ":")))


def binding_of(record: AccessControlEntryRecord) -> AclBinding:
    """The binding `record` creates."""
    return AclBinding(
        from_code(AclResourceType, record.resource_type),
        record.resource_name,
        from_code(PatternType, record.pattern_type),
        record.principal,
        record.host,
        from_code(AclOperation, record.operation),
        from_code(AclPermissionType, record.permission_type),
    )


def acl_record(binding: AclBinding, record_id: uuid.UUID | None = None) -> AccessControlEntryRecord:
    """The record creating `binding` under `record_id` (by default `acl_id(binding)`)."""
    return AccessControlEntryRecord(
        acl_id(binding) if record_id is None else record_id,
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission_type),
    )
