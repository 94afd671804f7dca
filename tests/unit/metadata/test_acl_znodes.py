"""ACLs in Kafka's ZooKeeper layout: names and paths, a resource's znode, the change
notifications, what a diff writes, what an operator's znode turns into, and parsers that
refuse hostile znodes by name and never crash."""

from __future__ import annotations

import json
import uuid
from contextlib import suppress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from znode_harness import (
    BINDINGS,
    DENY,
    EPOCH,
    LITERAL,
    PREFIXED,
    acl_notices,
    apply,
    binding,
    example,
    render,
    settled,
)

from strom.metadata.acl_records import ResourcePattern, acl_id, acl_record
from strom.metadata.acl_znodes import (
    ACL_CHANGE_PREFIX,
    ACL_PARENTS,
    EXTENDED_ACL_CHANGE_PREFIX,
    acl_change,
    acl_data,
    acl_path,
    acl_path_problem,
    acl_resource,
    kafka_name,
    parse_acl_change,
    parse_acls,
)
from strom.metadata.image import MetadataImage
from strom.metadata.records import RemoveAccessControlEntryRecord
from strom.metadata.znode_diff import diff, replace_resource_acls
from strom.metadata.znodes import PARENTS, OpKind, ZnodeError, ZnodeOp, image_from_znodes
from strom.security.acls import AclBinding, AclPermissionType
from strom.security.operations import AclOperation, AclResourceType

Kind, Op = AclResourceType, AclOperation
ORDERS = ResourcePattern(Kind.TOPIC, "orders", LITERAL)
TX = ResourcePattern(Kind.TRANSACTIONAL_ID, "tx-", PREFIXED)
CHANGE = "/kafka-acl-changes/acl_changes_0000000007"
EXTENDED_CHANGE = "/kafka-acl-extended-changes/acl_changes_0000000007"


# --- names and paths ---------------------------------------------------------------------


def test_types_operations_and_permissions_have_kafkas_names() -> None:
    assert [kafka_name(kind) for kind in Kind if kind > Kind.ANY] == [
        "Topic",
        "Group",
        "Cluster",
        "TransactionalId",
        "DelegationToken",
        "User",
    ]
    names = [kafka_name(o) for o in (Op.IDEMPOTENT_WRITE, Op.DESCRIBE_CONFIGS, Op.ALL)]
    assert names == ["IdempotentWrite", "DescribeConfigs", "All"]
    assert [kafka_name(p) for p in (AclPermissionType.ALLOW, DENY)] == ["Allow", "Deny"]


def test_each_resource_pattern_has_its_znode_under_its_types_parent() -> None:
    assert acl_path(ORDERS) == "/kafka-acl/Topic/orders"
    assert acl_path(TX) == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    assert acl_path(ResourcePattern(Kind.GROUP, "*", LITERAL)) == "/kafka-acl/Group/*"
    assert "/kafka-acl/DelegationToken" in ACL_PARENTS
    assert "/kafka-acl-extended/prefixed/User" in ACL_PARENTS
    assert {"/kafka-acl-changes", "/kafka-acl-extended-changes"} <= set(ACL_PARENTS)
    assert set(ACL_PARENTS) <= set(PARENTS)
    for index, parent in enumerate(PARENTS):  # parents first, as the store creates them
        assert parent.rsplit("/", 1)[0] in ("", *PARENTS[:index]), parent
    for resource in (ORDERS, TX):
        assert acl_resource(acl_path(resource)) == resource


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "nul\x00", "bell\x07", "del\x7f", "\ue000", "\ufff0", "😀"]
)
def test_a_name_zookeeper_cannot_hold_has_no_znode(name: str) -> None:
    resource = ResourcePattern(Kind.GROUP, name, LITERAL)
    assert acl_path_problem(resource) is not None
    with pytest.raises(ZnodeError, match="resource name"):
        acl_path(resource)


def test_only_concrete_types_and_patterns_have_znodes() -> None:
    assert acl_path_problem(ResourcePattern(Kind.ANY, "x", LITERAL)) is not None
    assert acl_path_problem(ResourcePattern(Kind.TOPIC, "x", PREFIXED.MATCH)) is not None
    for name in ("...", "a.b", "*", "é ~%", "a:b"):
        assert acl_path_problem(ResourcePattern(Kind.TOPIC, name, PREFIXED)) is None


def test_paths_outside_the_resource_znodes_are_no_resource() -> None:
    for path in [*ACL_PARENTS, "/kafka-acl/Topic/a/b", "/config/topics/t", CHANGE]:
        assert acl_resource(path) is None, path
    assert acl_resource("/kafka-acl/TRANSACTIONAL_ID/t") == ResourcePattern(
        Kind.TRANSACTIONAL_ID, "t", LITERAL
    )
    with pytest.raises(ZnodeError, match="/kafka-acl/Queue/q: resource type 'Queue'"):
        acl_resource("/kafka-acl/Queue/q")
    with pytest.raises(ZnodeError, match="pattern type 'match' is not 'prefixed'"):
        acl_resource("/kafka-acl-extended/match/Topic/t")


# --- a resource's bindings ---------------------------------------------------------------


def test_kafkas_own_znode_is_read_and_strom_writes_it_sorted_and_compact() -> None:
    kafkas = (
        b'{"version": 1, "acls": [{"host": "host1", "permissionType": "Deny", '
        b'"operation": "Read", "principal": "User:alice"}, {"principal": "User:*", '
        b'"host": "*", "operation": "IDEMPOTENTWRITE", "permissionType": "allow"}]}'
    )
    read = [
        binding("kafka-cluster", Op.IDEMPOTENT_WRITE, principal="User:*", kind=Kind.CLUSTER),
        binding("kafka-cluster", Op.READ, DENY, host="host1", kind=Kind.CLUSTER),
    ]
    cluster = ResourcePattern(Kind.CLUSTER, "kafka-cluster", LITERAL)
    assert parse_acls(cluster, kafkas, "/kafka-acl/Cluster/kafka-cluster") == read
    assert acl_data(reversed(read)) == (
        b'{"acls":[{"host":"*","operation":"IdempotentWrite","permissionType":"Allow",'
        b'"principal":"User:*"},{"host":"host1","operation":"Read","permissionType":"Deny",'
        b'"principal":"User:alice"}],"version":1}'
    )


def test_empty_znodes_hold_no_bindings_and_repeats_count_once() -> None:
    assert parse_acls(ORDERS, b"", "z") == []
    assert parse_acls(ORDERS, b'{"version":1,"acls":[]}', "z") == []
    entry = {"principal": "User:alice", "host": "*", "operation": "read", "permissionType": "ALLOW"}
    twice = json.dumps({"version": 1, "acls": [entry, entry]}).encode()
    assert parse_acls(ORDERS, twice, "z") == [binding()]
    assert acl_data([]) is None
    assert acl_data([binding(principal="alice")]) is None  # CreateAcls refuses it


def _one(**changes: object) -> bytes:
    """A resource znode holding one entry: a valid one with `changes` (None: left out)."""
    entry: dict[str, object] = {
        "principal": "User:a",
        "host": "*",
        "operation": "Read",
        "permissionType": "Allow",
        **changes,
    }
    kept = {key: value for key, value in entry.items() if value is not None}
    return json.dumps({"version": 1, "acls": [kept]}).encode()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"{", "is not JSON"),
        (b"[]", "must hold a JSON object"),
        (b'{"acls":[]}', "version None is not supported"),
        (b'{"version":2,"acls":[]}', "version 2 is not supported"),
        (b'{"version":true,"acls":[]}', "version True is not supported"),
        (b'{"version":1,"acls":{}}', "acls: expected list"),
        (b'{"version":1,"acls":[1]}', r"acls\[0\]: expected an object"),
        (_one(principal=None), "principal: expected str"),
        (_one(host=["*"]), "host: expected str"),
        (_one(operation="Fly"), "operation 'Fly' is not"),
        (_one(operation="Any"), "operation 'Any' is not"),
        (_one(operation="IDEMPOTENT-WRITE"), "operation 'IDEMPOTENT-WRITE' is not"),
        (_one(permissionType="Unknown"), "permissionType 'Unknown'"),
        (_one(principal="alice"), "Invalid principal"),
        (_one(host="10.0.0.0/33"), "Invalid CIDR"),
        (_one(host=""), "Invalid empty host"),
    ],
)
def test_malformed_resource_znodes_are_refused_by_name(data: bytes, problem: str) -> None:
    with pytest.raises(ZnodeError, match=problem) as info:
        parse_acls(ORDERS, data, "/kafka-acl/Topic/orders")
    assert str(info.value).startswith("/kafka-acl/Topic/orders")


def test_a_cluster_znode_must_be_kafka_cluster() -> None:
    data = acl_data([binding(kind=Kind.GROUP)])
    assert data is not None
    with pytest.raises(ZnodeError, match="only valid name for the CLUSTER resource"):
        image_from_znodes({"/kafka-acl/Cluster/other": data}, offset=1)


@given(st.lists(BINDINGS, min_size=1, max_size=6))
def test_a_resources_bindings_survive_their_znode(bindings: list[AclBinding]) -> None:
    resource = ResourcePattern.of(bindings[0])
    mine = [b for b in bindings if ResourcePattern.of(b) == resource]
    data = acl_data(mine)
    assert data is not None
    assert parse_acls(resource, data, acl_path(resource)) == sorted(set(mine))


# --- change notifications ----------------------------------------------------------------


def test_notifications_name_the_resource_as_kafka_writes_them() -> None:
    assert acl_change(ORDERS) == ZnodeOp(OpKind.NOTIFY, ACL_CHANGE_PREFIX, b"TOPIC:orders")
    assert acl_change(TX) == ZnodeOp(
        OpKind.NOTIFY,
        EXTENDED_ACL_CHANGE_PREFIX,
        b'{"name":"tx-","patternType":"PREFIXED","resourceType":"TRANSACTIONAL_ID","version":1}',
    )
    assert parse_acl_change(CHANGE, b"Topic:orders") == ORDERS  # as older Kafkas wrote it
    assert parse_acl_change(CHANGE, b"GROUP:a:b") == ResourcePattern(Kind.GROUP, "a:b", LITERAL)
    assert parse_acl_change(CHANGE, b"TransactionalId:t") == ResourcePattern(
        Kind.TRANSACTIONAL_ID, "t", LITERAL
    )


@given(BINDINGS)
def test_any_resource_survives_its_notification(acl: AclBinding) -> None:
    resource = ResourcePattern.of(acl)
    op = acl_change(resource)
    assert parse_acl_change(f"{op.path}0000000001", op.data) == resource


@pytest.mark.parametrize(
    ("path", "data", "problem"),
    [
        ("/config/changes/config_change_1", b"TOPIC:t", "is not an ACL change notification"),
        (CHANGE, b"TOPIC", "is not ResourceType:name"),
        (CHANGE, b"\xff:t", "is not UTF-8"),
        (CHANGE, b"QUEUE:t", "resource type 'QUEUE'"),
        (CHANGE, b"ANY:t", "resource type 'ANY'"),
        (CHANGE, b"TOPIC:a/b", "holds '/'"),
        (EXTENDED_CHANGE, b"TOPIC:t", "is not JSON"),
        (EXTENDED_CHANGE, b'{"version":2}', "version 2 is not supported"),
        (
            EXTENDED_CHANGE,
            b'{"version":1,"resourceType":"TOPIC","name":"t","patternType":"LITERAL"}',
            "patternType LITERAL is not PREFIXED",
        ),
        (
            EXTENDED_CHANGE,
            b'{"version":1,"resourceType":"TOPIC","name":7,"patternType":"PREFIXED"}',
            "name: expected str",
        ),
        (
            EXTENDED_CHANGE,
            b'{"version":1,"resourceType":"TOPIC","name":"t","patternType":"MATCH"}',
            "patternType 'MATCH'",
        ),
    ],
)
def test_malformed_notifications_are_refused_by_name(path: str, data: bytes, problem: str) -> None:
    with pytest.raises(ZnodeError, match=problem):
        parse_acl_change(path, data)


@settings(max_examples=300)
@given(
    st.sampled_from([CHANGE, EXTENDED_CHANGE, "/kafka-acl-changes", "/x/acl_changes_1"]),
    st.one_of(st.binary(max_size=30), st.text(max_size=20).map(str.encode)),
)
def test_a_notification_is_read_or_refused_never_a_crash(path: str, data: bytes) -> None:
    with suppress(ZnodeError):
        parse_acl_change(path, data)


@settings(max_examples=300)
@given(
    st.lists(
        st.sampled_from(["", "kafka-acl", "kafka-acl-extended", "prefixed", "Topic", "x", "."])
        | st.text(max_size=4),
        max_size=6,
    ).map("/".join)
)
def test_any_path_is_a_resource_or_not_or_refused_never_a_crash(path: str) -> None:
    with suppress(ZnodeError):
        acl_resource(path)


# --- what a diff writes ------------------------------------------------------------------


def _acls(image: MetadataImage, *bindings: AclBinding) -> MetadataImage:
    return image.replay([acl_record(b) for b in bindings])


def test_a_resource_znode_is_created_set_and_deleted_with_a_notice_each_time() -> None:
    read, write = binding(), binding(operation=Op.WRITE)
    one = _acls(MetadataImage.empty(), read)
    two = _acls(one, write)
    ops = diff(one, two, controller_epoch=EPOCH)
    assert ops == [
        ZnodeOp(OpKind.SET, "/kafka-acl/Topic/orders", acl_data([read, write]) or b""),
        ZnodeOp(OpKind.NOTIFY, ACL_CHANGE_PREFIX, b"TOPIC:orders"),
    ]
    gone = two.replay([RemoveAccessControlEntryRecord(acl_id(read))])
    gone = gone.replay([RemoveAccessControlEntryRecord(acl_id(write))])
    ops = diff(two, gone, controller_epoch=EPOCH)
    assert ops == [
        ZnodeOp(OpKind.DELETE, "/kafka-acl/Topic/orders"),
        ZnodeOp(OpKind.NOTIFY, ACL_CHANGE_PREFIX, b"TOPIC:orders"),
    ]
    tree = apply(render(two), ops)
    assert settled(tree) == settled(render(gone))
    assert tree[f"{ACL_CHANGE_PREFIX}0000000001"] == b"TOPIC:orders"


def test_bindings_zookeeper_cannot_hold_are_not_written() -> None:
    slash = binding("a/b", kind=Kind.GROUP)
    refused = binding(principal="alice")  # no Type: -- CreateAcls refuses it
    image = _acls(MetadataImage.empty(), slash, refused)
    assert diff(MetadataImage.empty(), image, controller_epoch=EPOCH) == []


def test_an_unrelated_change_writes_no_acl_znodes() -> None:
    image = example()
    later = image.replay([RemoveAccessControlEntryRecord(uuid.UUID(int=99))])
    assert diff(image, later, controller_epoch=EPOCH) == []
    assert acl_notices(diff(MetadataImage.empty(), image, controller_epoch=EPOCH)) == [
        acl_change(ORDERS),
        acl_change(TX),
    ]


# --- an operator's znode -----------------------------------------------------------------


def test_an_operators_znode_replaces_the_resources_bindings() -> None:
    read, write, other = binding(), binding(operation=Op.WRITE), binding("payments")
    random_id = uuid.UUID(int=7)
    image = MetadataImage.empty().replay(
        [acl_record(read), acl_record(write, random_id), acl_record(other)]
    )
    added = binding(operation=Op.DELETE, permission=DENY)
    assert replace_resource_acls(image, ORDERS, [write, added]) == [
        RemoveAccessControlEntryRecord(acl_id(read)),
        acl_record(added),
    ]
    assert replace_resource_acls(image, ORDERS, [read, write]) == []
    assert replace_resource_acls(image, ORDERS, []) == [
        RemoveAccessControlEntryRecord(random_id),
        RemoveAccessControlEntryRecord(acl_id(read)),
    ]
    twice = image.replay([acl_record(read, uuid.UUID(int=3))])
    assert replace_resource_acls(twice, ORDERS, [write]) == [
        RemoveAccessControlEntryRecord(uuid.UUID(int=3)),
        RemoveAccessControlEntryRecord(acl_id(read)),
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(BINDINGS, max_size=6), st.lists(BINDINGS, max_size=6))
def test_taking_in_an_edited_znode_gives_the_image_the_tree_now_holds(
    before: list[AclBinding], written: list[AclBinding]
) -> None:
    image = _acls(MetadataImage.empty(), *before)
    tree = render(image)
    resource = ResourcePattern.of(written[0]) if written else ORDERS
    stored = [b for b in written if ResourcePattern.of(b) == resource]
    path = acl_path(resource)
    data = acl_data(stored)
    edited = {p: d for p, d in tree.items() if p != path}
    if data is not None:
        edited[path] = data
    read_back = parse_acls(resource, edited.get(path, b""), path)
    taken = image.replay(replace_resource_acls(image, resource, read_back))
    assert taken == image_from_znodes(edited, offset=taken.offset)
