"""Client quota entities and keys, as Kafka names them.

A quota entity is a user, a client id, both (a client id of one user), or an IP address;
each part names one entity or, with the name None, that type's default (Kafka's
`<default>`): `{user: None}` is every user without a quota of its own. The keys are
Kafka's: `producer_byte_rate` and `consumer_byte_rate` (bytes a second, whole numbers),
`request_percentage` (a share of one request handler thread's time) and
`controller_mutation_rate` (partitions created or deleted a second) for users and client
ids; `connection_creation_rate` (new connections a second, a whole number) for IPs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

__all__ = [
    "CLIENT_ID",
    "ENTITY_TYPES",
    "IP",
    "IP_KEYS",
    "USER",
    "USER_CLIENT_KEYS",
    "QuotaEntity",
    "QuotaValueType",
    "format_quota_value",
]

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
"""In the order strom writes an entity's parts (a user before its client id)."""


class QuotaValueType(Enum):
    """The type of a quota key's values (Kafka's ConfigDef type)."""

    LONG = "LONG"
    INT = "INT"
    DOUBLE = "DOUBLE"


USER_CLIENT_KEYS: Mapping[str, QuotaValueType] = {
    "producer_byte_rate": QuotaValueType.LONG,
    "consumer_byte_rate": QuotaValueType.LONG,
    "request_percentage": QuotaValueType.DOUBLE,
    "controller_mutation_rate": QuotaValueType.DOUBLE,
}
"""The keys of user, client id and user + client id entities."""
IP_KEYS: Mapping[str, QuotaValueType] = {"connection_creation_rate": QuotaValueType.INT}
"""The keys of IP entities."""


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    """An entity's (type, name) parts, one per type, sorted by type; a name None is the
    type's default. Build it with `of`, which sorts."""

    parts: tuple[tuple[str, str | None], ...]

    @staticmethod
    def of(parts: Mapping[str, str | None]) -> QuotaEntity:
        return QuotaEntity(tuple(sorted(parts.items())))

    @staticmethod
    def user(name: str | None) -> QuotaEntity:
        return QuotaEntity(((USER, name),))

    @staticmethod
    def client(client_id: str | None) -> QuotaEntity:
        return QuotaEntity(((CLIENT_ID, client_id),))

    @staticmethod
    def user_client(name: str | None, client_id: str | None) -> QuotaEntity:
        return QuotaEntity(((CLIENT_ID, client_id), (USER, name)))

    @staticmethod
    def ip(address: str | None) -> QuotaEntity:
        return QuotaEntity(((IP, address),))

    def has(self, entity_type: str) -> bool:
        return any(kind == entity_type for kind, _ in self.parts)

    def name(self, entity_type: str) -> str | None:
        """The part's name (None: the default); KeyError if the entity lacks the type."""
        for kind, name in self.parts:
            if kind == entity_type:
                return name
        raise KeyError(entity_type)

    def types(self) -> frozenset[str]:
        return frozenset(kind for kind, _ in self.parts)

    def ordered(self) -> list[tuple[str, str | None]]:
        """The parts as strom writes them: user, client id, ip."""
        rank = {kind: index for index, kind in enumerate(ENTITY_TYPES)}
        return sorted(self.parts, key=lambda part: rank.get(part[0], len(rank)))

    def sort_key(self) -> tuple[tuple[str, bool, str], ...]:
        """Orders entities (defaults before names) without comparing None with text."""
        return tuple((kind, name is not None, name or "") for kind, name in self.parts)

    def quota_keys(self) -> Mapping[str, QuotaValueType]:
        """The quota keys an entity of these types takes."""
        return IP_KEYS if self.has(IP) else USER_CLIENT_KEYS

    def __str__(self) -> str:
        """As Kafka's messages name an entity: ClientQuotaEntity(entries={user=alice})."""
        entries = ", ".join(
            f"{kind}={'null' if name is None else name}" for kind, name in self.ordered()
        )
        return f"ClientQuotaEntity(entries={{{entries}}})"


def format_quota_value(key: str, value: float) -> str:
    """A value as Kafka's tools write it into a config znode: whole-number keys as an
    integer (`1048576`), the others as a decimal (`200.0`)."""
    kind = USER_CLIENT_KEYS.get(key) or IP_KEYS.get(key)
    if kind in (QuotaValueType.LONG, QuotaValueType.INT):
        return str(int(value))
    return repr(float(value))
