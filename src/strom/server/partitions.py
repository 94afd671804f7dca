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
from pathlib import Path

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig, effective_topic_config
from strom.durable_files import replace_file
from strom.log.config import LogConfig
from strom.log.offset_checkpoint import (
    CheckpointError,
    read_offset_checkpoint,
    write_offset_checkpoint,
)
from strom.log.partition_log import PartitionLog
from strom.log.recovery import log_recovery
from strom.metadata.image import MetadataImage, PartitionImage
from strom.protocol.records import TimestampType
from strom.replication.replica import Assignment, Replica
from strom.server.partition import NO_PORTS, Partition, ReplicaPorts
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)

METADATA_LOG_DIR = "__cluster_metadata-0"  # controllers: the Raft log of the metadata
INLINE_OPENS = 64  # more new partitions than this open in a worker thread
OPEN_CHUNK = 200

_PARTITION_DIR = re.compile(r"(?P<topic>.+)-(?P<partition>\d+)")
PARTITION_METADATA_FILE = "partition.metadata"
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"


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


class PartitionManager:
    """Follows the image: sync(image) -> open/close/delete logs; get(topic, p) -> Partition."""

    def __init__(
        self,
        config: BrokerConfig,
        *,
        on_opened: Callable[[], None] | None = None,
        ports: ReplicaPorts = NO_PORTS,
    ) -> None:
        """`on_opened` is called after partitions opened in the background appear;
        `ports` carry the partitions' effects out of them (ISR proposals, role changes)."""
        self._config = config
        self._log_dir = config.log_dir
        self._by_name: dict[tuple[str, int], Partition] = {}
        self._by_id: dict[tuple[uuid.UUID, int], Partition] = {}
        self._topic_configs: dict[str, Mapping[str, str]] = {}
        self._log_configs: dict[tuple[tuple[str, str], ...], LogConfig] = {}
        self._wanted: dict[tuple[str, int], tuple[uuid.UUID, LogConfig]] = {}
        self._states: dict[tuple[str, int], tuple[PartitionImage, int]] = {}
        self._synced: MetadataImage | None = None
        """The image of the last sync; None: the next sync looks at every topic."""
        self._checkpoint_at_open: dict[tuple[str, int], int] | None = None
        self._checkpoint_written: dict[tuple[str, int], int] = {}
        self._opening: set[tuple[str, int]] = set()
        self._tasks = TaskSet(f"[node {config.node_id}] partitions")
        self._on_opened = on_opened
        self._ports = ports
        self._ineligible: frozenset[int] = frozenset()
        """Fenced brokers, which may not join an ISR (KIP-841)."""

    def __iter__(self) -> Iterator[Partition]:
        return iter(list(self._by_name.values()))

    def reconfigure(self, config: BrokerConfig) -> None:
        """New broker-level defaults (dynamic configs); the next sync applies them to
        every topic."""
        self._config = config
        self._log_configs.clear()
        self._synced = None
        for partition in self._by_name.values():
            partition.replica.lag_time_max_ms = config.replica_lag_time_max_ms

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
        self,
        topic: str,
        partition: int,
        image: MetadataImage,
        current_leader_epoch: int = -1,
    ) -> tuple[Partition | None, ErrorCode]:
        """The partition if this broker leads it, else why not: UNKNOWN_TOPIC_OR_PARTITION
        when it does not exist here, NOT_LEADER_OR_FOLLOWER when another broker leads it
        (clients refresh their metadata and go there), and for a client that names the
        leader epoch it knows (KIP-320), FENCED_LEADER_EPOCH when that is older than this
        leader's, UNKNOWN_LEADER_EPOCH when newer (this broker has not seen that election
        yet); -1 skips the check."""
        found = self._by_name.get((topic, partition))
        if found is None:
            topic_image = image.topics_by_name.get(topic)
            if topic_image is not None and partition in topic_image.partitions:
                return None, ErrorCode.not_leader_or_follower
            return None, ErrorCode.unknown_topic_or_partition
        if not found.is_leader:
            return None, ErrorCode.not_leader_or_follower
        if 0 <= current_leader_epoch < found.leader_epoch:
            return None, ErrorCode.fenced_leader_epoch
        if current_leader_epoch > found.leader_epoch:
            return None, ErrorCode.unknown_leader_epoch
        return found, ErrorCode.none

    def sync(self, image: MetadataImage, *, now_ms: int) -> None:
        """Open, reconfigure, lead or follow, and delete partitions to match `image`.

        Only the topics whose image changed since the last sync are looked at (a topic's
        TopicImage is the same object while it is unchanged), unless configs changed,
        which may touch every topic: creating topics one by one would otherwise cost
        each creation a pass over every partition. A few new partitions open at once;
        many (a topic with thousands of partitions) open in a worker thread, a chunk at a
        time, so the event loop (Raft heartbeats among it) keeps running: each appears
        once its files exist.
        """
        self._sync_ineligible(image, now_ms)
        last, self._synced = self._synced, image
        keys: set[tuple[str, int]] | None  # the partitions to look at; None: all
        if last is None or last.configs is not image.configs:
            keys, topics = None, list(image.topics_by_name.values())
            wanted: dict[tuple[str, int], tuple[uuid.UUID, LogConfig]] = {}
            states: dict[tuple[str, int], tuple[PartitionImage, int]] = {}
        else:
            was, now = last.topics_by_name, image.topics_by_name
            if was is now:
                return
            changed = [n for n in was.keys() | now.keys() if was.get(n) is not now.get(n)]
            keys = {
                (name, index)
                for name in changed
                for topic in (was.get(name), now.get(name))
                if topic is not None
                for index in topic.partitions
            }
            topics = [now[name] for name in changed if name in now]
            wanted, states = dict(self._wanted), dict(self._states)
            for key in keys:
                wanted.pop(key, None)
                states.pop(key, None)
        for topic in topics:
            overrides = image.topic_configs(topic.name)
            log_config = self._log_config(overrides)
            min_isr = self._min_insync_replicas(overrides)
            for index, partition in topic.partitions.items():
                if self._config.node_id in partition.replicas:
                    wanted[(topic.name, index)] = (topic.topic_id, log_config)
                    states[(topic.name, index)] = (partition, min_isr)
        self._wanted, self._states = wanted, states
        for key in list(self._by_name if keys is None else keys):
            existing = self._by_name.get(key)
            if existing is None:
                continue
            target = wanted.get(key)
            if target is None or target[0] != existing.topic_id:
                self._remove(existing)
            elif target[1] != existing.config:
                existing.config = target[1]
                existing.log.reconfigure(target[1])
        touched = list(wanted) if keys is None else [k for k in keys if k in wanted]
        new = [
            (key, wanted[key])
            for key in touched
            if key not in self._by_name and key not in self._opening
        ]
        if len(new) > INLINE_OPENS:
            self._opening.update(key for key, _ in new)
            self._tasks.spawn(self._open_in_background(new, now_ms), "open-partitions")
            new = []
        for (name, index), (topic_id, log_config) in new:
            self._register(self._open_files(name, index, topic_id, log_config, now_ms))
        for key in touched:
            opened = self._by_name.get(key)
            if opened is not None:
                self._follow_leader(opened, now_ms)

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
                    self._follow_leader(partition, now_ms)
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
        """In a worker thread: open the partitions, and record the leader epoch of the new,
        empty ones this node is to lead, so that becoming their leader on the event loop
        costs no fsync (a thousand of those held the loop for seconds)."""
        opened = []
        for (name, index), (topic_id, log_config) in chunk:
            partition = self._open_files(name, index, topic_id, log_config, now_ms)
            found = self._states.get((name, index))
            empty = partition.log.log_end_offset == 0 == partition.log.log_start_offset
            if empty and found is not None and found[0].leader == self._config.node_id:
                partition.log.assign_epoch_start(found[0].leader_epoch, 0)
            opened.append(partition)
        return opened

    def _min_insync_replicas(self, overrides: Mapping[str, str]) -> int:
        value = overrides.get("min.insync.replicas")
        return int(value) if value is not None else self._config.min_insync_replicas

    def _follow_leader(self, opened: Partition, now_ms: int) -> None:
        """Bring a partition's role, replicas and ISR in line with the image."""
        found = self._states.get(opened.key)
        if found is None:
            return
        state, min_isr = found
        opened.apply(
            Assignment(
                leader=state.leader,
                leader_epoch=state.leader_epoch,
                partition_epoch=state.partition_epoch,
                replicas=state.replicas,
                isr=state.isr,
                min_insync_replicas=min_isr,
            ),
            now_ms,
        )

    def _sync_ineligible(self, image: MetadataImage, now_ms: int) -> None:
        """Fenced brokers changed: tell the led partitions (a caught-up replica that was
        fenced may join an ISR now)."""
        fenced = frozenset(b.broker_id for b in image.brokers.values() if b.fenced)
        if fenced == self._ineligible:
            return
        self._ineligible = fenced
        for partition in self._by_name.values():
            partition.set_ineligible(fenced, now_ms)

    # --- high watermark checkpoint ------------------------------------------------------------

    @property
    def log_dir(self) -> Path:
        """The directory holding every partition's log (log.dirs)."""
        return self._log_dir

    @property
    def checkpoint_path(self) -> Path:
        return self._log_dir / HW_CHECKPOINT_FILE

    def write_checkpoint(self, offsets: dict[tuple[str, int], int] | None = None) -> None:
        """Write the high watermarks (`offsets`, default: every partition's now); a
        blocking fsync, so the broker calls it in a worker thread, or at shutdown."""
        if offsets is None:
            offsets = self.checkpoint_snapshot()
        if offsets == self._checkpoint_written:
            return
        write_offset_checkpoint(self.checkpoint_path, offsets)
        self._checkpoint_written = offsets

    def checkpoint_snapshot(self) -> dict[tuple[str, int], int]:
        return {key: p.high_watermark for key, p in self._by_name.items()}

    def _checkpointed_high_watermark(self, key: tuple[str, int]) -> int:
        """The high watermark the file had when this broker started (read once)."""
        if self._checkpoint_at_open is None:
            try:
                self._checkpoint_at_open = read_offset_checkpoint(self.checkpoint_path)
            except CheckpointError as exc:
                log.warning("[node %d] %s; starting from 0", self._config.node_id, exc)
                self._checkpoint_at_open = {}
        return self._checkpoint_at_open.get(key, 0)

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
        replica = Replica(
            self._config.node_id,
            high_watermark=min(
                self._checkpointed_high_watermark((name, index)), partition_log.log_end_offset
            ),
            lag_time_max_ms=self._config.replica_lag_time_max_ms,
        )
        replica.ineligible = self._ineligible
        return Partition(name, topic_id, index, partition_log, log_config, replica, self._ports)

    def _register(self, partition: Partition) -> None:
        self._by_name[(partition.topic, partition.index)] = partition
        self._by_id[(partition.topic_id, partition.index)] = partition

    def _remove(self, partition: Partition) -> None:
        log.info("deleting partition %s-%d", partition.topic, partition.index)
        self._by_name.pop((partition.topic, partition.index), None)
        self._by_id.pop((partition.topic_id, partition.index), None)
        partition.stop_leading()
        self._ports.on_role(partition)
        partition.log.delete()

    def close(self) -> None:
        self._tasks.cancel()
        try:
            self.write_checkpoint()
        except OSError as exc:
            log.warning("[node %d] high watermark checkpoint: %s", self._config.node_id, exc)
        for partition in self._by_name.values():
            partition.stop_leading()
            partition.log.close(clean=True)
        self._by_name.clear()
        self._by_id.clear()


def _write_topic_id(directory: Path, topic_id: uuid.UUID) -> None:
    path = directory / PARTITION_METADATA_FILE
    text = f"version: 0\ntopic_id: {topic_id}\n"
    if not path.exists() or path.read_text() != text:
        replace_file(path, text.encode())


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
