"""DescribeClientQuotas and AlterClientQuotas responses."""

from __future__ import annotations

from typing import TypedDict

from kio.schema.errors import ErrorCode


class QuotaEntityData(TypedDict):
    entity_type: str
    """`user`, `client-id` or `ip`."""
    entity_name: str | None
    """None: the type's default entity."""


class QuotaValueData(TypedDict):
    key: str
    value: float


class DescribeClientQuotasEntry(TypedDict):
    entity: list[QuotaEntityData]
    values: list[QuotaValueData]


class DescribeClientQuotasResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    entries: list[DescribeClientQuotasEntry] | None
    """None when the request is refused."""


class AlterClientQuotasEntry(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    entity: list[QuotaEntityData]


class AlterClientQuotasResponse(TypedDict):
    throttle_time: int
    entries: list[AlterClientQuotasEntry]
