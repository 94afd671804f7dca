"""Group configs in ZooKeeper: /config/groups/<group id URL-encoded as Kafka encodes user
names>, with the JSON of topic and broker config znodes, written from the image and read
back into it, and named by change notices. Kafka's own ZooKeeper mode had no group
configs; the path is strom's."""

from __future__ import annotations

from znode_harness import EPOCH, notified, render

from strom.metadata.image import MetadataImage
from strom.metadata.records import ConfigRecord, ConfigResourceType
from strom.metadata.znode_diff import diff
from strom.metadata.znodes import (
    PARENTS,
    TREE_ROOTS,
    OpKind,
    ZnodeOp,
    config_path,
    image_from_znodes,
    parse_change,
)

GROUP = ConfigResourceType.GROUP
SESSION = "consumer.session.timeout.ms"


def test_group_config_paths_are_sanitized_like_user_names() -> None:
    assert config_path(GROUP, "orders") == "/config/groups/orders"
    assert config_path(GROUP, "a b/c*~é") == "/config/groups/a%20b%2Fc%2A%7E%C3%A9"
    assert "/config/groups" in PARENTS and "/config/groups" in TREE_ROOTS


def test_a_groups_configs_are_written_noticed_and_deleted_with_its_last_override() -> None:
    configured = MetadataImage.empty().replay(
        [
            ConfigRecord(GROUP, "a b", SESSION, "50000"),
            ConfigRecord(GROUP, "a b", "share.auto.offset.reset", "earliest"),
        ]
    )
    ops = diff(MetadataImage.empty(), configured, controller_epoch=EPOCH)
    data = (
        b'{"config":{"consumer.session.timeout.ms":"50000",'
        b'"share.auto.offset.reset":"earliest"},"version":1}'
    )
    assert ZnodeOp(OpKind.CREATE, "/config/groups/a%20b", data) in ops
    assert notified(ops) == ["groups/a%20b"]
    assert parse_change(b'{"version":2,"entity_path":"groups/a%20b"}') == (GROUP, "a b")

    gone = configured.replay(
        [
            ConfigRecord(GROUP, "a b", SESSION, None),
            ConfigRecord(GROUP, "a b", "share.auto.offset.reset", None),
        ]
    )
    ops = diff(configured, gone, controller_epoch=EPOCH)
    assert ZnodeOp(OpKind.DELETE, "/config/groups/a%20b") in ops
    assert notified(ops) == ["groups/a%20b"]


def test_the_tree_gives_the_group_configs_back() -> None:
    image = MetadataImage.empty().replay(
        [
            ConfigRecord(GROUP, "é*", SESSION, "50000"),
            ConfigRecord(GROUP, "plain", "share.record.lock.duration.ms", "20000"),
        ]
    )
    tree = render(image)
    assert "/config/groups/%C3%A9%2A" in tree
    assert image_from_znodes(tree, offset=image.offset) == image
