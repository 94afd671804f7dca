"""The controller's client quota decisions, and DescribeClientQuotas, as pure functions of
the image.

    alter_client_quotas(image, alterations, validate_only=...) -> (records, results)
    describe_client_quotas(image, components, strict=...) -> DescribedQuotas
    replace_entity_quotas(image, entity, quotas) -> records   (what ZooKeeper holds)

The rules are Kafka's (its ClientQuotaControlManager and ClientQuotasImage), with its
error codes and messages. An entity names each of `user`, `client-id` and `ip` at most
once, never an empty name, and an IP never with a user or client id; a name None is the
type's default. Each key must be one the entity's types take, each value above 0, and a
whole number for the byte rates and `connection_creation_rate`, within their Java types.
A removal (None) of a key the entity lacks writes nothing and is not checked. An entity
is altered whole or not at all; a request may alter several, each decided on its own.

Where strom differs: an entity named twice in one request is refused both times and
neither alteration is written (Kafka writes the first and answers the entity with an
error); a key named twice gets Kafka's "Duplicate quota key" message (Kafka overwrites it
with "Ignoring duplicate entity"); an IP entity must be an address, or a host name that
`resolves` (Kafka resolves it), and NaN or infinite values are refused.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum

from kio.schema.errors import ErrorCode

from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import (
    CLIENT_ID,
    ENTITY_TYPES,
    IP,
    USER,
    QuotaEntity,
    QuotaValueType,
)
from strom.metadata.records import ClientQuotaRecord, MetadataRecord

__all__ = [
    "DescribedQuotas",
    "FilterComponent",
    "MatchType",
    "QuotaAlteration",
    "QuotaOp",
    "QuotaResult",
    "alter_client_quotas",
    "describe_client_quotas",
    "is_ip_address",
    "replace_entity_quotas",
]

_LONG_MAX = float(2**63 - 1)
_INT_MAX = float(2**31 - 1)


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float | None
    """None removes the key (the request's `remove`)."""


@dataclass(frozen=True, slots=True)
class QuotaAlteration:
    parts: tuple[tuple[str, str | None], ...]
    """The entity as the request names it: (type, name) pairs, name None the default."""
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, slots=True)
class QuotaResult:
    entity: QuotaEntity
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


class _Refusal(Exception):
    def __init__(self, message: str, code: ErrorCode = ErrorCode.invalid_request) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def is_ip_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _entity(parts: Sequence[tuple[str, str | None]], resolves: Callable[[str], bool]) -> None:
    """Refuses an entity Kafka refuses, with its message."""
    if not parts:
        raise _Refusal("Invalid empty client quota entity")
    seen: set[str] = set()
    for kind, name in parts:
        if kind in seen:
            raise _Refusal(f"Invalid client quota entity, duplicate entity entry {kind}")
        if kind not in ENTITY_TYPES:
            raise _Refusal(f"Unhandled client quota entity type: {kind}")
        if name == "":
            raise _Refusal(f"Empty {kind} not supported")
        seen.add(kind)
    if IP in seen:
        if seen != {IP}:
            raise _Refusal(
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId"
            )
        address = dict(parts)[IP]
        if address is not None and not (is_ip_address(address) or resolves(address)):
            raise _Refusal(f"{address} is not a valid IP or resolvable host.")


def _check_value(entity: QuotaEntity, key: str, value: float) -> None:
    kind = entity.quota_keys().get(key)
    if kind is None:
        raise _Refusal(f"Invalid configuration key {key}")
    if math.isnan(value) or math.isinf(value):
        raise _Refusal(f"Quota {key} must be a finite number")
    if value <= 0.0:
        raise _Refusal(f"Quota {key} must be greater than 0")
    if kind is QuotaValueType.DOUBLE:
        return
    if kind is QuotaValueType.LONG and value > _LONG_MAX:
        raise _Refusal(f"Proposed value for {key} is too large for a LONG.")
    if kind is QuotaValueType.INT and value > _INT_MAX:
        raise _Refusal(f"Proposed value for {key} is too large for an INT.")
    if abs(math.fmod(value, 1.0)) > 1e-6:
        raise _Refusal(f"{key} cannot be a fractional value.")


def _entity_records(
    image: MetadataImage, entity: QuotaEntity, ops: Sequence[QuotaOp]
) -> list[MetadataRecord]:
    current = image.client_quotas.get(entity, {})
    records: list[MetadataRecord] = []
    for op in ops:
        if op.value is None:
            if op.key in current:
                records.append(ClientQuotaRecord(entity, op.key, None))
            continue
        _check_value(entity, op.key, op.value)
        if current.get(op.key) != op.value:
            records.append(ClientQuotaRecord(entity, op.key, float(op.value)))
    return records


def alter_client_quotas(
    image: MetadataImage,
    alterations: Sequence[QuotaAlteration],
    *,
    validate_only: bool = False,
    resolves: Callable[[str], bool] = lambda _host: False,
) -> tuple[list[MetadataRecord], list[QuotaResult]]:
    """The records of one AlterClientQuotas request (none with `validate_only`), and one
    result per entity, in the order the request first names them. `resolves(host)` says
    whether an IP entity that is not an address names a host that resolves."""
    entities = [QuotaEntity.of(dict(alteration.parts)) for alteration in alterations]
    counts: dict[QuotaEntity, int] = {}
    for entity in entities:
        counts[entity] = counts.get(entity, 0) + 1
    results: dict[QuotaEntity, QuotaResult] = {}
    records: list[MetadataRecord] = []
    for alteration, entity in zip(alterations, entities, strict=True):
        if entity in results:
            continue
        try:
            if counts[entity] > 1:
                raise _Refusal(f"Ignoring duplicate entity {entity}")
            keys = [op.key for op in alteration.ops]
            twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
            if twice is not None:
                raise _Refusal(
                    f"Duplicate quota key {twice} not updating quota for this entity {entity}"
                )
            _entity(alteration.parts, resolves)
            records += _entity_records(image, entity, alteration.ops)
        except _Refusal as refusal:
            results[entity] = QuotaResult(entity, refusal.code, refusal.message)
            continue
        results[entity] = QuotaResult(entity)
    return ([] if validate_only else records), list(results.values())


# --- DescribeClientQuotas ----------------------------------------------------------------


class MatchType(IntEnum):
    """How a filter component matches an entity's part of its type."""

    EXACT = 0
    """The name given."""
    DEFAULT = 1
    """The type's default."""
    ANY = 2
    """Any name or the default: the entity has a part of the type (Kafka's SPECIFIED)."""


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int
    match: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedQuotas:
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    entries: tuple[tuple[QuotaEntity, Mapping[str, float]], ...] | None = ()
    """Each matching entity with its quotas, entities sorted; None when refused."""


def _filter(
    components: Sequence[FilterComponent],
) -> tuple[dict[str, str | None], set[str]]:
    """(the exact names, None for a default; the types any name matches) of a filter."""
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for component in components:
        kind = component.entity_type
        if not kind:
            raise _Refusal("Invalid empty entity type.")
        if kind in exact or kind in any_name:
            raise _Refusal(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            raise _Refusal(f"Unsupported entity type {kind}", ErrorCode.unsupported_version)
        if component.match_type == MatchType.EXACT:
            if component.match is None:
                raise _Refusal("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = component.match
        elif component.match_type in (MatchType.DEFAULT, MatchType.ANY):
            if component.match is not None:
                default = component.match_type == MatchType.DEFAULT
                name = "MATCH_TYPE_DEFAULT" if default else "MATCH_TYPE_SPECIFIED"
                raise _Refusal(f"Request specified {name}, but also specified a match string.")
            if component.match_type == MatchType.DEFAULT:
                exact[kind] = None
            else:
                any_name.add(kind)
        else:
            raise _Refusal(f"Unknown match type {component.match_type}")
    named = exact.keys() | any_name
    if IP in named and (USER in named or CLIENT_ID in named):
        raise _Refusal(
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component."
        )
    return exact, any_name


def _matches(
    entity: QuotaEntity, exact: Mapping[str, str | None], any_name: set[str], strict: bool
) -> bool:
    parts = dict(entity.parts)
    if strict and len(parts) != len(exact) + len(any_name):
        return False
    if any(kind not in parts or parts[kind] != name for kind, name in exact.items()):
        return False
    return all(kind in parts for kind in any_name)


def describe_client_quotas(
    image: MetadataImage, components: Sequence[FilterComponent], *, strict: bool
) -> DescribedQuotas:
    """The entities the filter matches: every component must match a part of the entity
    (and, when `strict`, the entity has no other part). A malformed filter is refused
    whole, with Kafka's code (INVALID_REQUEST; UNSUPPORTED_VERSION for an unknown type)."""
    try:
        exact, any_name = _filter(components)
    except _Refusal as refusal:
        return DescribedQuotas(refusal.code, refusal.message, None)
    found = [
        (entity, quotas)
        for entity, quotas in image.client_quotas.items()
        if _matches(entity, exact, any_name, strict)
    ]
    found.sort(key=lambda item: item[0].sort_key())
    return DescribedQuotas(entries=tuple(found))


def replace_entity_quotas(
    image: MetadataImage, entity: QuotaEntity, quotas: Mapping[str, float]
) -> list[MetadataRecord]:
    """The records that make `entity`'s quotas exactly `quotas` (what an operator wrote
    into ZooKeeper); none if they are already."""
    known = image.client_quotas.get(entity, {})
    records: list[MetadataRecord] = [
        ClientQuotaRecord(entity, key, None) for key in sorted(known.keys() - quotas.keys())
    ]
    records += [
        ClientQuotaRecord(entity, key, value)
        for key, value in sorted(quotas.items())
        if known.get(key) != value
    ]
    return records
