"""The group coordinator's shell: the pure core on the event loop, its timers, and its
storage in `__consumer_offsets`.

    created -> follow(image) (load each partition of __consumer_offsets this broker leads;
            drop the groups of one it no longer leads) -> serving
            -> close() (waiting requests answered NOT_COORDINATOR) -> closed

The coordinator of a group is the leader of partition `partition_for(group)` of
`__consumer_offsets`. The topic is created on
first use (FindCoordinator or any group request), compacted, with
`offsets.topic.num.partitions` partitions. Records the core returns are appended to the
group's partition and committed (held by every in-sync replica, fsynced with the
default `flush.messages=1`) before any reply that depends on them is sent, and commits
take effect in memory only then; a write not committed within `COMMIT_TIMEOUT_S`
fails the request (Kafka's offsets.commit.timeout.ms).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from strom.group import offsets as group_offsets
from strom.group.coordinator import GroupCoordinator, GroupRecord, Output, Reply
from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.group.records import (
    GroupMetadataKey,
    RecordFormatError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from strom.group.replay import replay
from strom.group.state import GroupConfig
from strom.metadata import controller
from strom.metadata.image import MetadataImage
from strom.protocol.records import (
    RecordsError,
    decode_batch,
    encode_batch,
    iter_batches,
    parse_batch_header,
)
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.partition import LeadershipMoved

if TYPE_CHECKING:
    from strom.server.broker import Broker
    from strom.server.partition import Partition

log = logging.getLogger(__name__)

_LOAD_READ_BYTES = 1 << 20
COMMIT_TIMEOUT_S = 5.0


class CoordinatorUnavailable(Exception):
    """This broker cannot coordinate the group now; `error_code` tells the client why."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def offsets_topic_configs(broker: Broker) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(broker.config.offsets_topic_segment_bytes),
        "compression.type": "producer",
    }


class GroupService:
    """Owns the GroupCoordinator core for this broker."""

    def __init__(self, broker: Broker) -> None:
        config = broker.config
        self._broker = broker
        self.core = GroupCoordinator(
            GroupConfig(
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                offsets_retention_ms=config.offsets_retention_ms,
                offset_metadata_max_bytes=config.offset_metadata_max_bytes,
                max_group_size=config.group_max_size,
            ),
            random.Random(),
            label=f"[node {broker.node_id}] ",
        )
        self._tokens = itertools.count()
        self._waiting: dict[int, asyncio.Future[Reply]] = {}
        self._wake = asyncio.Event()
        self._loaded: set[int] = set()
        self._creating: asyncio.Task[None] | None = None
        self._closed = False

    # --- loading ----------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        topic = self._broker.image.topics_by_name.get(OFFSETS_TOPIC)
        if topic is not None:
            return len(topic.partitions)
        return self._broker.config.offsets_topic_num_partitions

    def follow(self, image: MetadataImage) -> None:
        """Coordinate the groups of the `__consumer_offsets` partitions this broker leads:
        load a partition when it becomes the leader, drop its groups when it stops."""
        topic = image.topics_by_name.get(OFFSETS_TOPIC)
        leading = set()
        if topic is not None:
            leading = {
                index
                for index, partition in topic.partitions.items()
                if partition.leader == self._broker.node_id
            }
        for index in sorted(self._loaded - leading):
            self._unload(index)
        current = now_ms()
        for index in sorted(leading - self._loaded):
            partition = self._broker.partitions.get(OFFSETS_TOPIC, index)
            if partition is None:
                continue
            count = self._load_partition(partition, current)
            self._loaded.add(index)
            log.info(
                "[node %d] coordinating the groups of %s-%d (%d record(s) loaded)",
                self._broker.node_id,
                OFFSETS_TOPIC,
                index,
                count,
            )

    def _unload(self, index: int) -> None:
        self._loaded.discard(index)
        count = self.num_partitions
        for group_id in [g for g in self.core.groups if partition_for(g, count) == index]:
            group = self.core.groups.pop(group_id)
            for member in group.members.values():
                for token in (member.join_token, member.sync_token):
                    if token is not None:
                        self._fail(token)
        log.info(
            "[node %d] no longer coordinating the groups of %s-%d",
            self._broker.node_id,
            OFFSETS_TOPIC,
            index,
        )

    def _load_partition(self, partition: Partition, current_ms: int) -> int:
        log_ = partition.log
        offset = log_.log_start_offset
        count = 0
        while offset < log_.log_end_offset:
            view = memoryview(log_.read(offset, _LOAD_READ_BYTES).read_bytes())
            start = offset
            for position, header in iter_batches(view):
                try:
                    _, records = decode_batch(view[position : position + header.size_bytes])
                except RecordsError as exc:
                    log.warning("skipping a bad batch of %s: %s", OFFSETS_TOPIC, exc)
                    records = []
                for record in records:
                    count += self._replay_record(record.key, record.value, current_ms)
                offset = header.next_offset
            if offset == start:  # nothing readable here: stop rather than spin
                break
        return count

    def _replay_record(self, key: bytes | None, value: bytes | None, current_ms: int) -> int:
        if key is None:
            return 0
        try:
            decoded_key = decode_key(key)
            decoded_value = decode_value(decoded_key, value) if value is not None else None
        except RecordFormatError as exc:
            log.warning("skipping a record of %s that does not parse: %s", OFFSETS_TOPIC, exc)
            return 0
        replay(self.core, decoded_key, decoded_value, current_ms, loading=True)
        return 1

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (once, whoever asks)."""
        if OFFSETS_TOPIC in self._broker.image.topics_by_name:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create_topic())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        from strom.server.handlers.admin import create_topics

        broker = self._broker
        config = broker.config
        live = sum(1 for b in broker.image.brokers.values() if not b.fenced)
        replication = min(config.offsets_topic_replication_factor, live)
        topic = controller.NewTopic(
            OFFSETS_TOPIC,
            config.offsets_topic_num_partitions,
            max(replication, 1),
            configs=offsets_topic_configs(broker),
        )
        results = await create_topics(broker, [topic])
        if results[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.error(
                "[node %d] cannot create %s: %s",
                broker.node_id,
                OFFSETS_TOPIC,
                results[0].error_message,
            )

    async def coordinate(self, group_id: str) -> None:
        """Raise CoordinatorUnavailable unless this broker coordinates `group_id` now."""
        if self._closed:
            raise CoordinatorUnavailable(ErrorCode.not_coordinator, "broker is stopping")
        await self.ensure_topic()
        index = partition_for(group_id, self.num_partitions)
        if self.leader_of(index) != self._broker.node_id:
            raise CoordinatorUnavailable(
                ErrorCode.not_coordinator, f"this broker does not lead {OFFSETS_TOPIC}-{index}"
            )
        if index not in self._loaded:
            raise CoordinatorUnavailable(
                ErrorCode.coordinator_load_in_progress, f"{OFFSETS_TOPIC}-{index} is loading"
            )

    def leader_of(self, index: int) -> int:
        topic = self._broker.image.topics_by_name.get(OFFSETS_TOPIC)
        partition = topic.partitions.get(index) if topic is not None else None
        return -1 if partition is None else partition.leader

    # --- requests ---------------------------------------------------------------------

    async def request(self, group_id: str, command: Callable[[int], Output]) -> Reply:
        """Run a command that may park its reply (JoinGroup, SyncGroup) and wait for it.

        `command(token)` calls the core; its output is applied as usual and the reply
        for `token` comes whenever the core gives it. Raises CoordinatorUnavailable.
        """
        await self.coordinate(group_id)
        token = next(self._tokens)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        future.add_done_callback(lambda _f: self._waiting.pop(token, None))
        await self.apply(command(token))
        return await future

    async def apply(self, out: Output) -> None:
        """Write the output's records, make them durable, then deliver its replies."""
        self._wake.set()
        if out.records and not await self.write(out.records):
            for token, _ in out.replies:
                self._fail(token)
            return
        for token, reply in out.replies:
            future = self._waiting.get(token)
            if future is not None and not future.done():
                future.set_result(reply)

    def _fail(self, token: int) -> None:
        future = self._waiting.get(token)
        if future is not None and not future.done():
            future.set_exception(
                CoordinatorUnavailable(ErrorCode.not_coordinator, "group state not written")
            )

    async def write(self, records: list[GroupRecord]) -> bool:
        """`persist`, reporting failure (logged) as False instead of raising."""
        try:
            await self.persist(records)
        except (PartitionGone, RecordsError, ValueError) as exc:
            log.error("[node %d] cannot write group state: %s", self._broker.node_id, exc)
            return False
        return True

    async def persist(self, records: list[GroupRecord]) -> None:
        """Append records to their groups' partitions, wait until durable, replay them."""
        by_partition: dict[int, list[GroupRecord]] = defaultdict(list)
        for key, value in records:
            by_partition[partition_for(key.group_id, self.num_partitions)].append((key, value))
        waits = []
        current = now_ms()
        for index, items in by_partition.items():
            partition = self._broker.partitions.get(OFFSETS_TOPIC, index)
            if partition is None:
                raise PartitionGone(OFFSETS_TOPIC, index)
            batch = encode_batch(
                [
                    (encode_key(key), None if value is None else encode_value(value), ())
                    for key, value in items
                ],
                base_timestamp_ms=current,
            )
            view = memoryview(batch)
            if partition.leader is None:
                raise PartitionGone(OFFSETS_TOPIC, index)
            result = partition.append(
                [(view, parse_batch_header(view))], now_ms=current, producer_check=False
            )
            waits.append(partition.acknowledged(result.last_offset + 1, -1, COMMIT_TIMEOUT_S))
        try:
            await asyncio.gather(*waits)
        except (LeadershipMoved, TimeoutError) as exc:
            raise PartitionGone(OFFSETS_TOPIC, -1) from exc
        applied = now_ms()
        for key, value in records:
            if not isinstance(key, GroupMetadataKey):
                replay(self.core, key, value, applied, loading=False)

    # --- background -------------------------------------------------------------------

    async def run_timers(self) -> None:
        """Fire the core's session, join and rebalance timeouts when they are due."""
        while True:
            deadline = self.core.next_deadline_ms()
            self._wake.clear()
            timeout_s = None if deadline is None else max(deadline - now_ms(), 0) / 1000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout_s)
            out = self.core.tick(now_ms())
            if out.replies or out.records:
                await self.apply(out)

    async def run_expiry(self) -> None:
        """Expire old offsets every `offsets.retention.check.interval.ms`."""
        interval_s = self._broker.config.offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            records = group_offsets.expire(self.core, now_ms())
            if records:
                await self.write(records)

    def close(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup: clients find the coordinator again."""
        self._closed = True
        for token in list(self._waiting):
            self._fail(token)
