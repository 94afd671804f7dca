"""The ZooKeeper multi that takes the znodes of one metadata image to those of the next
(the layout is znodes.py's and acl_znodes.py's): deletes (children first), creates
(parents first), sets, then change notices; and, the other way, the records that take
the image to what an operator wrote into a znode (`replace_resource_acls`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from strom.metadata.acl_records import ResourcePattern, acl_record
from strom.metadata.acl_znodes import acl_change, acl_data, acl_path, acl_path_problem
from strom.metadata.image import MetadataImage, PartitionImage, TopicImage
from strom.metadata.quota_entities import USER, QuotaEntity
from strom.metadata.quota_znodes import QUOTA_PARENTS, entity_path, quota_data, user_tree
from strom.metadata.records import (
    ConfigResourceType,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
)
from strom.metadata.znode_json import ZnodeError, json_object
from strom.metadata.znodes import (
    CLUSTER_ID,
    CONFIG_CHANGE_PREFIX,
    PRODUCER_ID_BLOCK,
    OpKind,
    ZnodeOp,
    broker_data,
    broker_path,
    cluster_data,
    config_data,
    config_path,
    json_bytes,
    producer_data,
    scram_config,
    state_data,
    state_path,
    topic_data,
    topic_path,
)
from strom.security.acls import AclBinding

__all__ = ["diff", "leftover_znodes", "replace_resource_acls"]


class _Ops:
    """One diff's ops by kind; `ordered` lists them as a multi needs them."""

    def __init__(self) -> None:
        self.deletes: list[ZnodeOp] = []  # children before parents
        self.creates: list[ZnodeOp] = []  # parents before children
        self.sets: list[ZnodeOp] = []
        self.notifies: list[ZnodeOp] = []

    def put(self, path: str, before: bytes | None, after: bytes | None) -> None:
        if before == after:
            return
        if after is None:
            self.deletes.append(ZnodeOp(OpKind.DELETE, path))
        elif before is None:
            self.creates.append(ZnodeOp(OpKind.CREATE, path, after))
        else:
            self.sets.append(ZnodeOp(OpKind.SET, path, after))

    def ordered(self) -> list[ZnodeOp]:
        return self.deletes + self.creates + self.sets + self.notifies


def diff(old: MetadataImage, new: MetadataImage, *, controller_epoch: int) -> list[ZnodeOp]:
    """The ops that take ZooKeeper from `old`'s znodes to `new`'s, in one multi's order:
    deletes (children first), creates (parents first), sets, then change notices.

    Unchanged parts cost nothing but an identity check: a topic whose TopicImage `is` the
    same is skipped, and in a changed topic only partitions whose state differs are
    written, with `controller_epoch`. A topic recreated under its name is deleted first.
    """
    ops = _Ops()
    ops.put(CLUSTER_ID, cluster_data(old), cluster_data(new))
    ops.put(PRODUCER_ID_BLOCK, producer_data(old), producer_data(new))
    if old.brokers is not new.brokers:
        for broker_id in sorted(old.brokers.keys() | new.brokers.keys()):
            before, after = old.brokers.get(broker_id), new.brokers.get(broker_id)
            if before != after:
                ops.put(broker_path(broker_id), broker_data(before), broker_data(after))
    reborn: list[str] = []  # topic names that appeared, vanished or changed id
    was, now = old.topics_by_name, new.topics_by_name
    if was is not now:
        changed = {name for name in was.keys() | now.keys() if was.get(name) is not now.get(name)}
        for name in sorted(changed):
            if _diff_topic(ops, was.get(name), now.get(name), controller_epoch):
                reborn.append(name)
    _diff_configs(ops, old, new, reborn)
    if old.scram_users is not new.scram_users or old.client_quotas is not new.client_quotas:
        _diff_users_and_quotas(ops, old, new)
    if old.acls is not new.acls:
        _diff_acls(ops, set(old.acl_index), set(new.acl_index))
    return ops.ordered()


def _diff_topic(
    ops: _Ops, before: TopicImage | None, after: TopicImage | None, controller_epoch: int
) -> bool:
    """Adds the ops of one topic; True if it was created or deleted."""
    if before is not None and (after is None or after.topic_id != before.topic_id):
        for index in sorted(before.partitions):
            _delete_partition(ops, before.name, index)
        path = topic_path(before.name)
        ops.deletes += [ZnodeOp(OpKind.DELETE, f"{path}/partitions"), ZnodeOp(OpKind.DELETE, path)]
        before = None
        if after is None:
            return True
    assert after is not None
    if before is None:
        path = topic_path(after.name)
        ops.creates.append(ZnodeOp(OpKind.CREATE, path, topic_data(after)))
        ops.creates.append(ZnodeOp(OpKind.CREATE, f"{path}/partitions"))
        for index in sorted(after.partitions):
            _create_partition(ops, after.name, index, after.partitions[index], controller_epoch)
        return True
    reassigned = before.partitions.keys() != after.partitions.keys()
    for index in sorted(after.partitions):
        was, now = before.partitions.get(index), after.partitions[index]
        if was is now:
            continue
        if was is None:
            _create_partition(ops, after.name, index, now, controller_epoch)
            continue
        reassigned = reassigned or _assignment(was) != _assignment(now)
        if _leadership(was) != _leadership(now):
            state = state_data(now, controller_epoch)
            ops.sets.append(ZnodeOp(OpKind.SET, state_path(after.name, index), state))
    for index in sorted(before.partitions.keys() - after.partitions.keys()):
        _delete_partition(ops, after.name, index)
    if reassigned:
        ops.sets.append(ZnodeOp(OpKind.SET, topic_path(after.name), topic_data(after)))
    return False


def _assignment(p: PartitionImage) -> tuple[tuple[int, ...], ...]:
    return p.replicas, p.adding_replicas, p.removing_replicas


def _leadership(p: PartitionImage) -> tuple[object, ...]:
    return p.leader, p.leader_epoch, p.isr, p.partition_epoch


def _create_partition(
    ops: _Ops, name: str, index: int, partition: PartitionImage, controller_epoch: int
) -> None:
    state = state_path(name, index)
    ops.creates.append(ZnodeOp(OpKind.CREATE, state.removesuffix("/state")))
    ops.creates.append(ZnodeOp(OpKind.CREATE, state, state_data(partition, controller_epoch)))


def _delete_partition(ops: _Ops, name: str, index: int) -> None:
    state = state_path(name, index)
    ops.deletes.append(ZnodeOp(OpKind.DELETE, state))
    ops.deletes.append(ZnodeOp(OpKind.DELETE, state.removesuffix("/state")))


def _diff_configs(ops: _Ops, old: MetadataImage, new: MetadataImage, reborn: list[str]) -> None:
    """Config znodes of changed entities and of reborn topics; a notice per changed entity."""
    keys = {(ConfigResourceType.TOPIC, name) for name in reborn}
    if old.configs is not new.configs:
        both = old.configs.keys() | new.configs.keys()
        keys.update(key for key in both if old.configs.get(key) != new.configs.get(key))
    for key in sorted(keys):
        path = config_path(*key)
        ops.put(path, config_data(old, key), config_data(new, key))
        if old.configs.get(key, {}) != new.configs.get(key, {}):
            notice = json_bytes({"version": 2, "entity_path": path.removeprefix("/config/")})
            ops.notifies.append(ZnodeOp(OpKind.NOTIFY, CONFIG_CHANGE_PREFIX, notice))


def _diff_users_and_quotas(ops: _Ops, old: MetadataImage, new: MetadataImage) -> None:
    """The znodes of each user whose SCRAM credentials or quotas (its own or a client
    id's) changed, and of each other changed quota entity; a notice per changed entity."""
    was, now = old.scram_users, new.scram_users
    changed: dict[str, None] = {}  # entity paths below /config, each noticed once
    scram = sorted(name for name in was.keys() | now.keys() if was.get(name) != now.get(name))
    changed.update((entity_path(QuotaEntity.user(name)), None) for name in scram)
    users: set[str | None] = set(scram)
    entities = old.client_quotas.keys() | new.client_quotas.keys()
    for entity in sorted(entities, key=QuotaEntity.sort_key):
        if old.client_quotas.get(entity) == new.client_quotas.get(entity):
            continue
        changed[entity_path(entity)] = None
        if entity.has(USER):
            users.add(entity.name(USER))
        else:
            ops.put(entity_path(entity), quota_data(old, entity), quota_data(new, entity))
    for user in sorted(users, key=lambda name: (name is not None, name or "")):
        before = user_tree(old, user, scram_config(old, user))
        after = user_tree(new, user, scram_config(new, user))
        paths = sorted(before.keys() | after.keys(), key=lambda path: path.count("/"))
        for path in reversed(paths):  # deletes, children first
            if path not in after:
                ops.put(path, before[path], None)
        for path in paths:  # creates, parents first, and sets
            if path in after:
                ops.put(path, before.get(path), after[path])
    for path in changed:
        notice = json_bytes({"version": 2, "entity_path": path.removeprefix("/config/")})
        ops.notifies.append(ZnodeOp(OpKind.NOTIFY, CONFIG_CHANGE_PREFIX, notice))


def _diff_acls(ops: _Ops, was: Set[AclBinding], now: Set[AclBinding]) -> None:
    """The znode of each resource pattern whose bindings changed, and a notice for it.

    A pattern without a znode in Kafka's layout (see acl_path_problem), and a binding
    CreateAcls would refuse, are not written: the controller refuses such bindings before
    they reach the image, and ZooKeeper could not store them (or strom read them back).
    """
    touched = {ResourcePattern.of(binding) for binding in was ^ now}
    before: dict[ResourcePattern, list[AclBinding]] = {}
    after: dict[ResourcePattern, list[AclBinding]] = {}
    for bindings, into in ((was, before), (now, after)):
        for binding in bindings:
            resource = ResourcePattern.of(binding)
            if resource in touched:
                into.setdefault(resource, []).append(binding)
    for resource in sorted(touched):
        if acl_path_problem(resource) is not None:
            continue
        old, new = acl_data(before.get(resource, ())), acl_data(after.get(resource, ()))
        if old != new:
            ops.put(acl_path(resource), old, new)
            ops.notifies.append(acl_change(resource))


def replace_resource_acls(
    image: MetadataImage, resource: ResourcePattern, stored: Iterable[AclBinding]
) -> list[MetadataRecord]:
    """The records that make `resource`'s bindings in `image` exactly `stored` (its znode's,
    as an operator wrote it): a RemoveAccessControlEntryRecord for each id of a binding
    not stored (every id, should a binding have two), an AccessControlEntryRecord under
    `acl_id` for each stored binding the image lacks; none if they agree. `stored` are
    bindings of `resource` (parse_acls gives them so). O(bindings in the image)."""
    wanted = set(stored)
    held: set[AclBinding] = set()
    records: list[MetadataRecord] = []
    for record_id, binding in sorted(image.acls.items()):
        if ResourcePattern.of(binding) != resource:
            continue
        if binding in wanted:
            held.add(binding)
        else:
            records.append(RemoveAccessControlEntryRecord(record_id))
    records += [acl_record(binding) for binding in sorted(wanted - held)]
    return records


_ENTITY_ROOTS = tuple(f"{root}/" for root in ("/config/users", *QUOTA_PARENTS))


def _holds_nothing(data: bytes) -> bool:
    """No data, or a config znode whose config is empty."""
    if not data:
        return True
    try:
        return json_object(data, "").get("config") == {}
    except ZnodeError:
        return False


def leftover_znodes(tree: Mapping[str, bytes], image: MetadataImage) -> list[str]:
    """The user, client id and IP znodes in `tree` that hold nothing, that `image` does not
    hold and that have no other znode below them, children first: what Kafka's tools leave
    behind once an entity's last quota is removed. Deleting them keeps a later delete of
    their parent (a user whose credentials go) from failing on children strom never knew."""
    rendered = {op.path for op in diff(MetadataImage.empty(), image, controller_epoch=0)}
    found = {
        path
        for path, data in tree.items()
        if path.startswith(_ENTITY_ROOTS) and path not in rendered and _holds_nothing(data)
    }
    below: dict[str, list[str]] = {}
    for path in tree:
        parent = path.rsplit("/", 1)[0]
        below.setdefault(parent, []).append(path)

    def removable(path: str) -> bool:
        return path in found and all(removable(child) for child in below.get(path, ()))

    return sorted((p for p in found if removable(p)), key=lambda p: (-p.count("/"), p))
