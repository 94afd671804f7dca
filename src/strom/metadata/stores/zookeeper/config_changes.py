"""What the active controller does with a /config/changes notice (ZooKeeperStore watches
them): it reads the znode the notice names and hands what it holds to the controller
(StoreWatches, metadata/stores/base.py), which makes the image hold the same. A topic's
or broker's configs; a user's SCRAM credentials and client quotas (one znode); another
client quota entity's quotas. A change this controller wrote itself matches its image
already and costs nothing. A notice or znode that does not parse is logged and ignored.
"""

from __future__ import annotations

import logging

from strom.metadata import quota_znodes, znodes
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.stores.base import StoreWatches
from strom.metadata.stores.zookeeper.session import NoNodeError, ZkSession

log = logging.getLogger(__name__)

__all__ = ["apply_change"]


async def apply_change(session: ZkSession, watches: StoreWatches, path: str, node_id: int) -> None:
    """The change notice at `path`, taken into the metadata."""
    try:
        data, _stat = await session.get(path)
        entity = znodes.parse_change(data)
        if not isinstance(entity, tuple):
            await _apply_quota_entity(session, watches, entity)
            return
        kind, name = entity
        config_path = znodes.config_path(kind, name)
        try:
            stored, _stat = await session.get(config_path)
            config = znodes.parse_entity_config(stored)
        except NoNodeError:
            config = {}  # gone: the entity has no overrides
    except NoNodeError:
        return
    except znodes.ZnodeError as exc:
        log.warning("[node %d] ignoring config change %s: %s", node_id, path, exc)
        return
    source = f"config of {config_path} written into ZooKeeper"
    await watches.apply_stored_config(kind, name, config, source)


async def _apply_quota_entity(
    session: ZkSession, watches: StoreWatches, entity: znodes.UserEntity | QuotaEntity
) -> None:
    user = entity.name if isinstance(entity, znodes.UserEntity) else None
    quota_entity = entity if isinstance(entity, QuotaEntity) else QuotaEntity.user(user)
    path = quota_znodes.entity_path(quota_entity)
    stored = await session.data_or_empty(path)
    written = f"{path} written into ZooKeeper"
    if user is not None:
        credentials = znodes.user_records(user, stored, path)
        await watches.apply_stored_scram(user, credentials, f"SCRAM credentials of {written}")
    quotas = quota_znodes.stored_quotas(quota_entity, stored, path)
    await watches.apply_stored_quotas(quota_entity, quotas, f"client quotas of {written}")
