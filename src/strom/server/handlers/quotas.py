"""DescribeClientQuotas, answered by any broker from its metadata image, and
AlterClientQuotas, decided by the active controller wherever a client sent it (see
forward.py); the decisions are metadata/client_quotas.py's. Quotas are stored and
described; nothing enforces them yet.

ACLs, as Kafka checks them: DescribeClientQuotas needs DESCRIBE_CONFIGS on the cluster
(refused: CLUSTER_AUTHORIZATION_FAILED "Cluster authorization failed." at the top, no
entries); AlterClientQuotas needs ALTER_CONFIGS on the cluster, checked on the broker the
client reached before the request goes on (refused: every entry of the request
CLUSTER_AUTHORIZATION_FAILED with Kafka's "Cluster authorization failed.").

An IP entity that is not an address is looked up (asyncio's resolver, at most
RESOLVE_TIMEOUT_S) before the decision, which takes the names that resolved: Kafka
accepts a host name that resolves.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata import client_quotas
from strom.metadata.quota_entities import IP
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.quotas import (
    AlterClientQuotasEntry,
    AlterClientQuotasResponse,
    DescribeClientQuotasEntry,
    DescribeClientQuotasResponse,
    QuotaEntityData,
)
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import CLUSTER_DENIED

log = logging.getLogger(__name__)

RESOLVE_TIMEOUT_S = 2.0


def _entity_data(parts: list[tuple[str, str | None]]) -> list[QuotaEntityData]:
    return [{"entity_type": kind, "entity_name": name} for kind, name in parts]


async def handle_describe_client_quotas(context: AdminContext, request: Request) -> Any:
    body = request.body
    if not Access.of(context.authorizer(), request).allows_cluster(AclOperation.DESCRIBE_CONFIGS):
        return _describe_response(
            request, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED, None
        )
    components = [
        client_quotas.FilterComponent(c.entity_type, int(c.match_type), c.match)
        for c in body.components
    ]
    described = client_quotas.describe_client_quotas(
        context.metadata.image, components, strict=bool(body.strict)
    )
    entries: list[DescribeClientQuotasEntry] | None = None
    if described.entries is not None:
        entries = [
            {
                "entity": _entity_data(entity.ordered()),
                "values": [{"key": key, "value": quotas[key]} for key in sorted(quotas)],
            }
            for entity, quotas in described.entries
        ]
    return _describe_response(request, described.error_code, described.error_message, entries)


def _describe_response(
    request: Request,
    code: ErrorCode,
    message: str | None,
    entries: list[DescribeClientQuotasEntry] | None,
) -> Any:
    response: DescribeClientQuotasResponse = {
        "throttle_time": 0,
        "error_code": code,
        "error_message": message,
        "entries": entries,
    }
    return build_response(ApiKey.DESCRIBE_CLIENT_QUOTAS, request.api_version, response)


async def handle_alter_client_quotas(context: AdminContext, request: Request) -> Any:
    if not Access.of(context.authorizer(), request).allows_cluster(AclOperation.ALTER_CONFIGS):
        return _alter_error(request, ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    return await at_controller(context, request, _alter_here, _alter_error)


async def controller_alter_client_quotas(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _alter_here, _alter_error)


def _alter_response(request: Request, entries: list[AlterClientQuotasEntry]) -> Any:
    response: AlterClientQuotasResponse = {"throttle_time": 0, "entries": entries}
    return build_response(ApiKey.ALTER_CLIENT_QUOTAS, request.api_version, response)


def _alter_error(request: Request, code: ErrorCode, message: str) -> Any:
    """Every entry of the request answered `code` (Kafka's getErrorResponse)."""
    return _alter_response(
        request,
        [
            {
                "error_code": code,
                "error_message": message,
                "entity": _entity_data([(e.entity_type, e.entity_name) for e in entry.entity]),
            }
            for entry in request.body.entries
        ],
    )


async def _resolvable(hosts: set[str]) -> frozenset[str]:
    """The host names among `hosts` that resolve within RESOLVE_TIMEOUT_S."""
    loop = asyncio.get_running_loop()

    async def resolves(host: str) -> bool:
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT_S):
                return bool(await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM))
        except (OSError, TimeoutError, ValueError):  # UnicodeError: a bad IDNA name
            return False

    found = await asyncio.gather(*(resolves(host) for host in sorted(hosts)))
    return frozenset(host for host, ok in zip(sorted(hosts), found, strict=True) if ok)


async def _alter_here(context: AdminContext, request: Request) -> Any:
    body = request.body
    alterations = [
        client_quotas.QuotaAlteration(
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            tuple(
                client_quotas.QuotaOp(op.key, None if op.remove else float(op.value))
                for op in entry.ops
            ),
        )
        for entry in body.entries
    ]
    hosts = {
        name
        for alteration in alterations
        for kind, name in alteration.parts
        if kind == IP and name and not client_quotas.is_ip_address(name)
    }
    resolvable = await _resolvable(hosts) if hosts else frozenset()
    validate_only = bool(body.validate_only)
    results = await context.active_controller().decide(
        lambda image: client_quotas.alter_client_quotas(
            image, alterations, validate_only=validate_only, resolves=resolvable.__contains__
        )
    )
    if not validate_only:
        for result in results:
            if result.error_code == ErrorCode.none:
                log.info(
                    "[node %d] altered the client quotas of %s", context.node_id, result.entity
                )
    return _alter_response(request, [_entry(result) for result in results])


def _entry(result: client_quotas.QuotaResult) -> AlterClientQuotasEntry:
    return {
        "error_code": result.error_code,
        "error_message": result.error_message,
        "entity": _entity_data(result.entity.ordered()),
    }
