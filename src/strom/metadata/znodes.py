"""The metadata image as Kafka's classic ZooKeeper znodes, and back.

    znode_diff.diff(old, new, controller_epoch=e) -> [ZnodeOp]   one ZooKeeper multi
    image_from_znodes(tree, offset=n)  -> MetadataImage   records replayed, as a snapshot is

The layout, under the chroot (JSON compact, keys sorted; the parents in PARENTS are empty):

    /cluster/id                         {"id":"..","name":"..","version":"1"}
    /brokers/topics/<name>              {"adding_replicas":{"0":[3]},"partitions":{"0":[1,2,3]},
                                         "removing_replicas":{"0":[1]},"topic_id":"..","version":3}
    /brokers/topics/<name>/partitions   empty, as is each .../partitions/<n>
    /brokers/topics/<name>/partitions/<n>/state
                                        {"controller_epoch":5,"isr":[1,2],"leader":1,
                                         "leader_epoch":4,"partition_epoch":6,"version":1}
    /config/topics/<name>               {"config":{"retention.ms":"1000"},"version":1}
    /config/brokers/<id>, /config/brokers/<default>   the same, while overrides exist
    /config/groups/<sanitized group id> the same, while overrides exist (strom's own)
    /config/users/<sanitized name>     {"config":{"SCRAM-SHA-256":"salt=..,stored_key=..,
                                         server_key=..,iterations=4096"},"version":1}
    /config/users/.., /config/clients/.., /config/ips/..   client quotas: quota_znodes.py
    /config/changes/config_change_<seq> {"entity_path":"topics/<name>","version":2}
    /latest_producer_id_block           {"next_producer_id":"2000","version":1}
    /strom/brokers/<id>                 the controller's registration of a broker (strom's own)
    /kafka-acl/..., /kafka-acl-extended/..., and their change notifications: acl_znodes.py
    /brokers/ids/<id>, /controller      ephemeral: broker_registration(), controller_json()

These are Kafka's shapes plus strom's additions: the cluster name, `partition_epoch` (Kafka
keeps it as the state znode's version), the producer id block, /strom and group configs
(Kafka's ZooKeeper mode had none; named like users, URL-encoded). Written by hand:
kazoo does the I/O in the store, and no library renders Kafka's znode JSON. What is read
may have been written by an operator, so parsers check every field and raise ZnodeError.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import unquote

from strom.metadata.acl_znodes import (
    ACL_PARENTS,
    ACL_ROOT,
    EXTENDED_ACL_ROOT,
    acl_znode_records,
)
from strom.metadata.image import BrokerImage, MetadataImage, PartitionImage, TopicImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.quota_znodes import (
    DEFAULT_ENTITY,
    QUOTA_PARENTS,
    entity_of_path,
    quota_records,
    sanitized,
)
from strom.metadata.records import (
    CLUSTER_DEFAULT,
    BrokerEndpoint,
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
    endpoint_json,
    endpoints_from_json,
)
from strom.metadata.scram_users import credential_of, credential_record
from strom.metadata.topic_names import validate_topic_name
from strom.metadata.znode_json import OpKind as OpKind
from strom.metadata.znode_json import ZnodeError as ZnodeError
from strom.metadata.znode_json import ZnodeOp as ZnodeOp
from strom.metadata.znode_json import json_bytes as json_bytes
from strom.metadata.znode_json import json_object
from strom.security.scram import ScramMechanism, format_scram_config, parse_scram_config

PARENTS: tuple[str, ...] = (
    "/brokers",
    "/brokers/ids",
    "/brokers/topics",
    "/cluster",
    "/config",
    "/config/brokers",
    "/config/changes",
    "/config/groups",
    "/config/topics",
    "/config/users",
    "/strom",
    "/strom/brokers",
    *ACL_PARENTS,
    *QUOTA_PARENTS,
)
"""Created once by the store, parents first; diff never creates or deletes them."""
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"
TREE_ROOTS = (
    "/cluster",
    "/brokers/topics",
    "/config/topics",
    "/config/brokers",
    "/config/groups",
    "/config/users",
    *QUOTA_PARENTS,
    ACL_ROOT,
    EXTENDED_ACL_ROOT,
    "/strom/brokers",
)
"""What a new controller reads (with everything below) to rebuild the image."""

_NUMBER = re.compile(r"0|[1-9][0-9]{0,18}")
_KAFKA_UUID = re.compile(r"[A-Za-z0-9_-]{22}")
_ENDPOINT = re.compile(r"([A-Za-z0-9_.-]+)://\[?([^\[\]]*?)\]?:([0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class OperatorTopic:
    """A topic written into /brokers/topics by hand (no topic id, or partitions without state)."""

    name: str
    topic_id: uuid.UUID | None
    assignment: Mapping[int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker's ephemeral /brokers/ids/<id> znode."""

    host: str
    port: int
    rack: str | None
    endpoints: tuple[tuple[str, str, int], ...]
    """(listener name, host, port) of each endpoint."""
    incarnation_id: uuid.UUID | None


# --- paths -----------------------------------------------------------------------------------


def topic_path(name: str) -> str:
    return f"/brokers/topics/{name}"


def state_path(name: str, partition: int) -> str:
    return f"/brokers/topics/{name}/partitions/{partition}/state"


def broker_path(broker_id: int) -> str:
    """The controller's registration of a broker (not its ephemeral /brokers/ids znode)."""
    return f"/strom/brokers/{broker_id}"


def sanitized_user(name: str) -> str:
    """A user name as a znode name, as Kafka writes it (quota_znodes.sanitized)."""
    return sanitized(name)


def user_path(name: str) -> str:
    return f"/config/users/{sanitized_user(name)}"


def config_path(resource_type: ConfigResourceType, name: str) -> str:
    if resource_type is ConfigResourceType.TOPIC:
        return f"/config/topics/{name}"
    if resource_type is ConfigResourceType.GROUP:
        return f"/config/groups/{sanitized(name)}"
    return f"/config/brokers/{name or DEFAULT_ENTITY}"


# --- rendering -------------------------------------------------------------------------------


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's text form of a Uuid: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def cluster_data(image: MetadataImage) -> bytes | None:
    if not image.cluster_id:
        return None
    return json_bytes({"version": "1", "id": image.cluster_id, "name": image.cluster_name})


def producer_data(image: MetadataImage) -> bytes | None:
    if not image.next_producer_id:
        return None
    return json_bytes({"version": 1, "next_producer_id": str(image.next_producer_id)})


def broker_data(broker: BrokerImage | None) -> bytes | None:
    if broker is None:
        return None
    body = {name: getattr(broker, name) for name in ("host", "port", "rack", "epoch", "fenced")}
    if broker.endpoints:
        body["endpoints"] = [endpoint_json(endpoint) for endpoint in broker.endpoints]
    return json_bytes({**body, "version": 1, "incarnation_id": str(broker.incarnation_id)})


def topic_data(topic: TopicImage) -> bytes:
    parts = sorted(topic.partitions.items())
    replicas = {str(i): list(p.replicas) for i, p in parts}
    adding = {str(i): list(p.adding_replicas) for i, p in parts if p.adding_replicas}
    removing = {str(i): list(p.removing_replicas) for i, p in parts if p.removing_replicas}
    body = {"version": 3, "topic_id": kafka_uuid(topic.topic_id), "partitions": replicas}
    return json_bytes({**body, "adding_replicas": adding, "removing_replicas": removing})


def state_data(p: PartitionImage, controller_epoch: int) -> bytes:
    body = {name: getattr(p, name) for name in ("leader", "leader_epoch", "partition_epoch")}
    return json_bytes(
        {**body, "version": 1, "controller_epoch": controller_epoch, "isr": list(p.isr)}
    )


def config_data(image: MetadataImage, key: tuple[ConfigResourceType, str]) -> bytes | None:
    """Every topic has its config znode; a broker or group only while it has overrides."""
    overrides = image.configs.get(key)
    if overrides is None and not (
        key[0] is ConfigResourceType.TOPIC and key[1] in image.topics_by_name
    ):
        return None
    return json_bytes({"version": 1, "config": dict(overrides or {})})


def scram_config(image: MetadataImage, name: str | None) -> dict[str, str]:
    """A SCRAM user's part of its /config/users znode, Kafka's: each mechanism's
    credential as `salt=..,stored_key=..,server_key=..,iterations=..` (quota_znodes.py
    adds its quotas)."""
    credentials = image.scram_users.get(name) if name is not None else None
    config: dict[str, str] = {}
    if not credentials:
        return config
    for mechanism_type, record in credentials.items():
        mechanism = ScramMechanism.from_kafka_type(mechanism_type)
        if mechanism is not None:
            config[mechanism.mechanism_name] = format_scram_config(credential_of(record))
    return config


# --- parsing ---------------------------------------------------------------------------------

_T = TypeVar("_T")
_D = TypeVar("_D")


class _Fields:
    """One znode's JSON object; its getters raise ZnodeError naming the znode and the field."""

    def __init__(self, data: bytes, what: str) -> None:
        self.body: dict[str, Any] = json_object(data, what)
        self.what = what

    def get(self, key: str, kind: type[_T]) -> _T:
        if key not in self.body:
            raise ZnodeError(f"{self.what} lacks {key!r}")
        return self.check(self.body[key], kind, key)

    def optional(self, key: str, kind: type[_T], default: _D) -> _T | _D:
        """The field's value; `default` when it is absent or null."""
        value = self.body.get(key)
        return default if value is None else self.check(value, kind, key)

    def check(self, value: object, kind: type[_T], name: str) -> _T:
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return value
        raise ZnodeError(f"{self.what}: {name}: expected {kind.__name__}, got {value!r:.80}")

    def endpoints(self, key: str) -> tuple[BrokerEndpoint, ...]:
        value = self.optional(key, list, [])
        try:
            return endpoints_from_json(value)
        except ValueError as exc:
            raise ZnodeError(f"{self.what}: {key}: {exc}") from None

    def ints(self, key: str) -> tuple[int, ...]:
        return tuple(self.check(item, int, key) for item in self.get(key, list))

    def partition_map(self, key: str, *, required: bool) -> dict[int, tuple[int, ...]]:
        """{"0": [1, 2], ...} as {0: (1, 2), ...}."""
        body = self.get(key, dict) if required else self.optional(key, dict, {})
        return {
            _number(index, f"{self.what}: {key}"): tuple(
                self.check(item, int, f"{key}[{index}]") for item in self.check(ids, list, key)
            )
            for index, ids in body.items()
        }


def _number(text: str, what: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise ZnodeError(f"{what}: {text!r} is not a number")
    return int(text)


def _uuid(text: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ZnodeError(f"{what}: {text!r} is not a UUID") from None


def parse_kafka_uuid(text: str) -> uuid.UUID:
    if not _KAFKA_UUID.fullmatch(text):
        raise ZnodeError(f"{text!r} is not a Kafka Uuid (22 characters of URL-safe base64)")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


@dataclass(frozen=True, slots=True)
class _TopicZnode:
    topic_id: uuid.UUID | None
    partitions: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]]
    removing: dict[int, tuple[int, ...]]


def _topic(data: bytes, what: str) -> _TopicZnode:
    fields = _Fields(data, what)
    text = fields.optional("topic_id", str, None)
    try:
        topic_id = None if text is None else parse_kafka_uuid(text)
    except ZnodeError as exc:
        raise ZnodeError(f"{what}: topic_id {exc}") from None
    return _TopicZnode(
        topic_id,
        fields.partition_map("partitions", required=True),
        fields.partition_map("adding_replicas", required=False),
        fields.partition_map("removing_replicas", required=False),
    )


def parse_topic(data: bytes) -> tuple[uuid.UUID | None, dict[int, tuple[int, ...]]]:
    """A /brokers/topics/<name> znode: its topic id (None if it has none) and assignment."""
    topic = _topic(data, "topic znode")
    return topic.topic_id, topic.partitions


def _entity_config(data: bytes, what: str) -> dict[str, str]:
    fields = _Fields(data, what)
    config = fields.get("config", dict)
    return {name: fields.check(value, str, f"config[{name!r}]") for name, value in config.items()}


def parse_entity_config(data: bytes) -> dict[str, str]:
    """A /config/topics/<name>, /config/brokers/<id> or /config/groups/<id> znode's
    overrides."""
    return _entity_config(data, "config znode")


@dataclass(frozen=True, slots=True)
class UserEntity:
    """A /config/users entity (its name unsanitized)."""

    name: str


def user_records(name: str, data: bytes, what: str) -> list[UserScramCredentialRecord]:
    """The SCRAM credentials of a /config/users znode (empty data: none). Its quotas are
    quota_znodes.py's."""
    records: list[UserScramCredentialRecord] = []
    if not data:
        return records
    for key, value in sorted(_entity_config(data, what).items()):
        mechanism = ScramMechanism.from_name(key)
        if mechanism is None:
            continue
        try:
            credential = parse_scram_config(value)
        except ValueError as exc:
            raise ZnodeError(f"{what}: {key}: {exc}") from None
        records.append(credential_record(name, mechanism.kafka_type, credential))
    return records


def _user_name(entity: str, what: str, kind: str = "user name") -> str:
    """A user name (or a group id) from its znode name, URL-encoded as Kafka writes it."""
    try:
        name = unquote(entity, errors="strict")
    except UnicodeDecodeError:
        name = ""
    if not name or sanitized_user(name) != entity:
        raise ZnodeError(f"{what}: {entity!r} is not a {kind} as Kafka writes it")
    return name


def _entity(
    kind: str, name: str, what: str
) -> tuple[ConfigResourceType, str] | UserEntity | QuotaEntity:
    if kind == "users" and "/" not in name and name != DEFAULT_ENTITY:
        return UserEntity(_user_name(name, what))
    if kind in ("users", "clients", "ips"):
        return entity_of_path(f"{kind}/{name}", what)
    if kind == "topics":
        problem = validate_topic_name(name)
        if problem is not None:
            raise ZnodeError(f"{what}: {problem}")
        return ConfigResourceType.TOPIC, name
    if kind == "brokers":
        if name == DEFAULT_ENTITY:
            return ConfigResourceType.BROKER, CLUSTER_DEFAULT
        return ConfigResourceType.BROKER, str(_number(name, what))
    if kind == "groups":
        return ConfigResourceType.GROUP, _user_name(name, what, "group id")
    raise ZnodeError(f"{what}: entity type {kind!r} is not topics, brokers, groups or a quota's")


def parse_change(data: bytes) -> tuple[ConfigResourceType, str] | UserEntity | QuotaEntity:
    """The config entity a change notification names: a user (its SCRAM credentials and
    quotas), another client quota entity, or a topic's, broker's or group's configs."""
    fields = _Fields(data, "config change")
    version = fields.get("version", int)
    if version != 2:
        raise ZnodeError(f"config change version {version} is not supported (only 2)")
    entity_path = fields.get("entity_path", str)
    kind, _, name = entity_path.partition("/")
    return _entity(kind, name, f"config change of {entity_path!r}")


def _endpoint(text: str, what: str) -> tuple[str, str, int]:
    match = _ENDPOINT.fullmatch(text)
    if match is None:
        raise ZnodeError(f"{what}: endpoint {text!r} is not LISTENER://host:port")
    return match[1], match[2], int(match[3])


def broker_registration(
    *,
    broker_id: int,
    host: str,
    port: int,
    rack: str | None,
    endpoints: Sequence[BrokerEndpoint],
    incarnation_id: uuid.UUID,
    timestamp_ms: int,
) -> bytes:
    """A broker's ephemeral /brokers/ids/<id> znode, Kafka's version 5 with the incarnation:
    `endpoints` as LISTENER://host:port texts and each listener's security protocol."""
    return json_bytes(
        {
            "version": 5,
            "host": host,
            "port": port,
            "rack": rack,
            "endpoints": [str(endpoint) for endpoint in endpoints],
            "listener_security_protocol_map": {e.name: e.security_protocol.name for e in endpoints},
            "jmx_port": -1,
            "timestamp": str(timestamp_ms),
            "features": {},
            "incarnation_id": str(incarnation_id),
        }
    )


def parse_broker_registration(data: bytes) -> BrokerRegistration:
    fields = _Fields(data, "broker registration")
    endpoints = fields.optional("endpoints", list, [])
    incarnation_id = fields.optional("incarnation_id", str, None)
    return BrokerRegistration(
        fields.get("host", str),
        fields.get("port", int),
        fields.optional("rack", str, None),
        tuple(_endpoint(fields.check(e, str, "endpoints"), fields.what) for e in endpoints),
        None if incarnation_id is None else _uuid(incarnation_id, fields.what),
    )


def controller_json(broker_id: int, timestamp_ms: int) -> bytes:
    """The ephemeral /controller znode of the active controller."""
    body = {"version": 2, "brokerid": broker_id, "kraftControllerEpoch": -1}
    return json_bytes({**body, "timestamp": str(timestamp_ms)})


def parse_controller(data: bytes) -> int:
    """The broker id in a /controller znode."""
    return _Fields(data, "/controller").get("brokerid", int)


# --- the image from a tree -------------------------------------------------------------------


def image_from_znodes(tree: Mapping[str, bytes], *, offset: int) -> MetadataImage:
    """The image `tree` (every znode's path and data) holds, as one entry at `offset`.

    A topic znode without a topic id or without a state for some partition is an operator's
    and not part of the image (see operator_topics). Unknown znodes are ignored.
    """
    records: list[MetadataRecord] = []
    for path in sorted(tree):
        data = tree[path]
        match path.split("/"):
            case ["", "cluster", "id"]:
                fields = _Fields(data, path)
                records.append(
                    ClusterRecord(fields.get("id", str), fields.optional("name", str, ""))
                )
            case ["", "strom", "brokers", broker_id]:
                fields = _Fields(data, path)
                records.append(
                    RegisterBrokerRecord(
                        _number(broker_id, path),
                        _uuid(fields.get("incarnation_id", str), path),
                        fields.get("host", str),
                        fields.get("port", int),
                        fields.optional("rack", str, None),
                        fenced=fields.get("fenced", bool),
                        epoch=fields.get("epoch", int),
                        endpoints=fields.endpoints("endpoints"),
                    )
                )
            case ["", "brokers", "topics", name]:
                records += _topic_records(tree, name, _topic(data, path))
            case ["", "config", "users", entity]:
                if entity != DEFAULT_ENTITY:
                    records += user_records(_user_name(entity, path), data, path)
                quota_entity = entity_of_path(path.removeprefix("/config/"), path)
                records += quota_records(quota_entity, data, path)
            case ["", "config", "users", _, "clients", _] | ["", "config", "clients" | "ips", _]:
                quota_entity = entity_of_path(path.removeprefix("/config/"), path)
                records += quota_records(quota_entity, data, path)
            case ["", "config", ("topics" | "brokers" | "groups") as kind, entity]:
                resource = _entity(kind, entity, path)
                assert isinstance(resource, tuple)
                resource_type, resource_name = resource
                overrides = sorted(_entity_config(data, path).items())
                records += [ConfigRecord(resource_type, resource_name, k, v) for k, v in overrides]
            case ["", "kafka-acl" | "kafka-acl-extended", *_]:
                records += acl_znode_records(path, data)
            case ["", "latest_producer_id_block"]:
                next_id = _Fields(data, path).get("next_producer_id", str)
                records.append(ProducerIdsRecord(-1, -1, _number(next_id, path)))
    return MetadataImage.empty().replay(records, offset=offset)


def _topic_records(
    tree: Mapping[str, bytes], name: str, topic: _TopicZnode
) -> list[MetadataRecord]:
    if topic.topic_id is None:
        return []
    records: list[MetadataRecord] = [TopicRecord(name, topic.topic_id)]
    for index, replicas in sorted(topic.partitions.items()):
        path = state_path(name, index)
        if path not in tree:
            return []
        state = _Fields(tree[path], path)
        records.append(
            PartitionRecord(
                topic.topic_id,
                index,
                replicas,
                state.ints("isr"),
                state.get("leader", int),
                state.get("leader_epoch", int),
                state.get("partition_epoch", int),
                topic.adding.get(index, ()),
                topic.removing.get(index, ()),
            )
        )
    return records


def operator_topics(tree: Mapping[str, bytes], image: MetadataImage) -> list[OperatorTopic]:
    """Topic znodes in `tree` that are not `image`'s topics (by name and id), by name."""
    found: list[OperatorTopic] = []
    for path in sorted(tree):
        match path.split("/"):
            case ["", "brokers", "topics", name]:
                topic = _topic(tree[path], path)
                known = image.topics_by_name.get(name)
                if known is None or known.topic_id != topic.topic_id:
                    found.append(OperatorTopic(name, topic.topic_id, topic.partitions))
    return found
