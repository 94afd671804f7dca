"""The active controller's ACL decisions, as Kafka's controller takes them: CreateAcls and
DeleteAcls against the image, as records and one result per binding or filter.

Pure. A binding is checked with `validate_binding` (INVALID_REQUEST with Kafka's
message); one the image holds already is a success that writes nothing, as is one
named twice in a request. On ZooKeeper a resource name a znode cannot hold is refused
too (`znode_names`). A new binding's record id is `acl_id(binding)`, the same on every
store, so a binding has one id wherever it was made. A delete lists, for each filter,
every binding it matches, and removes each matched id once however many filters match it.
Neither writes more than MAX_RECORDS records: a request that would is refused whole.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.metadata.acl_records import ResourcePattern, acl_record
from strom.metadata.acl_znodes import acl_path_problem
from strom.metadata.image import MetadataImage
from strom.metadata.records import MetadataRecord, RemoveAccessControlEntryRecord
from strom.security.acls import (
    AclBinding,
    AclBindingFilter,
    AclRefusal,
    validate_binding,
    validate_filter,
)

__all__ = [
    "MAX_RECORDS",
    "AclDeletion",
    "TooManyAclRecords",
    "create_acls",
    "delete_acls",
]

MAX_RECORDS = 10_000
"""The most records one CreateAcls or DeleteAcls may write (Kafka's bound per operation)."""


class TooManyAclRecords(ValueError):
    """The request would write more than MAX_RECORDS records; nothing is written."""


@dataclass(frozen=True, slots=True)
class AclDeletion:
    """One DeleteAcls filter's result: the bindings it matched, or why it was refused."""

    deleted: tuple[AclBinding, ...] = ()
    refusal: AclRefusal | None = None


def create_acls(
    image: MetadataImage, bindings: Sequence[AclBinding], *, znode_names: bool = False
) -> tuple[list[MetadataRecord], list[AclRefusal | None]]:
    """The records creating `bindings` and one result per binding (None: created, or
    held already). TooManyAclRecords past MAX_RECORDS."""
    records: list[MetadataRecord] = []
    results: list[AclRefusal | None] = []
    new: set[AclBinding] = set()
    for binding in bindings:
        refusal = validate_binding(binding)
        if refusal is None and znode_names:
            problem = acl_path_problem(ResourcePattern.of(binding))
            if problem is not None:
                refusal = AclRefusal(ErrorCode.invalid_request, f"On ZooKeeper, {problem}")
        results.append(refusal)
        if refusal is not None or binding in image.acl_index or binding in new:
            continue
        new.add(binding)
        records.append(acl_record(binding))
        if len(records) > MAX_RECORDS:
            raise TooManyAclRecords(f"cannot create more than {MAX_RECORDS} ACLs at once")
    return records, results


def delete_acls(
    image: MetadataImage, filters: Sequence[AclBindingFilter]
) -> tuple[list[MetadataRecord], list[AclDeletion]]:
    """The records removing every binding `filters` match, and one result per filter.
    TooManyAclRecords past MAX_RECORDS."""
    removed: dict[uuid.UUID, MetadataRecord] = {}
    results: list[AclDeletion] = []
    ids_of: dict[AclBinding, list[uuid.UUID]] = {}
    for acl_id, binding in image.acls.items():
        ids_of.setdefault(binding, []).append(acl_id)
    for acl_filter in filters:
        refusal = validate_filter(acl_filter)
        if refusal is not None:
            results.append(AclDeletion(refusal=refusal))
            continue
        matched = tuple(image.acl_index.matching(acl_filter))
        for binding in matched:
            for acl_id in ids_of.get(binding, ()):
                removed.setdefault(acl_id, RemoveAccessControlEntryRecord(acl_id))
        if len(removed) > MAX_RECORDS:
            raise TooManyAclRecords(f"cannot delete more than {MAX_RECORDS} ACLs at once")
        results.append(AclDeletion(deleted=matched))
    return list(removed.values()), results
