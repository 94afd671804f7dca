"""The shell of KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe
on the event loop, their writes, and their timers.

The core (`strom.group.consumer.coordinator.ConsumerCoordinator`) lives in the
`GroupService` (server/groups.py), which loads it with the classic core from the same
`__consumer_offsets` partitions and drops its groups with them; a group id names one
group, of either type. This service carries out the core's decisions
(server/group_writes.py): their records are written, then the core is told `durable`,
and only then does the member get its answer. If the write fails the core is told
`failed` (the group is as before it and the later writes of the group, decided on it,
are dropped too) and the member gets the coordinator error Kafka gives. An answer that
wrote nothing waits for the group's writes still pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from strom.group.consumer.coordinator import ConsumerCoordinator, ConsumerDecision
from strom.group.consumer.heartbeat import (
    ConsumerGroupConfig,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    TopicInfo,
    assignor_of,
)
from strom.group.consumer.state import ConsumerGroup
from strom.group.handover import adopt, hand_over
from strom.group.requests import JoinRequest, LeavingMember, Output, SyncRequest
from strom.group.state import GroupState, JoinResult, SyncResult
from strom.metadata.image import MetadataImage
from strom.server.clock import now_ms
from strom.server.group_writes import CoreWrites, with_group_timeouts
from strom.server.groups import CoordinatorUnavailable, GroupService

__all__ = ["ConsumerGroupService"]

log = logging.getLogger(__name__)

_TIMER_RETRY_S = 0.5


class ConsumerGroupService:
    """KIP-848 groups on this broker. Ports: the group service (where they are loaded,
    how this broker coordinates, how records are written) and the metadata image."""

    def __init__(
        self,
        groups: GroupService,
        image: Callable[[], MetadataImage],
        cleanup_interval_ms: Callable[[], int] = lambda: 600_000,
    ) -> None:
        """`cleanup_interval_ms`: offsets.retention.check.interval.ms, how often empty
        groups left without offsets are deleted (`cleanup`)."""
        self._groups = groups
        self._image = image
        self._cleanup_interval_ms = cleanup_interval_ms
        self._core_writes = CoreWrites(groups, groups.consumer, "consumer")
        self._wake = asyncio.Event()
        groups.classic_members = self

    @property
    def core(self) -> ConsumerCoordinator:
        return self._groups.consumer

    def topics(self) -> dict[str, TopicInfo]:
        return {
            name: TopicInfo(topic.topic_id, len(topic.partitions), topic.is_internal)
            for name, topic in self._image().topics_by_name.items()
        }

    async def heartbeat(self, req: ConsumerHeartbeatRequest) -> ConsumerHeartbeatResult:
        """Raises CoordinatorUnavailable."""
        await self._groups.coordinate(req.group_id)
        not_consumer = ConsumerHeartbeatResult(
            ErrorCode.group_id_not_found, f"Group {req.group_id} is not a consumer group."
        )
        if self._groups.share.group(req.group_id) is not None:
            return not_consumer
        classic = self._groups.core.store.peek(req.group_id)
        if (
            classic is None
            or classic.state in (GroupState.EMPTY, GroupState.DEAD)
            or self.core.group(req.group_id) is not None
        ):
            classic = None
        elif req.member_epoch != 0:  # only a member joining upgrades a live classic group
            return not_consumer
        config = self._config_of(req.group_id)
        decision = self.core.heartbeat(req, self.topics(), now_ms(), config, classic)
        handed = None
        if classic is not None and decision.records:
            _, handed = hand_over(self._groups.core, req.group_id, now_ms())
        self._wake.set()
        await self._carry_out(decision, handed)
        assert decision.result is not None
        return decision.result

    # --- members using the classic protocol, as GroupService sends their requests --------

    async def classic_join(self, join: JoinRequest) -> JoinResult | None:
        """A JoinGroup to a consumer group. An empty one is deleted instead (None), so the
        classic coordinator makes the group classic again, as Kafka converts an empty
        consumer group on a JoinGroup; its offsets stay."""
        refused = self._groups.core.check_join(join)  # as for a classic group, first
        if refused is not ErrorCode.none:
            return JoinResult(refused, member_id=join.member_id)
        group = self.core.group(join.group_id)
        if group is not None and not group.members:
            error = await self.delete(join.group_id)
            if error is ErrorCode.none:
                log.info("consumer group %s: empty, deleted for a JoinGroup", join.group_id)
            elif error not in (ErrorCode.group_id_not_found, ErrorCode.non_empty_group):
                raise CoordinatorUnavailable(error, "the empty consumer group was not deleted")
        if self.core.group(join.group_id) is None:
            return None
        config = self._config_of(join.group_id)
        result, decision = self.core.classic_join(join, self.topics(), now_ms(), config)
        self._wake.set()
        await self._carry_out(decision)
        return result

    async def classic_sync(self, sync: SyncRequest) -> SyncResult:
        result, decision = self.core.classic_sync(sync, self.topics(), now_ms())
        self._wake.set()
        await self._carry_out(decision)
        return result

    async def classic_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        error, decision = self.core.classic_heartbeat(
            group_id, member_id, instance_id, generation_id, now_ms()
        )
        self._wake.set()
        await self._carry_out(decision)
        return error

    async def classic_leave(self, group_id: str, leaving: list[LeavingMember]) -> list[ErrorCode]:
        errors, decision = self.core.classic_leave(group_id, leaving, self.topics(), now_ms())
        self._wake.set()
        await self._carry_out(decision)
        return errors

    def _config_of(self, group_id: str) -> ConsumerGroupConfig:
        """The coordinator's settings with the group's own session timeout and heartbeat
        interval (config resource GROUP: consumer.session.timeout.ms and
        consumer.heartbeat.interval.ms, checked against the broker's bounds when set)."""
        own = self._image().group_configs(group_id)
        return with_group_timeouts(self.core.config, own, "consumer")

    def _adopted(self, decision: ConsumerDecision) -> Output | None:
        """The classic core's decision adopting the classic group a consumer group became
        (a downgrade), made at once, before anything else is decided."""
        if decision.classic is None:
            return None
        reason = "the group moved back to the classic protocol"
        return adopt(self._groups.core, decision.classic, now_ms(), reason)

    async def _carry_out(
        self,
        decision: ConsumerDecision,
        classic: Output | None = None,
        *,
        classic_first: bool = True,
    ) -> None:
        """Write a decision, with the classic core's side of a move between the protocols
        in the same batch: an upgrade's hand-over (the classic membership's tombstone
        first) or a downgrade's adoption (after the consumer group's tombstones)."""
        if classic is None and decision.classic is not None:
            classic, classic_first = self._adopted(decision), False
        await self._core_writes.carry_out(
            decision.group_id,
            decision.records,
            decision.write_id,
            decision.after_write_id,
            classic=classic,
            classic_first=classic_first,
        )

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a KIP-848 group here: NONE once its tombstones are durable,
        NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND (not one), or the coordinator error."""
        error, decision = self.core.delete_group(group_id)
        try:
            await self._carry_out(decision)
        except CoordinatorUnavailable as exc:
            return exc.error_code
        return error

    def check_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode:
        """OffsetFetch v9's member check in a KIP-848 group (NONE for any other group)."""
        return self.core.check_offset_fetch(group_id, member_id, member_epoch) or ErrorCode.none

    def describe(self, group_id: str) -> ConsumerGroup | None:
        """The committed state of a KIP-848 group here; None when it is not one."""
        return self.core.committed_group(group_id)

    def assignor(self, group_id: str) -> str:
        """The server assignor the group uses (or would use)."""
        group = self.core.committed_group(group_id)
        config = self.core.config
        return config.assignors[0] if group is None else assignor_of(group, config)

    def group_ids(self) -> list[str]:
        return [g for g in self.core.group_ids() if self.core.committed_group(g) is not None]

    async def cleanup(self) -> list[str]:
        """Delete the empty KIP-848 groups left without offsets (committed or pending), as
        Kafka's coordinator does at each offset expiry check; returns their ids."""
        deleted: list[str] = []
        for group_id in self.core.group_ids():
            group = self.core.group(group_id)
            holder = self._groups.core.store.peek(group_id)
            if group is None or group.members:
                continue
            if holder is not None and (holder.offsets or holder.pending_offsets):
                continue
            if await self.delete(group_id) is ErrorCode.none:
                deleted.append(group_id)
        return deleted

    async def run_timers(self) -> None:
        """Fence the members whose session or revocation deadline passed; every
        `cleanup_interval_ms`, delete the empty groups left without offsets."""
        cleanup_at = now_ms() + self._cleanup_interval_ms()
        while True:
            due = self.core.next_deadline_ms()
            deadline = cleanup_at if due is None else min(cleanup_at, due)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(deadline - now_ms(), 0) / 1000):
                    await self._wake.wait()
            decided = [(d, self._adopted(d)) for d in self.core.tick(now_ms(), self.topics())]
            for decision, adopted in decided:
                try:
                    await self._carry_out(decision, adopted, classic_first=False)
                except CoordinatorUnavailable:
                    await asyncio.sleep(_TIMER_RETRY_S)
            if now_ms() >= cleanup_at:
                await self.cleanup()
                cleanup_at = now_ms() + self._cleanup_interval_ms()
