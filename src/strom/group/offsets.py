"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, expiry.

Decisions of the coordinator, like the membership code (`GroupCoordinator.decide`): they
validate, return errors and an `Output` with the `__consumer_offsets` records to write,
and change no offset themselves - a commit or a deletion takes effect when its records
are replayed, and is committed state once the shell reports them durable. OffsetFetch
reads the committed state only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.group.coordinator import GroupCoordinator, GroupRecord, Output
from strom.group.layers import GroupStore
from strom.group.records import (
    NO_EXPIRE_TIMESTAMP,
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
)
from strom.group.state import CONSUMER_PROTOCOL_TYPE, Group, GroupState, TopicPartition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_ms: int = -1
    """OffsetCommit v2-v4 only: -1 = the broker's offsets.retention.minutes."""
    offsets: tuple[OffsetToCommit, ...] = ()
    api_version: int = 9
    """The OffsetCommit version: a KIP-848 member must use v9+ (UNSUPPORTED_VERSION)."""


def commit(
    coordinator: GroupCoordinator, req: CommitRequest, now_ms: int
) -> tuple[list[ErrorCode], Output]:
    """One error per offset, in request order, and the output with the records to write."""
    errors: list[ErrorCode] = []

    def decision(out: Output) -> None:
        error = _check_commit(coordinator.store, req, now_ms)
        if error is not ErrorCode.none:
            errors.extend([error] * len(req.offsets))
            return
        max_bytes = coordinator.config.offset_metadata_max_bytes
        expire_ms = now_ms + req.retention_ms if req.retention_ms >= 0 else NO_EXPIRE_TIMESTAMP
        for each in req.offsets:
            metadata = each.metadata or ""
            if len(metadata.encode()) > max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            key = OffsetCommitKey(req.group_id, each.topic, each.partition)
            value = OffsetCommitValue(each.offset, each.leader_epoch, metadata, now_ms, expire_ms)
            out.records.append((key, value))
            errors.append(ErrorCode.none)

    out = coordinator.decide(now_ms, decision)
    return errors, out


def _check_commit(store: GroupStore, req: CommitRequest, now_ms: int) -> ErrorCode:
    if not req.group_id:
        return ErrorCode.invalid_group_id
    group = store.get(req.group_id)
    managed = req.generation_id >= 0 or req.member_id or req.group_instance_id is not None
    if group is None:
        if managed:
            return ErrorCode.illegal_generation
        # A consumer using assign() keeps offsets without any group protocol.
        store.put(Group(req.group_id, GroupState.EMPTY, now_ms))
        return ErrorCode.none
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if not managed:
        # Only an empty group takes commits from outside its membership (admin tools,
        # assign() consumers); Kafka answers the others as unknown members.
        return ErrorCode.none if group.state is GroupState.EMPTY else ErrorCode.unknown_member_id
    if group.is_static_fenced(req.group_instance_id, req.member_id):
        return ErrorCode.fenced_instance_id
    member = group.members.get(req.member_id)
    if member is None:
        return ErrorCode.unknown_member_id
    if req.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    if group.state is GroupState.COMPLETING_REBALANCE:
        return ErrorCode.rebalance_in_progress
    member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
    return ErrorCode.none


def fetch(
    coordinator: GroupCoordinator, group_id: str, partitions: Iterable[TopicPartition] | None
) -> list[tuple[TopicPartition, OffsetCommitValue | None]]:
    """Committed offsets of `partitions` (every committed one when None)."""
    group = coordinator.groups.get(group_id)
    offsets = group.offsets if group is not None else {}
    if partitions is None:
        return sorted(offsets.items(), key=lambda item: (item[0].topic, item[0].partition))
    return [(tp, offsets.get(tp)) for tp in partitions]


def delete_groups(
    coordinator: GroupCoordinator, group_ids: Sequence[str], now_ms: int
) -> tuple[list[ErrorCode], Output]:
    errors: list[ErrorCode] = []

    def decision(out: Output) -> None:
        store = coordinator.store
        for group_id in group_ids:
            group = store.get(group_id) if group_id else None
            if not group_id:
                errors.append(ErrorCode.invalid_group_id)
            elif group is None or group.state is GroupState.DEAD:
                errors.append(ErrorCode.group_id_not_found)
            elif group.state is not GroupState.EMPTY or group.members:
                errors.append(ErrorCode.non_empty_group)
            else:
                # Pending transactional offsets go too (Kafka's deleteAllOffsets).
                pending = [tp for tp in group.pending_offsets if tp not in group.offsets]
                out.records.extend(_tombstones(group, [*group.offsets, *pending]))
                out.records.append((GroupMetadataKey(group_id), None))
                group.transition(GroupState.DEAD, now_ms)
                store.drop(group_id)
                log.info("group %s deleted", group_id)
                errors.append(ErrorCode.none)

    out = coordinator.decide(now_ms, decision)
    return errors, out


def delete_offsets(
    coordinator: GroupCoordinator,
    group_id: str,
    partitions: Sequence[TopicPartition],
    now_ms: int,
) -> tuple[ErrorCode, list[ErrorCode], Output]:
    """OffsetDelete: a live consumer group keeps the offsets of topics it subscribes to."""
    result: list[tuple[ErrorCode, list[ErrorCode]]] = []

    def decision(out: Output) -> None:
        result.append(_delete_offsets(coordinator.store, group_id, partitions, out))

    out = coordinator.decide(now_ms, decision)
    return result[0][0], result[0][1], out


def _delete_offsets(
    store: GroupStore, group_id: str, partitions: Sequence[TopicPartition], out: Output
) -> tuple[ErrorCode, list[ErrorCode]]:
    group = store.get(group_id)
    if group is None or group.state is GroupState.DEAD:
        return ErrorCode.group_id_not_found, []
    if group.state is not GroupState.EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return ErrorCode.non_empty_group, []
    subscribed = group.subscribed_topics() if group.state is not GroupState.EMPTY else frozenset()
    errors: list[ErrorCode] = []
    deleted: list[TopicPartition] = []
    for tp in partitions:
        if subscribed is None or tp.topic in subscribed:
            errors.append(ErrorCode.group_subscribed_to_topic)
        else:
            errors.append(ErrorCode.none)
            deleted.append(tp)
    out.records.extend(_tombstones(group, deleted))
    return ErrorCode.none, errors


def expire(
    coordinator: GroupCoordinator,
    now_ms: int,
    live: Mapping[str, frozenset[str]] | None = None,
) -> Output:
    """Offsets past `offsets.retention.minutes`, and the empty groups left with none.

    An empty group's offsets expire together, counted from when it became empty; a
    group without a protocol (assign() users) counts from each commit; a live consumer
    group only loses offsets of topics it no longer subscribes to. An offset with
    pending transactional offsets stays until their markers, and so does its group.
    `live`: the KIP-848 groups with members and the topics they subscribe to (their
    offsets are kept here; their members are not).
    """
    live = live or {}
    return coordinator.decide(now_ms, lambda out: _expire(coordinator, now_ms, out, live))


def _expire(
    coordinator: GroupCoordinator, now_ms: int, out: Output, live: Mapping[str, frozenset[str]]
) -> None:
    retention_ms = coordinator.config.offsets_retention_ms
    store = coordinator.store
    for group in list(store.view()):
        base_ms: int | None
        keep: frozenset[str] | None
        if group.group_id in live:
            base_ms, keep = None, live[group.group_id]
        elif group.state is GroupState.EMPTY and group.protocol_type is not None:
            base_ms, keep = group.state_timestamp_ms, frozenset()
        elif group.state is GroupState.EMPTY:
            base_ms, keep = None, frozenset()
        else:
            base_ms, keep = None, group.subscribed_topics()
        if keep is None:
            continue
        expired = [  # an offset a transaction may still replace does not expire yet
            tp
            for tp, value in group.offsets.items()
            if tp.topic not in keep
            and tp not in group.pending_offsets
            and _expired(value, base_ms, retention_ms, now_ms)
        ]
        if expired:
            out.records.extend(_tombstones(group, expired))
            log.info("group %s: %d committed offset(s) expired", group.group_id, len(expired))
        left = len(group.offsets) - len(expired)
        if (
            group.state is GroupState.EMPTY
            and group.group_id not in live
            and not left
            and not group.pending_members
            and not group.pending_offsets
        ):
            out.records.append((GroupMetadataKey(group.group_id), None))
            mine = store.get(group.group_id)
            assert mine is not None
            mine.transition(GroupState.DEAD, now_ms)
            store.drop(group.group_id)
            log.info("group %s: empty with no offsets left; removed", group.group_id)


def _expired(value: OffsetCommitValue, base_ms: int | None, retention_ms: int, now_ms: int) -> bool:
    if value.expire_timestamp_ms != NO_EXPIRE_TIMESTAMP:
        return value.expire_timestamp_ms <= now_ms
    start_ms = value.commit_timestamp_ms if base_ms is None else base_ms
    return start_ms + retention_ms <= now_ms


def _tombstones(group: Group, partitions: Iterable[TopicPartition]) -> list[GroupRecord]:
    return [(OffsetCommitKey(group.group_id, tp.topic, tp.partition), None) for tp in partitions]
