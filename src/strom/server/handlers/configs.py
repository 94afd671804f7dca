"""DescribeConfigs for topics, this broker, the cluster-wide broker default and groups,
with sources; AlterConfigs and IncrementalAlterConfigs, decided by the active controller.

A group's configs are described as Kafka describes them: every group key, a group's own
value as GROUP_CONFIG, the rest as DEFAULT_CONFIG with the value this broker's keys
give; the group need not exist.

ACLs, per resource, as Kafka checks them (DescribeConfigs here; the alters on the broker
the client reached, before they go on, as the controller's variants check nothing):
DESCRIBE_CONFIGS, or ALTER_CONFIGS, on the topic for a TOPIC (TOPIC_AUTHORIZATION_FAILED),
on the cluster for a BROKER, BROKER_LOGGER or CLIENT_METRICS
(CLUSTER_AUTHORIZATION_FAILED), on the group for a GROUP (GROUP_AUTHORIZATION_FAILED),
each with Kafka's default text. A refused resource is neither looked up nor validated.
DescribeConfigs answers the refused ones after the others; the alters keep the
request's order, and a resource named twice goes on regardless (the controller refuses
both). Legacy AlterConfigs has no BROKER_LOGGER (INVALID_REQUEST, unchecked), and
IncrementalAlterConfigs refuses one with no message, as Kafka does.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig, ConfigSource, effective_topic_config
from strom.config.group_configs import group_config_defaults
from strom.config.keys import CONFIG_KEYS_BY_NAME
from strom.config.listener_settings import LISTENER_PREFIX, override_key
from strom.metadata.configs import (
    AlterConfigOp,
    ConfigEntryChange,
    ConfigResourceChange,
    ConfigResult,
    alter_configs,
)
from strom.metadata.records import ConfigResourceType
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.admin import (
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
    DescribeConfigsEntry,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.access import Access
from strom.server.handlers.forward import at_controller, on_this_controller
from strom.server.handlers.ports import AdminContext
from strom.server.handlers.refusals import (
    CLUSTER_DENIED,
    GROUP_DENIED,
    TOPIC_DENIED,
    answer_each,
)
from strom.server.listener_security import check_tls_change

log = logging.getLogger(__name__)

BROKER_LOGGER = 8
CLIENT_METRICS = 16
"""Kafka's config resource types strom has no configs of (ConfigResourceType has those it
has), checked all the same: a principal refused learns nothing more."""


def _refusal(
    access: Access, operation: AclOperation, kind: int, name: str
) -> tuple[ErrorCode, str] | None:
    """Why the principal may not do `operation` (DESCRIBE_CONFIGS or ALTER_CONFIGS) on
    the config resource (`kind`, `name`), with Kafka's text; None when it may (or when
    `kind` is no config resource type Kafka knows: refused as unsupported, unchecked)."""
    if kind == ConfigResourceType.TOPIC:
        if access.allows(operation, AclResourceType.TOPIC, name):
            return None
        return ErrorCode.topic_authorization_failed, TOPIC_DENIED
    if kind in (ConfigResourceType.BROKER, BROKER_LOGGER, CLIENT_METRICS):
        if access.allows_cluster(operation):
            return None
        return ErrorCode.cluster_authorization_failed, CLUSTER_DENIED
    if kind == ConfigResourceType.GROUP:
        if access.allows(operation, AclResourceType.GROUP, name):
            return None
        return ErrorCode.group_authorization_failed, GROUP_DENIED
    return None


def _entry(name: str, value: str | None, source: ConfigSource) -> DescribeConfigsEntry:
    """One config, its value hidden (null, is_sensitive) if its key is sensitive; a
    `listener.name.<listener>.<key>` name is as sensitive as its key."""
    key = override_key(name) or CONFIG_KEYS_BY_NAME.get(name)
    sensitive = key is not None and key.sensitive
    return {
        "name": name,
        "value": None if sensitive else value,
        "read_only": False,
        "config_source": int(source),
        "is_sensitive": sensitive,
        "synonyms": [],
        "config_type": 0,
        "documentation": None,
    }


def topic_config_entries(
    config: BrokerConfig, overrides: Mapping[str, str]
) -> list[DescribeConfigsEntry]:
    """A topic's every config: its `overrides`, else the broker's `config` behind them."""
    effective = effective_topic_config(config, overrides)
    return [_entry(name, value, source) for name, (value, source) in sorted(effective.items())]


def group_config_entries(
    config: BrokerConfig, overrides: Mapping[str, str]
) -> list[DescribeConfigsEntry]:
    """A group's every config: its `overrides`, else what the broker's `config` gives."""
    defaults = group_config_defaults(config.raw)
    return [
        _entry(name, overrides[name], ConfigSource.GROUP_CONFIG)
        if name in overrides
        else _entry(name, value, ConfigSource.DEFAULT_CONFIG)
        for name, value in sorted(defaults.items())
    ]


def _broker_entries(config: BrokerConfig) -> list[DescribeConfigsEntry]:
    """This broker's every key with a value, and, as Kafka lists them, the per-listener
    keys that are set."""
    entries = [
        (name, value, config.sources.get(name, ConfigSource.DEFAULT_CONFIG))
        for name, value in config.raw.items()
    ]
    entries += [(name, text, source) for name, (text, source) in config.listener_keys.items()]
    return [_entry(name, value, source) for name, value, source in sorted(entries)]


async def handle_describe_configs(context: AdminContext, request: Request) -> Any:
    image = context.metadata.image
    config = context.config()
    access = Access.of(context.authorizer(), request)
    results: list[DescribeConfigsResult] = []
    refused: list[DescribeConfigsResult] = []
    for resource in request.body.resources:
        result: DescribeConfigsResult = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        kind = int(resource.resource_type)
        denied = _refusal(access, AclOperation.DESCRIBE_CONFIGS, kind, resource.resource_name)
        if denied is not None:  # answered after the others, as Kafka answers
            result["error_code"], result["error_message"] = denied
            refused.append(result)
            continue
        results.append(result)
        if kind == ConfigResourceType.TOPIC:
            if resource.resource_name not in image.topics_by_name:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"topic {resource.resource_name!r} does not exist"
                continue
            entries = topic_config_entries(config, image.topic_configs(resource.resource_name))
        elif kind == ConfigResourceType.BROKER and resource.resource_name == "":
            entries = [
                _entry(name, value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
                for name, value in sorted(image.cluster_default_configs().items())
            ]
        elif kind == ConfigResourceType.BROKER:
            if resource.resource_name != str(context.node_id):
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = (
                    f"this is broker {context.node_id}; ask broker {resource.resource_name} "
                    "for its own configs"
                )
                continue
            entries = _broker_entries(config)
        elif kind == ConfigResourceType.GROUP:
            if not resource.resource_name:
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = "Group name must not be empty"
                continue
            entries = group_config_entries(config, image.group_configs(resource.resource_name))
        else:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = f"unsupported resource type {kind}"
            continue
        keys = resource.configuration_keys
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if e["name"] in wanted]
        result["configs"] = entries
    response: DescribeConfigsResponse = {"throttle_time": 0, "results": results + refused}
    return build_response(ApiKey.DESCRIBE_CONFIGS, request.api_version, response)


# --- AlterConfigs and IncrementalAlterConfigs: decided by the active controller -------


def _changes(request: Request, *, incremental: bool) -> list[ConfigResourceChange]:
    return [
        ConfigResourceChange(
            int(resource.resource_type),
            resource.resource_name,
            [
                ConfigEntryChange(
                    entry.name,
                    entry.value,
                    _op(int(entry.config_operation)) if incremental else AlterConfigOp.SET,
                )
                for entry in resource.configs
            ],
        )
        for resource in request.body.resources
    ]


def _op(value: int) -> AlterConfigOp:
    """The operation; unknown ones were refused already (see _alter_here)."""
    return AlterConfigOp(value) if value in set(AlterConfigOp) else AlterConfigOp.SET


def _alter_response(request: Request, results: list[ConfigResult]) -> Any:
    """AlterConfigs' or IncrementalAlterConfigs' response (the same shape)."""
    entries: list[AlterConfigsResourceResponse] = [
        {
            "error_code": r.error_code,
            "error_message": r.error_message,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
        }
        for r in results
    ]
    response: AlterConfigsResponse = {"throttle_time": 0, "responses": entries}
    return build_response(request.api_key, request.api_version, response)


def _alter_error(request: Request, code: ErrorCode, message: str) -> Any:
    return _alter_response(
        request,
        [
            ConfigResult(int(r.resource_type), r.resource_name, code, message)
            for r in request.body.resources
        ],
    )


async def _alter_here(context: AdminContext, request: Request) -> Any:
    incremental = request.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
    bad_ops = [
        (resource, entry)
        for resource in request.body.resources
        for entry in resource.configs
        if incremental and int(entry.config_operation) not in set(AlterConfigOp)
    ]
    changes = _changes(request, incremental=incremental and not bad_ops)
    broker_config = context.config().raw  # this node's: it is the active controller
    results = await context.active_controller().decide(
        lambda image: alter_configs(
            image,
            changes,
            incremental=incremental,
            validate_only=bool(request.body.validate_only),
            broker_config=broker_config,
        )
    )
    if bad_ops:
        names = {(int(r.resource_type), r.resource_name) for r, _ in bad_ops}
        results = [
            ConfigResult(
                r.resource_type,
                r.resource_name,
                ErrorCode.invalid_request,
                "config_operation must be 0 (SET), 1 (DELETE), 2 (APPEND) or 3 (SUBTRACT)",
            )
            if (r.resource_type, r.resource_name) in names
            else r
            for r in results
        ]
    for result in results:
        if result.error_code == ErrorCode.none and not request.body.validate_only:
            log.info(
                "[node %d] configs of %s %r changed",
                context.node_id,
                ConfigResourceType(result.resource_type).name.lower(),
                result.resource_name,
            )
    return _alter_response(request, results)


def _tls_problem(context: AdminContext, request: Request) -> tuple[str, str] | None:
    """(resource name, what is wrong) if the request changes this broker's TLS stores to
    ones its SSL listeners could not load: checked here, where the files are, before
    the controller stores the change (as Kafka checks a new key store)."""
    incremental = request.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
    image = context.metadata.image
    for change in _changes(request, incremental=incremental):
        if change.resource_type != ConfigResourceType.BROKER or change.resource_name != str(
            context.node_id
        ):
            continue
        if not any(e.name.startswith(("ssl.", LISTENER_PREFIX)) for e in change.entries):
            continue
        configs = dict(image.broker_configs(context.node_id)) if incremental else {}
        for entry in change.entries:
            if entry.op is AlterConfigOp.DELETE or entry.value is None:
                configs.pop(entry.name, None)
            elif entry.op is AlterConfigOp.SET:
                configs[entry.name] = entry.value
        now = context.config()
        problem = check_tls_change(now, now.with_dynamic(image.cluster_default_configs(), configs))
        if problem is not None:
            return change.resource_name, problem
    return None


async def _alter(context: AdminContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    if not access.enforced:
        return await _alter_allowed(context, request)
    incremental = request.api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS
    resources = request.body.resources
    named = Counter((int(r.resource_type), r.resource_name) for r in resources)
    refusals: list[ConfigResult | None] = []
    for resource in resources:
        kind, name = int(resource.resource_type), resource.resource_name
        denied = None
        if named[kind, name] == 1 and (incremental or kind != BROKER_LOGGER):
            denied = _refusal(access, AclOperation.ALTER_CONFIGS, kind, name)
        if denied is None:
            refusals.append(None)
        else:
            code, message = denied
            shown = None if kind == BROKER_LOGGER else message  # Kafka's broker says none
            refusals.append(ConfigResult(kind, name, code, shown))

    async def allowed(passed_on: Request) -> list[ConfigResult]:
        body = await _alter_allowed(context, passed_on)
        return [
            ConfigResult(
                int(r.resource_type), r.resource_name, ErrorCode(r.error_code), r.error_message
            )
            for r in body.responses
        ]

    return _alter_response(request, await answer_each(request, "resources", refusals, allowed))


async def _alter_allowed(context: AdminContext, request: Request) -> Any:
    """The alter of the resources the principal may alter: checked for this broker's TLS
    stores here, then decided by the active controller."""
    problem = None if request.body.validate_only else _tls_problem(context, request)
    if problem is not None:
        name, message = problem
        results = [
            ConfigResult(
                int(r.resource_type),
                r.resource_name,
                ErrorCode.invalid_config,
                message
                if r.resource_name == name
                else f"not applied: the configs of broker {name} were refused",
            )
            for r in request.body.resources
        ]
        return _alter_response(request, results)
    return await at_controller(context, request, _alter_here, _alter_error)


async def handle_alter_configs(context: AdminContext, request: Request) -> Any:
    return await _alter(context, request)


async def handle_incremental_alter_configs(context: AdminContext, request: Request) -> Any:
    return await _alter(context, request)


async def controller_alter_configs(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _alter_here, _alter_error)


async def controller_incremental_alter_configs(context: AdminContext, request: Request) -> Any:
    return await on_this_controller(context, request, _alter_here, _alter_error)
