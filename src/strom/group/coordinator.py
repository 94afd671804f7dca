"""The classic group protocol as a pure state machine: JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, the timers behind them, and a rebalance forced by the broker (`rebalance`).

Requests come in with the shell's reply token and `now_ms`; every decision returns an
`Output`: replies for waiting requests (a JoinGroup waits until the rebalance ends, a
SyncGroup until the leader sent the assignment), `__consumer_offsets` records to write
and a write id. A decision reads the committed groups plus the pending writes and
changes only its own copies of the groups (`layers.py`); the shell writes the records
and reports `durable(write_id)` (the copies become the committed groups, the replies
may go out) or `failed(write_id)` (the copies are discarded, with every later decision
made on them). `groups` is the committed state. `tick(now_ms)` fires session, join and
rebalance timeouts through the same path; `next_deadline_ms()` says when to call it
next. Offsets are in `offsets.py`; the state table in `state.py`; the steps of a
rebalance in `rebalance.py`; the request and output values in `requests.py`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from random import Random

from kio.schema.errors import ErrorCode

from strom.group.layers import Discarded, GroupStore
from strom.group.rebalance import Rebalancer, join_result, new_member, remove_member
from strom.group.records import GroupMetadataKey, Key, Value
from strom.group.replay import replay
from strom.group.requests import (
    GroupRecord,
    JoinRequest,
    LeavingMember,
    Output,
    RebalanceResult,
    Reply,
    SyncRequest,
)
from strom.group.state import Group, GroupConfig, GroupState, JoinResult, Member, SyncResult, Token

__all__ = [
    "Discarded",
    "GroupCoordinator",
    "GroupRecord",
    "JoinRequest",
    "LeavingMember",
    "Output",
    "RebalanceResult",
    "Reply",
    "SyncRequest",
]

log = logging.getLogger(__name__)


class GroupCoordinator:
    """Every classic group this broker coordinates: membership, generations, timers.

    One owner calls it; nothing here blocks, sleeps or reads a clock.
    """

    def __init__(self, config: GroupConfig, rng: Random, *, label: str = "") -> None:
        self.config = config
        self.store = GroupStore()
        self._rng = rng
        self._label = label
        self._rebalance = Rebalancer(config, label)

    @property
    def rebalancer(self) -> Rebalancer:
        return self._rebalance

    @property
    def groups(self) -> dict[str, Group]:
        """The committed groups: what durable records say (read them, never change them)."""
        return self.store.committed

    # ------------------------------------------------------------ decisions and writes

    def decide(self, now_ms: int, decision: Callable[[Output], None]) -> Output:
        """Run one decision on copies of the groups it touches (`self.store.get`) and
        push it as a pending write; its `write_id` goes back to `durable` or `failed`."""
        out = Output()
        self.store.begin()
        try:
            decision(out)
        except BaseException:
            self.store.abort()
            raise
        out.write_id = self.store.finish(
            out.records, (t for t, _ in out.replies), now_ms, out.producer_id
        )
        return out

    def durable(self, write_id: int) -> list[int]:
        """The write's records are durable: returns the writes whose state is committed
        now (and whose replies may go out), oldest first."""
        return self.store.durable(write_id)

    def failed(self, write_id: int) -> Discarded:
        """The write failed: the state is as before it, and before every later decision
        made on it; returns those writes and the waiting requests nobody will answer."""
        return self.store.failed(write_id)

    def forget(self, group_ids: Iterable[str]) -> Discarded:
        """Drop groups (their partition moved away), committed and pending."""
        return self.store.forget(group_ids)

    def load(self, key: Key, value: Value | None, now_ms: int, producer_id: int = -1) -> None:
        """Replay one record read from `__consumer_offsets` into the committed state
        (`producer_id`: that of its batch, when the batch is transactional)."""
        replay(self.store.committed, key, value, now_ms, loading=True, producer_id=producer_id)

    # ---------------------------------------------------------------------- JoinGroup

    def join(self, req: JoinRequest, token: Token, now_ms: int) -> Output:
        return self.decide(now_ms, lambda out: self._join(req, token, now_ms, out))

    def _join(self, req: JoinRequest, token: Token, now_ms: int, out: Output) -> None:
        error = self.check_join(req)
        if error is not ErrorCode.none:
            out.reply(token, JoinResult(error, member_id=req.member_id))
            return
        group = self.store.get(req.group_id)
        if group is None:
            if req.member_id:
                out.reply(token, JoinResult(ErrorCode.unknown_member_id, req.member_id))
                return
            group = Group(req.group_id, GroupState.EMPTY, now_ms)
            self.store.put(group)
        if group.state is GroupState.DEAD:
            out.reply(token, JoinResult(ErrorCode.coordinator_not_available, req.member_id))
        elif not group.accepts(req.protocol_type, req.protocols):
            out.reply(token, JoinResult(ErrorCode.inconsistent_group_protocol, req.member_id))
        elif not req.member_id:
            self._join_new(group, req, token, now_ms, out)
        else:
            self._join_known(group, req, token, now_ms, out)

    def check_join(self, req: JoinRequest) -> ErrorCode:
        """Kafka's GroupCoordinatorService.joinGroup checks, made whatever the group's
        type: the group id, and the session timeout within the broker's bounds."""
        if not req.group_id:
            return ErrorCode.invalid_group_id
        config = self.config
        if not (
            config.min_session_timeout_ms <= req.session_timeout_ms <= config.max_session_timeout_ms
        ):
            return ErrorCode.invalid_session_timeout
        return ErrorCode.none

    def _join_new(
        self, group: Group, req: JoinRequest, token: Token, now_ms: int, out: Output
    ) -> None:
        if len(group.members) + len(group.pending_members) >= self.config.max_group_size:
            out.reply(token, JoinResult(ErrorCode.group_max_size_reached))
            return
        member_id = self._new_member_id(req.group_instance_id or req.client_id)
        instance_id = req.group_instance_id
        if instance_id is not None and group.static_members.get(instance_id) in group.members:
            self._replace_static_member(group, member_id, req, token, now_ms, out)
        elif instance_id is None and req.require_known_member_id:
            group.pending_members[member_id] = now_ms + req.session_timeout_ms
            out.reply(token, JoinResult(ErrorCode.member_id_required, member_id))
        else:
            self._add_member(group, member_id, req, token, now_ms, out)

    def _join_known(
        self, group: Group, req: JoinRequest, token: Token, now_ms: int, out: Output
    ) -> None:
        member_id = req.member_id
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._add_member(group, member_id, req, token, now_ms, out)
            return
        if group.is_static_fenced(req.group_instance_id, member_id):
            self._log_fenced(group, req.group_instance_id, member_id)
            out.reply(token, JoinResult(ErrorCode.fenced_instance_id, member_id))
            return
        member = group.members.get(member_id)
        if member is None:
            out.reply(token, JoinResult(ErrorCode.unknown_member_id, member_id))
            return
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        unchanged = member.protocols == req.protocols
        if group.state is GroupState.PREPARING_REBALANCE:
            self._update_member(member, req, token, out)
            self._rebalance.maybe_complete_join(group, now_ms, out)
        elif group.state is GroupState.COMPLETING_REBALANCE and unchanged:
            # It missed the JoinGroup answer of this generation: give it again.
            out.reply(token, join_result(group, member))
        elif group.state is GroupState.STABLE and unchanged and member_id != group.leader_id:
            out.reply(token, join_result(group, member))
        else:
            self._update_member(member, req, token, out)
            self._rebalance.prepare_rebalance(group, now_ms, out, f"member {member_id} rejoined")

    def _add_member(
        self,
        group: Group,
        member_id: str,
        req: JoinRequest,
        token: Token,
        now_ms: int,
        out: Output,
    ) -> None:
        member = new_member(member_id, req, now_ms)
        member.join_token = token
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.group_instance_id is not None:
            group.static_members[req.group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        if group.initial_delay_deadline_ms is not None:
            group.new_member_during_delay = True
        if group.state is GroupState.PREPARING_REBALANCE:
            self._rebalance.maybe_complete_join(group, now_ms, out)
        else:
            self._rebalance.prepare_rebalance(group, now_ms, out, f"member {member_id} joined")

    def _update_member(self, member: Member, req: JoinRequest, token: Token, out: Output) -> None:
        if member.join_token is not None:
            out.reply(member.join_token, JoinResult(ErrorCode.rebalance_in_progress))
        member.protocols = req.protocols
        member.rebalance_timeout_ms = req.rebalance_timeout_ms
        member.session_timeout_ms = req.session_timeout_ms
        member.join_token = token

    def _replace_static_member(
        self,
        group: Group,
        new_id: str,
        req: JoinRequest,
        token: Token,
        now_ms: int,
        out: Output,
    ) -> None:
        """A static member restarted: it takes over its old id's place and assignment."""
        instance_id = req.group_instance_id
        assert instance_id is not None
        old = group.members.pop(group.static_members[instance_id])
        fenced = ErrorCode.fenced_instance_id
        out.reply(old.join_token, JoinResult(fenced, old.member_id))
        out.reply(old.sync_token, SyncResult(fenced))
        chosen = group.protocol_name
        unchanged = chosen in dict(req.protocols) and dict(req.protocols)[
            chosen
        ] == old.metadata_for(chosen)
        member = new_member(new_id, req, now_ms)
        member.assignment = old.assignment
        group.members[new_id] = member
        group.static_members[instance_id] = new_id
        if group.leader_id == old.member_id:
            group.leader_id = new_id
        log.info(
            "%sgroup %s: static member %s restarted as %s",
            self._label,
            group.group_id,
            instance_id,
            new_id,
        )
        if group.state is GroupState.STABLE and unchanged:
            # No rebalance: the member gets the current generation and, at SyncGroup,
            # its old assignment. A returning leader must not compute a new one.
            is_leader = new_id == group.leader_id
            out.reply(token, join_result(group, member, skip_assignment=is_leader))
            out.records.append((GroupMetadataKey(group.group_id), group.to_record()))
        else:
            member.join_token = token
            if group.state is GroupState.PREPARING_REBALANCE:
                self._rebalance.maybe_complete_join(group, now_ms, out)
            else:
                self._rebalance.prepare_rebalance(
                    group, now_ms, out, f"static member {instance_id} changed"
                )

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{uuid.UUID(int=self._rng.getrandbits(128), version=4)}"

    # ---------------------------------------------------------------------- SyncGroup

    def sync(self, req: SyncRequest, token: Token, now_ms: int) -> Output:
        return self.decide(now_ms, lambda out: self._sync(req, token, now_ms, out))

    def _sync(self, req: SyncRequest, token: Token, now_ms: int, out: Output) -> None:
        group = self.store.get(req.group_id)
        member = group.members.get(req.member_id) if group is not None else None
        if group is not None and group.state is GroupState.DEAD:
            error = ErrorCode.coordinator_not_available
        elif group is not None and group.is_static_fenced(req.group_instance_id, req.member_id):
            self._log_fenced(group, req.group_instance_id, req.member_id)
            error = ErrorCode.fenced_instance_id
        elif group is None or member is None:
            error = ErrorCode.unknown_member_id
        elif req.generation_id != group.generation_id:
            error = ErrorCode.illegal_generation
        elif (req.protocol_type is not None and req.protocol_type != group.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != group.protocol_name
        ):
            error = ErrorCode.inconsistent_group_protocol
        elif group.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        else:
            error = ErrorCode.none
        if error is not ErrorCode.none or group is None or member is None:
            out.reply(token, SyncResult(error))
            return
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.STABLE:
            out.reply(token, self._sync_result(group, member))
            return
        # CompletingRebalance: wait for the leader's assignment.
        if member.sync_token is not None:
            out.reply(member.sync_token, SyncResult(ErrorCode.rebalance_in_progress))
        member.sync_token = token
        if member.member_id == group.leader_id:
            assignments = dict(req.assignments)
            for each in group.members.values():
                each.assignment = assignments.get(each.member_id, b"")
            group.transition(GroupState.STABLE, now_ms)
            out.records.append((GroupMetadataKey(group.group_id), group.to_record()))
            for each in group.members.values():
                out.reply(each.sync_token, self._sync_result(group, each))
                each.sync_token = None
            log.info(
                "%sgroup %s: stable at generation %d",
                self._label,
                group.group_id,
                group.generation_id,
            )

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(
            ErrorCode.none, group.protocol_type, group.protocol_name, member.assignment
        )

    # ---------------------------------------------------------------------- Heartbeat

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> tuple[ErrorCode, Output]:
        """The error to answer with once the output's write id is durable."""
        errors: list[ErrorCode] = []

        def decision(_out: Output) -> None:
            errors.append(
                self._heartbeat(group_id, member_id, group_instance_id, generation_id, now_ms)
            )

        out = self.decide(now_ms, decision)
        return errors[0], out

    def _heartbeat(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        now_ms: int,
    ) -> ErrorCode:
        group = self.store.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if group.is_static_fenced(group_instance_id, member_id):
            self._log_fenced(group, group_instance_id, member_id)
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # --------------------------------------------------------------------- LeaveGroup

    def leave(
        self, group_id: str, leaving: Sequence[LeavingMember], now_ms: int
    ) -> tuple[ErrorCode, list[ErrorCode], Output]:
        """Returns the group-level error, one error per leaving member, and the output."""
        result: list[tuple[ErrorCode, list[ErrorCode]]] = []

        def decision(out: Output) -> None:
            result.append(self._leave(group_id, leaving, now_ms, out))

        out = self.decide(now_ms, decision)
        return result[0][0], result[0][1], out

    def _leave(
        self, group_id: str, leaving: Sequence[LeavingMember], now_ms: int, out: Output
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        group = self.store.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id] * len(leaving)
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available, []
        errors: list[ErrorCode] = []
        removed: list[str] = []
        for each in leaving:
            member_id = each.member_id
            if member_id and member_id in group.pending_members:
                del group.pending_members[member_id]
                errors.append(ErrorCode.none)
                continue
            instance_id = each.group_instance_id
            if member_id and group.is_static_fenced(instance_id, member_id):
                self._log_fenced(group, instance_id, member_id)
                errors.append(ErrorCode.fenced_instance_id)
                continue
            if instance_id is not None:
                member_id = group.static_members.get(instance_id, member_id)
            member = group.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.unknown_member_id)
                continue
            remove_member(group, member, out)
            removed.append(member_id)
            errors.append(ErrorCode.none)
        if removed:
            log.info(
                "%sgroup %s: member(s) %s left",
                self._label,
                group_id,
                ", ".join(removed),
            )
            self._rebalance.member_gone(group, now_ms, out, f"{len(removed)} member(s) left")
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._rebalance.maybe_complete_join(group, now_ms, out)
        return ErrorCode.none, errors

    # ------------------------------------------------------------- forced rebalance

    def rebalance(self, group_id: str, now_ms: int, reason: str) -> tuple[RebalanceResult, Output]:
        """Start a rebalance of a Stable or CompletingRebalance group with the same members,
        as a membership change would (Kafka's GroupCoordinator.prepareRebalance): their
        heartbeats get REBALANCE_IN_PROGRESS, they rejoin, the next generation is formed
        and its leader assigns anew. Any other group is left as it is (RebalanceResult)."""
        result: list[RebalanceResult] = []

        def decision(out: Output) -> None:
            seen = self.store.peek(group_id)  # copied (`get`) only when it changes
            state = None if seen is None else seen.state
            if state is None or state is GroupState.DEAD:
                result.append(RebalanceResult(ErrorCode.group_id_not_found, state=state))
            elif state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                group = self.store.get(group_id)
                assert group is not None
                self._rebalance.prepare_rebalance(group, now_ms, out, f"requested: {reason}")
                result.append(RebalanceResult(ErrorCode.none, started=True, state=state))
            else:  # Empty: nobody to rebalance; PreparingRebalance: one is under way
                result.append(RebalanceResult(ErrorCode.none, state=state))

        out = self.decide(now_ms, decision)
        return result[0], out

    # ------------------------------------------------------------------------ timers

    def tick(self, now_ms: int) -> Output:
        def decision(out: Output) -> None:
            for group_id in self.store.group_ids():
                seen = self.store.peek(group_id)
                if seen is not None and self._due(seen, now_ms):
                    group = self.store.get(group_id)
                    assert group is not None
                    self._tick_group(group, now_ms, out)

        return self.decide(now_ms, decision)

    @staticmethod
    def _due(group: Group, now_ms: int) -> bool:
        """Whether `_tick_group` has anything to do for the group (only then is it copied)."""
        delay = group.initial_delay_deadline_ms
        rebalance = group.rebalance_deadline_ms
        return (
            any(deadline <= now_ms for deadline in group.pending_members.values())
            or any(
                not m.is_waiting and m.heartbeat_deadline_ms <= now_ms
                for m in group.members.values()
            )
            or (delay is not None and delay <= now_ms)
            or (rebalance is not None and rebalance <= now_ms)
            or _never_formed(group)
        )

    def _tick_group(self, group: Group, now_ms: int, out: Output) -> None:
        expired_pending = [m for m, d in group.pending_members.items() if d <= now_ms]
        for member_id in expired_pending:
            del group.pending_members[member_id]
        if expired_pending and group.state is GroupState.PREPARING_REBALANCE:
            self._rebalance.maybe_complete_join(group, now_ms, out)
        expired = [
            m
            for m in group.members.values()
            if not m.is_waiting and m.heartbeat_deadline_ms <= now_ms
        ]
        for member in expired:
            log.info(
                "%sgroup %s: member %s missed its session timeout (%d ms); removed",
                self._label,
                group.group_id,
                member.member_id,
                member.session_timeout_ms,
            )
            remove_member(group, member, out)
        if expired:
            self._rebalance.member_gone(group, now_ms, out, f"{len(expired)} member(s) expired")
        delay_deadline = group.initial_delay_deadline_ms
        if delay_deadline is not None and delay_deadline <= now_ms:
            remaining = group.initial_delay_remaining_ms
            if group.new_member_during_delay and remaining > 0:
                step = min(self.config.initial_rebalance_delay_ms, remaining)
                group.initial_delay_deadline_ms = now_ms + step
                group.initial_delay_remaining_ms = remaining - step
                group.new_member_during_delay = False
            else:
                self._rebalance.complete_join(group, now_ms, out)
        deadline = group.rebalance_deadline_ms
        if (
            deadline is not None
            and deadline <= now_ms
            and group.state is GroupState.PREPARING_REBALANCE
        ):
            self._rebalance.complete_join(group, now_ms, out)
        if _never_formed(group):
            # A group that never formed (its only joiner went away): forget it.
            self.store.drop(group.group_id)

    def next_deadline_ms(self) -> int | None:
        """The earliest time `tick` has something to do; None when nothing is pending."""
        deadlines: list[int] = []
        for group in self.store.view():
            if group.rebalance_deadline_ms is not None:
                deadlines.append(group.rebalance_deadline_ms)
            if group.initial_delay_deadline_ms is not None:
                deadlines.append(group.initial_delay_deadline_ms)
            deadlines += group.pending_members.values()
            deadlines += (
                m.heartbeat_deadline_ms for m in group.members.values() if not m.is_waiting
            )
        return min(deadlines, default=None)

    def _log_fenced(self, group: Group, instance_id: str | None, member_id: str) -> None:
        log.info(
            "%sgroup %s: fenced %s: instance %s now belongs to %s",
            self._label,
            group.group_id,
            member_id,
            instance_id,
            group.static_members.get(instance_id or ""),
        )


def _never_formed(group: Group) -> bool:
    return (
        group.state is GroupState.EMPTY
        and group.generation_id == 0
        and not group.members
        and not group.pending_members
        and not group.offsets
        and not group.pending_offsets
    )
