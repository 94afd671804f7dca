"""ACL records: a binding and its record, the ids derived from bindings, and the image's
ACLs and their index, kept change by change (duplicates and unknown ids included)."""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from znode_harness import BINDINGS, DENY, PREFIXED, binding

from strom.metadata.acl_records import ResourcePattern, acl_id, acl_record, binding_of
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    AccessControlEntryRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    TopicRecord,
)
from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType

READ = binding()
WRITE = binding(operation=AclOperation.WRITE)
GROUP = binding("app-", AclOperation.ALL, DENY, pattern=PREFIXED, kind=AclResourceType.GROUP)
ID1, ID2, ID3 = (uuid.UUID(int=n) for n in (1, 2, 3))


def replayed(*entries: Iterable[MetadataRecord]) -> MetadataImage:
    image = MetadataImage.empty()
    for entry in entries:
        image = image.replay(entry)
    return image


def consistent(image: MetadataImage) -> None:
    """The index holds exactly the bindings of `acls`, and the duplicate counts agree."""
    assert sorted(image.acl_index) == sorted(set(image.acls.values()))
    counts = Counter(image.acls.values())
    assert image.acl_duplicates == {b: n - 1 for b, n in counts.items() if n > 1}


# --- a binding and its record ------------------------------------------------------------


@given(BINDINGS)
def test_a_binding_survives_its_record(acl: AclBinding) -> None:
    assert binding_of(acl_record(acl)) == acl
    assert acl_record(acl, ID1).id == ID1


def test_a_record_carries_kafkas_codes_and_unknown_ones_read_as_unknown() -> None:
    assert acl_record(READ, ID1) == AccessControlEntryRecord(
        ID1, 2, "orders", 3, "User:alice", "*", 3, 3
    )
    odd = binding_of(AccessControlEntryRecord(ID1, 42, "x", 9, "User:a", "*", 77, 8))
    assert (odd.resource_type, odd.pattern_type, odd.operation, odd.permission_type) == (
        AclResourceType.UNKNOWN,
        PatternType.UNKNOWN,
        AclOperation.UNKNOWN,
        AclPermissionType.UNKNOWN,
    )


def test_a_bindings_id_is_a_fixed_version_5_uuid_of_its_fields() -> None:
    # Pinned: every broker and every later strom must derive the same id from ZooKeeper.
    assert acl_id(READ) == uuid.UUID("6c48f312-a064-5528-b037-9eb166f3979e")
    assert acl_id(READ).version == 5
    assert acl_id(binding()) == acl_id(READ)
    assert acl_record(READ).id == acl_id(READ)
    assert acl_id(binding(principal="User:\ud800")) != acl_id(READ)  # any text hashes


@given(BINDINGS, BINDINGS)
def test_different_bindings_get_different_ids(one: AclBinding, other: AclBinding) -> None:
    assert (acl_id(one) == acl_id(other)) == (one == other)


def test_a_resource_pattern_is_a_bindings_type_name_and_pattern() -> None:
    assert ResourcePattern.of(GROUP) == ResourcePattern(
        AclResourceType.GROUP, "app-", PatternType.PREFIXED
    )


# --- the image ---------------------------------------------------------------------------


def test_the_image_holds_created_acls_and_forgets_removed_ones() -> None:
    empty = MetadataImage.empty()
    image = empty.replay([acl_record(READ, ID1), acl_record(GROUP, ID2)])
    assert image.acls == {ID1: READ, ID2: GROUP}
    consistent(image)
    assert Authorizer(image.acl_index).authorize(
        "User:alice", "10.1.1.1", AclOperation.DESCRIBE, AclResourceType.TOPIC, "orders"
    )
    later = image.replay([RemoveAccessControlEntryRecord(ID1)])
    assert later.acls == {ID2: GROUP}
    consistent(later)
    # Images are immutable: the earlier ones, and their indexes, are as they were.
    assert image.acls == {ID1: READ, ID2: GROUP} and READ in image.acl_index
    assert empty.acls == {} and len(empty.acl_index) == 0


def test_an_entry_without_acl_changes_keeps_the_acls_and_index_objects() -> None:
    image = replayed([acl_record(READ, ID1)])
    later = image.replay([TopicRecord("t", ID3)])
    assert later.acls is image.acls and later.acl_index is image.acl_index
    again = image.replay([acl_record(READ, ID1)])  # the same binding under the same id
    assert again.acl_index is image.acl_index and again.acls == image.acls
    changed = image.replay([acl_record(WRITE, ID2)])
    assert changed.acl_index is not image.acl_index


def test_the_index_changes_once_per_entry_and_is_never_rebuilt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    image = replayed([acl_record(READ, ID1)])
    calls: list[tuple[list[AclBinding], list[AclBinding]]] = []
    real = AclIndex.with_changes

    def spy(
        self: AclIndex, added: Iterable[AclBinding] = (), removed: Iterable[AclBinding] = ()
    ) -> AclIndex:
        calls.append((sorted(added), sorted(removed)))
        return real(self, added, removed)

    monkeypatch.setattr(AclIndex, "with_changes", spy)
    monkeypatch.setattr(AclIndex, "__init__", lambda *_: pytest.fail("index rebuilt"))
    later = image.replay(
        [
            acl_record(WRITE, ID2),
            acl_record(GROUP, ID3),
            RemoveAccessControlEntryRecord(ID3),  # created and removed in one entry
            RemoveAccessControlEntryRecord(ID1),
        ]
    )
    assert calls == [([WRITE], [READ])]
    assert sorted(later.acl_index) == [WRITE]


def test_one_binding_under_two_ids_stays_indexed_until_its_last_id_goes() -> None:
    # No controller writes this (CreateAcls of a binding that exists writes nothing), but
    # a replayed history that holds it must leave the image consistent.
    image = replayed([acl_record(READ, ID1)], [acl_record(READ, ID2)])
    assert image.acls == {ID1: READ, ID2: READ}
    assert list(image.acl_index) == [READ] and image.acl_duplicates == {READ: 1}
    consistent(image)
    one_left = image.replay([RemoveAccessControlEntryRecord(ID1)])
    assert one_left.acls == {ID2: READ} and READ in one_left.acl_index
    consistent(one_left)
    none_left = one_left.replay([RemoveAccessControlEntryRecord(ID2)])
    assert none_left.acls == {} and len(none_left.acl_index) == 0
    consistent(none_left)
    same_entry = MetadataImage.empty().replay([acl_record(READ, ID1), acl_record(READ, ID2)])
    assert same_entry.acl_duplicates == {READ: 1}
    consistent(same_entry)


def test_a_reused_id_replaces_its_binding() -> None:
    image = replayed([acl_record(READ, ID1)], [acl_record(WRITE, ID1)])
    assert image.acls == {ID1: WRITE} and list(image.acl_index) == [WRITE]
    consistent(image)


def test_removing_an_unknown_id_changes_nothing_and_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    image = replayed([acl_record(READ, ID1)])
    with caplog.at_level(logging.DEBUG):
        later = image.replay([RemoveAccessControlEntryRecord(ID2)])
    assert later.acls is image.acls and later.acl_index is image.acl_index
    assert caplog.records == []


_IDS = st.sampled_from([ID1, ID2, ID3, uuid.UUID(int=4)])
_FEW_BINDINGS = st.sampled_from([READ, WRITE, GROUP, binding("orders", host="::1")])
_ACL_RECORDS: st.SearchStrategy[MetadataRecord] = st.one_of(
    st.builds(acl_record, _FEW_BINDINGS, _IDS),
    st.builds(RemoveAccessControlEntryRecord, _IDS),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(_ACL_RECORDS, max_size=5), max_size=10))
def test_the_image_follows_a_model_of_ids_and_bindings(
    entries: list[list[MetadataRecord]],
) -> None:
    """A model: a dict of id -> binding; a creation sets an id, a removal pops it. The index
    always holds the distinct bindings, as an index built at once from them would."""
    model: dict[uuid.UUID, AclBinding] = {}
    image = MetadataImage.empty()
    seen: list[tuple[MetadataImage, dict[uuid.UUID, AclBinding]]] = []
    for entry in entries:
        for record in entry:
            if isinstance(record, AccessControlEntryRecord):
                model[record.id] = binding_of(record)
            elif isinstance(record, RemoveAccessControlEntryRecord):
                model.pop(record.id, None)
        image = image.replay(entry)
        assert image.acls == model
        consistent(image)
        assert sorted(image.acl_index) == sorted(AclIndex(model.values()))
        seen.append((image, dict(model)))
    for earlier, then in seen:
        assert earlier.acls == then
        consistent(earlier)
