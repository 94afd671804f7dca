"""DescribeUserScramCredentials and AlterUserScramCredentials responses."""

from __future__ import annotations

from typing import TypedDict

from kio.schema.errors import ErrorCode


class CredentialInfo(TypedDict):
    mechanism: int
    """Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512."""
    iterations: int


class DescribeUserScramCredentialsResult(TypedDict):
    user: str
    error_code: ErrorCode
    error_message: str | None
    credential_infos: list[CredentialInfo]


class DescribeUserScramCredentialsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    error_message: str | None
    results: list[DescribeUserScramCredentialsResult]


class AlterUserScramCredentialsResult(TypedDict):
    user: str
    error_code: ErrorCode
    error_message: str | None


class AlterUserScramCredentialsResponse(TypedDict):
    throttle_time: int
    results: list[AlterUserScramCredentialsResult]
