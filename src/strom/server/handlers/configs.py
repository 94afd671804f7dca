"""DescribeConfigs for topics and for this broker, with sources and defaults."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.config import ConfigSource, effective_topic_config
from strom.metadata.records import ConfigResourceType
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response

if TYPE_CHECKING:
    from strom.server.broker import Broker


def _entry(name: str, value: str | None, source: ConfigSource, **extra: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "value": value,
        "read_only": False,
        "config_source": int(source),
        "is_default": source == ConfigSource.DEFAULT_CONFIG,
        "is_sensitive": False,
        "synonyms": [],
        "config_type": 0,
        "documentation": None,
    }
    entry.update(extra)
    return entry


def topic_config_entries(broker: Broker, overrides: Mapping[str, str]) -> list[dict[str, Any]]:
    effective = effective_topic_config(broker.config, overrides)
    return [_entry(name, value, source) for name, (value, source) in sorted(effective.items())]


def _broker_entries(broker: Broker) -> list[dict[str, Any]]:
    config = broker.config
    return [
        _entry(name, value, config.sources.get(name, ConfigSource.DEFAULT_CONFIG))
        for name, value in sorted(config.raw.items())
    ]


async def handle_describe_configs(broker: Broker, request: Request) -> Any:
    results = []
    for resource in request.body.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
            "configs": [],
        }
        results.append(result)
        kind = int(resource.resource_type)
        if kind == ConfigResourceType.TOPIC:
            if resource.resource_name not in broker.image.topics_by_name:
                result["error_code"] = ErrorCode.unknown_topic_or_partition
                result["error_message"] = f"topic {resource.resource_name!r} does not exist"
                continue
            entries = topic_config_entries(
                broker, broker.image.topic_configs(resource.resource_name)
            )
        elif kind == ConfigResourceType.BROKER:
            if resource.resource_name not in ("", str(broker.node_id)):
                result["error_code"] = ErrorCode.invalid_request
                result["error_message"] = (
                    f"this is broker {broker.node_id}; ask broker {resource.resource_name} "
                    "for its own configs"
                )
                continue
            entries = _broker_entries(broker)
        else:
            result["error_code"] = ErrorCode.invalid_request
            result["error_message"] = f"unsupported resource type {kind}"
            continue
        keys = resource.configuration_keys
        if keys is not None:
            wanted = set(keys)
            entries = [e for e in entries if e["name"] in wanted]
        result["configs"] = entries
    return build_response(
        ApiKey.DESCRIBE_CONFIGS, request.api_version, {"throttle_time": 0, "results": results}
    )
