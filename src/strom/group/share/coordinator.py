"""The share group coordinator of one `__consumer_offsets` partition: a pure core.

Shaped as the consumer groups' coordinator (`strom.group.consumer.coordinator`): the
committed groups (what durable records say), the writes not yet durable, and the tip
(the committed groups with every pending write replayed on top), which the next
decision reads, are kept by `strom.group.pending.PendingWrites`, which lists a write's
transitions (durable: replayed into the committed groups; failed: dropped with the
later writes of its group, the group's tip rebuilt from what remains).

A decision that writes nothing waits for the pending writes of its group it read
(`after_write_id`). Session deadlines are kept here, not in records, as in Kafka;
`tick(now_ms)` removes the members whose session ran out. Time comes in as `now_ms`;
member ids come from the clients (ShareGroupHeartbeat v1).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from strom.group.pending import PendingWrites
from strom.group.share.heartbeat import (
    LEAVE_GROUP_EPOCH,
    ShareDescribedGroup,
    ShareGroupConfig,
    ShareHeartbeatRefused,
    ShareHeartbeatRequest,
    ShareHeartbeatResult,
    ShareRecord,
    ShareTopic,
    ShareWork,
    describe,
    fence_share_member,
    run_share_heartbeat,
    validate_share_heartbeat,
)
from strom.group.share.initialize import (
    ShareInitialize,
    TopicPartitions,
    mark_initialized,
    mark_uninitialized,
)
from strom.group.share.namespace import GroupType, group_type_error
from strom.group.share.offsets import (
    AlterPlan,
    DeletePlan,
    plan_alter,
    plan_delete,
    without_deleting,
)
from strom.group.share.records import (
    ShareGroupEpochKey,
    ShareGroupEpochValue,
    ShareKey,
    ShareStatePartitionsKey,
    ShareStatePartitionsValue,
    ShareTargetEpochKey,
    ShareTargetKey,
    ShareValue,
)
from strom.group.share.state import ShareGroup, replay_share

__all__ = ["ShareCoordinator", "ShareGroupDecision"]

log = logging.getLogger(__name__)

OtherGroupType = Callable[[str], GroupType | None]
"""The type of a classic or consumer group with this id, None when there is none."""


@dataclass(slots=True)
class ShareGroupDecision:
    """What the shell writes (`records`, as write `write_id`) and answers once they are
    durable; with no records the answer waits for `after_write_id` (0: none)."""

    group_id: str
    records: list[ShareRecord] = field(default_factory=list)
    result: ShareHeartbeatResult | None = None
    write_id: int = 0
    after_write_id: int = 0
    initialize: ShareInitialize | None = None
    """Share-partitions whose state the shell initializes once `records` are durable,
    then reports with `state_initialized` or `state_not_initialized`."""


class ShareCoordinator:
    def __init__(self, config: ShareGroupConfig, *, label: str = "") -> None:
        self.config = config
        self._label = label
        self._writes: PendingWrites[ShareGroup, ShareKey, ShareValue] = PendingWrites(
            replay_share, self._retry_removals
        )
        self._sessions: dict[tuple[str, str], int] = {}
        """(group, member) -> its session deadline, ms."""
        self._initializing_since: dict[str, int] = {}
        """group -> when its state partition metadata was last written or loaded, ms: its
        initializing share-partitions were asked for then (as Kafka keeps it)."""

    # --- reading ------------------------------------------------------------------

    @property
    def committed(self) -> dict[str, ShareGroup]:
        return self._writes.committed

    @property
    def _tip(self) -> dict[str, ShareGroup]:
        return self._writes.tip

    def group(self, group_id: str) -> ShareGroup | None:
        """The newest version of a group (pending writes included). Read only."""
        return self._tip.get(group_id)

    def committed_group(self, group_id: str) -> ShareGroup | None:
        return self.committed.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._tip)

    def describe(
        self, group_id: str, topics: Mapping[str, ShareTopic], other: OtherGroupType
    ) -> tuple[ErrorCode, str | None, ShareDescribedGroup | None]:
        """ShareGroupDescribe of one group, from the committed state."""
        group = self.committed.get(group_id)
        if group is None:
            if other(group_id) is not None:
                code, message = group_type_error(group_id, GroupType.SHARE)
                return code, message, None
            return ErrorCode.group_id_not_found, f"Group {group_id} not found.", None
        return ErrorCode.none, None, describe(group, topics, self.config)

    # --- loading ------------------------------------------------------------------

    def load(self, key: ShareKey, value: ShareValue | None, now_ms: int) -> None:
        """Replay one record of the partition at load; members get a fresh session."""
        replay_share(self.committed, key, value)
        if isinstance(key, ShareStatePartitionsKey):
            self._initializing_since[key.group_id] = now_ms
        self._writes.settle(key.group_id)
        group = self.committed.get(key.group_id)
        if group is not None:
            deadline_ms = now_ms + self.config.session_timeout_ms
            for member_id in group.members:
                self._sessions.setdefault((key.group_id, member_id), deadline_ms)
        for k in [k for k in self._sessions if k[0] == key.group_id]:
            if group is None or k[1] not in group.members:
                del self._sessions[k]

    # --- deciding -----------------------------------------------------------------

    def heartbeat(
        self,
        req: ShareHeartbeatRequest,
        topics: Mapping[str, ShareTopic],
        now_ms: int,
        other: OtherGroupType,
        config: ShareGroupConfig | None = None,
    ) -> ShareGroupDecision:
        """`other`: the type of a group of this id that is not a share group; `config`:
        the group's own session timeout and heartbeat interval, when it has them."""
        config = config or self.config
        try:
            validate_share_heartbeat(req)
            current = self._tip.get(req.group_id)
            if current is None:
                if other(req.group_id) is not None:
                    raise ShareHeartbeatRefused(*group_type_error(req.group_id, GroupType.SHARE))
                if req.member_epoch == LEAVE_GROUP_EPOCH:
                    raise ShareHeartbeatRefused(
                        ErrorCode.group_id_not_found, f"Group {req.group_id} not found."
                    )
                if req.member_epoch != 0:
                    raise ShareHeartbeatRefused(
                        ErrorCode.group_id_not_found, f"Share group {req.group_id} not found."
                    )
            work = ShareWork(current.copy() if current is not None else ShareGroup(req.group_id))
            since = self._initializing_since.get(req.group_id)
            fresh = since is not None and now_ms - since < config.initialize_retry_interval_ms
            result = run_share_heartbeat(work, req, topics, config, fresh)
        except ShareHeartbeatRefused as refused:
            return ShareGroupDecision(
                req.group_id,
                result=ShareHeartbeatResult(
                    error=refused.error, message=refused.message, member_id=req.member_id
                ),
                after_write_id=self._last(req.group_id),
            )
        key = (req.group_id, req.member_id)
        if req.member_epoch == LEAVE_GROUP_EPOCH:
            self._sessions.pop(key, None)
        else:
            self._sessions[key] = now_ms + config.session_timeout_ms
        if work.initialize is not None:
            self._initializing_since[req.group_id] = now_ms
        decision = self._finish(work, result)
        decision.initialize = work.initialize
        return decision

    def state_initialized(
        self, group_id: str, done: TopicPartitions, topics: Mapping[str, ShareTopic], now_ms: int
    ) -> ShareGroupDecision:
        """The shell wrote the state of these share-partitions: they may be assigned (the
        next heartbeat of a member bumps the group epoch and assigns them)."""
        names = {t.topic_id: name for name, t in topics.items()}
        return self._restate(group_id, lambda g: mark_initialized(g, done, names), now_ms)

    def state_not_initialized(
        self, group_id: str, failed: TopicPartitions, now_ms: int
    ) -> ShareGroupDecision:
        """Initializing these share-partitions failed: a later heartbeat asks again."""
        return self._restate(group_id, lambda g: mark_uninitialized(g, failed), now_ms)

    def _restate(
        self,
        group_id: str,
        change: Callable[[ShareStatePartitionsValue], ShareStatePartitionsValue],
        now_ms: int,
    ) -> ShareGroupDecision:
        group = self._tip.get(group_id)
        if group is None:
            return ShareGroupDecision(group_id)
        new = change(group.state_partitions)
        if new == group.state_partitions:
            return ShareGroupDecision(group_id, after_write_id=self._last(group_id))
        work = ShareWork(group.copy())
        work.emit(ShareStatePartitionsKey(group_id), new)
        self._initializing_since[group_id] = now_ms
        return self._finish(work, None)

    def tick(self, now_ms: int, topics: Mapping[str, ShareTopic]) -> list[ShareGroupDecision]:
        """Remove the members whose session ran out."""
        decisions: list[ShareGroupDecision] = []
        for key in sorted(k for k, deadline in self._sessions.items() if deadline <= now_ms):
            del self._sessions[key]
            group = self._tip.get(key[0])
            if group is None or key[1] not in group.members:
                continue
            log.info(
                "%s share group %s: removing member %s: its session timed out",
                self._label,
                key[0],
                key[1],
            )
            work = ShareWork(group.copy())
            fence_share_member(work, key[1], topics)
            decisions.append(self._finish(work, None))
        return decisions

    def delete_group(self, group_id: str) -> tuple[ErrorCode, ShareGroupDecision]:
        """DeleteGroups of a share group: only an empty one (NON_EMPTY_GROUP), by the
        tombstones of its records; GROUP_ID_NOT_FOUND when it is not a share group.
        (Deleting its share-partitions' state in `__share_group_state` is the shell's.)"""
        group = self._tip.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, ShareGroupDecision(group_id)
        if group.members:
            return ErrorCode.non_empty_group, ShareGroupDecision(group_id)
        work = ShareWork(group.copy())
        for member_id in sorted(work.group.target):
            work.emit(ShareTargetKey(group_id, member_id), None)
        work.emit(ShareTargetEpochKey(group_id), None)
        work.emit(ShareStatePartitionsKey(group_id), None)
        work.emit(ShareGroupEpochKey(group_id), None)
        self._initializing_since.pop(group_id, None)
        log.info("%s share group %s deleted", self._label, group_id)
        return ErrorCode.none, self._finish(work, None)

    def alter_offsets(
        self,
        group_id: str,
        asked: list[tuple[str, list[tuple[int, int]]]],
        topics: Mapping[str, ShareTopic],
        other: OtherGroupType,
        now_ms: int,
    ) -> tuple[ErrorCode, str | None, AlterPlan | None, ShareGroupDecision]:
        """AlterShareGroupOffsets: only an empty group (NON_EMPTY_GROUP), created when it
        does not exist; GROUP_ID_NOT_FOUND for another type's. The decision bumps the
        group epoch and records the altered partitions initializing; the plan says which
        states the shell starts again (then `state_initialized`/`state_not_initialized`)."""
        group = self._tip.get(group_id)
        if group is None and other(group_id) is not None:
            code, message = group_type_error(group_id, GroupType.SHARE)
            return code, message, None, ShareGroupDecision(group_id)
        if group is not None and group.members:
            return ErrorCode.non_empty_group, None, None, ShareGroupDecision(group_id)
        work = ShareWork(group.copy() if group is not None else ShareGroup(group_id))
        epoch = work.group.group_epoch + 1
        plan = plan_alter(group_id, work.group.state_partitions, epoch, asked, topics)
        work.emit(
            ShareGroupEpochKey(group_id), ShareGroupEpochValue(epoch, work.group.metadata_hash)
        )
        if plan.state != work.group.state_partitions:
            work.emit(ShareStatePartitionsKey(group_id), plan.state)
            self._initializing_since[group_id] = now_ms
        log.info("%s share group %s: offsets altered at epoch %d", self._label, group_id, epoch)
        return ErrorCode.none, None, plan, self._finish(work, None)

    def delete_offsets(
        self,
        group_id: str,
        asked: list[str],
        topics: Mapping[str, ShareTopic],
        other: OtherGroupType,
    ) -> tuple[ErrorCode, str | None, DeletePlan | None, ShareGroupDecision]:
        """DeleteShareGroupOffsets: only an empty share group (NON_EMPTY_GROUP,
        GROUP_ID_NOT_FOUND). The decision moves the named topics to deleting; the shell
        deletes the plan's states, then reports `offsets_deleted`."""
        group = self._tip.get(group_id)
        if group is None:
            if other(group_id) is not None:
                code, message = group_type_error(group_id, GroupType.SHARE)
            else:
                code, message = ErrorCode.group_id_not_found, f"Group {group_id} not found."
            return code, message, None, ShareGroupDecision(group_id)
        if group.members:
            return ErrorCode.non_empty_group, None, None, ShareGroupDecision(group_id)
        plan = plan_delete(group.state_partitions, asked, topics)
        work = ShareWork(group.copy())
        if plan.state != group.state_partitions:
            work.emit(ShareStatePartitionsKey(group_id), plan.state)
        return ErrorCode.none, None, plan, self._finish(work, None)

    def offsets_deleted(self, group_id: str, topic_ids: frozenset[uuid.UUID]) -> ShareGroupDecision:
        """The states of these topics' share-partitions are deleted: they leave the
        group's deleting list."""
        group = self._tip.get(group_id)
        if group is None:
            return ShareGroupDecision(group_id)
        new = without_deleting(group.state_partitions, topic_ids)
        if new == group.state_partitions:
            return ShareGroupDecision(group_id, after_write_id=self._last(group_id))
        work = ShareWork(group.copy())
        work.emit(ShareStatePartitionsKey(group_id), new)
        return self._finish(work, None)

    def next_deadline_ms(self) -> int | None:
        return min(self._sessions.values()) if self._sessions else None

    def _last(self, group_id: str) -> int:
        return self._writes.last(group_id)

    def _finish(self, work: ShareWork, result: ShareHeartbeatResult | None) -> ShareGroupDecision:
        group_id = work.group.group_id
        if not work.records:
            return ShareGroupDecision(group_id, result=result, after_write_id=self._last(group_id))
        before = self._tip.get(group_id)
        old = set(before.members) if before is not None else set()
        for member_id in sorted(set(work.group.members) - old):
            log.info("%s share group %s: member %s joined", self._label, group_id, member_id)
        for member_id in sorted(old - set(work.group.members)):
            log.info("%s share group %s: member %s left", self._label, group_id, member_id)
        write_id = self._writes.push(
            group_id, list(work.records), None if work.deleted else work.group
        )
        return ShareGroupDecision(group_id, list(work.records), result, write_id)

    # --- the shell reports ----------------------------------------------------------

    def durable(self, write_id: int) -> None:
        self._writes.durable(write_id)

    def failed(self, write_id: int) -> list[int]:
        """Drop the write and the later writes of its group; returns their ids."""
        return self._writes.failed(write_id)

    def _retry_removals(self, group: ShareGroup) -> None:
        """A failed write's group is as before it: a removal it held is tried again."""
        for member_id in group.members:
            self._sessions.setdefault((group.group_id, member_id), 0)

    def forget(self, group_ids: Iterable[str]) -> list[int]:
        """This coordinator no longer owns these groups (the partition moved): drop them,
        their pending writes (returned) and their timers."""
        gone = set(group_ids)
        dropped = self._writes.forget(gone)
        for group_id in gone:
            self._initializing_since.pop(group_id, None)
        for key in [k for k in self._sessions if k[0] in gone]:
            del self._sessions[key]
        return dropped
