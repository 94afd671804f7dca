"""Client quotas as Kafka's ZooKeeper znodes, and back (the rest of the layout: znodes.py).

    /config/users/<user>                      {"config":{"producer_byte_rate":"1048576",
                                                "SCRAM-SHA-256":"salt=.."},"version":1}
    /config/users/<user>/clients              empty: the parent of the user's client ids
    /config/users/<user>/clients/<client id>  {"config":{"request_percentage":"12.5"},"version":1}
    /config/clients/<client id>               the same, for a client id of any user
    /config/ips/<ip>                          {"config":{"connection_creation_rate":"20"},...}
    /config/changes/config_change_<seq>       {"entity_path":"users/alice/clients/app","version":2}

`<default>` stands for a type's default entity (`/config/users/<default>/clients/app`).
Users and client ids are written sanitized as Kafka writes them (URL-encoded, `*` and `~`
too); IPs as they are. A user's znode is shared with its SCRAM credentials, and exists
while the user has credentials, quotas or a client id with quotas; Kafka's tools may
have created it (and `clients`) without data, which reads as no config. Whole-number
keys are written as integers and the others as decimals, as Kafka's tools write them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from urllib.parse import quote, unquote

from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import (
    CLIENT_ID,
    IP,
    USER,
    QuotaEntity,
    format_quota_value,
)
from strom.metadata.records import ClientQuotaRecord
from strom.metadata.znode_json import ZnodeError, json_bytes, json_object

__all__ = [
    "DEFAULT_ENTITY",
    "QUOTA_PARENTS",
    "entity_of_path",
    "entity_path",
    "quota_config",
    "quota_data",
    "quota_records",
    "sanitized",
    "stored_quotas",
    "user_tree",
]

DEFAULT_ENTITY = "<default>"
QUOTA_PARENTS = ("/config/clients", "/config/ips")
"""Created once by the store, with the other parents (znodes.PARENTS)."""


def sanitized(name: str) -> str:
    """A user name or client id as a znode name, as Kafka writes it (its Sanitizer:
    URL-encoded, with `*` and `~` encoded too)."""
    return quote(name, safe="").replace("~", "%7E").replace("*", "%2A")


def _segment(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else sanitized(name)


def entity_path(entity: QuotaEntity) -> str:
    parts = dict(entity.parts)
    if IP in parts:
        address = parts[IP]
        return f"/config/ips/{DEFAULT_ENTITY if address is None else address}"
    if USER in parts:
        path = f"/config/users/{_segment(parts[USER])}"
        return f"{path}/clients/{_segment(parts[CLIENT_ID])}" if CLIENT_ID in parts else path
    return f"/config/clients/{_segment(parts[CLIENT_ID])}"


def _name(segment: str, what: str) -> str | None:
    """The name a path segment stands for (None: `<default>`); ZnodeError unless it is
    written as Kafka writes it."""
    if segment == DEFAULT_ENTITY:
        return None
    try:
        name = unquote(segment, errors="strict")
    except UnicodeDecodeError:
        name = ""
    if not name or sanitized(name) != segment:
        raise ZnodeError(f"{what}: {segment!r} is not a name as Kafka writes it")
    return name


def entity_of_path(entity_path_text: str, what: str) -> QuotaEntity:
    """The quota entity of a path below /config (`users/alice/clients/app`, `ips/<default>`)."""
    match entity_path_text.split("/"):
        case ["users", user]:
            return QuotaEntity.user(_name(user, what))
        case ["users", user, "clients", client]:
            return QuotaEntity.user_client(_name(user, what), _name(client, what))
        case ["clients", client]:
            return QuotaEntity.client(_name(client, what))
        case ["ips", address] if address:
            return QuotaEntity.ip(None if address == DEFAULT_ENTITY else address)
    raise ZnodeError(f"{what}: {entity_path_text!r} names no client quota entity")


def quota_config(image: MetadataImage, entity: QuotaEntity) -> dict[str, str]:
    quotas = image.client_quotas.get(entity, {})
    return {key: format_quota_value(key, value) for key, value in quotas.items()}


def quota_data(image: MetadataImage, entity: QuotaEntity) -> bytes | None:
    """The znode of a client id, an IP or a user's client id; None without quotas."""
    config = quota_config(image, entity)
    return json_bytes({"version": 1, "config": config}) if config else None


def user_tree(
    image: MetadataImage, user: str | None, scram_config: Mapping[str, str]
) -> dict[str, bytes]:
    """Every znode of /config/users/<user> and below, with its data: none when the user
    has no credentials (`scram_config`, as znodes.py writes them), quotas or client id."""
    clients = [
        entity
        for entity in image.client_quotas
        if entity.has(CLIENT_ID) and entity.has(USER) and entity.name(USER) == user
    ]
    own = {**scram_config, **quota_config(image, QuotaEntity.user(user))}
    if not own and not clients:
        return {}
    path = entity_path(QuotaEntity.user(user))
    tree = {path: json_bytes({"version": 1, "config": own})}
    if clients:
        tree[f"{path}/clients"] = b""
    for entity in clients:
        tree[entity_path(entity)] = json_bytes(
            {"version": 1, "config": quota_config(image, entity)}
        )
    return tree


def stored_quotas(entity: QuotaEntity, data: bytes, what: str) -> dict[str, float]:
    """The quotas of an entity's znode: the keys the entity takes (a user's also holds
    its SCRAM credentials, which are left to znodes.py). Empty data: none."""
    if not data:
        return {}
    config = json_object(data, what).get("config")
    if not isinstance(config, dict):
        raise ZnodeError(f"{what} lacks its config")
    quotas = {}
    for key in entity.quota_keys():
        text = config.get(key)
        if text is None:
            continue
        try:
            value = float(text) if isinstance(text, str) else math.nan
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise ZnodeError(f"{what}: {key}: {text!r:.40} is not a positive number")
        quotas[key] = value
    return quotas


def quota_records(entity: QuotaEntity, data: bytes, what: str) -> list[ClientQuotaRecord]:
    """The records of an entity's znode, as read from a tree (znodes.image_from_znodes)."""
    quotas = stored_quotas(entity, data, what)
    return [ClientQuotaRecord(entity, key, value) for key, value in sorted(quotas.items())]
