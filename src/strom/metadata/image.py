"""The metadata image: an immutable view of the cluster, changed only by replay.

    MetadataImage.empty() --replay(entry's records, offset)--> MetadataImage --> ...

Every broker answers clients from its current image; the controller decides against it.
One `replay` call applies one metadata-log entry (one controller decision): `offset` is
that entry's offset, which becomes the image's offset and the epoch of every broker
registered in it. Replay copies only what the entry touches (the topic maps once, each
touched topic's partitions once), so an entry costs O(topics it touches + partitions it
touches), plus one copy of each top-level map it changes.

A record naming a broker or topic the image does not have (or a broker epoch that is no
longer current) changes nothing: decisions are taken against the image they are applied
to, so this only happens after a bug, and a broker must not crash replaying it.

ACLs: `acls` maps the id of each AccessControlEntryRecord to its binding, and
`acl_index` holds the distinct bindings, indexed for the authorizer. An entry's ACL
records change the index once, with `AclIndex.with_changes` (the bindings that gained
their first id or lost their last), never by building it anew. The controller stores a
binding once (CreateAcls of a binding that exists is a success that writes nothing), so
ids and bindings normally map one to one; a history that does hold one binding under two
ids (a bug, or a hand-edited log) is kept as it is: both ids stay in `acls`, the index
holds the binding once, until its last id is removed (`acl_duplicates` counts the ids
beyond the first, and is empty otherwise). An AccessControlEntryRecord reusing an id
replaces that id's binding. Removing an id the image does not have changes nothing.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from strom.metadata.acl_records import binding_of
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import (
    CLUSTER_DEFAULT,
    AccessControlEntryRecord,
    BrokerEndpoint,
    ClientQuotaRecord,
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    FenceBrokerRecord,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)
from strom.security.acls import AclBinding
from strom.security.authorizer import AclIndex

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerImage:
    broker_id: int
    incarnation_id: uuid.UUID
    host: str
    port: int
    rack: str | None
    epoch: int = -1
    """The metadata offset of the entry that registered this incarnation."""
    fenced: bool = False
    endpoints: tuple[BrokerEndpoint, ...] = ()
    """Its advertised client listeners; empty: `host`:`port` on every listener."""

    def address(self, listener: str | None) -> tuple[str, int] | None:
        """Where a client that reached the cluster on `listener` finds this broker: that
        listener's endpoint; None if this broker has no such listener (Kafka leaves such
        a broker out of the answer). `listener` None: the inter-broker address."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for endpoint in self.endpoints:
            if endpoint.name == listener:
                return endpoint.host, endpoint.port
        return None


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    replicas: tuple[int, ...]
    """Every replica, those a pending reassignment adds or removes included."""
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        """Whether a reassignment is pending (see reassignments.py)."""
        return bool(self.adding_replicas or self.removing_replicas)

    def changed(self, record: PartitionChangeRecord) -> PartitionImage:
        """This partition after `record` (which must name it)."""
        return PartitionImage(
            self.partition,
            self.replicas if record.replicas is None else record.replicas,
            record.isr,
            record.leader,
            record.leader_epoch,
            record.partition_epoch,
            self.adding_replicas if record.adding_replicas is None else record.adding_replicas,
            self.removing_replicas
            if record.removing_replicas is None
            else record.removing_replicas,
        )


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


@dataclass(frozen=True, slots=True)
class MetadataImage:
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    brokers: Mapping[int, BrokerImage] = field(default_factory=dict)
    configs: Mapping[tuple[ConfigResourceType, str], Mapping[str, str]] = field(
        default_factory=dict
    )
    offset: int = -1
    """Offset of the last replayed entry of the metadata log (-1: none)."""
    cluster_id: str = ""
    """"" until the first controller wrote the ClusterRecord."""
    cluster_name: str = ""
    next_producer_id: int = 0
    scram_users: Mapping[str, Mapping[int, UserScramCredentialRecord]] = field(default_factory=dict)
    """Each SCRAM user's credentials, by Kafka's mechanism type (1 SHA-256, 2 SHA-512)."""
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=dict)
    """Every ACL binding, by the id of the record that created it."""
    acl_index: AclIndex = field(default_factory=AclIndex, compare=False, repr=False)
    """The distinct bindings of `acls`, indexed for decisions (derived: not compared)."""
    acl_duplicates: Mapping[AclBinding, int] = field(
        default_factory=dict, compare=False, repr=False
    )
    """Bindings held under more than one id, with the number of ids beyond the first."""
    client_quotas: Mapping[QuotaEntity, Mapping[str, float]] = field(default_factory=dict)
    """Each client quota entity's quotas, by key; an entity without quotas is absent."""

    @staticmethod
    def empty() -> MetadataImage:
        return MetadataImage()

    # --- readers -------------------------------------------------------------------------

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ConfigResourceType.TOPIC, name), {})

    def broker_configs(self, broker_id: int) -> Mapping[str, str]:
        """The dynamic configs set for one broker (not the cluster default)."""
        return self.configs.get((ConfigResourceType.BROKER, str(broker_id)), {})

    def cluster_default_configs(self) -> Mapping[str, str]:
        """The dynamic broker configs set as the cluster-wide default."""
        return self.configs.get((ConfigResourceType.BROKER, CLUSTER_DEFAULT), {})

    def group_configs(self, group_id: str) -> Mapping[str, str]:
        """A group's own configs (the group need not exist, as in Kafka)."""
        return self.configs.get((ConfigResourceType.GROUP, group_id), {})

    def scram_credential(self, name: str, mechanism: int) -> UserScramCredentialRecord | None:
        return self.scram_users.get(name, {}).get(mechanism)

    def unfenced_brokers(self) -> list[BrokerImage]:
        """Registered brokers that are not fenced, by id."""
        return sorted((b for b in self.brokers.values() if not b.fenced), key=lambda b: b.broker_id)

    def live_broker_ids(self) -> list[int]:
        """Ids of the unfenced brokers, sorted: where replicas may be placed."""
        return [b.broker_id for b in self.unfenced_brokers()]

    def is_live(self, broker_id: int) -> bool:
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.fenced

    def partitions(self) -> Iterator[tuple[TopicImage, PartitionImage]]:
        """Every partition of every topic, topics by name, partitions by index."""
        for name in sorted(self.topics_by_name):
            topic = self.topics_by_name[name]
            for index in sorted(topic.partitions):
                yield topic, topic.partitions[index]

    # --- replay --------------------------------------------------------------------------

    def replay(
        self, records: Iterable[MetadataRecord], *, offset: int | None = None
    ) -> MetadataImage:
        """The image after one entry holding `records`, at `offset` (default: the next one)."""
        entry_offset = self.offset + 1 if offset is None else offset
        replay = _Replay(self, entry_offset)
        for record in records:
            replay.apply(record)
        return replay.finish()


class _Replay:
    """Applies one entry's records to copies of only the parts of the image they touch."""

    def __init__(self, image: MetadataImage, offset: int) -> None:
        self.image = image
        self.offset = offset
        self.by_name: dict[str, TopicImage] | None = None
        self.by_id: dict[uuid.UUID, TopicImage] | None = None
        self.brokers: dict[int, BrokerImage] | None = None
        self.configs: dict[tuple[ConfigResourceType, str], Mapping[str, str]] | None = None
        self.touched: dict[uuid.UUID, dict[int, PartitionImage]] = {}
        self.scram_users: dict[str, Mapping[int, UserScramCredentialRecord]] | None = None
        self.acls: dict[uuid.UUID, AclBinding] | None = None
        self.acl_duplicates: dict[AclBinding, int] | None = None
        self.acl_held: dict[AclBinding, bool] = {}  # touched bindings: held by some id now?
        self.client_quotas: dict[QuotaEntity, Mapping[str, float]] | None = None
        self.cluster = (image.cluster_id, image.cluster_name)
        self.next_producer_id = image.next_producer_id

    # copy-on-write accessors
    def _topics(self) -> tuple[dict[str, TopicImage], dict[uuid.UUID, TopicImage]]:
        if self.by_name is None or self.by_id is None:
            self.by_name = dict(self.image.topics_by_name)
            self.by_id = dict(self.image.topics_by_id)
        return self.by_name, self.by_id

    def _brokers(self) -> dict[int, BrokerImage]:
        if self.brokers is None:
            self.brokers = dict(self.image.brokers)
        return self.brokers

    def _configs(self) -> dict[tuple[ConfigResourceType, str], Mapping[str, str]]:
        if self.configs is None:
            self.configs = dict(self.image.configs)
        return self.configs

    def _partitions(self, topic_id: uuid.UUID) -> dict[int, PartitionImage] | None:
        partitions = self.touched.get(topic_id)
        if partitions is None:
            by_id = self.by_id if self.by_id is not None else self.image.topics_by_id
            topic = by_id.get(topic_id)
            if topic is None:
                return None
            partitions = self.touched[topic_id] = dict(topic.partitions)
        return partitions

    def apply(self, record: MetadataRecord) -> None:
        match record:
            case ClusterRecord():
                self.cluster = (record.cluster_id, record.cluster_name)
            case RegisterBrokerRecord():
                self._brokers()[record.broker_id] = BrokerImage(
                    record.broker_id,
                    record.incarnation_id,
                    record.host,
                    record.port,
                    record.rack,
                    epoch=self.offset if record.epoch is None else record.epoch,
                    fenced=record.fenced,
                    endpoints=record.endpoints,
                )
            case FenceBrokerRecord() | UnfenceBrokerRecord() | UnregisterBrokerRecord():
                self._broker_state(record)
            case TopicRecord():
                by_name, by_id = self._topics()
                old = by_name.get(record.name)
                if old is not None and old.topic_id != record.topic_id:
                    by_id.pop(old.topic_id, None)
                    self.touched.pop(old.topic_id, None)
                same_id = by_id.get(record.topic_id)
                if same_id is not None and same_id.name != record.name:
                    by_name.pop(same_id.name, None)
                topic = TopicImage(record.name, record.topic_id, {})
                by_name[record.name] = topic
                by_id[record.topic_id] = topic
                self.touched[record.topic_id] = {}
            case PartitionRecord():
                partitions = self._partitions(record.topic_id)
                if partitions is None:
                    log.warning("metadata: %s names an unknown topic; ignored", record)
                    return
                partitions[record.partition] = PartitionImage(
                    record.partition,
                    record.replicas,
                    record.isr,
                    record.leader,
                    record.leader_epoch,
                    record.partition_epoch,
                    record.adding_replicas,
                    record.removing_replicas,
                )
            case PartitionChangeRecord():
                self._partition_change(record)
            case RemoveTopicRecord():
                by_name, by_id = self._topics()
                removed = by_id.pop(record.topic_id, None)
                self.touched.pop(record.topic_id, None)
                if removed is not None:
                    by_name.pop(removed.name, None)
                    self._configs().pop((ConfigResourceType.TOPIC, removed.name), None)
            case ConfigRecord():
                configs = self._configs()
                key = (record.resource_type, record.resource_name)
                entries = dict(configs.get(key, {}))
                if record.value is None:
                    entries.pop(record.name, None)
                else:
                    entries[record.name] = record.value
                if entries:
                    configs[key] = entries
                else:
                    configs.pop(key, None)
            case ProducerIdsRecord():
                self.next_producer_id = record.next_producer_id
            case UserScramCredentialRecord() | RemoveUserScramCredentialRecord():
                self._scram(record)
            case AccessControlEntryRecord():
                self._add_acl(record.id, binding_of(record))
            case RemoveAccessControlEntryRecord():
                acls = self.image.acls if self.acls is None else self.acls
                if record.id in acls:
                    self._drop_acl(self._acls().pop(record.id))
            case ClientQuotaRecord():
                self._client_quota(record)

    def _client_quota(self, record: ClientQuotaRecord) -> None:
        if self.client_quotas is None:
            self.client_quotas = dict(self.image.client_quotas)
        quotas = dict(self.client_quotas.get(record.entity, {}))
        if record.value is None:
            quotas.pop(record.key, None)
        else:
            quotas[record.key] = record.value
        if quotas:
            self.client_quotas[record.entity] = quotas
        else:
            self.client_quotas.pop(record.entity, None)

    def _scram(self, record: UserScramCredentialRecord | RemoveUserScramCredentialRecord) -> None:
        if self.scram_users is None:
            self.scram_users = dict(self.image.scram_users)
        credentials = dict(self.scram_users.get(record.name, {}))
        if isinstance(record, UserScramCredentialRecord):
            credentials[record.mechanism] = record
        elif credentials.pop(record.mechanism, None) is None:
            log.warning("metadata: %s names no credential; ignored", record)
        if credentials:
            self.scram_users[record.name] = credentials
        else:
            self.scram_users.pop(record.name, None)

    def _acls(self) -> dict[uuid.UUID, AclBinding]:
        if self.acls is None:
            self.acls = dict(self.image.acls)
        return self.acls

    def _add_acl(self, acl_id: uuid.UUID, binding: AclBinding) -> None:
        acls = self.image.acls if self.acls is None else self.acls
        old = acls.get(acl_id)
        if old == binding:
            return
        acls = self._acls()
        if old is not None:
            self._drop_acl(old)
        acls[acl_id] = binding
        held = self.acl_held.get(binding)
        if (binding in self.image.acl_index) if held is None else held:
            duplicates = self._acl_duplicates()
            duplicates[binding] = duplicates.get(binding, 0) + 1
        else:
            self.acl_held[binding] = True

    def _drop_acl(self, binding: AclBinding) -> None:
        """One id of `binding` is gone: it loses a duplicate, or leaves the index."""
        duplicates = (
            self.image.acl_duplicates if self.acl_duplicates is None else self.acl_duplicates
        )
        extra = duplicates.get(binding, 0)
        if not extra:
            self.acl_held[binding] = False
        elif extra == 1:
            del self._acl_duplicates()[binding]
        else:
            self._acl_duplicates()[binding] = extra - 1

    def _acl_duplicates(self) -> dict[AclBinding, int]:
        if self.acl_duplicates is None:
            self.acl_duplicates = dict(self.image.acl_duplicates)
        return self.acl_duplicates

    def _acl_index(self) -> AclIndex:
        """The image's index with this entry's bindings that gained their first id or lost
        their last: one `with_changes` per entry."""
        index = self.image.acl_index
        added = [b for b, held in self.acl_held.items() if held and b not in index]
        removed = [b for b, held in self.acl_held.items() if not held and b in index]
        return index.with_changes(added, removed) if added or removed else index

    def _broker_state(
        self, record: FenceBrokerRecord | UnfenceBrokerRecord | UnregisterBrokerRecord
    ) -> None:
        brokers = self.brokers if self.brokers is not None else self.image.brokers
        broker = brokers.get(record.broker_id)
        if broker is None or broker.epoch != record.epoch:
            log.warning("metadata: %s does not match the registered broker; ignored", record)
            return
        if isinstance(record, UnregisterBrokerRecord):
            del self._brokers()[record.broker_id]
        else:
            fenced = isinstance(record, FenceBrokerRecord)
            self._brokers()[record.broker_id] = replace(broker, fenced=fenced)

    def _partition_change(self, record: PartitionChangeRecord) -> None:
        partitions = self._partitions(record.topic_id)
        old = None if partitions is None else partitions.get(record.partition)
        if partitions is None or old is None:
            log.warning("metadata: %s names an unknown partition; ignored", record)
            return
        partitions[record.partition] = old.changed(record)

    def finish(self) -> MetadataImage:
        image = self.image
        if self.touched:
            by_name, by_id = self._topics()
            for topic_id, partitions in self.touched.items():
                topic = replace(by_id[topic_id], partitions=partitions)
                by_id[topic_id] = topic
                by_name[topic.name] = topic
        return MetadataImage(
            topics_by_name=image.topics_by_name if self.by_name is None else self.by_name,
            topics_by_id=image.topics_by_id if self.by_id is None else self.by_id,
            brokers=image.brokers if self.brokers is None else self.brokers,
            configs=image.configs if self.configs is None else self.configs,
            offset=self.offset,
            cluster_id=self.cluster[0],
            cluster_name=self.cluster[1],
            next_producer_id=self.next_producer_id,
            scram_users=image.scram_users if self.scram_users is None else self.scram_users,
            acls=image.acls if self.acls is None else self.acls,
            acl_index=self._acl_index(),
            acl_duplicates=(
                image.acl_duplicates if self.acl_duplicates is None else self.acl_duplicates
            ),
            client_quotas=(
                image.client_quotas if self.client_quotas is None else self.client_quotas
            ),
        )
