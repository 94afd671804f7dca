"""What a request's principal may do: the authorizer's answers for one request, from the
principal and client address it carries. Without an authorizer (authorizer.class.name
unset) everything is allowed, as in Kafka.

Handlers ask `Access.of(context.authorizer(), request)` once per request, then
`allows(...)` per resource. The decisions are strom.security.authorizer's.
"""

from __future__ import annotations

from dataclasses import dataclass

from strom.protocol.codec import Request
from strom.security.acls import CLUSTER_NAME
from strom.security.authorizer import Authorizer
from strom.security.operations import SUPPORTED_OPERATIONS, AclOperation, AclResourceType

__all__ = ["Access"]


@dataclass(frozen=True, slots=True)
class Access:
    authorizer: Authorizer | None
    principal: str
    host: str

    @classmethod
    def of(cls, authorizer: Authorizer | None, request: Request) -> Access:
        # The request carries the address as Java writes it ("/10.0.0.7"), as groups
        # report it; ACL hosts name the address alone. IPv6 scopes are left out too.
        host = request.client_host.removeprefix("/").partition("%")[0]
        return cls(authorizer, request.principal, host)

    @property
    def enforced(self) -> bool:
        return self.authorizer is not None

    def allows(self, operation: AclOperation, kind: AclResourceType, name: str) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize(self.principal, self.host, operation, kind, name)

    def allows_cluster(self, operation: AclOperation) -> bool:
        return self.allows(operation, AclResourceType.CLUSTER, CLUSTER_NAME)

    def allows_any(self, operation: AclOperation, kind: AclResourceType) -> bool:
        """Whether some resource of `kind` may be acted on (Kafka's authorizeByResourceType)."""
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(
            self.principal, self.host, operation, kind
        )

    def operations(self, kind: AclResourceType, name: str) -> frozenset[AclOperation]:
        """The operations the principal may perform on the resource (authorized_operations)."""
        if self.authorizer is None:
            return SUPPORTED_OPERATIONS[kind]
        return self.authorizer.authorized_operations(self.principal, self.host, kind, name)
