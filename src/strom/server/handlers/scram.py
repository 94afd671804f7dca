"""DescribeUserScramCredentials, answered by any broker from its metadata image, and
AlterUserScramCredentials, decided by the active controller wherever a client sent it
(see forward.py); the decisions are metadata/scram_users.py's.

ACLs, as Kafka checks them: DescribeUserScramCredentials needs DESCRIBE on the cluster
(refused: CLUSTER_AUTHORIZATION_FAILED at the top, no message, and on one result per
user asked for, its name left empty); AlterUserScramCredentials needs ALTER on the
cluster, checked on the broker the client reached before the request goes on (refused:
one result per user named, sorted, each CLUSTER_AUTHORIZATION_FAILED with "Request … is
not authorized.").
"""

from __future__ import annotations

import logging
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata import scram_users
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.scram import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import not_authorized

log = logging.getLogger(__name__)


async def handle_describe_user_scram_credentials(context: AdminContext, request: Request) -> Any:
    if not Access.of(context.authorizer(), request).allows_cluster(AclOperation.DESCRIBE):
        return _describe_refused(request)
    users = request.body.users
    names = None if users is None else [str(user.name) for user in users]
    described = scram_users.describe_scram_credentials(context.metadata.image, names)
    results: list[DescribeUserScramCredentialsResult] = [
        {
            "user": user.user,
            "error_code": user.error_code,
            "error_message": user.error_message,
            "credential_infos": [
                {"mechanism": mechanism, "iterations": iterations}
                for mechanism, iterations in user.credentials
            ],
        }
        for user in described
    ]
    response: DescribeUserScramCredentialsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": results,
    }
    return build_response(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version, response)


def _describe_refused(request: Request) -> Any:
    code = ErrorCode.cluster_authorization_failed
    results: list[DescribeUserScramCredentialsResult] = [
        {"user": "", "error_code": code, "error_message": None, "credential_infos": []}
        for _ in request.body.users or ()  # "every user" (null): no results
    ]
    response: DescribeUserScramCredentialsResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": None,
        "results": results,
    }
    return build_response(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request.api_version, response)


async def handle_alter_user_scram_credentials(context: AdminContext, request: Request) -> Any:
    if not Access.of(context.authorizer(), request).allows_cluster(AclOperation.ALTER):
        body = request.body
        names = sorted({d.name for d in body.deletions} | {u.name for u in body.upsertions})
        code, message = ErrorCode.cluster_authorization_failed, not_authorized(request)
        return _alter_response(
            request,
            [{"user": name, "error_code": code, "error_message": message} for name in names],
        )
    return await at_controller(context, request, _alter_here, _alter_error)


async def controller_alter_user_scram_credentials(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _alter_here, _alter_error)


def _alter_response(request: Request, results: list[AlterUserScramCredentialsResult]) -> Any:
    response: AlterUserScramCredentialsResponse = {"throttle_time": 0, "results": results}
    return build_response(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request.api_version, response)


def _alter_error(request: Request, code: ErrorCode, message: str) -> Any:
    body = request.body
    names = dict.fromkeys([d.name for d in body.deletions] + [u.name for u in body.upsertions])
    return _alter_response(
        request, [{"user": name, "error_code": code, "error_message": message} for name in names]
    )


async def _alter_here(context: AdminContext, request: Request) -> Any:
    body = request.body
    deletions = [scram_users.ScramDeletion(d.name, int(d.mechanism)) for d in body.deletions]
    upsertions = [
        scram_users.ScramUpsertion(
            u.name, int(u.mechanism), int(u.iterations), bytes(u.salt), bytes(u.salted_password)
        )
        for u in body.upsertions
    ]
    results = await context.active_controller().decide(
        lambda image: scram_users.alter_scram_credentials(image, deletions, upsertions)
    )
    for result in results:
        if result.error_code == ErrorCode.none:
            log.info("[node %d] altered the SCRAM credentials of %r", context.node_id, result.user)
    return _alter_response(
        request,
        [
            {"user": r.user, "error_code": r.error_code, "error_message": r.error_message}
            for r in results
        ],
    )
