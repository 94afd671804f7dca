"""What the console's pages show and do, asked of the cluster through the Kafka protocol.

One `ClusterBackend` serves every request thread: librdkafka's admin client and producer
are thread-safe, and the calls strom's own client makes (DescribeCluster, DescribeQuorum,
DescribeLogDirs) open a connection per call. Failures are CommandError, whose message the
pages show as it is.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.cli.cluster import (
    DESCRIBE_LOG_DIRS,
    ClusterStatus,
    brokers_from,
    describe_cluster,
    fetch_status,
)
from strom.cli.common import (
    CommandError,
    ConnectionSettings,
    admin_outcome,
    kafka_error_message,
)
from strom.cli.group_admin import list_offsets, offset_spec
from strom.cli.topic import describe_source
from strom.cli.wire import WireSession, is_error, run_session

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, ClusterMetadata  # type: ignore[attr-defined]

Partition = tuple[str, int]
CLIENT_ID = "strom-console"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    earliest: int | None
    latest: int | None
    sizes: Mapping[int, int]
    """Bytes on disk per broker holding a replica (those that answered)."""

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclass(frozen=True, slots=True)
class TopicSummary:
    name: str
    partitions: int
    replication_factor: int
    under_replicated: int
    offline: int
    size: int | None
    """Bytes on disk, every replica counted; None when no broker said."""
    internal: bool


@dataclass(frozen=True, slots=True)
class ConfigValue:
    name: str
    value: str | None
    source: str
    default: bool
    read_only: bool
    sensitive: bool


@dataclass(frozen=True, slots=True)
class TopicDetail:
    name: str
    partitions: tuple[PartitionInfo, ...]
    configs: tuple[ConfigValue, ...]


@dataclass(frozen=True, slots=True)
class ClusterOverview:
    status: ClusterStatus
    topics: int
    partitions: int
    under_replicated: int
    offline: int


class ClusterBackend:
    def __init__(self, bootstrap: str, timeout_s: float, command_config: Path | None) -> None:
        self.connection = ConnectionSettings.create(bootstrap, timeout_s, command_config)
        self.admin: AdminClient = self.connection.create_client(_admin, self.own_settings())
        self._producer: Producer | None = None
        self._lock = threading.Lock()

    @property
    def bootstrap(self) -> str:
        return self.connection.bootstrap

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.connection.timeout_s)

    # --- the cluster ----------------------------------------------------------------------

    def metadata(self) -> ClusterMetadata:
        return self.connection.metadata(self.admin)

    def overview(self) -> ClusterOverview:
        status = run_session(
            self.bootstrap, self.timeout_s, fetch_status, self.connection.command_config_file
        )
        topics = self.metadata().topics.values()
        partitions = [p for t in topics for p in t.partitions.values()]
        return ClusterOverview(
            status=status,
            topics=len(topics),
            partitions=len(partitions),
            under_replicated=sum(len(p.isrs) < len(p.replicas) for p in partitions),
            offline=sum(p.leader < 0 for p in partitions),
        )

    def log_sizes(self) -> dict[Partition, dict[int, int]]:
        """Bytes per partition per broker (DescribeLogDirs, asked of every broker); brokers
        that do not answer are left out."""

        async def ask(session: WireSession) -> dict[Partition, dict[int, int]]:
            version, cluster = await describe_cluster(session)
            sizes: dict[Partition, dict[int, int]] = {}
            for broker in brokers_from(cluster, fenced_known=version >= 2):
                node = WireSession(broker.address, session.timeout_s, session.security)
                try:
                    _, answer = await node.call(
                        DESCRIBE_LOG_DIRS, "DescribeLogDirs", {"topics": None}, max_version=4
                    )
                except CommandError:
                    continue
                finally:
                    await node.close()
                for result in answer.results:
                    if is_error(result.error_code):
                        continue
                    for topic in result.topics:
                        for p in topic.partitions:
                            key = (str(topic.name), int(p.partition_index))
                            held = sizes.setdefault(key, {})
                            held[broker.node_id] = held.get(broker.node_id, 0) + int(
                                p.partition_size
                            )
            return sizes

        try:
            return run_session(
                self.bootstrap, self.timeout_s, ask, self.connection.command_config_file
            )
        except CommandError:
            return {}  # sizes are extra: a page shows "-" rather than failing

    # --- topics ---------------------------------------------------------------------------

    def topics(self) -> list[TopicSummary]:
        metadata = self.metadata()
        sizes = self.log_sizes()
        summaries = []
        for name, topic in sorted(metadata.topics.items()):
            if topic.error is not None:
                continue
            parts = list(topic.partitions.values())
            held = [sum(sizes[(name, p.id)].values()) for p in parts if (name, p.id) in sizes]
            summaries.append(
                TopicSummary(
                    name=name,
                    partitions=len(parts),
                    replication_factor=max((len(p.replicas) for p in parts), default=0),
                    under_replicated=sum(len(p.isrs) < len(p.replicas) for p in parts),
                    offline=sum(p.leader < 0 for p in parts),
                    size=sum(held) if held else None,
                    internal=name.startswith("__"),
                )
            )
        return summaries

    def topic(self, name: str) -> TopicDetail:
        topic = self.connection.topic(self.metadata(), name)
        keys = [(name, p) for p in sorted(topic.partitions)]
        earliest, _ = list_offsets(self.admin, self.connection, keys, offset_spec("earliest"))
        latest, _ = list_offsets(self.admin, self.connection, keys, offset_spec("latest"))
        sizes = self.log_sizes()
        partitions = tuple(
            PartitionInfo(
                partition=p.id,
                leader=p.leader,
                replicas=tuple(p.replicas),
                isr=tuple(p.isrs),
                earliest=earliest.get((name, p.id)),
                latest=latest.get((name, p.id)),
                sizes=sizes.get((name, p.id), {}),
            )
            for _, p in sorted(topic.partitions.items())
        )
        return TopicDetail(name, partitions, tuple(self.topic_configs(name)))

    def topic_configs(self, name: str) -> list[ConfigValue]:
        from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

        resource = ConfigResource("TOPIC", name)
        futures = self.admin.describe_configs([resource], request_timeout=self.timeout_s)
        entries, error = admin_outcome(futures[resource], self.connection, name)
        if error is not None:
            raise self.connection.kafka_error(error, name)
        return [
            ConfigValue(
                name=entry.name,
                value=None if entry.is_sensitive else entry.value,
                source=describe_source(entry.source),
                default=bool(entry.is_default),
                read_only=bool(entry.is_read_only),
                sensitive=bool(entry.is_sensitive),
            )
            for entry in sorted(entries.values(), key=lambda e: e.name)
        ]

    @property
    def timeout_s(self) -> float:
        return self.connection.timeout_s

    def create_topic(
        self, name: str, partitions: int, replication_factor: int, configs: Mapping[str, str]
    ) -> None:
        from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

        new = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=replication_factor,
            config=dict(configs),
        )
        futures = self.admin.create_topics(
            [new], operation_timeout=self.timeout_s, request_timeout=self.timeout_s
        )
        self._outcome(futures[name], name)

    def delete_topic(self, name: str) -> None:
        futures = self.admin.delete_topics(
            [name], operation_timeout=self.timeout_s, request_timeout=self.timeout_s
        )
        self._outcome(futures[name], name)

    def add_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions  # type: ignore[attr-defined]

        futures = self.admin.create_partitions(
            [NewPartitions(name, total)],
            operation_timeout=self.timeout_s,
            request_timeout=self.timeout_s,
        )
        self._outcome(futures[name], name)

    def alter_topic_config(self, name: str, key: str, value: str | None) -> None:
        """Set one key (IncrementalAlterConfigs SET), or with value None, remove the
        topic's own value so the default applies again (DELETE)."""
        from confluent_kafka.admin import (  # type: ignore[attr-defined]
            AlterConfigOpType,
            ConfigEntry,
            ConfigResource,
        )

        operation = AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET
        entry = ConfigEntry(key, value or "", incremental_operation=operation)
        resource = ConfigResource("TOPIC", name, incremental_configs=[entry])
        futures = self.admin.incremental_alter_configs([resource], request_timeout=self.timeout_s)
        self._outcome(futures[resource], name)

    def _outcome(self, future: Any, context: str) -> Any:
        result, error = admin_outcome(future, self.connection, context)
        if error is not None:
            raise CommandError(kafka_error_message(error.name(), error.str(), context))
        return result

    # --- records --------------------------------------------------------------------------

    def producer(self) -> Producer:
        from confluent_kafka import Producer

        with self._lock:
            if self._producer is None:
                self._producer = self.connection.create_client(Producer, self.own_settings())
            return self._producer

    def produce(
        self,
        topic: str,
        partition: int | None,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]],
    ) -> tuple[int, int]:
        """Send one record and wait for its acknowledgement: (partition, offset)."""
        self.connection.topic(self.metadata(), topic)  # a missing topic is not created
        outcome: list[tuple[Any, Any]] = []  # (error, message) from the delivery report
        producer = self.producer()
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=list(headers),
            partition=-1 if partition is None else partition,  # -1: the partitioner picks
            on_delivery=lambda error, message: outcome.append((error, message)),
        )
        deadline = self.timeout_s + 5
        producer.flush(deadline)  # serves the delivery report
        if not outcome:
            raise CommandError(f"{topic}: no acknowledgement within {deadline:g} s")
        error, result = outcome[0]
        if error is not None:
            raise CommandError(kafka_error_message(error.name(), error.str(), topic))
        return int(result.partition()), int(result.offset())

    def own_settings(self) -> dict[str, Any]:
        """The console's client id, unless the command config names one."""
        return {} if "client.id" in self.connection.command_config else {"client.id": CLIENT_ID}

    def consumer(self) -> Consumer:
        """A consumer for one search: assigned partitions, no group membership, no commits."""
        from confluent_kafka import Consumer

        return self.connection.create_client(
            Consumer,
            self.own_settings()
            | {
                "group.id": CLIENT_ID,
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
            },
        )


def _admin(config: dict[str, Any]) -> AdminClient:
    from confluent_kafka.admin import AdminClient

    return AdminClient(config)
