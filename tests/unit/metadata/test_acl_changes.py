"""The controller's ACL decisions: CreateAcls and DeleteAcls against an image, as records
and one result per binding or filter, replayed back into the image."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from znode_harness import DENY, PREFIXED, binding

from strom.metadata import acl_changes
from strom.metadata.acl_changes import TooManyAclRecords, create_acls, delete_acls
from strom.metadata.acl_records import acl_id
from strom.metadata.image import MetadataImage
from strom.security.acls import AclBinding, AclBindingFilter, AclPermissionType, PatternType
from strom.security.operations import AclOperation, AclResourceType

READ = binding()
WRITE = binding(operation=AclOperation.WRITE)
GROUP = binding("app-", AclOperation.ALL, DENY, pattern=PREFIXED, kind=AclResourceType.GROUP)


def created(image: MetadataImage, *bindings: AclBinding) -> MetadataImage:
    records, results = create_acls(image, bindings)
    assert results == [None] * len(bindings)
    return image.replay(records)


def test_created_bindings_replay_into_the_index_under_their_own_ids() -> None:
    image = created(MetadataImage.empty(), READ, GROUP)
    assert set(image.acls) == {acl_id(READ), acl_id(GROUP)}
    assert sorted(image.acl_index) == sorted([READ, GROUP])


def test_a_binding_held_or_named_twice_is_a_success_that_writes_nothing_more() -> None:
    image = created(MetadataImage.empty(), READ)
    records, results = create_acls(image, [READ, WRITE, WRITE])
    assert results == [None, None, None]
    assert len(records) == 1
    assert sorted(image.replay(records).acl_index) == sorted([READ, WRITE])


def test_a_refused_binding_fails_alone() -> None:
    bad = binding(operation=AclOperation.ANY)
    records, results = create_acls(MetadataImage.empty(), [bad, READ])
    assert results[0] is not None and results[0].error_code == ErrorCode.invalid_request
    assert results[1] is None
    assert len(records) == 1


def test_on_zookeeper_a_name_a_znode_cannot_hold_is_refused() -> None:
    slashed = binding("a/b")
    _records, on_raft = create_acls(MetadataImage.empty(), [slashed])
    assert on_raft == [None]
    records, on_zookeeper = create_acls(MetadataImage.empty(), [slashed], znode_names=True)
    refusal = on_zookeeper[0]
    assert refusal is not None and refusal.error_code == ErrorCode.invalid_request
    assert "'/'" in refusal.message
    assert records == []


def test_each_filter_lists_its_matches_and_each_id_goes_once() -> None:
    image = created(MetadataImage.empty(), READ, WRITE, GROUP)
    topics = AclBindingFilter(resource_type=AclResourceType.TOPIC)
    reads = AclBindingFilter(operation=AclOperation.READ)
    nothing = AclBindingFilter(principal="User:nobody")
    records, results = delete_acls(image, [topics, reads, nothing])
    assert [sorted(r.deleted) for r in results] == [sorted([READ, WRITE]), [READ], []]
    assert len(records) == 2
    assert sorted(image.replay(records).acl_index) == [GROUP]


def test_a_refused_filter_fails_alone() -> None:
    image = created(MetadataImage.empty(), READ)
    bad = AclBindingFilter(pattern_type=PatternType.UNKNOWN)
    records, results = delete_acls(image, [bad, AclBindingFilter()])
    assert results[0].refusal is not None
    assert results[0].refusal.error_code == ErrorCode.invalid_request
    assert results[1].deleted == (READ,)
    assert image.replay(records).acls == {}


def test_more_records_than_one_request_may_write_are_refused_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    many = [binding(f"t{i}") for i in range(3)]
    image = created(MetadataImage.empty(), *many)
    monkeypatch.setattr(acl_changes, "MAX_RECORDS", 2)
    with pytest.raises(TooManyAclRecords):
        create_acls(MetadataImage.empty(), many)
    with pytest.raises(TooManyAclRecords):
        delete_acls(image, [AclBindingFilter()])


names = st.sampled_from(["orders", "order", "pay", "*"])
bindings = st.builds(
    binding,
    names,
    st.sampled_from([AclOperation.READ, AclOperation.WRITE, AclOperation.ALL]),
    st.sampled_from([AclPermissionType.ALLOW, AclPermissionType.DENY]),
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    pattern=st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(bindings, max_size=8), st.lists(bindings, max_size=8), names)
def test_creates_and_deletes_keep_the_image_a_set_of_bindings(
    first: list[AclBinding], second: list[AclBinding], deleted_name: str
) -> None:
    image = created(created(MetadataImage.empty(), *first), *second)
    assert sorted(image.acl_index) == sorted(set(first) | set(second))
    assert len(image.acls) == len(set(first) | set(second))  # one id per binding
    gone = AclBindingFilter(resource_name=deleted_name, pattern_type=PatternType.LITERAL)
    records, _results = delete_acls(image, [gone])
    left = image.replay(records)
    assert sorted(left.acl_index) == sorted(
        b
        for b in set(first) | set(second)
        if (b.resource_name, b.pattern_type) != (deleted_name, PatternType.LITERAL)
    )
