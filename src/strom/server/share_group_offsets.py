"""The shell of KIP-932's share-group offset admin APIs: Describe (90), Alter (91) and
DeleteShareGroupOffsets (92), carried out as Kafka's GroupCoordinatorService does.

- **Describe** reads each share-partition's summary through the share-state port (the
  start offset, its leader epoch and KIP-1226's delivery-complete count) and, where all
  three are known, the lag: the partition's log end (the high watermark, as ListOffsets
  LATEST answers) minus the start offset minus the records already delivered at or
  above it. No group is looked at when topics are named (a topic the image lacks
  answers start offset -1); with no topics, the topics whose state the group has
  initialized.
- **Alter** asks the core (`ShareCoordinator.alter_offsets`: an empty group only, its
  epoch bumped), writes its records, starts the named share-partitions' states again
  at the new group epoch (which fences their leaders, who read the new state) and
  records which were initialized.
- **Delete** asks the core (`delete_offsets`: an empty share group only), writes the
  topics as deleting, deletes their share-partitions' states, then records them gone.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.group.share.offsets import OffsetResult
from strom.server.share_groups import ShareGroupService
from strom.share.state_port import UNINITIALIZED_START_OFFSET, ShareStateKey

__all__ = ["LogEnd", "ShareOffset", "ShareOffsetAdmin"]

log = logging.getLogger(__name__)

LogEnd = Callable[[str, int], Awaitable[tuple[ErrorCode, int]]]
"""(topic, partition) -> the error and the log end (high watermark) of the partition."""


@dataclass(frozen=True, slots=True)
class ShareOffset:
    """DescribeShareGroupOffsets' answer for one share-partition."""

    topic: str
    topic_id: uuid.UUID | None
    partition: int
    start_offset: int = UNINITIALIZED_START_OFFSET
    leader_epoch: int = 0
    lag: int = -1
    error: ErrorCode = ErrorCode.none
    message: str | None = None


class ShareOffsetAdmin:
    def __init__(
        self,
        share: ShareGroupService,
        log_end: LogEnd,
        state_reset: Callable[[ShareStateKey], None] = lambda key: None,
    ) -> None:
        """`state_reset`: a share-partition's state was started again or deleted (the
        share-partitions led here drop what they hold of it)."""
        self._share = share
        self._log_end = log_end
        self.state_reset = state_reset

    async def describe(
        self, group_id: str, asked: list[tuple[str, list[int]]] | None
    ) -> list[ShareOffset]:
        """`asked`: (topic, partitions), or None for every initialized share-partition."""
        topics = self._share.topics()
        if asked is None:
            await self._share.coordinate(group_id)
            group = self._share.core.committed_group(group_id)
            names = {t.topic_id: name for name, t in topics.items()}
            asked = []
            if group is not None:
                for done in group.state_partitions.initialized:
                    name = names.get(done.topic_id)
                    if name is not None:
                        asked.append((name, sorted(done.partitions or ())))
        calls: list[tuple[str, uuid.UUID | None, int]] = []
        for name, partitions in asked:
            topic = topics.get(name)
            calls.extend((name, None if topic is None else topic.topic_id, p) for p in partitions)
        return list(await asyncio.gather(*(self._one(group_id, *call) for call in calls)))

    async def _one(
        self, group_id: str, name: str, topic_id: uuid.UUID | None, partition: int
    ) -> ShareOffset:
        if topic_id is None:  # a topic the image lacks: no offset, no error (Kafka's)
            return ShareOffset(name, None, partition)
        summary = await self._share.port().summary(ShareStateKey(group_id, topic_id, partition), 0)
        if summary.error is not ErrorCode.none:
            return ShareOffset(name, topic_id, partition)
        known = UNINITIALIZED_START_OFFSET not in (
            summary.start_offset,
            summary.delivery_complete_count,
        )
        if not known:
            return ShareOffset(
                name, topic_id, partition, summary.start_offset, summary.leader_epoch
            )
        error, end = await self._log_end(name, partition)
        if error is not ErrorCode.none:
            return ShareOffset(name, topic_id, partition, error=error)
        lag = end - summary.start_offset - summary.delivery_complete_count
        return ShareOffset(
            name, topic_id, partition, summary.start_offset, summary.leader_epoch, lag
        )

    async def alter(
        self, group_id: str, asked: list[tuple[str, list[tuple[int, int]]]]
    ) -> tuple[ErrorCode, str | None, list[OffsetResult]]:
        """The top-level error, or each partition's answer. Raises CoordinatorUnavailable."""
        share = self._share
        await share.coordinate(group_id)
        error, message, plan, decision = share.core.alter_offsets(
            group_id, asked, share.topics(), share.other_type, share.now_ms()
        )
        if plan is None:
            await share.carry_out(decision)
            return error, message, []
        await share.carry_out(decision)
        if plan.initialize is None:
            return ErrorCode.none, None, list(plan.results)
        answers, recorded = await share.initialize_each(plan.initialize)
        for topic_id, partition in answers:
            self.state_reset(ShareStateKey(group_id, topic_id, partition))
        results = []
        for result in plan.results:
            answer = (
                answers.get((result.topic_id, result.partition))
                if result.topic_id is not None and result.partition is not None
                else None
            )
            if answer is not None and answer[0] is ErrorCode.none:
                answer = recorded if recorded[0] is not ErrorCode.none else None
            if answer is not None and result.error is ErrorCode.none:
                result = OffsetResult(
                    result.topic, result.topic_id, result.partition, answer[0], answer[1]
                )
            results.append(result)
        return ErrorCode.none, None, results

    async def delete(
        self, group_id: str, asked: list[str]
    ) -> tuple[ErrorCode, str | None, list[OffsetResult]]:
        """The top-level error, or each topic's answer. Raises CoordinatorUnavailable."""
        share = self._share
        await share.coordinate(group_id)
        error, message, plan, decision = share.core.delete_offsets(
            group_id, asked, share.topics(), share.other_type
        )
        await share.carry_out(decision)
        if plan is None:
            return error, message, []
        port = share.port()
        results: list[OffsetResult] = []
        gone: set[uuid.UUID] = set()
        for name, topic_id, partitions in plan.deletes:
            answers = await asyncio.gather(
                *(port.delete(ShareStateKey(group_id, topic_id, p)) for p in sorted(partitions))
            )
            for p in partitions:
                self.state_reset(ShareStateKey(group_id, topic_id, p))
            failed = [a for a in answers if a[0] is not ErrorCode.none]
            if failed:
                log.error("cannot delete share state of %s, %s: %s", group_id, name, failed[0])
                results.append(OffsetResult(name, topic_id, None, failed[0][0], failed[0][1]))
            else:
                gone.add(topic_id)
                results.append(OffsetResult(name, topic_id))
        if gone:
            await share.carry_out(share.core.offsets_deleted(group_id, frozenset(gone)))
        return ErrorCode.none, None, results + list(plan.errors)
