"""ACL bindings in Kafka's ZooKeeper layout, and back (the rest of the layout is znodes.py's).

    /kafka-acl/<ResourceType>/<name>                      LITERAL bindings of one resource
    /kafka-acl-extended/prefixed/<ResourceType>/<name>    PREFIXED bindings of one prefix
        {"acls":[{"host":"*","operation":"Read","permissionType":"Allow",
                  "principal":"User:alice"}],"version":1}
    /kafka-acl-changes/acl_changes_<seq>                  TOPIC:orders   (a LITERAL change)
    /kafka-acl-extended-changes/acl_changes_<seq>
        {"name":"ord","patternType":"PREFIXED","resourceType":"TOPIC","version":1}

One znode per resource pattern holds every binding of that pattern; it is deleted with its
last binding. Resource types, operations and permission types are written by Kafka's names
(`Topic`, `TransactionalId`, `IdempotentWrite`, `DescribeConfigs`, `Allow`) and read as
Kafka reads them, case-insensitively, with or without the underscores of the enum names
(`TRANSACTIONAL_ID`, `transactionalid`). A change notification names the pattern that
changed: as `<RESOURCE_TYPE>:<name>` text for LITERAL ones (Kafka writes the enum name
there), as JSON for PREFIXED ones. The parents (ACL_PARENTS, with a znode per resource
type under each root, as Kafka creates them) are created once by the store.

Kafka's layout puts the resource name into the path as it is, so a name that cannot be a
znode name (empty, `.` or `..`, holding `/` or a character ZooKeeper refuses) cannot be
stored: `acl_path_problem` says why, and the controller must refuse such a binding when
its store keeps ZooKeeper's layout (Kafka's ZooKeeper mode fails it too). Bindings are
stored without ids: what is read back gets `acl_records.acl_id`.

Written by hand: no library renders Kafka's ACL znodes. What is read may have been
written by an operator, so every field is checked, each binding as CreateAcls checks it
(`validate_binding`), and anything else is a ZnodeError naming the znode.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import IntEnum
from types import MappingProxyType
from typing import TypeVar

from strom.metadata.acl_records import ResourcePattern, acl_record
from strom.metadata.records import MetadataRecord
from strom.metadata.znode_json import OpKind, ZnodeError, ZnodeOp, json_bytes, json_object
from strom.security.acls import AclBinding, AclPermissionType, PatternType, validate_binding
from strom.security.operations import AclOperation, AclResourceType

__all__ = [
    "ACL_CHANGE_PREFIX",
    "ACL_PARENTS",
    "ACL_ROOT",
    "EXTENDED_ACL_CHANGE_PREFIX",
    "PREFIXED_ACL_ROOT",
    "acl_change",
    "acl_data",
    "acl_path",
    "acl_path_problem",
    "acl_resource",
    "acl_znode_records",
    "kafka_name",
    "parse_acl_change",
    "parse_acls",
]

ACL_ROOT = "/kafka-acl"
EXTENDED_ACL_ROOT = "/kafka-acl-extended"
PREFIXED_ACL_ROOT = f"{EXTENDED_ACL_ROOT}/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = f"{ACL_CHANGES}/acl_changes_"
EXTENDED_ACL_CHANGE_PREFIX = f"{EXTENDED_ACL_CHANGES}/acl_changes_"
ACL_VERSION = 1
"""The version of the resource znodes and of the PREFIXED change notifications."""

_ROOTS: Mapping[PatternType, str] = MappingProxyType(
    {PatternType.LITERAL: ACL_ROOT, PatternType.PREFIXED: PREFIXED_ACL_ROOT}
)
_NOT_CONCRETE = frozenset({"UNKNOWN", "ANY", "MATCH"})
RESOURCE_TYPES: tuple[AclResourceType, ...] = tuple(
    kind for kind in AclResourceType if kind.name not in _NOT_CONCRETE
)


def kafka_name(member: IntEnum) -> str:
    """Kafka's name of a resource type, operation or permission type in ZooKeeper: its
    enum name in PascalCase (TRANSACTIONAL_ID -> TransactionalId)."""
    return "".join(part.capitalize() for part in member.name.split("_"))


ACL_PARENTS: tuple[str, ...] = (
    ACL_ROOT,
    *(f"{ACL_ROOT}/{kafka_name(kind)}" for kind in RESOURCE_TYPES),
    ACL_CHANGES,
    EXTENDED_ACL_ROOT,
    PREFIXED_ACL_ROOT,
    *(f"{PREFIXED_ACL_ROOT}/{kafka_name(kind)}" for kind in RESOURCE_TYPES),
    EXTENDED_ACL_CHANGES,
)
"""The ACL layout's parents, parents first: empty znodes the store creates once."""

_Member = TypeVar("_Member", AclResourceType, AclOperation, AclPermissionType, PatternType)


def _member(kind: type[_Member], text: str, field: str, what: str) -> _Member:
    """The concrete member of `kind` that `text` names as Kafka reads it (its enum name or
    its PascalCase name, any case); ZnodeError otherwise."""
    wanted = text.upper()
    for member in kind:
        if member.name not in _NOT_CONCRETE and wanted in (member.name, kafka_name(member).upper()):
            return member
    raise ZnodeError(f"{what}: {field} {text[:80]!r} is not a {kind.__name__} strom knows")


# --- paths -----------------------------------------------------------------------------

# ZooKeeper refuses these characters in a path (its PathUtils, on Java's UTF-16 chars):
# NUL, C0 and C1 controls, U+D800 to U+F8FF, U+FFF0 to U+FFFF, and so every character
# beyond U+FFFF (Java holds it as two surrogates).
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\U0010ffff]")


def acl_path_problem(resource: ResourcePattern) -> str | None:
    """Why `resource` has no znode in Kafka's layout, or None."""
    if resource.resource_type not in RESOURCE_TYPES:
        return f"resource type {resource.resource_type.name} is not one that has ACLs"
    if resource.pattern_type not in _ROOTS:
        return f"pattern type {resource.pattern_type.name} is neither LITERAL nor PREFIXED"
    name = resource.name
    if name in ("", ".", ".."):
        return f"resource name {name!r} cannot be a znode name"
    if "/" in name:
        return f"resource name {name[:80]!r} holds '/', which ZooKeeper's paths cannot"
    refused = _REFUSED.search(name)
    if refused is not None:
        return f"resource name {name[:80]!r} holds {refused[0]!r}, which ZooKeeper refuses"
    return None


def acl_path(resource: ResourcePattern) -> str:
    """The znode of `resource`'s bindings; ZnodeError if it cannot have one."""
    problem = acl_path_problem(resource)
    if problem is not None:
        raise ZnodeError(problem)
    root = _ROOTS[resource.pattern_type]
    return f"{root}/{kafka_name(resource.resource_type)}/{resource.name}"


def acl_resource(path: str) -> ResourcePattern | None:
    """The resource pattern whose znode `path` is; None for a path that is no resource
    znode of the ACL layout (a parent, or outside it); ZnodeError for a path inside it
    that names no resource strom knows."""
    match path.split("/"):
        case ["", "kafka-acl", kind, name]:
            pattern_type = PatternType.LITERAL
        case ["", "kafka-acl-extended", "prefixed", kind, name]:
            pattern_type = PatternType.PREFIXED
        case ["", "kafka-acl-extended", pattern, _, _]:
            raise ZnodeError(f"{path}: pattern type {pattern[:80]!r} is not 'prefixed'")
        case _:
            return None
    return _resource(kind, name, pattern_type, path)


# --- a resource's bindings -------------------------------------------------------------


def _entry(binding: AclBinding) -> dict[str, str]:
    return {
        "principal": binding.principal,
        "permissionType": kafka_name(binding.permission_type),
        "operation": kafka_name(binding.operation),
        "host": binding.host,
    }


def acl_data(bindings: Iterable[AclBinding]) -> bytes | None:
    """A resource znode holding `bindings` (all of one resource pattern), Kafka's version 1;
    None when there are none. A binding CreateAcls would refuse is left out: it could not
    be read back."""
    valid = sorted({b for b in bindings if validate_binding(b) is None})
    if not valid:
        return None
    return json_bytes({"version": ACL_VERSION, "acls": [_entry(b) for b in valid]})


def _text(entry: Mapping[str, object], key: str, what: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str):
        raise ZnodeError(f"{what}: {key}: expected str, got {value!r:.80}")
    return value


def parse_acls(resource: ResourcePattern, data: bytes, what: str) -> list[AclBinding]:
    """The bindings of `resource` its znode `data` holds, sorted, each once. Empty data is
    no bindings, as Kafka reads it. ZnodeError naming `what` (the znode) for anything but
    Kafka's version 1 with valid bindings."""
    if not data:
        return []
    body = json_object(data, what)
    version = body.get("version")
    if version != ACL_VERSION or isinstance(version, bool):
        raise ZnodeError(f"{what}: version {version!r:.40} is not supported (only 1)")
    entries = body.get("acls")
    if not isinstance(entries, list):
        raise ZnodeError(f"{what}: acls: expected list, got {entries!r:.80}")
    bindings: set[AclBinding] = set()
    for index, entry in enumerate(entries):
        at = f"{what}: acls[{index}]"
        if not isinstance(entry, dict):
            raise ZnodeError(f"{at}: expected an object, got {entry!r:.80}")
        binding = AclBinding(
            resource.resource_type,
            resource.name,
            resource.pattern_type,
            _text(entry, "principal", at),
            _text(entry, "host", at),
            _member(AclOperation, _text(entry, "operation", at), "operation", at),
            _member(AclPermissionType, _text(entry, "permissionType", at), "permissionType", at),
        )
        refusal = validate_binding(binding)
        if refusal is not None:
            raise ZnodeError(f"{at}: {refusal.message}")
        bindings.add(binding)
    return sorted(bindings)


def acl_znode_records(path: str, data: bytes) -> list[MetadataRecord]:
    """The records of the bindings the znode at `path` holds, ids by `acl_id`; none for a
    znode that is no resource znode of the ACL layout."""
    resource = acl_resource(path)
    if resource is None:
        return []
    return [acl_record(binding) for binding in parse_acls(resource, data, path)]


# --- change notifications --------------------------------------------------------------


def acl_change(resource: ResourcePattern) -> ZnodeOp:
    """The notification that `resource`'s bindings changed (`resource` must have a path)."""
    kind = resource.resource_type
    if resource.pattern_type == PatternType.LITERAL:
        return ZnodeOp(OpKind.NOTIFY, ACL_CHANGE_PREFIX, f"{kind.name}:{resource.name}".encode())
    event = {
        "version": ACL_VERSION,
        "resourceType": kind.name,
        "name": resource.name,
        "patternType": resource.pattern_type.name,
    }
    return ZnodeOp(OpKind.NOTIFY, EXTENDED_ACL_CHANGE_PREFIX, json_bytes(event))


def parse_acl_change(path: str, data: bytes) -> ResourcePattern:
    """The resource pattern the notification at `path` (under /kafka-acl-changes or
    /kafka-acl-extended-changes) names; ZnodeError naming `path` otherwise."""
    parent = path.rpartition("/")[0]
    if parent == ACL_CHANGES:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ZnodeError(f"{path} is not UTF-8 text: {data[:100]!r}") from None
        kind, colon, name = text.partition(":")
        if not colon:
            raise ZnodeError(f"{path}: {text[:80]!r} is not ResourceType:name")
        pattern_type = PatternType.LITERAL
    elif parent == EXTENDED_ACL_CHANGES:
        body = json_object(data, path)
        version = body.get("version")
        if version != ACL_VERSION or isinstance(version, bool):
            raise ZnodeError(f"{path}: version {version!r:.40} is not supported (only 1)")
        kind, name = _text(body, "resourceType", path), _text(body, "name", path)
        pattern_type = _member(PatternType, _text(body, "patternType", path), "patternType", path)
        if pattern_type != PatternType.PREFIXED:
            raise ZnodeError(f"{path}: patternType {pattern_type.name} is not PREFIXED")
    else:
        raise ZnodeError(f"{path} is not an ACL change notification")
    return _resource(kind, name, pattern_type, path)


def _resource(kind: str, name: str, pattern_type: PatternType, path: str) -> ResourcePattern:
    """The resource pattern a znode path or notice names; ZnodeError naming `path` for a
    resource type strom does not know or a name a znode cannot hold."""
    resource = ResourcePattern(
        _member(AclResourceType, kind, "resource type", path), name, pattern_type
    )
    problem = acl_path_problem(resource)
    if problem is not None:
        raise ZnodeError(f"{path}: {problem}")
    return resource
