"""What the znode tests share: an in-memory ZooKeeper that applies a diff's ops, and an
example image with one topic mid-reassignment and configs of all three kinds.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping

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

TOPIC = ConfigResourceType.TOPIC
BROKER = ConfigResourceType.BROKER
EPOCH = 5

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
            assert op.path == CONFIG_CHANGE_PREFIX, op
            sequence = len(_children(tree, "/config/changes"))
            tree[f"{op.path}{sequence:010d}"] = op.data
    return tree


def render(image: MetadataImage, *, controller_epoch: int = EPOCH) -> dict[str, bytes]:
    """The tree of `image`: its full diff from the empty image, applied to the parents."""
    ops = diff(MetadataImage.empty(), image, controller_epoch=controller_epoch)
    return apply(dict.fromkeys(PARENTS, b""), ops)


def settled(tree: Mapping[str, bytes]) -> dict[str, bytes]:
    """The tree without its change notifications (which only ever accumulate)."""
    return {path: data for path, data in tree.items() if not path.startswith(CONFIG_CHANGE_PREFIX)}


def notified(ops: Iterable[ZnodeOp]) -> list[str]:
    return [json.loads(op.data)["entity_path"] for op in ops if op.kind is OpKind.NOTIFY]


def assert_notices_come_last(ops: list[ZnodeOp]) -> None:
    kinds = [op.kind for op in ops]
    first = kinds.index(OpKind.NOTIFY) if OpKind.NOTIFY in kinds else len(kinds)
    assert all(kind is OpKind.NOTIFY for kind in kinds[first:]), kinds


# ----------------------------------------------------------------- the layout, by example

ORDERS = uuid.UUID("7a1e3b52-51c4-4c1f-9d6e-0b9a4f6c2d10")


def example() -> MetadataImage:
    """One broker, one topic mid-reassignment, configs of all three kinds, producer ids,
    a SCRAM user."""
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
        ],
        offset=7,
    )
