"""CreateAcls, DescribeAcls and DeleteAcls. Without an authorizer (authorizer.class.name
unset) each answers SECURITY_DISABLED, as Kafka does. DescribeAcls is answered by any
broker from its image (DESCRIBE on the cluster); CreateAcls and DeleteAcls need ALTER on
the cluster, checked where the client sent them, and are decided by the active
controller (metadata/acl_changes.py), forwarded there like the other admin APIs.
"""

from __future__ import annotations

import logging
from itertools import groupby
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata import acl_changes
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.acls import (
    AclCreationResult,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsResponse,
    DescribeAclsResource,
    DescribeAclsResponse,
)
from strom.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclPermissionType,
    PatternType,
    from_code,
    validate_filter,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import not_authorized

log = logging.getLogger(__name__)

NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_TO_DESCRIBE = "No Authorizer is configured on the broker"
"""Kafka's texts: DescribeAcls says which node has none; CreateAcls and DeleteAcls do not."""


def _refusal(context: AdminContext, request: Request, operation: AclOperation) -> ErrorCode:
    """SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without
    `operation` on the cluster, NONE otherwise."""
    authorizer = context.authorizer()
    if authorizer is None:
        return ErrorCode.security_disabled
    if not Access.of(authorizer, request).allows_cluster(operation):
        return ErrorCode.cluster_authorization_failed
    return ErrorCode.none


def _message(code: ErrorCode, request: Request) -> str:
    return NO_AUTHORIZER if code == ErrorCode.security_disabled else not_authorized(request)


# --- DescribeAcls ---------------------------------------------------------------------


async def handle_describe_acls(context: AdminContext, request: Request) -> Any:
    code = _refusal(context, request, AclOperation.DESCRIBE)
    if code == ErrorCode.security_disabled:
        return _describe_response(request, code, NO_AUTHORIZER_TO_DESCRIBE, [])
    if code != ErrorCode.none:
        return _describe_response(request, code, _message(code, request), [])
    acl_filter = _filter(request.body)
    refusal = validate_filter(acl_filter)
    if refusal is not None:
        return _describe_response(request, refusal.error_code, refusal.message, [])
    bindings = context.metadata.image.acl_index.matching(acl_filter)
    return _describe_response(request, ErrorCode.none, None, _resources(bindings))


def _resources(bindings: list[AclBinding]) -> list[DescribeAclsResource]:
    def pattern(binding: AclBinding) -> tuple[int, str, int]:
        return (binding.resource_type, binding.resource_name, binding.pattern_type)

    return [
        {
            "resource_type": kind,
            "resource_name": name,
            "pattern_type": pattern_type,
            "acls": [
                {
                    "principal": b.principal,
                    "host": b.host,
                    "operation": b.operation,
                    "permission_type": b.permission_type,
                }
                for b in same
            ],
        }
        for (kind, name, pattern_type), same in groupby(sorted(bindings, key=pattern), pattern)
    ]


def _describe_response(
    request: Request,
    code: ErrorCode,
    message: str | None,
    resources: list[DescribeAclsResource],
) -> Any:
    response: DescribeAclsResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "resources": resources,
    }
    return build_response(ApiKey.DESCRIBE_ACLS, request.api_version, response)


def _filter(body: Any) -> AclBindingFilter:
    return AclBindingFilter(
        from_code(AclResourceType, int(body.resource_type_filter)),
        body.resource_name_filter,
        from_code(PatternType, int(body.pattern_type_filter)),
        body.principal_filter,
        body.host_filter,
        from_code(AclOperation, int(body.operation)),
        from_code(AclPermissionType, int(body.permission_type)),
    )


# --- CreateAcls -------------------------------------------------------------------------


async def handle_create_acls(context: AdminContext, request: Request) -> Any:
    code = _refusal(context, request, AclOperation.ALTER)
    if code != ErrorCode.none:
        return _create_error(request, code, _message(code, request))
    return await at_controller(context, request, _create_here, _create_error)


async def controller_create_acls(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _create_here, _create_error)


def _create_error(request: Request, code: ErrorCode, message: str | None) -> Any:
    results: list[AclCreationResult] = [
        {"error_code": code, "error_message": message} for _ in request.body.creations
    ]
    response: CreateAclsResponse = {"throttle_time": 0, "results": results}
    return build_response(ApiKey.CREATE_ACLS, request.api_version, response)


async def _create_here(context: AdminContext, request: Request) -> Any:
    bindings = [
        AclBinding(
            from_code(AclResourceType, int(c.resource_type)),
            c.resource_name,
            from_code(PatternType, int(c.resource_pattern_type)),
            c.principal,
            c.host,
            from_code(AclOperation, int(c.operation)),
            from_code(AclPermissionType, int(c.permission_type)),
        )
        for c in request.body.creations
    ]
    znode_names = context.config().zookeeper is not None
    try:
        refusals = await context.active_controller().decide(
            lambda image: acl_changes.create_acls(image, bindings, znode_names=znode_names)
        )
    except acl_changes.TooManyAclRecords as exc:
        return _create_error(request, ErrorCode.invalid_request, str(exc))
    results: list[AclCreationResult] = []
    for binding, refusal in zip(bindings, refusals, strict=True):
        if refusal is None:
            log.info("[node %d] ACL created: %s", context.node_id, binding)
            results.append({"error_code": ErrorCode.none, "error_message": None})
        else:
            results.append({"error_code": refusal.error_code, "error_message": refusal.message})
    response: CreateAclsResponse = {"throttle_time": 0, "results": results}
    return build_response(ApiKey.CREATE_ACLS, request.api_version, response)


# --- DeleteAcls -------------------------------------------------------------------------


async def handle_delete_acls(context: AdminContext, request: Request) -> Any:
    code = _refusal(context, request, AclOperation.ALTER)
    if code != ErrorCode.none:
        return _delete_error(request, code, _message(code, request))
    return await at_controller(context, request, _delete_here, _delete_error)


async def controller_delete_acls(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _delete_here, _delete_error)


def _delete_error(request: Request, code: ErrorCode, message: str | None) -> Any:
    results: list[DeleteAclsFilterResult] = [
        {"error_code": code, "error_message": message, "matching_acls": []}
        for _ in request.body.filters
    ]
    response: DeleteAclsResponse = {"throttle_time": 0, "filter_results": results}
    return build_response(ApiKey.DELETE_ACLS, request.api_version, response)


async def _delete_here(context: AdminContext, request: Request) -> Any:
    filters = [_filter(f) for f in request.body.filters]
    try:
        deletions = await context.active_controller().decide(
            lambda image: acl_changes.delete_acls(image, filters)
        )
    except acl_changes.TooManyAclRecords as exc:
        return _delete_error(request, ErrorCode.invalid_request, str(exc))
    results: list[DeleteAclsFilterResult] = []
    for deletion in deletions:
        if deletion.refusal is not None:
            refusal = deletion.refusal
            results.append(
                {
                    "error_code": refusal.error_code,
                    "error_message": refusal.message,
                    "matching_acls": [],
                }
            )
            continue
        for binding in deletion.deleted:
            log.info("[node %d] ACL deleted: %s", context.node_id, binding)
        results.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [
                    {
                        "error_code": ErrorCode.none,
                        "error_message": None,
                        "resource_type": b.resource_type,
                        "resource_name": b.resource_name,
                        "pattern_type": b.pattern_type,
                        "principal": b.principal,
                        "host": b.host,
                        "operation": b.operation,
                        "permission_type": b.permission_type,
                    }
                    for b in deletion.deleted
                ],
            }
        )
    response: DeleteAclsResponse = {"throttle_time": 0, "filter_results": results}
    return build_response(ApiKey.DELETE_ACLS, request.api_version, response)
