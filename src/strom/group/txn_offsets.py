"""Transactional offsets: TxnOffsetCommit, the markers that end it, and OffsetFetch with
require_stable (Kafka's OffsetMetadataManager: commitTransactionalOffset,
replayEndTransactionMarker, fetchOffsets).

A TxnOffsetCommit is a decision like an OffsetCommit (`GroupCoordinator.decide`), except
that its records are written as one transactional batch of the request's producer id
and epoch (`Output.producer_id`): replayed, they become the group's pending offsets of
that producer (`Group.pending_offsets`), invisible to OffsetFetch. The producer's COMMIT
marker on the group's `__consumer_offsets` partition turns them into committed offsets,
its ABORT marker drops them (`end_transaction`, once the marker is durable; at load, as
the marker is read). OffsetFetch v7+ with require_stable answers UNSTABLE_OFFSET_COMMIT
for a partition with pending offsets (`stable_fetch`); without it (and before v7) the
committed offset is answered as if no transaction were open.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from strom.group.coordinator import GroupCoordinator, Output
from strom.group.layers import GroupStore
from strom.group.offsets import OffsetToCommit
from strom.group.records import NO_EXPIRE_TIMESTAMP, OffsetCommitKey, OffsetCommitValue
from strom.group.state import Group, GroupState, TopicPartition

__all__ = ["StableOffsets", "TxnCommitRequest", "end_transaction", "stable_fetch", "txn_commit"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    group_id: str
    producer_id: int
    producer_epoch: int
    transactional_id: str = ""
    generation_id: int = -1
    """TxnOffsetCommit v3+ (with `member_id` and `group_instance_id`); -1 before."""
    member_id: str = ""
    group_instance_id: str | None = None
    offsets: tuple[OffsetToCommit, ...] = ()


def txn_commit(
    coordinator: GroupCoordinator, req: TxnCommitRequest, now_ms: int
) -> tuple[list[ErrorCode], Output]:
    """One error per offset, in request order, and the output whose records the shell
    writes as one transactional batch of `req.producer_id` and `req.producer_epoch`."""
    errors: list[ErrorCode] = []

    def decision(out: Output) -> None:
        out.producer_id, out.producer_epoch = req.producer_id, req.producer_epoch
        error = _check(coordinator.store, req, now_ms)
        if error is not ErrorCode.none:
            errors.extend([error] * len(req.offsets))
            return
        max_bytes = coordinator.config.offset_metadata_max_bytes
        for each in req.offsets:
            metadata = each.metadata or ""
            if len(metadata.encode()) > max_bytes:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            key = OffsetCommitKey(req.group_id, each.topic, each.partition)
            # A transactional offset never carries a retention of its own.
            value = OffsetCommitValue(
                each.offset, each.leader_epoch, metadata, now_ms, NO_EXPIRE_TIMESTAMP
            )
            out.records.append((key, value))
            errors.append(ErrorCode.none)

    out = coordinator.decide(now_ms, decision)
    return errors, out


def _check(store: GroupStore, req: TxnCommitRequest, now_ms: int) -> ErrorCode:
    """Kafka's validateTransactionalOffsetCommit with ClassicGroup.validateOffsetCommit
    (isTransactional): unlike a plain commit, a commit without member id and generation
    is taken whatever the group's state, a rebalance in progress is no error, and the
    member's session is not extended."""
    if not req.group_id:
        return ErrorCode.invalid_group_id
    group = store.get(req.group_id)
    if group is None:
        if req.generation_id >= 0:
            return ErrorCode.illegal_generation  # v0-v5; v6 answers GROUP_ID_NOT_FOUND
        store.put(Group(req.group_id, GroupState.EMPTY, now_ms))  # a "simple" group
        return ErrorCode.none
    if group.state is GroupState.DEAD:
        return ErrorCode.coordinator_not_available
    if req.generation_id < 0 and group.state is GroupState.EMPTY:
        return ErrorCode.none
    if req.generation_id < 0 and not req.member_id and req.group_instance_id is None:
        return ErrorCode.none  # the older versions carry no member id nor generation
    instance_id = req.group_instance_id
    if instance_id is not None:
        holder = group.static_members.get(instance_id)
        if holder is None:
            return ErrorCode.unknown_member_id
        if holder != req.member_id:
            log.info(
                "group %s: fenced %s: instance %s now belongs to %s (txn offset commit)",
                group.group_id,
                req.member_id,
                instance_id,
                holder,
            )
            return ErrorCode.fenced_instance_id
    if req.member_id not in group.members:
        return ErrorCode.unknown_member_id
    if req.generation_id != group.generation_id:
        return ErrorCode.illegal_generation
    return ErrorCode.none


def end_transaction(
    coordinator: GroupCoordinator,
    producer_id: int,
    *,
    commit: bool,
    belongs: Callable[[str], bool],
) -> list[str]:
    """The COMMIT (or ABORT) marker of `producer_id` is durable, or read at load, on the
    `__consumer_offsets` partition of the groups `belongs` selects: their pending
    offsets of that producer become committed offsets (or are dropped). Returns the
    groups that had some; a producer with nothing pending changes nothing, so a second
    marker (a retried WriteTxnMarkers) is harmless."""
    ended = coordinator.store.end_transaction(producer_id, commit=commit, belongs=belongs)
    if ended:
        log.info(
            "producer %d: transactional offsets of group(s) %s %s",
            producer_id,
            ", ".join(ended),
            "committed" if commit else "aborted",
        )
    return ended


@dataclass(frozen=True, slots=True)
class StableOffsets:
    """OffsetFetch with require_stable: the committed offsets, and the partitions among
    them that are UNSTABLE_OFFSET_COMMIT (a transaction's offset awaits its marker)."""

    offsets: list[tuple[TopicPartition, OffsetCommitValue | None]]
    unstable: frozenset[TopicPartition]


def stable_fetch(
    coordinator: GroupCoordinator,
    group_id: str,
    partitions: Iterable[TopicPartition] | None,
    now_ms: int,
) -> tuple[StableOffsets, Output]:
    """Kafka answers require_stable from its newest state, as a write without records
    that completes after the writes before it: here a decision without records, on the
    newest version of the group, to be answered once `durable` promotes it (and failed
    with the writes it was decided on). `partitions` None: every committed offset."""
    found: list[StableOffsets] = []

    def decision(_out: Output) -> None:
        group = coordinator.store.get(group_id)  # joins the group's pending writes
        offsets = group.offsets if group is not None else {}
        pending = group.pending_offsets if group is not None else {}
        if partitions is None:
            wanted = sorted(offsets, key=lambda tp: (tp.topic, tp.partition))
        else:
            wanted = list(partitions)
        unstable = frozenset(tp for tp in wanted if tp in pending)
        listed = [(tp, None if tp in unstable else offsets.get(tp)) for tp in wanted]
        found.append(StableOffsets(listed, unstable))

    out = coordinator.decide(now_ms, decision)
    return found[0], out
