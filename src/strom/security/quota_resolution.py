"""Which client quota applies to a connection, by Kafka's precedence (its ClientQuotaManager
and ConnectionQuotas).

A client's quota for one key comes from the first of these eight entities that sets that
key, most specific first (`<default>` is the type's default entity):

    1. user U, client id C             5. user <default>, client id <default>
    2. user U, client id <default>     6. user <default>
    3. user U                          7. client id C
    4. user <default>, client id C     8. client id <default>

U is the name of the connection's principal (`alice` for `User:alice`, `ANONYMOUS` for an
unauthenticated client) and C the client id in its request headers. As in Kafka, an empty
client id skips every level that names a client id (1, 2, 4, 5, 7, 8) and an empty user
every level that names a user. An IP's `connection_creation_rate` comes from its own
entity, else from the IP default. No entity: no quota (None).

Pure: the quotas come in as the metadata image's mapping.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from strom.metadata.quota_entities import QuotaEntity

__all__ = ["ResolvedQuota", "client_quota", "ip_quota", "precedence"]

Quotas = Mapping[QuotaEntity, Mapping[str, float]]


@dataclass(frozen=True, slots=True)
class ResolvedQuota:
    value: float
    entity: QuotaEntity
    """The entity the value was set on."""


def precedence(user: str, client_id: str) -> list[QuotaEntity]:
    """The entities a client's quota may come from, in Kafka's order, those an empty user
    or client id skips left out."""
    levels: list[QuotaEntity] = []
    if user and client_id:
        levels += [QuotaEntity.user_client(user, client_id), QuotaEntity.user_client(user, None)]
    if user:
        levels.append(QuotaEntity.user(user))
    if user and client_id:
        levels += [QuotaEntity.user_client(None, client_id), QuotaEntity.user_client(None, None)]
    if user:
        levels.append(QuotaEntity.user(None))
    if client_id:
        levels += [QuotaEntity.client(client_id), QuotaEntity.client(None)]
    return levels


def client_quota(quotas: Quotas, key: str, *, user: str, client_id: str) -> ResolvedQuota | None:
    """The quota for `key` of a client (its principal's name and client id), or None."""
    for entity in precedence(user, client_id):
        value = quotas.get(entity, {}).get(key)
        if value is not None:
            return ResolvedQuota(value, entity)
    return None


def ip_quota(quotas: Quotas, address: str) -> ResolvedQuota | None:
    """The `connection_creation_rate` of connections from `address`, or None."""
    for entity in (QuotaEntity.ip(address), QuotaEntity.ip(None)):
        value = quotas.get(entity, {}).get("connection_creation_rate")
        if value is not None:
            return ResolvedQuota(value, entity)
    return None
