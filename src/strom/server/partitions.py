"""The partitions this broker holds: their logs, high watermarks and waiting fetches.

The manager follows the metadata image: `sync(image)` opens a log for every partition
this node is a replica of and deletes the logs of partitions that are gone. It is owned
by the broker's event loop; nothing here blocks except the file operations of the log.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig, effective_topic_config
from strom.log.config import LogConfig
from strom.log.partition_log import PartitionLog
from strom.log.recovery import log_recovery
from strom.metadata.image import MetadataImage
from strom.protocol.records import TimestampType
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)

METADATA_LOG_DIR = "__cluster_metadata-0"  # controllers: the Raft log of the metadata
INLINE_OPENS = 64  # more new partitions than this open in a worker thread
OPEN_CHUNK = 200

_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>\d+)")
PARTITION_METADATA_FILE = "partition.metadata"


def log_config_for(config: BrokerConfig, overrides: Mapping[str, str]) -> LogConfig:
    values = {
        key: value for key, (value, _source) in effective_topic_config(config, overrides).items()
    }
    timestamp_type = (
        TimestampType.LOG_APPEND_TIME
        if values["message.timestamp.type"] == "LogAppendTime"
        else TimestampType.CREATE_TIME
    )
    return LogConfig(
        segment_bytes=int(values["segment.bytes"]),
        segment_ms=int(values["segment.ms"]),
        retention_ms=int(values["retention.ms"]),
        retention_bytes=int(values["retention.bytes"]),
        index_interval_bytes=int(values["index.interval.bytes"]),
        max_message_bytes=int(values["max.message.bytes"]),
        message_timestamp_type=timestamp_type,
        flush_messages=int(values["flush.messages"]),
        flush_ms=int(values["flush.ms"]),
        cleanup_policy=values["cleanup.policy"],
        delete_retention_ms=int(values["delete.retention.ms"]),
        min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
        min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
        max_compaction_lag_ms=int(values["max.compaction.lag.ms"]),
    )


@dataclass(slots=True, eq=False)
class Partition:
    """One partition replica on this broker.

    With `flush.messages=1` (the default) records become visible to consumers, and the
    high watermark passes them, only once they are fsynced: nothing a consumer read can
    be lost by a crash. Otherwise the high watermark is the log end.
    """

    topic: str
    topic_id: uuid.UUID
    index: int
    log: PartitionLog
    config: LogConfig
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    leader_id: int = -1
    leader_epoch: int = 0
    node_id: int = -1

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def fsync_before_ack(self) -> bool:
        return self.config.flush_messages <= 1

    @property
    def high_watermark(self) -> int:
        if self.fsync_before_ack:
            return min(self.log.flushed_offset, self.log.log_end_offset)
        return self.log.log_end_offset

    def wake_fetchers(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.waiters.clear()


class PartitionManager:
    """Follows the image: sync(image) -> open/close/delete logs; get(topic, p) -> Partition."""

    def __init__(
        self, config: BrokerConfig, *, on_opened: Callable[[], None] | None = None
    ) -> None:
        """`on_opened` is called after partitions opened in the background appear."""
        self._config = config
        self._log_dir = config.log_dir
        self._by_name: dict[tuple[str, int], Partition] = {}
        self._by_id: dict[tuple[uuid.UUID, int], Partition] = {}
        self._topic_configs: dict[str, Mapping[str, str]] = {}
        self._log_configs: dict[tuple[tuple[str, str], ...], LogConfig] = {}
        self._wanted: dict[tuple[str, int], tuple[uuid.UUID, LogConfig]] = {}
        self._leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self._opening: set[tuple[str, int]] = set()
        self._tasks = TaskSet(f"[node {config.node_id}] partitions")
        self._on_opened = on_opened

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._by_name.values()))

    def reconfigure(self, config: BrokerConfig) -> None:
        """New broker-level defaults (dynamic configs); the next sync applies them."""
        self._config = config
        self._log_configs.clear()

    def _log_config(self, overrides: Mapping[str, str]) -> LogConfig:
        """The log config for a topic's overrides, computed once per distinct set: sync
        runs on every metadata change, over every topic."""
        key = tuple(sorted(overrides.items()))
        found = self._log_configs.get(key)
        if found is None:
            found = self._log_configs[key] = log_config_for(self._config, overrides)
        return found

    def get(self, topic: str, partition: int) -> Partition | None:
        return self._by_name.get((topic, partition))

    def get_by_id(self, topic_id: uuid.UUID, partition: int) -> Partition | None:
        return self._by_id.get((topic_id, partition))

    def led(
        self, topic: str, partition: int, image: MetadataImage
    ) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it, else why not: UNKNOWN_TOPIC_OR_PARTITION
        when it does not exist here, NOT_LEADER_OR_FOLLOWER when another broker leads it
        (clients refresh their metadata and go there)."""
        found = self._by_name.get((topic, partition))
        if found is None:
            topic_image = image.topics_by_name.get(topic)
            if topic_image is not None and partition in topic_image.partitions:
                return None, ErrorCode.not_leader_or_follower
            return None, ErrorCode.unknown_topic_or_partition
        if not found.is_leader:
            return None, ErrorCode.not_leader_or_follower
        return found, ErrorCode.none

    def sync(self, image: MetadataImage, *, now_ms: int) -> None:
        """Open, reconfigure, lead or follow, and delete partitions to match `image`.

        A few new partitions open at once; many (a topic with thousands of partitions)
        open in a worker thread, a chunk at a time, so the event loop (Raft heartbeats
        among it) keeps running: each appears once its files exist.
        """
        wanted: dict[tuple[str, int], tuple[uuid.UUID, LogConfig]] = {}
        leaders: dict[tuple[str, int], tuple[int, int]] = {}
        for topic in image.topics_by_name.values():
            overrides = image.topic_configs(topic.name)
            log_config = self._log_config(overrides)
            for index, partition in topic.partitions.items():
                if self._config.node_id in partition.replicas:
                    wanted[(topic.name, index)] = (topic.topic_id, log_config)
                    leaders[(topic.name, index)] = (partition.leader, partition.leader_epoch)
        self._wanted, self._leaders = wanted, leaders
        for key, existing in list(self._by_name.items()):
            target = wanted.get(key)
            if target is None or target[0] != existing.topic_id:
                self._remove(existing)
            elif target[1] != existing.config:
                existing.config = target[1]
                existing.log.reconfigure(target[1])
        new = [
            (key, target)
            for key, target in wanted.items()
            if key not in self._by_name and key not in self._opening
        ]
        if len(new) > INLINE_OPENS:
            self._opening.update(key for key, _ in new)
            self._tasks.spawn(self._open_in_background(new, now_ms), "open-partitions")
            new = []
        for (name, index), (topic_id, log_config) in new:
            self._register(self._open_files(name, index, topic_id, log_config, now_ms))
        for key in wanted:
            opened = self._by_name.get(key)
            if opened is not None:
                self._follow_leader(opened)

    async def _open_in_background(
        self, items: list[tuple[tuple[str, int], tuple[uuid.UUID, LogConfig]]], now_ms: int
    ) -> None:
        try:
            for start in range(0, len(items), OPEN_CHUNK):
                chunk = items[start : start + OPEN_CHUNK]
                opened = await asyncio.to_thread(self._open_chunk, chunk, now_ms)
                for partition in opened:
                    key = (partition.topic, partition.index)
                    self._opening.discard(key)
                    target = self._wanted.get(key)
                    if target is None or target[0] != partition.topic_id:
                        partition.log.delete()  # deleted while it was being opened
                        continue
                    self._register(partition)
                    self._follow_leader(partition)
                log.info(
                    "[node %d] opened %d of %d new partitions",
                    self._config.node_id,
                    min(start + OPEN_CHUNK, len(items)),
                    len(items),
                )
                if self._on_opened is not None:
                    self._on_opened()
        finally:
            self._opening.difference_update(key for key, _ in items)

    def _open_chunk(
        self, chunk: list[tuple[tuple[str, int], tuple[uuid.UUID, LogConfig]]], now_ms: int
    ) -> list[Partition]:
        return [
            self._open_files(name, index, topic_id, log_config, now_ms)
            for (name, index), (topic_id, log_config) in chunk
        ]

    def _follow_leader(self, opened: Partition) -> None:
        key = (opened.topic, opened.index)
        leader_id, leader_epoch = self._leaders.get(key, (-1, 0))
        if (opened.leader_id, opened.leader_epoch) == (leader_id, leader_epoch):
            return
        became = leader_id == self._config.node_id and not opened.is_leader
        opened.leader_id, opened.leader_epoch = leader_id, leader_epoch
        if became:
            log.info(
                "[node %d] leader of %s-%d (leader epoch %d)",
                self._config.node_id,
                opened.topic,
                opened.index,
                leader_epoch,
            )
        opened.wake_fetchers()

    def delete_stray_logs(self, image: MetadataImage) -> None:
        """Remove partition directories that no topic of the image owns (deleted while down)."""
        if not self._log_dir.exists():
            return
        for path in sorted(self._log_dir.iterdir()):
            match = _PARTITION_DIR.fullmatch(path.name)
            if not path.is_dir() or match is None or path.name == METADATA_LOG_DIR:
                continue
            topic = image.topics_by_name.get(match["topic"])
            index = int(match["partition"])
            owned = (
                topic is not None
                and index in topic.partitions
                and _read_topic_id(path) in (None, topic.topic_id)
            )
            if not owned:
                log.warning("deleting stray log %s: its topic no longer exists", path)
                shutil.rmtree(path, ignore_errors=True)

    def _open_files(
        self, name: str, index: int, topic_id: uuid.UUID, log_config: LogConfig, now_ms: int
    ) -> Partition:
        """Open (or create) a partition's files; safe in a worker thread."""
        directory = self._log_dir / f"{name}-{index}"
        partition_log = PartitionLog.open(directory, log_config, now_ms=now_ms)
        log_recovery(
            log, f"[node {self._config.node_id}] {name}-{index}", partition_log.recovery_report
        )
        _write_topic_id(directory, topic_id)
        return Partition(
            name, topic_id, index, partition_log, log_config, node_id=self._config.node_id
        )

    def _register(self, partition: Partition) -> None:
        self._by_name[(partition.topic, partition.index)] = partition
        self._by_id[(partition.topic_id, partition.index)] = partition

    def _remove(self, partition: Partition) -> None:
        log.info("deleting partition %s-%d", partition.topic, partition.index)
        self._by_name.pop((partition.topic, partition.index), None)
        self._by_id.pop((partition.topic_id, partition.index), None)
        partition.wake_fetchers()
        partition.log.delete()

    def close(self) -> None:
        self._tasks.cancel()
        for partition in self._by_name.values():
            partition.wake_fetchers()
            partition.log.close(clean=True)
        self._by_name.clear()
        self._by_id.clear()


def _write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    path = directory / PARTITION_METADATA_FILE
    text = f"version: 0\ntopic_id: {topic_id}\n"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(path)


def _read_topic_id(directory: Path) -> uuid.UUID | None:
    try:
        text = (directory / PARTITION_METADATA_FILE).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id":
            try:
                return uuid.UUID(value.strip())
            except ValueError:
                return None
    return None
