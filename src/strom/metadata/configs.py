"""AlterConfigs and IncrementalAlterConfigs: pure controller decisions on dynamic configs.

Resources:
- TOPIC "<name>": the topic must exist; values are checked like CreateTopics' configs.
- BROKER "": the cluster-wide dynamic broker default; BROKER "<id>": one registered
  broker. Only keys Kafka lets change at run time (strom.config.dynamic) are accepted.
- GROUP "<group id>": one group's own configs (strom.config.group_configs); the group
  need not exist, as in Kafka. Checked like Kafka's GroupConfig: every effective value
  (the broker's defaults behind the overrides) within the bounds of `broker_config`,
  the deciding controller's broker keys.

AlterConfigs replaces the whole set of overrides of a resource (keys left out are
removed). IncrementalAlterConfigs applies operations key by key: SET, DELETE, and, for list
keys such as cleanup.policy, APPEND and SUBTRACT, which start from the current override
or, without one, from the key's built-in default, as Kafka does. Each resource succeeds
or fails as a whole; values are stored in canonical text.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode

from strom.config import (
    CONFIG_KEYS_BY_NAME,
    TOPIC_CONFIG_KEYS,
    ConfigError,
    ConfigType,
    canonical_dynamic_broker_configs,
    dynamic_config_key,
    validate_topic_configs,
)
from strom.config.group_configs import GROUP_CONFIG_KEYS, validate_group_configs
from strom.metadata.image import MetadataImage
from strom.metadata.records import CLUSTER_DEFAULT, ConfigRecord, ConfigResourceType, MetadataRecord
from strom.metadata.refused import Refused


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs' operation per key, numbered as on the wire."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigEntryChange:
    name: str
    value: str | None
    op: AlterConfigOp = AlterConfigOp.SET
    """Ignored by AlterConfigs, which always replaces the whole set."""


@dataclass(frozen=True, slots=True)
class ConfigResourceChange:
    resource_type: int
    """A ConfigResourceType; any other number is refused with INVALID_REQUEST."""
    resource_name: str
    entries: Sequence[ConfigEntryChange]


@dataclass(frozen=True, slots=True)
class ConfigResult:
    resource_type: int
    resource_name: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


def alter_configs(
    image: MetadataImage,
    resources: Sequence[ConfigResourceChange],
    *,
    incremental: bool,
    validate_only: bool = False,
    broker_config: Mapping[str, str] | None = None,
) -> tuple[list[MetadataRecord], list[ConfigResult]]:
    """Records changing each valid resource's overrides, and one result per resource.
    `broker_config`: the deciding controller's broker keys as text (BrokerConfig.raw),
    which bound group configs; None: the built-in defaults."""
    records: list[MetadataRecord] = []
    results: list[ConfigResult] = []
    seen = Counter((r.resource_type, r.resource_name) for r in resources)
    for resource in resources:
        result = ConfigResult(resource.resource_type, resource.resource_name)
        try:
            if seen[(resource.resource_type, resource.resource_name)] > 1:
                raise Refused(
                    ErrorCode.invalid_request,
                    f"resource {resource.resource_name!r} appears more than once in the request",
                )
            new_records = _alter_one(
                image, resource, incremental=incremental, broker_config=broker_config or {}
            )
        except Refused as refused:
            kind, name = result.resource_type, result.resource_name
            results.append(ConfigResult(kind, name, refused.code, refused.message))
            continue
        results.append(result)
        if not validate_only:
            records.extend(new_records)
    return records, results


def _alter_one(
    image: MetadataImage,
    resource: ConfigResourceChange,
    *,
    incremental: bool,
    broker_config: Mapping[str, str],
) -> list[ConfigRecord]:
    kind = _resource_type(resource.resource_type)
    name = resource.resource_name
    names = [entry.name for entry in resource.entries]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise Refused(ErrorCode.invalid_request, f"config key(s) {repeated} appear more than once")
    if kind is ConfigResourceType.TOPIC:
        if name not in image.topics_by_name:
            raise Refused(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        current = image.topic_configs(name)
    elif kind is ConfigResourceType.GROUP:
        return _alter_group(image, resource, incremental=incremental, broker=broker_config)
    else:
        _check_broker(image, name)
        current = image.configs.get((kind, name), {})
    per_broker = name != CLUSTER_DEFAULT
    try:
        for entry in resource.entries:
            if kind is ConfigResourceType.TOPIC:
                validate_topic_configs({entry.name: None})  # the key must exist
            else:
                dynamic_config_key(entry.name, per_broker=per_broker)
    except ConfigError as exc:
        raise Refused(ErrorCode.invalid_config, str(exc)) from None
    if incremental:
        wanted = _apply_ops(kind, dict(current), resource.entries)
    else:
        wanted = {e.name: e.value for e in resource.entries if e.value is not None}
    # Only changed values are checked: an override stored earlier stays as it is.
    changed = {key: value for key, value in wanted.items() if current.get(key) != value}
    try:
        if kind is ConfigResourceType.TOPIC:
            canonical = validate_topic_configs(changed)
        else:
            canonical = canonical_dynamic_broker_configs(changed, per_broker=per_broker)
    except ConfigError as exc:
        raise Refused(ErrorCode.invalid_config, str(exc)) from None
    final = {key: value for key, value in wanted.items() if key not in changed} | canonical
    return _diff(kind, name, current, final)


def _alter_group(
    image: MetadataImage,
    resource: ConfigResourceChange,
    *,
    incremental: bool,
    broker: Mapping[str, str],
) -> list[ConfigRecord]:
    """A group's overrides: every effective value checked, as Kafka checks them (a stored
    override out of the broker's bounds now refuses any change but its own)."""
    name = resource.resource_name
    if not name:
        raise Refused(ErrorCode.invalid_request, "Default group resources are not allowed.")
    current = image.group_configs(name)
    for entry in resource.entries:
        if entry.name not in GROUP_CONFIG_KEYS:
            raise Refused(ErrorCode.invalid_config, f"Unknown group config name: {entry.name}")
    if incremental:
        wanted = _apply_ops(ConfigResourceType.GROUP, dict(current), resource.entries)
    else:
        wanted = {e.name: e.value for e in resource.entries if e.value is not None}
    try:
        final = validate_group_configs(wanted, broker)
    except ConfigError as exc:
        raise Refused(ErrorCode.invalid_config, str(exc)) from None
    return _diff(ConfigResourceType.GROUP, name, current, final)


def _resource_type(value: int) -> ConfigResourceType:
    try:
        return ConfigResourceType(value)
    except ValueError:
        raise Refused(
            ErrorCode.invalid_request,
            f"config resource type {value} is not supported; strom has topic (2), "
            "broker (4) and group (32) configs",
        ) from None


def _check_broker(image: MetadataImage, name: str) -> None:
    if name == CLUSTER_DEFAULT:
        return
    if not name.isdigit():
        raise Refused(
            ErrorCode.invalid_request,
            f'broker resource name {name!r} is neither a broker id nor "" (the cluster default)',
        )
    if int(name) not in image.brokers:
        raise Refused(ErrorCode.broker_id_not_registered, f"broker {name} is not registered")


def _apply_ops(
    kind: ConfigResourceType, configs: dict[str, str], entries: Sequence[ConfigEntryChange]
) -> dict[str, str]:
    for entry in entries:
        match entry.op:
            case AlterConfigOp.SET:
                if entry.value is None:
                    raise Refused(ErrorCode.invalid_request, f"SET of {entry.name!r} needs a value")
                configs[entry.name] = entry.value
            case AlterConfigOp.DELETE:
                configs.pop(entry.name, None)
            case AlterConfigOp.APPEND | AlterConfigOp.SUBTRACT:
                configs[entry.name] = _list_op(kind, configs.get(entry.name), entry)
            case _:  # pragma: no cover - AlterConfigOp has no other members
                raise Refused(ErrorCode.invalid_request, f"unknown operation {entry.op}")
    return configs


def _list_op(kind: ConfigResourceType, current: str | None, entry: ConfigEntryChange) -> str:
    key_type, default = _type_and_default(kind, entry.name)
    if key_type is not ConfigType.LIST:
        raise Refused(
            ErrorCode.invalid_config,
            f"cannot {entry.op.name} to {entry.name!r}: only list configs (such as "
            "cleanup.policy) take APPEND and SUBTRACT",
        )
    items = _split(current if current is not None else default)
    for item in _split(entry.value):
        if entry.op is AlterConfigOp.APPEND and item not in items:
            items.append(item)
        elif entry.op is AlterConfigOp.SUBTRACT and item in items:
            items.remove(item)
    return ",".join(items)


def _type_and_default(kind: ConfigResourceType, name: str) -> tuple[ConfigType | None, str | None]:
    if kind is ConfigResourceType.TOPIC:
        topic_key = TOPIC_CONFIG_KEYS.get(name)
        if topic_key is None:
            return None, None
        broker_key = CONFIG_KEYS_BY_NAME.get(topic_key.broker_key)
        return topic_key.type, None if broker_key is None else broker_key.default
    if kind is ConfigResourceType.GROUP:  # no group key is a list
        return (ConfigType.STRING, None) if name in GROUP_CONFIG_KEYS else (None, None)
    key = CONFIG_KEYS_BY_NAME.get(name)
    return (None, None) if key is None else (key.type, key.default)


def _split(text: str | None) -> list[str]:
    return [item.strip() for item in (text or "").split(",") if item.strip()]


def _diff(
    kind: ConfigResourceType, name: str, current: Mapping[str, str], wanted: Mapping[str, str]
) -> list[ConfigRecord]:
    records = [ConfigRecord(kind, name, key, None) for key in sorted(current) if key not in wanted]
    records += [
        ConfigRecord(kind, name, key, value)
        for key, value in sorted(wanted.items())
        if current.get(key) != value
    ]
    return records
