"""The image as ZooKeeper znodes: diffs render it, the tree rebuilds it, parsers refuse junk."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata.image import MetadataImage, PartitionImage, TopicImage
from strom.metadata.records import (
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from strom.metadata.znodes import (
    CONFIG_CHANGE_PREFIX,
    PARENTS,
    BrokerRegistration,
    OperatorTopic,
    OpKind,
    ZnodeError,
    ZnodeOp,
    broker_registration,
    config_path,
    controller_json,
    diff,
    image_from_znodes,
    kafka_uuid,
    operator_topics,
    parse_broker_registration,
    parse_change,
    parse_controller,
    parse_entity_config,
    parse_kafka_uuid,
    parse_topic,
)

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
    """One broker, one topic mid-reassignment, configs of all three kinds, producer ids."""
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
        ],
        offset=7,
    )


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
        "/latest_producer_id_block": b'{"next_producer_id":"2000","version":1}',
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
        endpoints=["PLAINTEXT://b1.example:9092", "INTERNAL://[::1]:9093"],
        incarnation_id=uuid.UUID(int=1),
        timestamp_ms=1_700_000_000_000,
    )
    assert data == (
        b'{"endpoints":["PLAINTEXT://b1.example:9092","INTERNAL://[::1]:9093"],"features":{},'
        b'"host":"b1.example","incarnation_id":"00000000-0000-0000-0000-000000000001",'
        b'"jmx_port":-1,"listener_security_protocol_map":{"INTERNAL":"PLAINTEXT",'
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


# ----------------------------------------------------------------- diffs, by example


def _topic(image: MetadataImage, name: str = "t", topic_id: uuid.UUID = ORDERS) -> MetadataImage:
    return image.replay(
        [
            TopicRecord(name, topic_id),
            PartitionRecord(topic_id, 0, (1, 2), (1, 2), 1, 0, 0),
            PartitionRecord(topic_id, 1, (2, 1), (2, 1), 2, 0, 0),
        ]
    )


def test_a_leader_change_sets_one_state_with_the_writers_epoch() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay([PartitionChangeRecord(ORDERS, 1, 1, (1,), 1, 1)])
    assert diff(before, after, controller_epoch=9) == [
        ZnodeOp(
            OpKind.SET,
            "/brokers/topics/t/partitions/1/state",
            b'{"controller_epoch":9,"isr":[1],"leader":1,"leader_epoch":1,'
            b'"partition_epoch":1,"version":1}',
        )
    ]
    tree = apply(render(before, controller_epoch=4), diff(before, after, controller_epoch=9))
    assert json.loads(tree["/brokers/topics/t/partitions/0/state"])["controller_epoch"] == 4


def test_a_reassignment_sets_the_topic_znode() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay(
        [PartitionChangeRecord(ORDERS, 0, 1, (1, 2), 0, 0, (1, 2, 3), adding_replicas=(3,))]
    )
    ops = diff(before, after, controller_epoch=EPOCH)
    assert [(op.kind, op.path) for op in ops] == [(OpKind.SET, "/brokers/topics/t")]
    assert json.loads(ops[0].data)["adding_replicas"] == {"0": [3]}


def test_a_new_partition_is_created_under_its_topic() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay([PartitionRecord(ORDERS, 2, (1,), (1,), 1, 0, 0)])
    ops = diff(before, after, controller_epoch=EPOCH)
    assert [(op.kind, op.path) for op in ops] == [
        (OpKind.CREATE, "/brokers/topics/t/partitions/2"),
        (OpKind.CREATE, "/brokers/topics/t/partitions/2/state"),
        (OpKind.SET, "/brokers/topics/t"),
    ]


def test_a_deleted_topic_goes_children_first_with_its_config() -> None:
    before = _topic(MetadataImage.empty())
    ops = diff(before, before.replay([RemoveTopicRecord(ORDERS)]), controller_epoch=EPOCH)
    assert ops == [
        ZnodeOp(OpKind.DELETE, path)
        for path in (
            "/brokers/topics/t/partitions/0/state",
            "/brokers/topics/t/partitions/0",
            "/brokers/topics/t/partitions/1/state",
            "/brokers/topics/t/partitions/1",
            "/brokers/topics/t/partitions",
            "/brokers/topics/t",
            "/config/topics/t",
        )
    ]


def test_a_topic_recreated_under_its_name_is_deleted_then_created() -> None:
    before = _topic(MetadataImage.empty())
    reborn = uuid.UUID(int=77)
    after = _topic(before.replay([RemoveTopicRecord(ORDERS)]), topic_id=reborn)
    ops = diff(before, after, controller_epoch=EPOCH)
    deleted = [op.path for op in ops if op.kind is OpKind.DELETE]
    created = [op.path for op in ops if op.kind is OpKind.CREATE]
    assert "/brokers/topics/t" in deleted and "/brokers/topics/t" in created
    assert ops.index(ZnodeOp(OpKind.DELETE, "/brokers/topics/t")) < len(deleted)
    assert settled(apply(render(before), ops)) == settled(render(after))


def test_brokers_are_created_set_and_deleted_by_value() -> None:
    before = MetadataImage.empty().replay([RegisterBrokerRecord(1, uuid.UUID(int=1), "h", 1, None)])
    fenced = before.replay([UnfenceBrokerRecord(1, before.brokers[1].epoch)])
    assert [(op.kind, op.path) for op in diff(before, fenced, controller_epoch=EPOCH)] == [
        (OpKind.SET, "/strom/brokers/1")
    ]
    gone = fenced.replay([UnregisterBrokerRecord(1, fenced.brokers[1].epoch)])
    assert diff(fenced, gone, controller_epoch=EPOCH) == [
        ZnodeOp(OpKind.DELETE, "/strom/brokers/1")
    ]


class _Untouchable(Mapping[int, PartitionImage]):
    """Partitions that fail the test if anyone reads them."""

    def __getitem__(self, index: int) -> PartitionImage:
        raise AssertionError("diff read the partitions of an unchanged topic")

    def __iter__(self) -> Iterator[int]:
        raise AssertionError("diff read the partitions of an unchanged topic")

    def __len__(self) -> int:
        raise AssertionError("diff read the partitions of an unchanged topic")


def test_an_unchanged_topic_costs_one_identity_check() -> None:
    big_id = uuid.UUID(int=42)
    big = TopicImage("big", big_id, _Untouchable())
    image = replace(MetadataImage.empty(), topics_by_name={"big": big}, topics_by_id={big_id: big})
    created = _topic(image)
    changed = created.replay([PartitionChangeRecord(ORDERS, 0, 2, (2,), 1, 1)])
    assert created.topics_by_name["big"] is big and changed.topics_by_name["big"] is big
    assert all("big" not in op.path for op in diff(image, created, controller_epoch=EPOCH))
    assert len(diff(created, changed, controller_epoch=EPOCH)) == 1


# ----------------------------------------------------------------- change notifications


def test_nothing_but_config_changes_notify() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay(
        [
            PartitionChangeRecord(ORDERS, 0, 2, (2,), 1, 1),
            RegisterBrokerRecord(4, uuid.UUID(int=4), "h", 1, None),
            ProducerIdsRecord(4, 1, 1000),
            ClusterRecord("c", "n"),
        ]
    )
    assert notified(diff(before, after, controller_epoch=EPOCH)) == []
    assert notified(diff(MetadataImage.empty(), before, controller_epoch=EPOCH)) == []


def test_each_changed_config_entity_notifies_once() -> None:
    before = _topic(MetadataImage.empty())
    after = before.replay(
        [
            ConfigRecord(TOPIC, "t", "retention.ms", "1"),
            ConfigRecord(TOPIC, "t", "cleanup.policy", "compact"),
            ConfigRecord(BROKER, "", "min.insync.replicas", "2"),
            ConfigRecord(BROKER, "2", "log.cleaner.threads", "2"),
        ]
    )
    assert notified(diff(before, after, controller_epoch=EPOCH)) == [
        "topics/t",
        "brokers/<default>",
        "brokers/2",
    ]
    back = after.replay([ConfigRecord(BROKER, "2", "log.cleaner.threads", None)])
    ops = diff(after, back, controller_epoch=EPOCH)
    assert notified(ops) == ["brokers/2"]
    assert ZnodeOp(OpKind.DELETE, "/config/brokers/2") in ops


def test_creating_or_deleting_a_topic_with_overrides_notifies() -> None:
    bare = _topic(MetadataImage.empty())
    configured = bare.replay([ConfigRecord(TOPIC, "t", "retention.ms", "1")])
    assert notified(diff(MetadataImage.empty(), configured, controller_epoch=EPOCH)) == ["topics/t"]
    gone = configured.replay([RemoveTopicRecord(ORDERS)])
    assert notified(diff(configured, gone, controller_epoch=EPOCH)) == ["topics/t"]
    assert notified(diff(bare, bare.replay([RemoveTopicRecord(ORDERS)]), controller_epoch=1)) == []


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
        (parse_change, b'{"version":2,"entity_path":"users/alice"}', "neither topics nor"),
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
    ]
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 3) | st.floats() | st.text(max_size=3) | _TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=5),
    max_leaves=15,
)
JUNK = st.one_of(st.binary(max_size=40), _JSON.map(lambda value: json.dumps(value).encode()))
PARSERS: list[Callable[[bytes], object]] = [
    parse_topic,
    parse_entity_config,
    parse_change,
    parse_broker_registration,
    parse_controller,
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


# ----------------------------------------------------------------- random images

NAMES = ("orders", "a.b", "a_b", "x-1")
DECISIONS = (
    "cluster",
    "broker",
    "broker state",
    "topic",
    "partition",
    "change",
    "remove",
    "config",
    "producer",
)
REPLICAS = st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True).map(tuple)
EPOCHS = st.integers(0, 20)


def _subset(draw: st.DrawFn, items: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(draw(st.lists(st.sampled_from(items), unique=True))) if items else ()


def _leadership(draw: st.DrawFn, replicas: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    isr = _subset(draw, replicas)
    return (draw(st.sampled_from(isr)) if isr else -1), isr


def _moving(draw: st.DrawFn, replicas: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Disjoint replicas a reassignment adds and removes."""
    moving = _subset(draw, replicas)
    split = draw(st.integers(0, len(moving)))
    return moving[:split], moving[split:]


def _partition(draw: st.DrawFn, topic_id: uuid.UUID, index: int) -> PartitionRecord:
    replicas = draw(REPLICAS)
    leader, isr = _leadership(draw, replicas)
    adding, removing = _moving(draw, replicas)
    epochs = draw(EPOCHS), draw(EPOCHS)
    return PartitionRecord(topic_id, index, replicas, isr, leader, *epochs, adding, removing)


def _decision(draw: st.DrawFn, image: MetadataImage, fresh: uuid.UUID) -> list[MetadataRecord]:
    """The records of one random decision that is valid against `image`."""
    topics = sorted(image.topics_by_name)
    kind = draw(st.sampled_from(DECISIONS))
    if kind == "cluster":
        return [
            ClusterRecord(draw(st.sampled_from(["c1", "c2"])), draw(st.sampled_from(["", "n"])))
        ]
    if kind == "broker":
        broker_id, incarnation = draw(st.integers(0, 4)), uuid.UUID(int=draw(st.integers(1, 3)))
        rack, fenced = draw(st.sampled_from([None, "r1"])), draw(st.booleans())
        return [RegisterBrokerRecord(broker_id, incarnation, "h", 9092, rack, fenced)]
    if kind == "broker state" and image.brokers:
        broker = image.brokers[draw(st.sampled_from(sorted(image.brokers)))]
        ways: list[MetadataRecord] = [
            FenceBrokerRecord(broker.broker_id, broker.epoch),
            UnfenceBrokerRecord(broker.broker_id, broker.epoch),
            UnregisterBrokerRecord(broker.broker_id, broker.epoch),
        ]
        return [draw(st.sampled_from(ways))]
    if kind == "topic":
        name = draw(st.sampled_from(NAMES))
        old = image.topics_by_name.get(name)
        records: list[MetadataRecord] = [] if old is None else [RemoveTopicRecord(old.topic_id)]
        records.append(TopicRecord(name, fresh))
        records += [_partition(draw, fresh, index) for index in range(draw(st.integers(0, 3)))]
        if draw(st.booleans()):
            records.append(ConfigRecord(TOPIC, name, "retention.ms", "1000"))
        return records
    if kind == "partition" and topics:
        topic = image.topics_by_name[draw(st.sampled_from(topics))]
        return [_partition(draw, topic.topic_id, len(topic.partitions))]
    partitions = list(image.partitions())
    if kind == "change" and partitions:
        topic, partition = draw(st.sampled_from(partitions))
        replicas = draw(st.none() | REPLICAS)
        leader, isr = _leadership(draw, partition.replicas if replicas is None else replicas)
        adding, removing = _moving(draw, partition.replicas if replicas is None else replicas)
        moved = draw(st.booleans())
        return [
            PartitionChangeRecord(
                topic.topic_id,
                partition.partition,
                leader,
                isr,
                draw(EPOCHS),
                draw(EPOCHS),
                replicas,
                adding if moved else None,
                removing if moved else None,
            )
        ]
    if kind == "remove" and topics:
        return [RemoveTopicRecord(image.topics_by_name[draw(st.sampled_from(topics))].topic_id)]
    if kind == "config":
        entities = [(TOPIC, name) for name in topics] + [(BROKER, ""), (BROKER, "1"), (BROKER, "2")]
        resource_type, resource_name = draw(st.sampled_from(entities))
        key, value = draw(st.sampled_from(["k1", "k2"])), draw(st.sampled_from([None, "v1", "v2"]))
        return [ConfigRecord(resource_type, resource_name, key, value)]
    if kind == "producer":
        return [ProducerIdsRecord(0, 0, draw(st.integers(0, 10**12)))]
    return []


@st.composite
def histories(draw: st.DrawFn) -> list[MetadataImage]:
    """The images after each of a few random entries of one or two valid decisions."""
    images = [MetadataImage.empty()]
    for entry in range(draw(st.integers(1, 10))):
        first = _decision(draw, images[-1], uuid.UUID(int=2 * entry + 1))
        second = _decision(draw, images[-1].replay(first), uuid.UUID(int=2 * entry + 2))
        images.append(images[-1].replay(first + second, offset=images[-1].offset + 1))
    return images


@settings(max_examples=200, deadline=None)
@given(histories(), st.integers(0, 50))
def test_any_image_round_trips_through_its_znodes(
    images: list[MetadataImage], controller_epoch: int
) -> None:
    image = images[-1]
    tree = render(image, controller_epoch=controller_epoch)
    rebuilt = image_from_znodes(tree, offset=image.offset)
    assert rebuilt.topics_by_name == image.topics_by_name
    assert rebuilt.topics_by_id == image.topics_by_id
    assert rebuilt.brokers == image.brokers
    assert rebuilt.configs == image.configs
    assert (rebuilt.cluster_id, rebuilt.cluster_name) == (image.cluster_id, image.cluster_name)
    assert rebuilt.next_producer_id == image.next_producer_id
    assert rebuilt == image
    assert operator_topics(tree, rebuilt) == []


@settings(max_examples=200, deadline=None)
@given(histories(), st.data())
def test_a_diff_takes_one_images_tree_to_the_others(
    images: list[MetadataImage], data: st.DataObject
) -> None:
    pairs = list(itertools.pairwise(images))
    pairs.append((data.draw(st.sampled_from(images)), data.draw(st.sampled_from(images))))
    for old, new in pairs:
        ops = diff(old, new, controller_epoch=EPOCH)
        assert_notices_come_last(ops)
        tree = apply(render(old), ops)  # asserts each op is valid where it stands in the multi
        assert settled(tree) == settled(render(new))
        changed = {
            config_path(*key).removeprefix("/config/")
            for key in old.configs.keys() | new.configs.keys()
            if old.configs.get(key, {}) != new.configs.get(key, {})
        }
        assert sorted(notified(ops)) == sorted(changed)
        assert diff(new, new, controller_epoch=EPOCH) == []
