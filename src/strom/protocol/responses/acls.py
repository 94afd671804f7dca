"""CreateAcls, DescribeAcls and DeleteAcls responses."""

from __future__ import annotations

from typing import TypedDict

from kio.schema.errors import ErrorCode


class AclCreationResult(TypedDict):
    error_code: ErrorCode
    error_message: str | None


class CreateAclsResponse(TypedDict):
    throttle_time: int
    results: list[AclCreationResult]


class AclDescription(TypedDict):
    principal: str
    host: str
    operation: int
    permission_type: int


class DescribeAclsResource(TypedDict):
    resource_type: int
    resource_name: str
    pattern_type: int
    acls: list[AclDescription]


class DescribeAclsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    resources: list[DescribeAclsResource]


class DeleteAclsMatchingAcl(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


class DeleteAclsFilterResult(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    matching_acls: list[DeleteAclsMatchingAcl]


class DeleteAclsResponse(TypedDict):
    throttle_time: int
    filter_results: list[DeleteAclsFilterResult]
