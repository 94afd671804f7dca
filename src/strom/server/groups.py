"""The group coordinator's shell: the pure core on the event loop, its timers, and its
storage in `__consumer_offsets`.

    created -> follow(image) (load each partition of __consumer_offsets this broker leads;
            drop the groups of one it no longer leads) -> serving
            -> close() (waiting requests answered NOT_COORDINATOR) -> closed

The coordinator of a group is the leader of partition `partition_for(group)` of
`__consumer_offsets`. The topic is created on first use (FindCoordinator or any group
request), compacted, with `offsets.topic.num.partitions` partitions.

Every decision of the core is carried out by `apply`: its records are appended to the
group's partition and committed (held by every in-sync replica, fsynced with the
default `flush.messages=1`); then the core is told `durable(write_id)`, its state for
that decision becomes committed, and the replies that depend on it are sent. If the
write fails (leadership moved, partition gone, not committed within `COMMIT_TIMEOUT_S`:
Kafka's offsets.commit.timeout.ms), the core is told `failed(write_id)`: the decision
and every later one made on it are discarded, the state is exactly as before, and the
requests they answered get the error Kafka's coordinator gives (`_COORDINATOR_ERRORS`).
`append_and_wait` is the one function that writes through `Partition`.

A TxnOffsetCommit's records are written as one transactional batch of its producer
(`Output.producer_id`); they stay pending, invisible to OffsetFetch, until the
transaction coordinator's marker on the group's partition is durable and
`complete_txn` applies it. Loading a partition (group_loading.py) replays both.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.group import offsets as group_offsets
from strom.group import txn_offsets
from strom.group.consumer.coordinator import ConsumerCoordinator
from strom.group.consumer.heartbeat import ConsumerRecord
from strom.group.coordinator import (
    Discarded,
    GroupCoordinator,
    GroupRecord,
    JoinRequest,
    LeavingMember,
    Output,
    RebalanceResult,
    Reply,
    SyncRequest,
)
from strom.group.offsets import CommitRequest
from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.group.records import OffsetCommitValue
from strom.group.share.coordinator import ShareCoordinator
from strom.group.share.heartbeat import ShareRecord
from strom.group.share.namespace import GroupType
from strom.group.state import (
    GroupConfig,
    GroupDescription,
    JoinResult,
    SyncResult,
    TopicPartition,
)
from strom.group.state import describe as description_of
from strom.group.txn_offsets import StableOffsets, TxnCommitRequest
from strom.metadata import controller
from strom.metadata.image import MetadataImage
from strom.server.clock import now_ms
from strom.server.group_loading import load_partition
from strom.server.group_storage import COORDINATOR_ERRORS as _COORDINATOR_ERRORS
from strom.server.group_storage import StorageError, append_group_records, offsets_topic_configs

if TYPE_CHECKING:
    from strom.server.consumer_groups import ConsumerGroupService
    from strom.server.partition import Partition

log = logging.getLogger(__name__)

C = TypeVar("C", CommitRequest, TxnCommitRequest)

COMMIT_TIMEOUT_S = 5.0
_TIMER_RETRY_S = 0.5  # after a failed timer write (the group is as before it)


class CoordinatorUnavailable(Exception):
    """This broker cannot coordinate the group now; `error_code` tells the client why."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def _retrieve(future: asyncio.Future[None]) -> None:
    """Mark a write's outcome as seen even if its caller went away."""
    if not future.cancelled():
        future.exception()


class OffsetsPartitions(Protocol):
    """The partitions this broker holds (server/partitions.py), where the groups' records
    are read and written."""

    def get(self, topic: str, index: int) -> Partition | None: ...


CreateTopics = Callable[[list[controller.NewTopic]], Awaitable[list[controller.TopicResult]]]
"""Topics created at the active controller (handlers/admin.py: create_topics)."""


class GroupService:
    """Owns the GroupCoordinator core for this broker.

    Ports, each read when it is used: `config`, the broker's config now (the group and
    offsets settings; the core's are read once, at construction); `image`, the committed
    metadata image (`__consumer_offsets`, its leaders, the live brokers); `partitions`,
    the partitions of `__consumer_offsets` this broker holds; `create_topics`, how
    `__consumer_offsets` is created."""

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        image: Callable[[], MetadataImage],
        partitions: OffsetsPartitions,
        create_topics: CreateTopics,
    ) -> None:
        self._node_id = node_id
        self._config = config
        self._image = image
        self._partitions = partitions
        self._create_topics = create_topics
        config_now = config()
        self.core = GroupCoordinator(
            GroupConfig(
                initial_rebalance_delay_ms=config_now.group_initial_rebalance_delay_ms,
                min_session_timeout_ms=config_now.group_min_session_timeout_ms,
                max_session_timeout_ms=config_now.group_max_session_timeout_ms,
                offsets_retention_ms=config_now.offsets_retention_ms,
                offset_metadata_max_bytes=config_now.offset_metadata_max_bytes,
                max_group_size=config_now.group_max_size,
            ),
            random.Random(),
            label=f"[node {node_id}] ",
        )
        self.consumer = ConsumerCoordinator(  # KIP-848 groups: server/consumer_groups.py
            config_now.consumer_group, random.Random(), label=f"[node {node_id}]"
        )
        self.share = ShareCoordinator(  # KIP-932 groups: server/share_groups.py
            config_now.share_group, label=f"[node {node_id}]"
        )
        self._tokens = itertools.count()
        self._waiting: dict[int, asyncio.Future[Reply]] = {}
        self._pending: dict[int, tuple[Output, asyncio.Future[None]]] = {}
        """Write id -> the decision and what its caller awaits, until promoted or failed."""
        self._writes: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._loaded: set[int] = set()
        self._creating: asyncio.Task[None] | None = None
        self._closed = False
        self.classic_members: ConsumerGroupService | None = None
        """Where the classic requests to a consumer group go (set by its service)."""

    # --- loading ----------------------------------------------------------------------

    @property
    def num_partitions(self) -> int:
        topic = self._image().topics_by_name.get(OFFSETS_TOPIC)
        if topic is not None:
            return len(topic.partitions)
        return self._config().offsets_topic_num_partitions

    def follow(self, image: MetadataImage) -> None:
        """Coordinate the groups of the `__consumer_offsets` partitions this broker leads:
        load a partition when it becomes the leader, drop its groups when it stops."""
        topic = image.topics_by_name.get(OFFSETS_TOPIC)
        leading = set()
        if topic is not None:
            leading = {
                index
                for index, partition in topic.partitions.items()
                if partition.leader == self._node_id
            }
        for index in sorted(self._loaded - leading):
            self._unload(index)
        current = now_ms()
        for index in sorted(leading - self._loaded):
            partition = self._partitions.get(OFFSETS_TOPIC, index)
            if partition is None:
                continue
            belongs = self._in_partition(index)
            count = load_partition(
                self.core, partition, current, belongs, self.consumer, self.share
            )
            self.consumer.loaded(belongs)
            self._loaded.add(index)
            log.info(
                "[node %d] coordinating the groups of %s-%d (%d record(s) loaded)",
                self._node_id,
                OFFSETS_TOPIC,
                index,
                count,
            )

    def _unload(self, index: int) -> None:
        self._loaded.discard(index)
        count = self.num_partitions
        mine = [g for g in self.core.store.group_ids() if partition_for(g, count) == index]
        self._discard(self.core.forget(mine), ErrorCode.not_coordinator)
        self.consumer.forget(
            g for g in self.consumer.group_ids() if partition_for(g, count) == index
        )
        self.share.forget(g for g in self.share.group_ids() if partition_for(g, count) == index)
        log.info(
            "[node %d] no longer coordinating the groups of %s-%d",
            self._node_id,
            OFFSETS_TOPIC,
            index,
        )

    def _in_partition(self, index: int) -> Callable[[str], bool]:
        """Whether a group lives in partition `index` of `__consumer_offsets`."""
        count = self.num_partitions
        return lambda group_id: partition_for(group_id, count) == index

    async def ensure_topic(self) -> None:
        """Create `__consumer_offsets` if it does not exist yet (once, whoever asks)."""
        if OFFSETS_TOPIC in self._image().topics_by_name:
            return
        if self._creating is None or self._creating.done():
            self._creating = asyncio.create_task(self._create_topic())
        await asyncio.shield(self._creating)

    async def _create_topic(self) -> None:
        config = self._config()
        live = sum(1 for b in self._image().brokers.values() if not b.fenced)
        replication = min(config.offsets_topic_replication_factor, live)
        topic = controller.NewTopic(
            OFFSETS_TOPIC,
            config.offsets_topic_num_partitions,
            max(replication, 1),
            configs=offsets_topic_configs(config),
        )
        results = await self._create_topics([topic])
        if results[0].error_code not in (ErrorCode.none, ErrorCode.topic_already_exists):
            log.error(
                "[node %d] cannot create %s: %s",
                self._node_id,
                OFFSETS_TOPIC,
                results[0].error_message,
            )

    async def coordinate(self, group_id: str) -> None:
        """Raise CoordinatorUnavailable unless this broker coordinates `group_id` now."""
        if self._closed:
            raise CoordinatorUnavailable(ErrorCode.not_coordinator, "broker is stopping")
        await self.ensure_topic()
        self._check_coordinator(group_id)

    def _check_coordinator(self, group_id: str) -> None:
        """`coordinate` without creating `__consumer_offsets` first."""
        if self._closed:
            raise CoordinatorUnavailable(ErrorCode.not_coordinator, "broker is stopping")
        index = partition_for(group_id, self.num_partitions)
        if self.leader_of(index) != self._node_id:
            raise CoordinatorUnavailable(
                ErrorCode.not_coordinator, f"this broker does not lead {OFFSETS_TOPIC}-{index}"
            )
        if index not in self._loaded:
            raise CoordinatorUnavailable(
                ErrorCode.coordinator_load_in_progress, f"{OFFSETS_TOPIC}-{index} is loading"
            )

    def leader_of(self, index: int) -> int:
        topic = self._image().topics_by_name.get(OFFSETS_TOPIC)
        partition = topic.partitions.get(index) if topic is not None else None
        return -1 if partition is None else partition.leader

    # --- what the handlers ask (handlers/ports.py: GroupCoordination) ------------------

    async def join(self, join: JoinRequest) -> JoinResult:
        """JoinGroup, answered when the core replies (a rebalance may park it first).
        Raises CoordinatorUnavailable."""
        await self.coordinate(join.group_id)
        if self.consumer.group(join.group_id) is not None and self.classic_members is not None:
            joined = await self.classic_members.classic_join(join)
            if joined is not None:  # None: it was empty, and is gone (Kafka's conversion)
                return joined
        if self.share.group(join.group_id) is not None:  # a share group: Kafka's answer too
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id="")
        reply = await self.request(
            join.group_id, lambda token: self.core.join(join, token, now_ms())
        )
        assert isinstance(reply, JoinResult)
        return reply

    async def sync(self, sync: SyncRequest) -> SyncResult:
        """SyncGroup, answered once the leader's assignment is durable. Raises
        CoordinatorUnavailable."""
        await self.coordinate(sync.group_id)
        if self.consumer.group(sync.group_id) is not None and self.classic_members is not None:
            return await self.classic_members.classic_sync(sync)
        reply = await self.request(
            sync.group_id, lambda token: self.core.sync(sync, token, now_ms())
        )
        assert isinstance(reply, SyncResult)
        return reply

    async def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """A Heartbeat, answered once the state it read is durable. Raises
        CoordinatorUnavailable."""
        await self.coordinate(group_id)
        if self.consumer.group(group_id) is not None and self.classic_members is not None:
            return await self.classic_members.classic_heartbeat(
                group_id, member_id, group_instance_id, generation_id
            )
        error, out = self.core.heartbeat(
            group_id, member_id, group_instance_id, generation_id, now_ms()
        )
        await self.apply(out)
        return error

    async def leave(
        self, group_id: str, leaving: list[LeavingMember]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """A LeaveGroup: the group's error and one per member, once durable. Raises
        CoordinatorUnavailable."""
        await self.coordinate(group_id)
        if self.consumer.group(group_id) is not None and self.classic_members is not None:
            return ErrorCode.none, await self.classic_members.classic_leave(group_id, leaving)
        error, member_errors, out = self.core.leave(group_id, leaving, now_ms())
        await self.apply(out)
        return error, member_errors

    def describe(self, group_id: str) -> GroupDescription | None:
        """The committed state of `group_id`; None when there is no such group here."""
        other = self.consumer.group(group_id) or self.share.group(group_id)
        group = None if other else self.core.groups.get(group_id)
        return None if group is None else description_of(group)

    def describe_all(self) -> list[GroupDescription]:
        """Every committed classic group this broker coordinates (ListGroups)."""
        groups = self.core.groups.values()
        return [description_of(g) for g in groups if self.group_type(g.group_id) is None]

    def group_type(self, group_id: str) -> GroupType | None:
        """The type of the consumer or share group of this id (None: none, or classic)."""
        consumer, share = self.consumer.group(group_id), self.share.group(group_id)
        return GroupType.CONSUMER if consumer else GroupType.SHARE if share else None

    def delete_groups(self, group_ids: list[str]) -> tuple[list[ErrorCode], Output]:
        """The core's decision on a DeleteGroups: one error per group, the output to `apply`."""
        return group_offsets.delete_groups(self.core, group_ids, now_ms())

    def commit_offsets(self, commit: CommitRequest) -> tuple[list[ErrorCode], Output]:
        """The core's decision on an OffsetCommit: one error per offset, the output to
        `apply`. A KIP-848 group's member commits with its member epoch (STALE_MEMBER_EPOCH
        when it is not the current one); the offsets are then kept as the classic ones."""
        refused, commit = self._consumer_commit(commit, ErrorCode.stale_member_epoch)
        return refused or group_offsets.commit(self.core, commit, now_ms())

    def _consumer_commit(
        self, commit: C, stale: ErrorCode
    ) -> tuple[tuple[list[ErrorCode], Output] | None, C]:
        """A commit to a KIP-848 group: refused (each offset `stale` for a stale member
        epoch), or the commit as the classic core takes it (a "simple" one)."""
        version = commit.api_version if isinstance(commit, CommitRequest) else 9
        if self.share.group(commit.group_id) is not None:  # "is not a consumer group"
            refused = [ErrorCode.group_id_not_found] * len(commit.offsets)
            return (refused, self.core.decide(now_ms(), lambda _: None)), commit
        verdict = self.consumer.check_offset_commit(
            commit.group_id, commit.member_id, commit.generation_id, version
        )
        if verdict is None:
            return None, commit
        if verdict is not ErrorCode.none:
            verdict = stale if verdict is ErrorCode.stale_member_epoch else verdict
            out = self.core.decide(now_ms(), lambda _: None)  # answered after earlier writes
            return ([verdict] * len(commit.offsets), out), commit
        return None, dataclasses.replace(
            commit, generation_id=-1, member_id="", group_instance_id=None
        )

    def committed_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> list[tuple[TopicPartition, OffsetCommitValue | None]]:
        """The committed offsets of `partitions` (every committed one when None)."""
        return group_offsets.fetch(self.core, group_id, partitions)

    def delete_offsets(
        self, group_id: str, partitions: list[TopicPartition]
    ) -> tuple[ErrorCode, list[ErrorCode], Output]:
        """The core's decision on an OffsetDelete: the group's error, one per partition,
        and the output to `apply`."""
        return group_offsets.delete_offsets(self.core, group_id, partitions, now_ms())

    def stable_offsets(
        self, group_id: str, partitions: list[TopicPartition] | None
    ) -> tuple[StableOffsets, Output]:
        """OffsetFetch with require_stable: the answer, to give once `apply(out)` returns
        (after the group's earlier writes are durable)."""
        return txn_offsets.stable_fetch(self.core, group_id, partitions, now_ms())

    def txn_offset_commit(self, commit: TxnCommitRequest) -> tuple[list[ErrorCode], Output]:
        """The core's decision on a TxnOffsetCommit: one error per offset, and the output
        whose records `apply` writes as one transactional batch of the request's
        producer id and epoch. The offsets stay pending until the producer's marker. In a
        KIP-848 group a stale member epoch is ILLEGAL_GENERATION, as Kafka answers it."""
        refused, commit = self._consumer_commit(commit, ErrorCode.illegal_generation)
        return refused or txn_offsets.txn_commit(self.core, commit, now_ms())

    def complete_txn(self, index: int, producer_id: int, *, commit: bool) -> None:
        """The COMMIT (or ABORT) marker of `producer_id` is durable on partition `index`
        of `__consumer_offsets`: its pending offsets there become committed (or are
        dropped). Idempotent; a producer with nothing pending, or a partition this broker
        does not coordinate (its next leader replays the marker), changes nothing."""
        if index in self._loaded:
            txn_offsets.end_transaction(
                self.core, producer_id, commit=commit, belongs=self._in_partition(index)
            )

    async def rebalance(self, group_id: str, reason: str) -> RebalanceResult:
        """Force a rebalance of a Stable or CompletingRebalance group (strom.testing's
        "trigger a rebalance"); the core says what it did. If this broker does not
        coordinate the group now, or the decision is discarded, the result carries the
        error (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...) and nothing started.
        Never creates `__consumer_offsets`: without it there is no group to rebalance."""
        try:
            self._check_coordinator(group_id)
            result, out = self.core.rebalance(group_id, now_ms(), reason)
            await self.apply(out)
        except CoordinatorUnavailable as exc:
            return RebalanceResult(exc.error_code)
        return result

    # --- requests and writes -----------------------------------------------------------

    async def request(self, group_id: str, command: Callable[[int], Output]) -> Reply:
        """Run a command that may park its reply (JoinGroup, SyncGroup) and wait for it.

        `command(token)` calls the core; its output is carried out as usual and the reply
        for `token` comes whenever the core gives it. Raises CoordinatorUnavailable.
        """
        await self.coordinate(group_id)
        token = next(self._tokens)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        future.add_done_callback(lambda _f: self._waiting.pop(token, None))
        try:
            await self.apply(command(token))
        except CoordinatorUnavailable as exc:
            self._fail(token, exc.error_code)
        return await future

    async def apply(
        self,
        out: Output,
        *,
        before: Sequence[ConsumerRecord] = (),
        after: Sequence[ConsumerRecord] = (),
    ) -> None:
        """Carry out one decision of the core: write its records; once they are durable the
        core commits the decision's state and its replies go out. Raises
        CoordinatorUnavailable when the write, or one it was decided on, failed: the core
        then discarded the decision and is as before it. `before` and `after`: a
        consumer group's records written in the same batch (a group moving between the
        protocols), which stand or fall with the decision's."""
        self._wake.set()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.add_done_callback(_retrieve)
        self._pending[out.write_id] = (out, done)
        task = asyncio.create_task(self._carry_out(out, [*before, *out.records, *after]))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)
        await asyncio.shield(done)

    async def _carry_out(
        self, out: Output, records: Sequence[GroupRecord | ConsumerRecord]
    ) -> None:
        """Write and report back to the core, whatever happens to the caller."""
        error = ErrorCode.not_coordinator  # if cancelled: the broker is stopping
        try:
            error = await self._write(out, records) if records else ErrorCode.none
        finally:
            if error is ErrorCode.none:
                self._settle(self.core.durable(out.write_id))
            else:
                self._discard(self.core.failed(out.write_id), error)

    def _settle(self, promoted: list[int]) -> None:
        for write_id in promoted:
            pending = self._pending.pop(write_id, None)
            if pending is None:
                continue
            out, done = pending
            for token, reply in out.replies:
                future = self._waiting.get(token)
                if future is not None and not future.done():
                    future.set_result(reply)
            if not done.done():
                done.set_result(None)

    def _discard(self, discarded: Discarded, error: ErrorCode) -> None:
        for write_id in discarded.write_ids:
            pending = self._pending.pop(write_id, None)
            if pending is not None and not pending[1].done():
                failure = CoordinatorUnavailable(error, "group state not written")
                pending[1].set_exception(failure)
        for token in sorted(discarded.tokens):
            self._fail(token, error)

    def _fail(self, token: int, error: ErrorCode = ErrorCode.not_coordinator) -> None:
        future = self._waiting.get(token)
        if future is not None and not future.done():
            future.set_exception(CoordinatorUnavailable(error, "group state not written"))

    async def _write(
        self, out: Output, records: Sequence[GroupRecord | ConsumerRecord]
    ) -> ErrorCode:
        """Append and wait until durable; a failure becomes the error code the client sees.

        Storage errors are mapped as Kafka's coordinator maps them: GroupMetadataManager
        .storeGroup (and GroupCoordinatorService.normalizeException in the KIP-848
        coordinator): UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT
        -> COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER, KAFKA_STORAGE_ERROR ->
        NOT_COORDINATOR; MESSAGE_TOO_LARGE and the like -> UNKNOWN_SERVER_ERROR (an
        offset commit answers INVALID_COMMIT_OFFSET_SIZE there, as storeOffsets does).
        """
        try:
            await self.append_and_wait(
                records, producer_id=out.producer_id, producer_epoch=out.producer_epoch
            )
        except StorageError as exc:
            log.error("[node %d] cannot write group state: %s", self._node_id, exc)
            return _COORDINATOR_ERRORS.get(exc.error_code, exc.error_code)
        return ErrorCode.none

    async def append_and_wait(
        self,
        records: Sequence[GroupRecord | ConsumerRecord | ShareRecord],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> None:
        """Append records to their groups' partitions and wait until they are durable
        (group_storage.append_group_records, the one place the coordinator writes through
        `Partition`); raises StorageError."""
        await append_group_records(
            self._partitions.get,
            self.num_partitions,
            records,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            timeout_s=COMMIT_TIMEOUT_S,
        )

    # --- background -------------------------------------------------------------------

    async def run_timers(self) -> None:
        """Fire the core's session, join and rebalance timeouts when they are due."""
        while True:
            deadline = self.core.next_deadline_ms()
            self._wake.clear()
            timeout_s = None if deadline is None else max(deadline - now_ms(), 0) / 1000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):  # wait_for can eat a cancel
                    await self._wake.wait()
            try:
                await self.apply(self.core.tick(now_ms()))
            except CoordinatorUnavailable:
                await asyncio.sleep(_TIMER_RETRY_S)

    async def run_expiry(self) -> None:
        """Expire old offsets every `offsets.retention.check.interval.ms`."""
        interval_s = self._config().offsets_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(CoordinatorUnavailable):
                live = self.consumer.live_subscriptions()
                await self.apply(group_offsets.expire(self.core, now_ms(), live))

    def close(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup: clients find the coordinator again."""
        self._closed = True
        for task in list(self._writes):
            task.cancel()  # its write is discarded: the core is as before it
        for token in list(self._waiting):
            self._fail(token)
