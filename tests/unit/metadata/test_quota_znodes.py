"""Client quotas in Kafka's ZooKeeper layout: the paths, a user's znode shared with its
SCRAM credentials, the tree Kafka's tools leave (parents without data), change notices,
and what a malformed znode is told."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from znode_harness import apply, notified, render

from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.quota_znodes import entity_of_path, entity_path, stored_quotas
from strom.metadata.records import ClientQuotaRecord, UserScramCredentialRecord
from strom.metadata.znode_diff import diff, leftover_znodes
from strom.metadata.znodes import ZnodeError, image_from_znodes, parse_change

EPOCH = 3


def quotas(*records: tuple[QuotaEntity, str, float | None]) -> MetadataImage:
    return MetadataImage.empty().replay([ClientQuotaRecord(*record) for record in records])


def test_each_entity_has_kafkas_path() -> None:
    assert entity_path(QuotaEntity.user("alice")) == "/config/users/alice"
    assert entity_path(QuotaEntity.user(None)) == "/config/users/<default>"
    assert entity_path(QuotaEntity.user_client("a b", "x/y")) == (
        "/config/users/a%20b/clients/x%2Fy"
    )
    assert entity_path(QuotaEntity.user_client(None, None)) == (
        "/config/users/<default>/clients/<default>"
    )
    assert entity_path(QuotaEntity.client("*~")) == "/config/clients/%2A%7E"
    assert entity_path(QuotaEntity.ip("::1")) == "/config/ips/::1"
    assert entity_path(QuotaEntity.ip(None)) == "/config/ips/<default>"


_NAMES = st.none() | st.text(min_size=1, max_size=8)


@given(
    st.one_of(
        st.builds(QuotaEntity.user, _NAMES),
        st.builds(QuotaEntity.client, _NAMES),
        st.builds(QuotaEntity.user_client, _NAMES, _NAMES),
        st.builds(QuotaEntity.ip, st.sampled_from(["10.1.2.3", "fe80::1", None])),
    )
)
def test_a_path_names_its_entity_back(entity: QuotaEntity) -> None:
    path = entity_path(entity).removeprefix("/config/")
    assert entity_of_path(path, "test") == entity
    notice = json.dumps({"version": 2, "entity_path": path}).encode()
    if entity.has("user") and not entity.has("client-id") and entity.name("user") is not None:
        assert parse_change(notice).name == entity.name("user")  # type: ignore[union-attr]
    else:
        assert parse_change(notice) == entity


def test_a_user_znode_holds_its_credentials_and_quotas_and_a_client_ids_parent() -> None:
    scram = UserScramCredentialRecord("alice", 1, b"salt", b"stored", b"server", 4096)
    image = quotas(
        (QuotaEntity.user("alice"), "producer_byte_rate", 1048576.0),
        (QuotaEntity.user_client("alice", "app"), "request_percentage", 12.5),
    ).replay([scram])
    tree = render(image)
    user = json.loads(tree["/config/users/alice"])
    assert user["version"] == 1
    assert user["config"]["producer_byte_rate"] == "1048576"
    assert user["config"]["SCRAM-SHA-256"].startswith("salt=")
    assert tree["/config/users/alice/clients"] == b""
    assert json.loads(tree["/config/users/alice/clients/app"]) == {
        "config": {"request_percentage": "12.5"},
        "version": 1,
    }
    rebuilt = image_from_znodes(tree, offset=image.offset)
    assert rebuilt.client_quotas == image.client_quotas
    assert rebuilt.scram_users == image.scram_users


def test_removing_the_last_quota_deletes_children_first_and_keeps_a_users_credentials() -> None:
    scram = UserScramCredentialRecord("alice", 1, b"salt", b"stored", b"server", 4096)
    old = quotas(
        (QuotaEntity.user("alice"), "producer_byte_rate", 10.0),
        (QuotaEntity.user_client("alice", "app"), "consumer_byte_rate", 20.0),
    ).replay([scram])
    new = old.replay(
        [
            ClientQuotaRecord(QuotaEntity.user("alice"), "producer_byte_rate", None),
            ClientQuotaRecord(QuotaEntity.user_client("alice", "app"), "consumer_byte_rate", None),
        ]
    )
    ops = diff(old, new, controller_epoch=EPOCH)
    tree = apply(render(old), ops)  # checks children are deleted before their parents
    assert "/config/users/alice/clients" not in tree
    assert "producer_byte_rate" not in json.loads(tree["/config/users/alice"])["config"]
    assert sorted(notified(ops)) == ["users/alice", "users/alice/clients/app"]
    gone = apply(tree, diff(new, MetadataImage.empty(), controller_epoch=EPOCH))
    assert not [path for path in gone if path.startswith("/config/users/")]


def test_a_tree_kafkas_tools_wrote_is_read() -> None:
    tree = {
        "/config/users/bob": b"",  # made by a recursive create: no data
        "/config/users/bob/clients": b"",
        "/config/users/bob/clients/%3Capp%3E": b'{"version":1,"config":{"producer_byte_rate":"5"}}',
        "/config/users/<default>": b'{"version":1,"config":{"consumer_byte_rate":"100"}}',
        "/config/clients/<default>": b'{"version":1,"config":{"controller_mutation_rate":"1.5"}}',
        "/config/ips/10.0.0.1": b'{"version":1,"config":{"connection_creation_rate":"3"}}',
    }
    image = image_from_znodes(tree, offset=4)
    assert image.client_quotas == {
        QuotaEntity.user_client("bob", "<app>"): {"producer_byte_rate": 5.0},
        QuotaEntity.user(None): {"consumer_byte_rate": 100.0},
        QuotaEntity.client(None): {"controller_mutation_rate": 1.5},
        QuotaEntity.ip("10.0.0.1"): {"connection_creation_rate": 3.0},
    }
    assert image.scram_users == {}


def test_only_an_entitys_own_keys_are_read_and_values_are_checked() -> None:
    user = QuotaEntity.user("a")
    data = b'{"version":1,"config":{"producer_byte_rate":"7","connection_creation_rate":"2"}}'
    assert stored_quotas(user, data, "z") == {"producer_byte_rate": 7.0}
    for bad in (b'"-1"', b'"x"', b"5", b'"NaN"'):
        with pytest.raises(ZnodeError, match="producer_byte_rate"):
            stored_quotas(user, b'{"config":{"producer_byte_rate":%s}}' % bad, "z")
    with pytest.raises(ZnodeError, match="names no client quota entity"):
        entity_of_path("clients/a/b", "z")
    with pytest.raises(ZnodeError, match="not a name as Kafka writes it"):
        entity_of_path("users/<default>/clients/a b", "z")


EMPTY = b'{"version":1,"config":{}}'


def test_znodes_kafkas_tools_left_holding_nothing_are_found_children_first() -> None:
    tree = {
        "/config/users/bob": b"",
        "/config/users/bob/clients": b"",
        "/config/users/bob/clients/old": EMPTY,
        "/config/users/carol": b'{"version":1,"config":{"SCRAM-SHA-256":"x"}}',
        "/config/users/carol/clients": b"",
        "/config/users/carol/clients/old": EMPTY,
        "/config/users/dave": EMPTY,
        "/config/users/dave/clients": b"",
        "/config/users/dave/clients/kept": b'{"version":1,"config":{"x":"1"}}',
        "/config/clients/gone": EMPTY,
        "/config/ips/<default>": EMPTY,
        "/config/topics/orders": EMPTY,  # not an entity of quotas: left alone
    }
    assert leftover_znodes(tree, MetadataImage.empty()) == [
        "/config/users/bob/clients/old",
        "/config/users/carol/clients/old",
        "/config/users/bob/clients",
        "/config/users/carol/clients",
        "/config/clients/gone",
        "/config/ips/<default>",
        "/config/users/bob",
    ]


def test_what_the_image_holds_is_never_a_leftover() -> None:
    image = quotas((QuotaEntity.user_client("bob", "app"), "producer_byte_rate", 5.0))
    tree = {
        **render(image),
        "/config/users/bob/clients/old": EMPTY,
        "/config/clients/gone": EMPTY,
    }
    assert leftover_znodes(tree, image) == ["/config/users/bob/clients/old", "/config/clients/gone"]
    assert leftover_znodes(render(image), image) == []
