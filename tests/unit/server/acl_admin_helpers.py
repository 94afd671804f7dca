"""The ACL tests of the admin, config and cluster handlers (test_acl_admin.py,
test_acl_cluster_admin.py, test_acl_partition_reads.py): bindings for one principal,
an authorizer of them alone (no super users, nothing allowed where no ACL is found), a
handler context that asks it, and requests sent by that principal."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import strom.config  # noqa: F401 (first: strom.security.authorizer and it import each other)
from strom.protocol.codec import Request
from strom.security.acls import CLUSTER_NAME, AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType

AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"""The setting that turns a node's ACL checks on."""
Op = AclOperation
Kind = AclResourceType
ALICE = "User:alice"
HOST = "10.0.0.1"
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED

C = TypeVar("C")


def acl(
    operation: AclOperation,
    name: str,
    kind: AclResourceType = Kind.TOPIC,
    *,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = LITERAL,
) -> AclBinding:
    """A binding for ALICE from any host."""
    return AclBinding(kind, name, pattern, ALICE, "*", operation, permission)


def cluster_acl(operation: AclOperation, **kwargs: Any) -> AclBinding:
    return acl(operation, CLUSTER_NAME, Kind.CLUSTER, **kwargs)


def authorizer(*bindings: AclBinding) -> Authorizer:
    return Authorizer(AclIndex(bindings), super_users=frozenset(), allow_if_no_acl=False)


def guarded(context: C, *bindings: AclBinding) -> C:
    """`context` (any handler context with an `authorizer` port) deciding by `bindings`."""
    decisions = authorizer(*bindings)
    return dataclasses.replace(context, authorizer=lambda: decisions)


def by_alice(request: Request, *, listener: str = "PLAINTEXT") -> Request:
    """`request` as ALICE sends it from HOST on a connection to `listener`."""
    return dataclasses.replace(request, principal=ALICE, client_host=HOST, listener=listener)
