"""The image as ZooKeeper znodes: the layout by example, operator-written topics, and
parsers that refuse malformed znodes by name and never crash.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import suppress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from znode_harness import BROKER, EPOCH, ORDERS, TOPIC, example, notified, render

from strom.metadata.acl_records import ResourcePattern
from strom.metadata.acl_znodes import parse_acl_change, parse_acls
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    BrokerEndpoint,
    RegisterBrokerRecord,
    SecurityProtocol,
    TopicRecord,
    UserScramCredentialRecord,
)
from strom.metadata.znode_diff import diff
from strom.metadata.znodes import (
    PARENTS,
    BrokerRegistration,
    OperatorTopic,
    OpKind,
    UserEntity,
    ZnodeError,
    ZnodeOp,
    broker_registration,
    config_path,
    controller_json,
    image_from_znodes,
    kafka_uuid,
    operator_topics,
    parse_broker_registration,
    parse_change,
    parse_controller,
    parse_entity_config,
    parse_kafka_uuid,
    parse_topic,
    user_path,
    user_records,
)
from strom.security.acls import PatternType
from strom.security.operations import AclResourceType


def test_the_example_image_as_znodes() -> None:
    state = "/brokers/topics/orders/partitions/{}/state"
    assert render(example()) == {
        **dict.fromkeys(PARENTS, b""),
        "/cluster/id": b'{"id":"q1Sh-9_ISia_zwNinIW4ng","name":"prod","version":"1"}',
        "/strom/brokers/1": b'{"epoch":7,"fenced":false,"host":"b1.example",'
        b'"incarnation_id":"00000000-0000-0000-0000-000000000001","port":9092,'
        b'"rack":"rack-a","version":1}',
        "/brokers/topics/orders": b'{"adding_replicas":{"0":[3]},'
        b'"partitions":{"0":[1,2,3],"1":[2,3]},"removing_replicas":{"0":[1]},'
        b'"topic_id":"eh47UlHETB-dbguaT2wtEA","version":3}',
        "/brokers/topics/orders/partitions": b"",
        "/brokers/topics/orders/partitions/0": b"",
        state.format(0): b'{"controller_epoch":5,"isr":[1,2],"leader":1,"leader_epoch":4,'
        b'"partition_epoch":6,"version":1}',
        "/brokers/topics/orders/partitions/1": b"",
        state.format(1): b'{"controller_epoch":5,"isr":[2,3],"leader":2,"leader_epoch":0,'
        b'"partition_epoch":0,"version":1}',
        "/config/topics/orders": b'{"config":{"retention.ms":"1000"},"version":1}',
        "/config/brokers/1": b'{"config":{"log.cleaner.threads":"2"},"version":1}',
        "/config/brokers/<default>": b'{"config":{"min.insync.replicas":"2"},"version":1}',
        "/config/changes/config_change_0000000000": b'{"entity_path":"topics/orders","version":2}',
        "/config/changes/config_change_0000000001": (
            b'{"entity_path":"brokers/<default>","version":2}'
        ),
        "/config/changes/config_change_0000000002": b'{"entity_path":"brokers/1","version":2}',
        "/config/users/alice%40corp": b'{"config":{"SCRAM-SHA-256":"salt=c2FsdA==,'
        b'stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=4096"},"version":1}',
        "/config/changes/config_change_0000000003": (
            b'{"entity_path":"users/alice%40corp","version":2}'
        ),
        "/latest_producer_id_block": b'{"next_producer_id":"2000","version":1}',
        "/kafka-acl/Topic/orders": b'{"acls":['
        b'{"host":"*","operation":"Read","permissionType":"Allow","principal":"User:alice"},'
        b'{"host":"10.0.0.9","operation":"Write","permissionType":"Deny",'
        b'"principal":"User:alice"}],"version":1}',
        "/kafka-acl-changes/acl_changes_0000000000": b"TOPIC:orders",
        "/kafka-acl-extended/prefixed/TransactionalId/tx-": b'{"acls":['
        b'{"host":"*","operation":"Describe","permissionType":"Allow","principal":"User:*"}],'
        b'"version":1}',
        "/kafka-acl-extended-changes/acl_changes_0000000000": b'{"name":"tx-",'
        b'"patternType":"PREFIXED","resourceType":"TRANSACTIONAL_ID","version":1}',
    }


def test_the_example_tree_rebuilds_the_image() -> None:
    assert image_from_znodes(render(example()), offset=7) == example()


def test_the_empty_image_has_no_znodes_but_the_parents() -> None:
    assert diff(MetadataImage.empty(), MetadataImage.empty(), controller_epoch=EPOCH) == []
    assert image_from_znodes(dict.fromkeys(PARENTS, b""), offset=-1) == MetadataImage.empty()


def test_a_topic_without_overrides_still_has_its_config_znode() -> None:
    image = MetadataImage.empty().replay([TopicRecord("t", ORDERS)])
    ops = diff(MetadataImage.empty(), image, controller_epoch=EPOCH)
    assert ZnodeOp(OpKind.CREATE, "/config/topics/t", b'{"config":{},"version":1}') in ops
    assert notified(ops) == []
    assert image_from_znodes(render(image), offset=image.offset) == image


def test_a_broker_s_listeners_survive_the_znode_round_trip() -> None:
    endpoints = (
        BrokerEndpoint("PLAINTEXT", "b1.example", 9092),
        BrokerEndpoint("SSL", "::1", 9093, SecurityProtocol.SSL),
    )
    image = MetadataImage.empty().replay(
        [RegisterBrokerRecord(1, uuid.UUID(int=1), "b1.example", 9092, None, endpoints=endpoints)]
    )
    tree = render(image)
    assert (
        b'"endpoints":[{"host":"b1.example","name":"PLAINTEXT","port":9092,'
        in (tree["/strom/brokers/1"])
    )
    assert image_from_znodes(tree, offset=image.offset) == image


def test_kafka_uuids_are_unpadded_url_safe_base64() -> None:
    assert kafka_uuid(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert kafka_uuid(ORDERS) == "eh47UlHETB-dbguaT2wtEA"
    assert parse_kafka_uuid("eh47UlHETB-dbguaT2wtEA") == ORDERS


@given(st.uuids())
def test_any_uuid_survives_kafkas_text_form(value: uuid.UUID) -> None:
    assert parse_kafka_uuid(kafka_uuid(value)) == value


def test_config_paths_name_topics_brokers_and_the_default() -> None:
    assert config_path(TOPIC, "a.b_c-d") == "/config/topics/a.b_c-d"
    assert config_path(BROKER, "3") == "/config/brokers/3"
    assert config_path(BROKER, "") == "/config/brokers/<default>"


def test_a_broker_registers_in_kafkas_version_5_shape() -> None:
    data = broker_registration(
        broker_id=1,
        host="b1.example",
        port=9092,
        rack=None,
        endpoints=[
            BrokerEndpoint("PLAINTEXT", "b1.example", 9092),
            BrokerEndpoint("INTERNAL", "::1", 9093, SecurityProtocol.SSL),
        ],
        incarnation_id=uuid.UUID(int=1),
        timestamp_ms=1_700_000_000_000,
    )
    assert data == (
        b'{"endpoints":["PLAINTEXT://b1.example:9092","INTERNAL://[::1]:9093"],"features":{},'
        b'"host":"b1.example","incarnation_id":"00000000-0000-0000-0000-000000000001",'
        b'"jmx_port":-1,"listener_security_protocol_map":{"INTERNAL":"SSL",'
        b'"PLAINTEXT":"PLAINTEXT"},"port":9092,"rack":null,"timestamp":"1700000000000",'
        b'"version":5}'
    )
    assert parse_broker_registration(data) == BrokerRegistration(
        "b1.example",
        9092,
        None,
        (("PLAINTEXT", "b1.example", 9092), ("INTERNAL", "::1", 9093)),
        uuid.UUID(int=1),
    )


def test_a_kafka_written_registration_has_no_incarnation() -> None:
    data = b'{"version":4,"host":"h","port":9092,"endpoints":["PLAINTEXT://h:9092"],"rack":"r"}'
    assert parse_broker_registration(data) == BrokerRegistration(
        "h", 9092, "r", (("PLAINTEXT", "h", 9092),), None
    )


def test_the_controller_znode() -> None:
    data = controller_json(3, 1_700_000_000_000)
    assert (
        data == b'{"brokerid":3,"kraftControllerEpoch":-1,"timestamp":"1700000000000","version":2}'
    )
    assert parse_controller(data) == 3
    assert parse_controller(b'{"version":1,"brokerid":4,"timestamp":"1"}') == 4


def test_change_notifications_name_their_entity() -> None:
    assert parse_change(b'{"version":2,"entity_path":"topics/a.b"}') == (TOPIC, "a.b")
    assert parse_change(b'{"version":2,"entity_path":"brokers/3"}') == (BROKER, "3")
    assert parse_change(b'{"version":2,"entity_path":"brokers/<default>"}') == (BROKER, "")
    assert parse_entity_config(b'{"version":1,"config":{"a":"1"}}') == {"a": "1"}
    user = parse_change(b'{"version":2,"entity_path":"users/%C3%A9mile%2A%7E"}')
    assert user == UserEntity("émile*~")


def test_user_znodes_are_named_as_kafkas_sanitizer_names_them() -> None:
    assert user_path("alice") == "/config/users/alice"
    assert user_path("a b+c@d.e-f_g") == "/config/users/a%20b%2Bc%40d.e-f_g"
    assert user_path("*~é") == "/config/users/%2A%7E%C3%A9"


def test_a_users_znode_keeps_scram_credentials_and_leaves_its_quotas_alone() -> None:
    data = (
        b'{"version":1,"config":{"producer_byte_rate":"1024","SCRAM-SHA-512":'
        b'"salt=c2FsdA==,stored_key=c3RvcmVk,server_key=c2VydmVy,iterations=8192"}}'
    )
    assert user_records("bob", data, "/config/users/bob") == [
        UserScramCredentialRecord("bob", 2, b"salt", b"stored", b"server", 8192)
    ]
    with pytest.raises(ZnodeError, match="/config/users/bob: SCRAM-SHA-256"):
        user_records(
            "bob", b'{"version":1,"config":{"SCRAM-SHA-256":"salt=x"}}', "/config/users/bob"
        )


# ----------------------------------------------------------------- operator topics


def test_hand_written_topics_are_not_in_the_image_but_are_listed() -> None:
    half = uuid.UUID(int=5)
    tree = {
        **render(example()),
        "/brokers/topics/manual": b'{"version":1,"partitions":{"1":[2,1],"0":[1,2]}}',
        "/brokers/topics/half": _topic_json(half, {"0": [1]}),
        "/brokers/topics/half/partitions": b"",
        "/brokers/ids/1": b"{}",
        "/controller": controller_json(1, 0),
        "/admin/delete_topics": b"",
    }
    image = image_from_znodes(tree, offset=7)
    assert image == example()
    assert operator_topics(tree, image) == [
        OperatorTopic("half", half, {0: (1,)}),
        OperatorTopic("manual", None, {0: (1, 2), 1: (2, 1)}),
    ]
    assert operator_topics(render(example()), example()) == []


def _topic_json(topic_id: uuid.UUID, partitions: dict[str, list[int]]) -> bytes:
    body = {"version": 3, "topic_id": kafka_uuid(topic_id), "partitions": partitions}
    return json.dumps(body).encode()


def test_parse_topic_reads_an_assignment() -> None:
    assert parse_topic(b'{"version":1,"partitions":{"0":[3,1]}}') == (None, {0: (3, 1)})
    assert parse_topic(_topic_json(ORDERS, {})) == (ORDERS, {})


# ----------------------------------------------------------------- malformed znodes


@pytest.mark.parametrize(
    ("parse", "data", "problem"),
    [
        (parse_topic, b"nope", "topic znode is not JSON"),
        (parse_topic, b"[1]", "must hold a JSON object"),
        (parse_topic, b'{"version":3}', "lacks 'partitions'"),
        (parse_topic, b'{"partitions":{"x":[1]}}', "'x' is not a number"),
        (parse_topic, b'{"partitions":{"0":[true]}}', r"partitions\[0\]: expected int"),
        (parse_topic, b'{"partitions":{},"topic_id":"short"}', "not a Kafka Uuid"),
        (parse_topic, b'{"partitions":{},"adding_replicas":[]}', "expected dict"),
        (parse_entity_config, b'{"version":1}', "lacks 'config'"),
        (parse_entity_config, b'{"config":{"a":1}}', "expected str"),
        (parse_entity_config, b"\xff\xfe\x00", "not JSON"),
        (parse_change, b'{"version":1,"entity_type":"topics"}', "version 1 is not supported"),
        (parse_change, b'{"version":2,"entity_path":"clusters/g"}', "not topics, brokers,"),
        (parse_change, b'{"version":2,"entity_path":"groups/a@b"}', "not a group id as Kafka"),
        (parse_change, b'{"version":2,"entity_path":"users/a@b"}', "not a user name as Kafka"),
        (parse_change, b'{"version":2,"entity_path":"users/%FF"}', "not a user name as Kafka"),
        (parse_change, b'{"version":2,"entity_path":"brokers/x"}', "'x' is not a number"),
        (parse_change, b'{"version":2,"entity_path":"topics/a b"}', "illegal"),
        (parse_broker_registration, b'{"host":"h","port":1,"endpoints":["h:1"]}', "LISTENER"),
        (parse_broker_registration, b'{"host":"h","port":1,"incarnation_id":"x"}', "not a UUID"),
        (parse_broker_registration, b'{"host":"h","port":"1"}', "port: expected int"),
        (parse_controller, b'{"brokerid":"1"}', "brokerid: expected int"),
        (parse_controller, b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "not JSON"),
    ],
)
def test_malformed_znodes_are_refused_by_name(
    parse: Callable[[bytes], object], data: bytes, problem: str
) -> None:
    with pytest.raises(ZnodeError, match=problem):
        parse(data)


def test_a_broken_znode_in_the_tree_names_its_path() -> None:
    state = "/brokers/topics/orders/partitions/1/state"
    tree = {**render(example()), state: b'{"leader":1}'}
    with pytest.raises(ZnodeError, match=f"{state} lacks 'isr'"):
        image_from_znodes(tree, offset=7)
    with pytest.raises(ZnodeError, match="/strom/brokers/x: 'x' is not a number"):
        image_from_znodes({"/strom/brokers/x": b"{}"}, offset=7)


_TEXTS = st.sampled_from(
    [
        "0",
        "1",
        "01",
        "x",
        "topics/a",
        "brokers/<default>",
        "brokers/2",
        "PLAINTEXT://h:9092",
        "AAAAAAAAAAAAAAAAAAAAAQ",
        str(uuid.UUID(int=1)),
        "Read",
        "idempotentwrite",
        "Allow",
        "User:a",
        "10.0.0.0/33",
        "TOPIC",
        "PREFIXED",
    ]
)
_KEYS = st.sampled_from(
    [
        "version",
        "topic_id",
        "partitions",
        "adding_replicas",
        "config",
        "entity_path",
        "host",
        "port",
        "rack",
        "endpoints",
        "incarnation_id",
        "brokerid",
        "isr",
        "leader",
        "0",
        "a",
        "acls",
        "principal",
        "operation",
        "permissionType",
        "resourceType",
        "patternType",
        "name",
    ]
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.floats() | st.text(max_size=3) | _TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=15,
)
ACL_PATTERN = (AclResourceType.TOPIC, "t", PatternType.LITERAL)
JUNK = st.one_of(st.binary(max_size=40), _JSON.map(lambda value: json.dumps(value).encode()))
PARSERS: list[Callable[[bytes], object]] = [
    parse_topic,
    parse_entity_config,
    parse_change,
    parse_broker_registration,
    parse_controller,
    lambda data: parse_acls(ResourcePattern(*ACL_PATTERN), data, "/kafka-acl/Topic/t"),
    lambda data: parse_acl_change("/kafka-acl-changes/acl_changes_0000000001", data),
    lambda data: parse_acl_change("/kafka-acl-extended-changes/acl_changes_0000000001", data),
]


@settings(max_examples=400)
@given(st.sampled_from(PARSERS), JUNK)
def test_parsers_raise_nothing_but_znode_errors(
    parse: Callable[[bytes], object], data: bytes
) -> None:
    with suppress(ZnodeError):
        parse(data)


@given(st.text(max_size=30))
def test_kafka_uuid_text_is_parsed_or_refused(text: str) -> None:
    with suppress(ZnodeError):
        parse_kafka_uuid(text)


EXAMPLE_TREE = render(example())


@settings(max_examples=300)
@given(st.sampled_from(sorted(EXAMPLE_TREE)), JUNK)
def test_a_corrupt_znode_is_read_or_refused_never_a_crash(path: str, data: bytes) -> None:
    tree = {**EXAMPLE_TREE, path: data}
    with suppress(ZnodeError):
        operator_topics(tree, image_from_znodes(tree, offset=7))
