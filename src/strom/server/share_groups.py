"""The shell of KIP-932 share groups' membership: ShareGroupHeartbeat and
ShareGroupDescribe on the event loop, their writes, their session timers and the
initialization of share-partition state.

The core (`strom.group.share.coordinator.ShareCoordinator`) lives in the `GroupService`
(server/groups.py), which loads it with the classic and consumer cores from the same
`__consumer_offsets` partitions and drops its groups with them; a group id names one
group, of any type. Decisions are carried out as the consumer groups' are
(server/group_writes.py): records written, the core told `durable`, then the answer.

When a heartbeat's decision says share-partitions need their state, the service asks
the share coordinator through the share-state port (`strom.share.state_port`):
`initialize(key, state_epoch=the group epoch, start_offset)`, as Kafka's
GroupCoordinatorService does, before it answers the heartbeat; then it tells the core
`state_initialized` (recorded; the next heartbeat assigns them) or, on any error,
`state_not_initialized` (a later heartbeat asks again) and answers the heartbeat with
that error, as Kafka does. A member that leaves or is fenced is reported to
`on_member_left(group_id, member_id)`, which gives back the records it held; a
share-partition state deleted with its group to `state_reset(key)`, so the
share-partitions led here drop what they hold of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from strom.group.share.coordinator import ShareCoordinator, ShareGroupDecision
from strom.group.share.heartbeat import (
    LEAVE_GROUP_EPOCH,
    ShareDescribedGroup,
    ShareGroupConfig,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    ShareTopic,
)
from strom.group.share.initialize import ShareInitialize, ShareInitializeTopic
from strom.group.share.namespace import GroupType
from strom.group.share.records import ShareMemberKey
from strom.group.state import GroupState
from strom.metadata.image import MetadataImage
from strom.server.clock import now_ms
from strom.server.group_writes import CoreWrites, with_group_timeouts
from strom.server.groups import CoordinatorUnavailable, GroupService
from strom.share.state_port import UNINITIALIZED_START_OFFSET, ShareStateKey, ShareStatePort

__all__ = ["ShareGroupService"]

log = logging.getLogger(__name__)

_TIMER_RETRY_S = 0.5


class ShareGroupService:
    """Share groups on this broker. Ports: the group service (where they are loaded, how
    records are written), the metadata image, the share-state port, and who is told
    that a member left."""

    def __init__(
        self,
        groups: GroupService,
        image: Callable[[], MetadataImage],
        share_state: Callable[[], ShareStatePort],
        on_member_left: Callable[[str, str], None] = lambda group_id, member_id: None,
        enabled: Callable[[], bool] = lambda: True,
    ) -> None:
        """`share_state` is read at each use (the broker may replace it); `enabled`:
        group.share.enable."""
        self._groups = groups
        self._image = image
        self._share_state = share_state
        self.on_member_left = on_member_left
        self.state_reset: Callable[[ShareStateKey], None] = lambda key: None
        """A share-partition's state was deleted (the leader here drops it)."""
        self.log_end: Callable[[str, int], Awaitable[tuple[ErrorCode, int]]] = _no_log_end
        """A partition's log end (high watermark), from its leader (server/log_ends.py)."""
        self.enabled = enabled
        self._core_writes = CoreWrites(groups, groups.share, "share")
        self._wake = asyncio.Event()

    @property
    def core(self) -> ShareCoordinator:
        return self._groups.share

    def topics(self) -> dict[str, ShareTopic]:
        return {
            name: ShareTopic(topic.topic_id, len(topic.partitions))
            for name, topic in self._image().topics_by_name.items()
            if not topic.is_internal
        }

    def other_type(self, group_id: str) -> GroupType | None:
        """The type of a classic or consumer group of this id (None: there is none)."""
        if self._groups.consumer.group(group_id) is not None:
            return GroupType.CONSUMER
        classic = self._groups.core.store.peek(group_id)
        if classic is not None and classic.state is not GroupState.DEAD:
            return GroupType.CLASSIC
        return None

    def config_of(self, group_id: str) -> ShareGroupConfig:
        """The coordinator's settings with the group's own share.session.timeout.ms and
        share.heartbeat.interval.ms (config resource GROUP), when it has them."""
        own = self._image().group_configs(group_id)
        return with_group_timeouts(self.core.config, own, "share")

    async def heartbeat(self, req: ShareHeartbeatRequest) -> ShareHeartbeatResult:
        """Raises CoordinatorUnavailable."""
        await self._groups.coordinate(req.group_id)
        decision = self.core.heartbeat(
            req, self.topics(), now_ms(), self.other_type, self.config_of(req.group_id)
        )
        self._wake.set()
        await self._carry_out(decision)
        assert decision.result is not None
        if decision.result.error is ErrorCode.none and req.member_epoch == LEAVE_GROUP_EPOCH:
            self.on_member_left(req.group_id, req.member_id)
        if decision.initialize is not None:
            error, message = await self._initialize(decision.initialize)
            if error is not ErrorCode.none:
                return ShareHeartbeatResult(error, message, member_id=req.member_id)
            return await self._assign_initialized(req, decision.result)
        return decision.result

    async def _assign_initialized(
        self, req: ShareHeartbeatRequest, first: ShareHeartbeatResult
    ) -> ShareHeartbeatResult:
        """Once the share-partitions a heartbeat asked for are initialized, the member is
        answered as if it had heartbeated again at once, so it gets them now. strom's, not
        Kafka's: there a member learns of them at its next heartbeat, an interval (5 s by
        default) later, which is how long a lone new member of a new group waits."""
        if first.error is not ErrorCode.none or first.member_epoch <= 0:
            return first
        again = dataclasses.replace(
            req, member_epoch=first.member_epoch, subscribed_topic_names=None
        )
        decision = self.core.heartbeat(
            again, self.topics(), now_ms(), self.other_type, self.config_of(req.group_id)
        )
        await self._carry_out(decision)
        result = decision.result
        if result is None or result.error is not ErrorCode.none:
            return first
        if result.assignment is None:  # unchanged since `first`
            return dataclasses.replace(result, assignment=first.assignment)
        return result

    async def coordinate(self, group_id: str) -> None:
        """Raises CoordinatorUnavailable unless the group is coordinated here, loaded."""
        await self._groups.coordinate(group_id)

    def port(self) -> ShareStatePort:
        return self._share_state()

    def now_ms(self) -> int:
        return now_ms()

    async def carry_out(self, decision: ShareGroupDecision) -> None:
        """Write a decision's records (raises CoordinatorUnavailable when they fail)."""
        await self._carry_out(decision)

    async def initialize_each(
        self, ask: ShareInitialize
    ) -> tuple[
        dict[tuple[uuid.UUID, int], tuple[ErrorCode, str | None]], tuple[ErrorCode, str | None]
    ]:
        """Initialize share-partitions' states and record which were: each one's answer,
        and the error of recording them (NONE: recorded)."""
        return await self._initialize_each(ask)

    async def _carry_out(self, decision: ShareGroupDecision) -> None:
        await self._core_writes.carry_out(
            decision.group_id, decision.records, decision.write_id, decision.after_write_id
        )

    async def _initialize(self, ask: ShareInitialize) -> tuple[ErrorCode, str | None]:
        """Initialize the share-partitions' state, then record the outcome in the group.
        Returns the first error (NONE when every partition was initialized)."""
        answers, recorded = await self._initialize_each(ask)
        if recorded[0] is not ErrorCode.none:
            return recorded
        for answer in answers.values():
            if answer[0] is not ErrorCode.none:
                return answer
        return ErrorCode.none, None

    async def _initialize_each(
        self, ask: ShareInitialize
    ) -> tuple[
        dict[tuple[uuid.UUID, int], tuple[ErrorCode, str | None]], tuple[ErrorCode, str | None]
    ]:
        """Each share-partition's answer, and whether the outcome was recorded (NONE)."""
        port = self._share_state()
        calls = [
            (topic.topic_id, partition, await self._start_of(ask.group_id, topic, partition))
            for topic in ask.topics
            for partition in sorted(topic.partitions)
        ]
        answers = await asyncio.gather(
            *(
                port.initialize(ShareStateKey(ask.group_id, t, p), ask.group_epoch, start)
                for t, p, start in calls
            ),
            return_exceptions=True,
        )
        done: dict[uuid.UUID, frozenset[int]] = {}
        failed: dict[uuid.UUID, frozenset[int]] = {}
        each: dict[tuple[uuid.UUID, int], tuple[ErrorCode, str | None]] = {}
        for (topic_id, partition, _), answer in zip(calls, answers, strict=True):
            if isinstance(answer, BaseException):
                log.error("cannot initialize share state of %s: %s", ask.group_id, answer)
                answer = (ErrorCode.coordinator_not_available, str(answer))
            into = done if answer[0] is ErrorCode.none else failed
            into[topic_id] = into.get(topic_id, frozenset()) | {partition}
            each[(topic_id, partition)] = answer
        current = now_ms()
        try:
            if failed:
                await self._carry_out(
                    self.core.state_not_initialized(ask.group_id, failed, current)
                )
            if done:
                await self._carry_out(
                    self.core.state_initialized(ask.group_id, done, self.topics(), current)
                )
        except CoordinatorUnavailable as exc:
            return each, (exc.error_code, str(exc))
        return each, (ErrorCode.none, None)

    async def _start_of(self, group_id: str, topic: ShareInitializeTopic, partition: int) -> int:
        """Where a share-partition starts. strom's, beyond Kafka: with
        share.auto.offset.reset=latest (the default) it starts at the log end as the
        group takes it, so a member that subscribed before records were written reads
        them; Kafka places it at the log end when the leader first loads it (the first
        ShareFetch), which skips what was written in between. -1 leaves it to the leader
        (earliest, by_duration, or the log end unknown)."""
        reset = self._image().group_configs(group_id).get("share.auto.offset.reset", "latest")
        if topic.start_offset != UNINITIALIZED_START_OFFSET or reset != "latest":
            return topic.start_offset
        error, end = await self.log_end(topic.name, partition)
        return end if error is ErrorCode.none and end >= 0 else UNINITIALIZED_START_OFFSET

    async def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups of a share group here: its share-partitions' state first (the
        port's `delete`), then the tombstones of its records. NONE once they are
        durable, NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND (not one), or an error."""
        group = self.core.group(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.members:
            return ErrorCode.non_empty_group
        port = self._share_state()
        for topic in group.state_partitions.initialized + group.state_partitions.initializing:
            for partition in sorted(topic.partitions or ()):
                key = ShareStateKey(group_id, topic.topic_id, partition)
                error, message = await port.delete(key)
                self.state_reset(key)
                if error not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition):
                    log.error("cannot delete share state of %s: %s", group_id, message)
                    return error
        error, decision = self.core.delete_group(group_id)
        try:
            await self._carry_out(decision)
        except CoordinatorUnavailable as exc:
            return exc.error_code
        return error

    def describe(self, group_id: str) -> tuple[ErrorCode, str | None, ShareDescribedGroup | None]:
        """ShareGroupDescribe of one group coordinated here (committed state)."""
        return self.core.describe(group_id, self.topics(), self.other_type)

    def group_ids(self) -> list[str]:
        return [g for g in self.core.group_ids() if self.core.committed_group(g) is not None]

    async def run_timers(self) -> None:
        """Remove the members whose session ran out (each reported to `on_member_left`)."""
        while True:
            deadline = self.core.next_deadline_ms()
            self._wake.clear()
            timeout_s = None if deadline is None else max(deadline - now_ms(), 0) / 1000
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._wake.wait()
            for decision in self.core.tick(now_ms(), self.topics()):
                try:
                    await self._carry_out(decision)
                except CoordinatorUnavailable:
                    await asyncio.sleep(_TIMER_RETRY_S)
                    continue
                for key, value in decision.records:
                    if isinstance(key, ShareMemberKey) and value is None:
                        self.on_member_left(key.group_id, key.member_id)


async def _no_log_end(topic: str, partition: int) -> tuple[ErrorCode, int]:
    return ErrorCode.leader_not_available, -1
