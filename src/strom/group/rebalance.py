"""A classic group's rebalance: how a generation ends and the next one starts.

    (Stable | CompletingRebalance | Empty) --prepare_rebalance--> PreparingRebalance
    PreparingRebalance --complete_join--> CompletingRebalance (members remain) | Empty

`prepare_rebalance` starts one (after the initial delay when the group was empty);
`maybe_complete_join` ends the join phase once every member rejoined; `complete_join`
ends it anyway (timeout), dropping members that did not rejoin, and answers every waiting
JoinGroup. The group's state table is in `state.py`; `coordinator.py` calls this.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.group.records import GroupMetadataKey
from strom.group.requests import JoinRequest, Output
from strom.group.state import (
    Group,
    GroupConfig,
    GroupState,
    JoinedMember,
    JoinResult,
    Member,
    SyncResult,
)

__all__ = ["Rebalancer", "join_result", "new_member", "remove_member"]

log = logging.getLogger("strom.group.coordinator")  # one logger for the coordinator's lines


@dataclass(frozen=True, slots=True)
class Rebalancer:
    """The rebalance steps of one coordinator (its config; `label` prefixes log lines)."""

    config: GroupConfig
    label: str = ""

    def prepare_rebalance(self, group: Group, now_ms: int, out: Output, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
                out.reply(member.sync_token, SyncResult(ErrorCode.rebalance_in_progress))
                member.sync_token = None
        from_empty = group.state is GroupState.EMPTY
        group.transition(GroupState.PREPARING_REBALANCE, now_ms)
        timeout_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        delay_ms = min(self.config.initial_rebalance_delay_ms, timeout_ms)
        if from_empty and delay_ms > 0:
            group.initial_delay_deadline_ms = now_ms + delay_ms
            group.initial_delay_remaining_ms = timeout_ms - delay_ms
            group.new_member_during_delay = False
            group.rebalance_deadline_ms = None
        else:
            group.rebalance_deadline_ms = now_ms + timeout_ms
        log.info(
            "%sgroup %s: preparing rebalance from generation %d (%s)",
            self.label,
            group.group_id,
            group.generation_id,
            reason,
        )
        self.maybe_complete_join(group, now_ms, out)

    def maybe_complete_join(self, group: Group, now_ms: int, out: Output) -> None:
        if (
            group.state is GroupState.PREPARING_REBALANCE
            and group.initial_delay_deadline_ms is None
            and not group.pending_members
            and all(m.join_token is not None for m in group.members.values())
        ):
            self.complete_join(group, now_ms, out)

    def complete_join(self, group: Group, now_ms: int, out: Output) -> None:
        for member in list(group.members.values()):
            if member.join_token is None:
                log.info(
                    "%sgroup %s: member %s did not rejoin in time; removed",
                    self.label,
                    group.group_id,
                    member.member_id,
                )
                remove_member(group, member, out)
        group.rebalance_deadline_ms = None
        group.initial_delay_deadline_ms = None
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms)
            out.records.append((GroupMetadataKey(group.group_id), group.to_record()))
            log.info(
                "%sgroup %s: empty at generation %d",
                self.label,
                group.group_id,
                group.generation_id,
            )
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        for member in group.members.values():
            out.reply(member.join_token, join_result(group, member))
            member.join_token = None
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        log.info(
            "%sgroup %s: generation %d with %d member(s), protocol %s, leader %s",
            self.label,
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )

    def member_gone(self, group: Group, now_ms: int, out: Output, reason: str) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(group, now_ms, out, reason)
        else:
            self.maybe_complete_join(group, now_ms, out)


def join_result(group: Group, member: Member, *, skip_assignment: bool = False) -> JoinResult:
    is_leader = member.member_id == group.leader_id
    members = (
        tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
            for m in group.members.values()
        )
        if is_leader
        else ()
    )
    return JoinResult(
        ErrorCode.none,
        member_id=member.member_id,
        generation_id=group.generation_id,
        protocol_type=group.protocol_type,
        protocol_name=group.protocol_name,
        leader_id=group.leader_id or "",
        members=members,
        skip_assignment=skip_assignment,
    )


def remove_member(
    group: Group,
    member: Member,
    out: Output,
    error: ErrorCode = ErrorCode.unknown_member_id,
) -> None:
    out.reply(member.join_token, JoinResult(error, member.member_id))
    out.reply(member.sync_token, SyncResult(error))
    del group.members[member.member_id]
    instance_id = member.group_instance_id
    if instance_id is not None and group.static_members.get(instance_id) == member.member_id:
        del group.static_members[instance_id]
    if group.leader_id == member.member_id:
        group.leader_id = next(iter(group.members), None)


def new_member(member_id: str, req: JoinRequest, now_ms: int) -> Member:
    return Member(
        member_id=member_id,
        group_instance_id=req.group_instance_id,
        client_id=req.client_id,
        client_host=req.client_host,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        session_timeout_ms=req.session_timeout_ms,
        protocol_type=req.protocol_type,
        protocols=req.protocols,
        heartbeat_deadline_ms=now_ms + req.session_timeout_ms,
    )
