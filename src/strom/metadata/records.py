"""Metadata records: every decision the controller makes is one or more of these.

State changes only by replaying records (see image.py), the same way at the controller,
on every broker and at restart. The metadata log is a Raft log: each Raft entry holds the
records of one controller decision, applied atomically, and the entry's Raft index is the
metadata offset. `encode_entry`/`decode_entry` turn one entry's records into bytes and
back (a JSON array of records); `encode`/`decode` do the same for a single record (the
embedded store keeps one record per Kafka record). The JSON is written by hand, as the
records are small and flat; `decode` checks every field's type, so a malformed entry is a
MetadataDecodeError, never a half-built record.

Compatibility: a RegisterBrokerRecord written before brokers were fenced has no `fenced`
field; it decodes as unfenced (`fenced=False`), because the single-node store that wrote
it had no heartbeats that could ever unfence it. New registrations are fenced until the
broker has caught up with the metadata log (KRaft's rule). A registration written before
brokers advertised several listeners has no `endpoints`: its `host` and `port` serve
every listener. Partition records written before reassignments existed have no
`adding_replicas`/`removing_replicas`: a PartitionRecord decodes with none pending, a
PartitionChangeRecord as leaving them as they are (their defaults).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, field, fields
from enum import IntEnum
from typing import Any

from strom.metadata.quota_entities import QuotaEntity


class ConfigResourceType(IntEnum):
    """Kafka's DescribeConfigs / AlterConfigs resource types."""

    TOPIC = 2
    BROKER = 4
    GROUP = 32


class SecurityProtocol(IntEnum):
    """A listener's security protocol, by Kafka's ids (BrokerRegistration's listeners)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """One client listener a broker advertises: clients that reach it on listener `name`
    are given `host`:`port` for it."""

    name: str
    host: str
    port: int
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT

    def __str__(self) -> str:
        """`NAME://host:port`, an IPv6 host in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


CLUSTER_DEFAULT = ""
"""The resource name of the cluster-wide dynamic broker default (Kafka's `<default>`)."""


@dataclass(frozen=True, slots=True)
class ClusterRecord:
    """Written once, by the first active controller of a new cluster."""

    cluster_id: str
    cluster_name: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker (re-)registered. Its epoch is the metadata offset of the entry holding this
    record; `epoch` is set only in snapshots, where every record shares one offset."""

    broker_id: int
    incarnation_id: uuid.UUID
    host: str
    port: int
    """The address other brokers reach this one on (its inter-broker listener)."""
    rack: str | None
    fenced: bool = True
    epoch: int | None = None
    endpoints: tuple[BrokerEndpoint, ...] = ()
    """Every advertised client listener; empty in records written before brokers had more
    than one, which meant `host`:`port` on every listener."""


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRecord:
    broker_id: int
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicRecord:
    name: str
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    topic_id: uuid.UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding_replicas: tuple[int, ...] = ()
    """Replicas a pending reassignment is adding (see reassignments.py); () if none."""
    removing_replicas: tuple[int, ...] = ()
    """Replicas a pending reassignment is removing; () if none."""


@dataclass(frozen=True, slots=True)
class PartitionChangeRecord:
    """The new full leader, ISR and epochs of a partition; `replicas`, `adding_replicas`
    and `removing_replicas` None = unchanged."""

    topic_id: uuid.UUID
    partition: int
    leader: int
    isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    topic_id: uuid.UUID


@dataclass(frozen=True, slots=True)
class ConfigRecord:
    """A dynamic config override. BROKER with resource_name "" is the cluster-wide broker
    default, "<id>" one broker's; TOPIC names the topic."""

    resource_type: ConfigResourceType
    resource_name: str
    name: str
    value: str | None  # None removes the override


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """A block of producer ids was handed to `broker_id`; the next free id follows it."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was set (Kafka's record of that name):
    what the broker needs to check a SCRAM client, never the password. `mechanism` is
    Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512. The key bytes are left
    out of the repr."""

    name: str
    mechanism: int
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was deleted."""

    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    """A client quota was set on an entity (Kafka's record of that name), or removed when
    `value` is None. The entity's parts are (type, name), a name None the default."""

    entity: QuotaEntity
    key: str
    value: float | None


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL binding was created (Kafka's record of that name, field for field): `id`
    names it for its removal; the codes are Kafka's ResourceType, PatternType,
    AclOperation and AclPermissionType (acl_records.binding_of turns them into an
    AclBinding)."""

    id: uuid.UUID
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """The ACL binding created under `id` was deleted."""

    id: uuid.UUID


MetadataRecord = (
    ClusterRecord
    | RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | UnregisterBrokerRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | ProducerIdsRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | ClientQuotaRecord
)

RECORD_TYPES: tuple[type[Any], ...] = (
    ClusterRecord,
    RegisterBrokerRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    TopicRecord,
    PartitionRecord,
    PartitionChangeRecord,
    RemoveTopicRecord,
    ConfigRecord,
    ProducerIdsRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    ClientQuotaRecord,
)
_TYPES: dict[str, type[Any]] = {cls.__name__: cls for cls in RECORD_TYPES}


class MetadataDecodeError(ValueError):
    pass


# --- field codecs, by the annotation text of the dataclass field --------------------------


def _int(value: object) -> int:
    if type(value) is not int:
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def _bool(value: object) -> bool:
    if type(value) is not bool:
        raise ValueError(f"expected true or false, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    return value


def _bytes(value: object) -> bytes:
    """Bytes are written as standard base64 text."""
    try:
        return base64.b64decode(_str(value), validate=True)
    except binascii.Error:
        raise ValueError("expected base64 text") from None


def _uuid(value: object) -> uuid.UUID:
    return uuid.UUID(_str(value))


def _ints(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError(f"expected a list of integers, got {value!r}")
    return tuple(_int(item) for item in value)


def _float(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    return float(value)


def _quota_entity(value: object) -> QuotaEntity:
    """[[type, name-or-null], ...], each type once."""
    if not isinstance(value, list):
        raise ValueError(f"expected a list of [type, name] pairs, got {value!r}")
    parts: dict[str, str | None] = {}
    for item in value:
        if not isinstance(item, list) or len(item) != 2 or item[0] in parts:
            raise ValueError(f"expected distinct [type, name] pairs, got {value!r}")
        parts[_str(item[0])] = None if item[1] is None else _str(item[1])
    return QuotaEntity.of(parts)


def _resource_type(value: object) -> ConfigResourceType:
    return ConfigResourceType(_int(value))


def endpoints_from_json(value: object) -> tuple[BrokerEndpoint, ...]:
    """Endpoints as `record_to_json` writes them; ValueError naming the problem."""
    if not isinstance(value, list):
        raise ValueError(f"expected a list of endpoints, got {value!r}")
    result = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "host", "port", "security_protocol"}:
            raise ValueError(f"expected {{name, host, port, security_protocol}}, got {item!r}")
        try:
            protocol = SecurityProtocol(_int(item["security_protocol"]))
        except ValueError:
            raise ValueError(f"unknown security protocol {item['security_protocol']!r}") from None
        result.append(
            BrokerEndpoint(_str(item["name"]), _str(item["host"]), _int(item["port"]), protocol)
        )
    return tuple(result)


def _optional(decode: Callable[[object], Any]) -> Callable[[object], Any]:
    return lambda value: None if value is None else decode(value)


_DECODERS: dict[str, Callable[[object], Any]] = {
    "int": _int,
    "bool": _bool,
    "str": _str,
    "bytes": _bytes,
    "uuid.UUID": _uuid,
    "tuple[int, ...]": _ints,
    "ConfigResourceType": _resource_type,
    "int | None": _optional(_int),
    "str | None": _optional(_str),
    "tuple[int, ...] | None": _optional(_ints),
    "tuple[BrokerEndpoint, ...]": endpoints_from_json,
    "QuotaEntity": _quota_entity,
    "float | None": _optional(_float),
}
# Per record type: field name -> (decoder, whether the field may be left out).
_SCHEMAS: dict[type[Any], dict[str, tuple[Callable[[object], Any], bool]]] = {
    cls: {f.name: (_DECODERS[str(f.type)], f.default is not MISSING) for f in fields(cls)}
    for cls in RECORD_TYPES
}
# Fields an older strom did not write, with the value such records mean.
_LEGACY_DEFAULTS: dict[type[Any], dict[str, object]] = {RegisterBrokerRecord: {"fenced": False}}


def endpoint_json(endpoint: BrokerEndpoint) -> dict[str, Any]:
    return {
        "name": endpoint.name,
        "host": endpoint.host,
        "port": endpoint.port,
        "security_protocol": int(endpoint.security_protocol),
    }


def record_to_json(record: MetadataRecord) -> dict[str, Any]:
    """The JSON object of one record: its fields plus "type"."""
    body: dict[str, Any] = {"type": type(record).__name__}
    for f in fields(record):
        value = getattr(record, f.name)
        if isinstance(value, uuid.UUID):
            value = str(value)
        elif isinstance(value, tuple):
            value = [
                endpoint_json(item) if isinstance(item, BrokerEndpoint) else item for item in value
            ]
        elif isinstance(value, IntEnum):
            value = int(value)
        elif isinstance(value, bytes):
            value = base64.b64encode(value).decode()
        elif isinstance(value, QuotaEntity):
            value = [list(part) for part in value.parts]
        body[f.name] = value
    return body


def record_from_json(body: object) -> MetadataRecord:
    """The record of a JSON object; MetadataDecodeError naming the problem otherwise."""
    try:
        if not isinstance(body, dict):
            raise ValueError(f"expected a JSON object, got {type(body).__name__}")
        kind = body.get("type")
        cls = _TYPES.get(kind) if isinstance(kind, str) else None
        if cls is None:
            raise ValueError(f"unknown record type {kind!r}")
        schema = _SCHEMAS[cls]
        unknown = sorted(set(body) - set(schema) - {"type"})
        if unknown:
            raise ValueError(f"unknown field(s) {unknown} in {kind}")
        values: dict[str, Any] = {}
        for name, (decode_field, optional) in schema.items():
            if name in body:
                try:
                    values[name] = decode_field(body[name])
                except ValueError as exc:
                    raise ValueError(f"{kind}.{name}: {exc}") from None
            elif name in _LEGACY_DEFAULTS.get(cls, {}):
                values[name] = _LEGACY_DEFAULTS[cls][name]
            elif not optional:
                raise ValueError(f"{kind} lacks field {name!r}")
        record: MetadataRecord = cls(**values)
    except (ValueError, TypeError) as exc:
        raise MetadataDecodeError(f"bad metadata record: {exc}") from exc
    return record


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _loads(data: bytes) -> object:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MetadataDecodeError(f"metadata is not JSON ({exc}): {data[:200]!r}") from exc


def encode(record: MetadataRecord) -> bytes:
    return _dumps(record_to_json(record))


def decode(data: bytes) -> MetadataRecord:
    return record_from_json(_loads(data))


def encode_entry(records: Sequence[MetadataRecord]) -> bytes:
    """One Raft entry: the records of one controller decision, as a JSON array."""
    return _dumps([record_to_json(record) for record in records])


def decode_entry(data: bytes) -> list[MetadataRecord]:
    """The records of one Raft entry; MetadataDecodeError if any part is malformed."""
    body = _loads(data)
    if not isinstance(body, list):
        raise MetadataDecodeError(f"a metadata entry is a JSON array, not {data[:200]!r}")
    return [record_from_json(item) for item in body]
