"""What the znode tests share: an in-memory ZooKeeper that applies a diff's ops, and an
example image with one topic mid-reassignment, configs of all three kinds and ACLs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping

from hypothesis import strategies as st

from strom.metadata.acl_records import acl_record
from strom.metadata.acl_znodes import ACL_CHANGE_PREFIX, EXTENDED_ACL_CHANGE_PREFIX
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)
from strom.metadata.znode_diff import diff
from strom.metadata.znodes import CONFIG_CHANGE_PREFIX, PARENTS, OpKind, ZnodeOp
from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.security.operations import AclOperation, AclResourceType

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER
EPOCH = 5
CHANGE_PREFIXES = (CONFIG_CHANGE_PREFIX, ACL_CHANGE_PREFIX, EXTENDED_ACL_CHANGE_PREFIX)
"""Where a diff's NOTIFY ops create their sequential znodes."""

# ----------------------------------------------------------------- an in-memory ZooKeeper


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _children(tree: Mapping[str, bytes], path: str) -> list[str]:
    return [child for child in tree if _parent(child) == path]


def apply(tree: Mapping[str, bytes], ops: Iterable[ZnodeOp]) -> dict[str, bytes]:
    """`ops` as one multi on an in-memory ZooKeeper that checks every op where it stands."""
    tree = dict(tree)
    for op in ops:
        assert op.path not in PARENTS, op
        if op.kind is OpKind.CREATE:
            assert op.path not in tree, op
            assert _parent(op.path) == "/" or _parent(op.path) in tree, op
            tree[op.path] = op.data
        elif op.kind is OpKind.SET:
            assert op.path in tree, op
            tree[op.path] = op.data
        elif op.kind is OpKind.DELETE:
            assert op.path in tree and not _children(tree, op.path), op
            del tree[op.path]
        else:
            assert op.path in CHANGE_PREFIXES, op
            sequence = len(_children(tree, _parent(op.path)))
            tree[f"{op.path}{sequence:010d}"] = op.data
    return tree


def render(image: MetadataImage, *, controller_epoch: int = EPOCH) -> dict[str, bytes]:
    """The tree of `image`: its full diff from the empty image, applied to the parents."""
    ops = diff(MetadataImage.empty(), image, controller_epoch=controller_epoch)
    return apply(dict.fromkeys(PARENTS, b""), ops)


def settled(tree: Mapping[str, bytes]) -> dict[str, bytes]:
    """The tree without its change notifications (which only ever accumulate)."""
    return {path: data for path, data in tree.items() if not path.startswith(CHANGE_PREFIXES)}


def notified(ops: Iterable[ZnodeOp]) -> list[str]:
    """The entities the config change notices among `ops` name."""
    return [
        json.loads(op.data)["entity_path"]
        for op in ops
        if op.kind is OpKind.NOTIFY and op.path == CONFIG_CHANGE_PREFIX
    ]


def acl_notices(ops: Iterable[ZnodeOp]) -> list[ZnodeOp]:
    """The ACL change notices among `ops`."""
    prefixes = (ACL_CHANGE_PREFIX, EXTENDED_ACL_CHANGE_PREFIX)
    return [op for op in ops if op.kind is OpKind.NOTIFY and op.path in prefixes]


def assert_notices_come_last(ops: list[ZnodeOp]) -> None:
    kinds = [op.kind for op in ops]
    first = kinds.index(OpKind.NOTIFY) if OpKind.NOTIFY in kinds else len(kinds)
    assert all(kind is OpKind.NOTIFY for kind in kinds[first:]), kinds


# ----------------------------------------------------------------- ACL bindings

LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def binding(
    name: str = "orders",
    operation: AclOperation = AclOperation.READ,
    permission: AclPermissionType = ALLOW,
    *,
    principal: str = "User:alice",
    host: str = "*",
    pattern: PatternType = LITERAL,
    kind: AclResourceType = AclResourceType.TOPIC,
) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


ACL_KINDS = tuple(k for k in AclResourceType if k not in (k.UNKNOWN, k.ANY))
ACL_OPERATIONS = tuple(o for o in AclOperation if o not in (o.UNKNOWN, o.ANY))


def _named(kind: AclResourceType, name: str) -> str:
    return "kafka-cluster" if kind == AclResourceType.CLUSTER else name


BINDINGS: st.SearchStrategy[AclBinding] = st.builds(
    lambda kind, name, pattern, principal, host, operation, permission: AclBinding(
        kind, _named(kind, name), pattern, principal, host, operation, permission
    ),
    st.sampled_from(ACL_KINDS),
    st.sampled_from(["orders", "ord", "*", "a b", "é~%2F", "x:y"]),
    st.sampled_from([LITERAL, PREFIXED]),
    st.sampled_from(["User:alice", "User:*", "Group:ops:x"]),
    st.sampled_from(["*", "10.0.0.1", "10.0.0.0/8", "::1", "h.example"]),
    st.sampled_from(ACL_OPERATIONS),
    st.sampled_from([ALLOW, DENY]),
)
"""Bindings CreateAcls accepts, whose names ZooKeeper can store, from a small world (so
they share resources often)."""

# ----------------------------------------------------------------- the layout, by example

ORDERS = uuid.UUID("7a1e3b52-51c4-4c1f-9d6e-0b9a4f6c2d10")


def example() -> MetadataImage:
    """One broker, one topic mid-reassignment, configs of all three kinds, producer ids,
    a SCRAM user, two LITERAL ACLs of one topic and a PREFIXED one."""
    return MetadataImage.empty().replay(
        [
            ClusterRecord("q1Sh-9_ISia_zwNinIW4ng", "prod"),
            RegisterBrokerRecord(1, uuid.UUID(int=1), "b1.example", 9092, "rack-a", fenced=False),
            TopicRecord("orders", ORDERS),
            PartitionRecord(ORDERS, 0, (1, 2, 3), (1, 2), 1, 4, 6, (3,), (1,)),
            PartitionRecord(ORDERS, 1, (2, 3), (2, 3), 2, 0, 0),
            ConfigRecord(TOPIC, "orders", "retention.ms", "1000"),
            ConfigRecord(BROKER, "1", "log.cleaner.threads", "2"),
            ConfigRecord(BROKER, "", "min.insync.replicas", "2"),
            ProducerIdsRecord(1, 7, 2000),
            UserScramCredentialRecord("alice@corp", 1, b"salt", b"stored", b"server", 4096),
            acl_record(binding()),
            acl_record(binding(operation=AclOperation.WRITE, permission=DENY, host="10.0.0.9")),
            acl_record(
                binding(
                    "tx-",
                    AclOperation.DESCRIBE,
                    pattern=PREFIXED,
                    kind=AclResourceType.TRANSACTIONAL_ID,
                    principal="User:*",
                )
            ),
        ],
        offset=7,
    )
