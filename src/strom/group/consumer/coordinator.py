"""The consumer group coordinator of one `__consumer_offsets` partition: a pure core.

Its committed groups, the writes not yet durable and the tip the next decision reads
are kept by `strom.group.pending.PendingWrites` (where a write's transitions are listed):
a decision's records are pushed there, `durable(write_id)` replays them into the
committed groups, `failed(write_id)` drops them with the later writes of their group.

A decision that writes nothing may still have read pending writes of its group: its
answer waits for them (`after_write_id`). Timers (session and rebalance timeouts) are
deadlines kept here, not records, as in Kafka; `tick(now_ms)` fences the members whose
deadline passed. Randomness (new member ids) comes from a seeded `random.Random`; time
comes in as `now_ms`.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from random import Random

from kio.schema.errors import ErrorCode

from strom.group.consumer.classic_members import (
    classic_heartbeat,
    classic_join,
    classic_leave,
    classic_sync,
)
from strom.group.consumer.heartbeat import (
    ConsumerGroupConfig,
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    ConsumerRecord,
    HeartbeatRefused,
    TopicInfo,
    Work,
    run_heartbeat,
    validate,
)
from strom.group.consumer.migration import check_upgrade, fence_members, upgrade
from strom.group.consumer.records import (
    ConsumerGroupEpochKey,
    ConsumerKey,
    ConsumerValue,
    PartitionMetadataKey,
    TargetAssignmentEpochKey,
    TargetAssignmentKey,
)
from strom.group.consumer.state import (
    ConsumerGroup,
    ConsumerMember,
    MemberState,
    OwnershipError,
    replay_consumer,
)
from strom.group.pending import PendingWrites
from strom.group.requests import JoinRequest, LeavingMember, SyncRequest
from strom.group.state import Group, JoinResult, SyncResult

__all__ = ["ConsumerCoordinator", "ConsumerDecision"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ConsumerDecision:
    """What the shell writes (`records`, as write `write_id`) and answers once they are
    durable; with no records, the answer waits for `after_write_id` (0: none)."""

    group_id: str
    records: list[ConsumerRecord] = field(default_factory=list)
    result: ConsumerHeartbeatResult | None = None
    write_id: int = 0
    after_write_id: int = 0
    classic: Group | None = None
    """The classic group this consumer group became (its last consumer-protocol member
    left): the classic coordinator adopts it, its records in the same batch."""


def _session_ms(member: ConsumerMember, config: ConsumerGroupConfig) -> int:
    """A member's session timeout: its JoinGroup's when it uses the classic protocol."""
    return (
        member.classic.session_timeout_ms
        if member.classic is not None
        else config.session_timeout_ms
    )


def new_member_id(rng: Random) -> str:
    """A random UUID in Kafka's text form (URL-safe base64, no padding)."""
    raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


class ConsumerCoordinator:
    def __init__(self, config: ConsumerGroupConfig, rng: Random, *, label: str = "") -> None:
        self.config = config
        self._rng = rng
        self._label = label
        self._writes: PendingWrites[ConsumerGroup, ConsumerKey, ConsumerValue] = PendingWrites(
            replay_consumer, self._retry_removals
        )
        self._sessions: dict[tuple[str, str], int] = {}
        """(group, member) -> the session deadline, ms."""
        self._revocations: dict[tuple[str, str], tuple[int, int]] = {}
        """(group, member) -> (deadline ms, the member epoch it must revoke in)."""
        self._rejoins: dict[tuple[str, str], int] = {}
        """(group, member using the classic protocol) -> the deadline to rejoin by, ms: it
        was told REBALANCE_IN_PROGRESS (Kafka's join timeout, the rebalance timeout)."""

    # --- reading ------------------------------------------------------------------

    def group(self, group_id: str) -> ConsumerGroup | None:
        """The newest version of a group (pending writes included). Read only."""
        return self._tip.get(group_id)

    def committed_group(self, group_id: str) -> ConsumerGroup | None:
        return self.committed.get(group_id)

    def group_ids(self) -> list[str]:
        return sorted(self._tip)

    @property
    def committed(self) -> dict[str, ConsumerGroup]:
        return self._writes.committed

    @property
    def _tip(self) -> dict[str, ConsumerGroup]:
        return self._writes.tip

    @property
    def pending(self) -> int:
        return len(self._writes)

    # --- loading ------------------------------------------------------------------

    def load(self, key: ConsumerKey, value: ConsumerValue | None, now_ms: int) -> None:
        """Replay one record of the partition at load; members get a fresh session."""
        try:
            replay_consumer(self.committed, key, value)
        except OwnershipError:
            log.exception("%s replaying %s", self._label, key)
        group = self.committed.get(key.group_id)
        if group is not None:
            for member_id, member in group.members.items():
                deadline_ms = now_ms + _session_ms(member, self.config)
                self._sessions.setdefault((key.group_id, member_id), deadline_ms)

    def loaded(self, belongs: Callable[[str], bool]) -> None:
        """The partition holding the groups `belongs` selects is loaded: their tip is a
        copy of their committed state (sessions of members gone meanwhile are dropped)."""
        for group_id, group in self.committed.items():
            if belongs(group_id):
                self._tip[group_id] = group.copy()
        for key in [k for k in self._sessions if belongs(k[0])]:
            loaded = self.committed.get(key[0])
            if loaded is None or key[1] not in loaded.members:
                self._forget_timers(*key)

    # --- deciding -----------------------------------------------------------------

    def heartbeat(
        self,
        req: ConsumerHeartbeatRequest,
        topics: Mapping[str, TopicInfo],
        now_ms: int,
        config: ConsumerGroupConfig | None = None,
        classic: Group | None = None,
    ) -> ConsumerDecision:
        """`config`: the group's own settings (its session timeout and heartbeat interval
        from its group configs) when they differ from the coordinator's. `classic`: the
        live classic group of this id, which a joining member upgrades (`migration.py`;
        the classic coordinator handed it over in the same batch)."""
        config = config or self.config
        member_id = req.member_id
        downgraded: list[Group] = []

        def fence(work: Work, leaving: str) -> None:
            classic = fence_members(
                work, [leaving], topics, config.migration_policy, config.classic_max_size, now_ms
            )
            downgraded.extend([classic] if classic is not None else [])

        try:
            validate(req, config)
            current = self._tip.get(req.group_id)
            if current is None and req.member_epoch != 0:
                raise HeartbeatRefused(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {req.group_id}.",
                )
            if not member_id:
                member_id = new_member_id(self._rng)
            work = Work(current.copy() if current is not None else ConsumerGroup(req.group_id))
            if current is None and classic is not None:
                check_upgrade(classic, config.migration_policy, config.max_size)
                upgrade(work, classic, topics)
                self._start_sessions(work.group, now_ms, config)
                log.info("%s group %s: upgraded from classic", self._label, req.group_id)
            result, member = run_heartbeat(work, req, member_id, topics, config, fence)
        except HeartbeatRefused as refused:
            result = ConsumerHeartbeatResult(
                error=refused.error, message=refused.message, member_id=req.member_id or None
            )
            return ConsumerDecision(
                req.group_id, result=result, after_write_id=self._last(req.group_id)
            )
        key = (req.group_id, result.member_id or member_id)
        if member is None:
            self._forget_timers(*key)
            if req.member_epoch != -1:  # a static member away for a while: session still runs
                self._sessions[key] = now_ms + config.session_timeout_ms
        else:
            self._sessions[key] = now_ms + config.session_timeout_ms
            self._track_revocation(key, member, now_ms)
        if work.records and result.member_id != req.member_id and req.instance_id is not None:
            self._drop_replaced(req.group_id, work.group)
        return self._finish(work, result, downgraded[0] if downgraded else None)

    def _start_sessions(
        self, group: ConsumerGroup, now_ms: int, config: ConsumerGroupConfig
    ) -> None:
        for member in group.members.values():
            self._sessions[(group.group_id, member.member_id)] = now_ms + _session_ms(
                member, config
            )

    def _track_revocation(self, key: tuple[str, str], member: ConsumerMember, now_ms: int) -> None:
        if member.state != MemberState.UNREVOKED_PARTITIONS:
            self._revocations.pop(key, None)
        elif key not in self._revocations or self._revocations[key][1] != member.member_epoch:
            timeout_ms = max(member.rebalance_timeout_ms, 0)
            self._revocations[key] = (now_ms + timeout_ms, member.member_epoch)

    def _drop_replaced(self, group_id: str, group: ConsumerGroup) -> None:
        for gid, member_id in list(self._sessions):
            if gid == group_id and member_id not in group.members:
                self._forget_timers(gid, member_id)

    def _forget_timers(self, group_id: str, member_id: str) -> None:
        self._sessions.pop((group_id, member_id), None)
        self._revocations.pop((group_id, member_id), None)
        self._rejoins.pop((group_id, member_id), None)

    def _last(self, group_id: str) -> int:
        return self._writes.last(group_id)

    def _finish(
        self,
        work: Work,
        result: ConsumerHeartbeatResult | None,
        classic: Group | None = None,
    ) -> ConsumerDecision:
        group_id = work.group.group_id
        if not work.records:
            return ConsumerDecision(group_id, result=result, after_write_id=self._last(group_id))
        self._log_changes(work)
        write_id = self._writes.push(
            group_id, list(work.records), None if work.deleted else work.group
        )
        if classic is not None:
            for key in [
                k for k in self._sessions.keys() | self._rejoins.keys() if k[0] == group_id
            ]:
                self._forget_timers(*key)
            log.info("%s group %s: downgraded to classic", self._label, group_id)
        return ConsumerDecision(group_id, list(work.records), result, write_id, classic=classic)

    def _log_changes(self, work: Work) -> None:
        """One INFO line per member that joined or left and per new target assignment."""
        before = self._tip.get(work.group.group_id)
        old = set(before.members) if before is not None else set()
        new = set(work.group.members)
        group = work.group
        for member_id in sorted(new - old):
            log.info(
                "%s consumer group %s: member %s joined", self._label, group.group_id, member_id
            )
        for member_id in sorted(old - new):
            log.info("%s consumer group %s: member %s left", self._label, group.group_id, member_id)
        if any(isinstance(key, TargetAssignmentEpochKey) and value for key, value in work.records):
            log.info(
                "%s consumer group %s: target assignment of epoch %d for %d member(s)",
                self._label,
                group.group_id,
                group.assignment_epoch,
                len(group.members),
            )

    def tick(self, now_ms: int, topics: Mapping[str, TopicInfo]) -> list[ConsumerDecision]:
        """Fence the members whose session or revocation deadline passed."""
        decisions: list[ConsumerDecision] = []
        expired = [key for key, deadline in self._sessions.items() if deadline <= now_ms]
        late = [
            (key, epoch)
            for key, (deadline, epoch) in self._revocations.items()
            if deadline <= now_ms
        ]
        late_joins = [key for key, deadline in self._rejoins.items() if deadline <= now_ms]
        for key in expired:
            self._forget_timers(*key)
            decisions += self._fence(key, topics, "its session timed out", now_ms)
        for key in late_joins:
            if key in self._rejoins:
                self._forget_timers(*key)
                decisions += self._fence(key, topics, "it did not rejoin in time", now_ms)
        for key, epoch in late:
            group = self._tip.get(key[0])
            member = group.members.get(key[1]) if group is not None else None
            self._revocations.pop(key, None)
            if (
                member is not None
                and member.state == MemberState.UNREVOKED_PARTITIONS
                and member.member_epoch == epoch
            ):
                self._forget_timers(*key)
                decisions += self._fence(
                    key, topics, "it did not revoke its partitions in time", now_ms
                )
        return decisions

    def _fence(
        self, key: tuple[str, str], topics: Mapping[str, TopicInfo], why: str, now_ms: int
    ) -> list[ConsumerDecision]:
        group = self._tip.get(key[0])
        if group is None or key[1] not in group.members:
            return []
        log.info("%s consumer group %s: removing member %s: %s", self._label, key[0], key[1], why)
        work = Work(group.copy())
        config = self.config
        classic = fence_members(
            work, [key[1]], topics, config.migration_policy, config.classic_max_size, now_ms
        )
        return [self._finish(work, None, classic)]

    def next_deadline_ms(self) -> int | None:
        deadlines = list(self._sessions.values()) + [d for d, _ in self._revocations.values()]
        deadlines += self._rejoins.values()
        return min(deadlines) if deadlines else None

    # --- members using the classic protocol (classic_members.py) --------------------

    def classic_join(
        self,
        req: JoinRequest,
        topics: Mapping[str, TopicInfo],
        now_ms: int,
        config: ConsumerGroupConfig | None = None,
    ) -> tuple[JoinResult, ConsumerDecision]:
        """A JoinGroup to this consumer group; answered once the decision is durable."""
        config = config or self.config
        current = self._tip.get(req.group_id)
        assert current is not None, "a JoinGroup to a consumer group that is not here"
        member_id = req.member_id or new_member_id(self._rng)
        work = Work(current.copy())
        joined = classic_join(work, req, member_id, topics, config, config.migration_policy)
        member = joined.member
        if member is not None:
            key = (req.group_id, member.member_id)
            if joined.result.member_id != member_id or key not in self._sessions:
                log.info(
                    "%s consumer group %s: member %s joins with the classic protocol",
                    self._label,
                    req.group_id,
                    member.member_id,
                )
            self._rejoins.pop(key, None)
            self._sessions[key] = now_ms + req.session_timeout_ms
            self._track_revocation(key, member, now_ms)
            if req.group_instance_id is not None:
                self._drop_replaced(req.group_id, work.group)
        return joined.result, self._finish(work, None)

    def classic_sync(
        self, req: SyncRequest, topics: Mapping[str, TopicInfo], now_ms: int
    ) -> tuple[SyncResult, ConsumerDecision]:
        group = self._tip.get(req.group_id)
        assert group is not None, "a SyncGroup to a consumer group that is not here"
        result = classic_sync(group, req, topics)
        self._after_classic(group, req.member_id, result.error, now_ms)
        return result, ConsumerDecision(req.group_id, after_write_id=self._last(req.group_id))

    def classic_heartbeat(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> tuple[ErrorCode, ConsumerDecision]:
        group = self._tip.get(group_id)
        assert group is not None, "a Heartbeat to a consumer group that is not here"
        error = classic_heartbeat(group, member_id, instance_id, generation_id)
        self._after_classic(group, member_id, error, now_ms)
        return error, ConsumerDecision(group_id, after_write_id=self._last(group_id))

    def _after_classic(
        self, group: ConsumerGroup, member_id: str, error: ErrorCode, now_ms: int
    ) -> None:
        """A SyncGroup or Heartbeat of a member using the classic protocol: its session
        goes on; told to rejoin, it must within its rebalance timeout."""
        member = group.members.get(member_id)
        if member is None or member.classic is None:
            return
        if error in (ErrorCode.none, ErrorCode.rebalance_in_progress):
            key = (group.group_id, member_id)
            self._sessions[key] = now_ms + member.classic.session_timeout_ms
            if error is ErrorCode.rebalance_in_progress and key not in self._rejoins:
                self._rejoins[key] = now_ms + max(member.rebalance_timeout_ms, 0)

    def classic_leave(
        self,
        group_id: str,
        leaving: Sequence[LeavingMember],
        topics: Mapping[str, TopicInfo],
        now_ms: int,
    ) -> tuple[list[ErrorCode], ConsumerDecision]:
        """A LeaveGroup to this consumer group: one error per member named."""
        current = self._tip.get(group_id)
        assert current is not None, "a LeaveGroup to a consumer group that is not here"
        work = Work(current.copy())
        config = self.config
        errors, gone, classic = classic_leave(
            work, leaving, topics, config.migration_policy, config.classic_max_size, now_ms
        )
        for member_id in gone:  # _finish logs each member that left
            self._forget_timers(group_id, member_id)
        return errors, self._finish(work, None, classic)

    # --- the shell reports ----------------------------------------------------------

    def durable(self, write_id: int) -> None:
        self._writes.durable(write_id)

    def failed(self, write_id: int) -> list[int]:
        """Drop the write and the later writes of its group; returns their ids."""
        return self._writes.failed(write_id)

    def _retry_removals(self, group: ConsumerGroup) -> None:
        """A failed write's group is as before it: a removal it held is tried again."""
        for member_id in group.members:
            self._sessions.setdefault((group.group_id, member_id), 0)

    def forget(self, group_ids: Iterable[str]) -> list[int]:
        """This coordinator no longer owns these groups: drop them and their writes."""
        gone = set(group_ids)
        dropped = self._writes.forget(gone)
        for key in [k for k in self._sessions if k[0] in gone]:
            self._forget_timers(*key)
        for key in [k for k in self._revocations.keys() | self._rejoins.keys() if k[0] in gone]:
            self._forget_timers(*key)
        return dropped

    # --- deleting and offsets -------------------------------------------------------

    def delete_group(self, group_id: str) -> tuple[ErrorCode, ConsumerDecision]:
        """DeleteGroups of a consumer group: only an empty one (NON_EMPTY_GROUP), by the
        tombstones of its records; GROUP_ID_NOT_FOUND when it is not a consumer group."""
        group = self._tip.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, ConsumerDecision(group_id)
        if group.members:
            return ErrorCode.non_empty_group, ConsumerDecision(group_id)
        work = Work(group.copy())
        for member_id in list(work.group.target):
            work.emit(TargetAssignmentKey(group_id, member_id), None)
        work.emit(TargetAssignmentEpochKey(group_id), None)
        work.emit(PartitionMetadataKey(group_id), None)
        work.emit(ConsumerGroupEpochKey(group_id), None)
        log.info("%s consumer group %s deleted", self._label, group_id)
        return ErrorCode.none, self._finish(work, None)

    def live_subscriptions(self) -> dict[str, frozenset[str]]:
        """The topics each consumer group with members subscribes to: their offsets do
        not expire (offsets.py: expire)."""
        return {
            group_id: frozenset(group.subscribed_topics) | group.subscribed_topic_names()
            for group_id, group in self._tip.items()
            if group.members
        }

    def check_offset_fetch(
        self, group_id: str, member_id: str | None, member_epoch: int
    ) -> ErrorCode | None:
        """OffsetFetch v9 by a member of a consumer group (committed state): its member id
        and current epoch, else UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH; without a member
        (null id, epoch -1: an admin) anything may be fetched. None: not a consumer group."""
        group = self.committed.get(group_id)
        if group is None:
            return None
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def check_offset_commit(
        self, group_id: str, member_id: str, member_epoch: int, api_version: int = 9
    ) -> ErrorCode | None:
        """KIP-848's rule for OffsetCommit to a consumer group; None: not a consumer group.
        A commit without a member (epoch < 0) is allowed only into an empty group; a
        member commits with OffsetCommit v9+ (TxnOffsetCommit: any version) and its
        current epoch; a member using the classic protocol with any version and its
        generation (ILLEGAL_GENERATION otherwise)."""
        group = self._tip.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member.classic is not None:  # a member using the classic protocol: its generation
            ok = member_epoch == member.member_epoch
            return ErrorCode.none if ok else ErrorCode.illegal_generation
        if api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none
