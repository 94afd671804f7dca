"""AlterPartition (API 56): a partition's leader asks the controller to change its ISR.

    alter_partitions(image, broker_id=, broker_epoch=, changes=, is_live=)
        -> (records, AlterPartitionResult)           one request, one decision
    alter_partition(image, broker_id=, ..., partition=, new_isr=, is_live=)
        -> (records, PartitionIsrResult)             one partition

The leader shrinks the ISR when a follower falls behind and expands it when one has
caught up; only the controller writes the change, so the metadata stays the one record
of who is in sync. The checks are Kafka's controller's (ReplicationControlManager's
alterPartition and validateAlterPartitionData in apache/kafka), in Kafka's order:

1. The requesting broker is registered with this broker epoch; otherwise the whole
   request is refused with STALE_BROKER_EPOCH.
2. The topic id is known (else UNKNOWN_TOPIC_ID) and so is the partition (else
   UNKNOWN_TOPIC_OR_PARTITION).
3. A leader epoch or partition epoch *newer* than the controller's: NOT_CONTROLLER. The
   leader has seen metadata this controller has not, so this node is most likely no
   longer the active controller; the leader looks for the new one and retries.
4. An older leader epoch: FENCED_LEADER_EPOCH (the requester was deposed).
5. The requester is not the partition's leader: INVALID_REQUEST.
6. An older partition epoch: INVALID_UPDATE_VERSION. The ISR moved since the leader
   based its change on it (a fence, a reassignment, an earlier change): of two changes
   based on the same partition epoch only the first can succeed.
7. The new ISR repeats a broker, names a broker that is not a replica, or lacks the
   leader: INVALID_REQUEST.
8. A member of the new ISR is not registered, is fenced (not live), or (v3) comes with a
   broker epoch other than -1 that is not its current one, i.e. it caught up in an
   earlier life: INELIGIBLE_REPLICA.

A valid change writes one PartitionChangeRecord: the ISR as given, partition epoch + 1,
leader epoch unchanged. An ISR equal to the current one writes nothing. Either way the
answer carries the leader, leader epoch, ISR and partition epoch after the change. If
the new ISR completes a pending reassignment (every target replica in sync, see
reassignments.py) the same record completes it, which bumps the leader epoch when
replicas leave; if that takes leadership from the requester (it was being removed), the
answer is NEW_LEADER_ELECTED, as in Kafka: the change is made, and the old leader learns
its successor from the metadata (the answer carries the new state as well).

Partitions of one request are decided in order, each seeing the changes before it. Not
modelled: leader_recovery_state (strom does not track recovery from an unclean
election; requests' values are ignored and answers carry 0) and eligible leader replicas.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from strom.metadata.elections import Liveness, PartitionState, partition_change
from strom.metadata.image import NO_LEADER, MetadataImage, PartitionImage
from strom.metadata.records import MetadataRecord
from strom.metadata.refused import Refused


@dataclass(frozen=True, slots=True)
class IsrMember:
    broker_id: int
    broker_epoch: int = -1
    """The epoch the member caught up in (AlterPartition v3); -1: not checked (v2)."""


@dataclass(frozen=True, slots=True)
class IsrChange:
    """One partition of an AlterPartition request."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[IsrMember, ...]


@dataclass(frozen=True, slots=True)
class PartitionIsrResult:
    topic_id: uuid.UUID
    partition: int
    error_code: ErrorCode
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1
    message: str | None = None
    changed: bool = False
    """Whether the decision wrote a record for this partition."""
    completed_reassignment: bool = False


@dataclass(frozen=True, slots=True)
class AlterPartitionResult:
    error_code: ErrorCode
    partitions: tuple[PartitionIsrResult, ...] = ()
    message: str | None = None


def members(new_isr: Sequence[int | IsrMember]) -> tuple[IsrMember, ...]:
    """ISR members as given by AlterPartition v2 (ids) or v3 (id and broker epoch)."""
    return tuple(m if isinstance(m, IsrMember) else IsrMember(m) for m in new_isr)


def alter_partitions(
    image: MetadataImage,
    *,
    broker_id: int,
    broker_epoch: int,
    changes: Sequence[IsrChange],
    is_live: Liveness,
) -> tuple[list[MetadataRecord], AlterPartitionResult]:
    """Decide one AlterPartition request from `broker_id` (see the module docstring)."""
    broker = image.brokers.get(broker_id)
    if broker is None or broker.epoch != broker_epoch:
        current = "is not registered" if broker is None else f"has epoch {broker.epoch}"
        return [], AlterPartitionResult(
            ErrorCode.stale_broker_epoch,
            message=f"broker {broker_id} sent broker epoch {broker_epoch}, but it {current}",
        )
    records: list[MetadataRecord] = []
    results: list[PartitionIsrResult] = []
    decided: dict[tuple[uuid.UUID, int], PartitionImage] = {}
    for change in changes:
        key = (change.topic_id, change.partition)
        try:
            old = decided.get(key)
            if old is None:
                old = _partition(image, change)
            result, new = _decide(image, broker_id, change, old, is_live)
        except Refused as refused:
            results.append(
                PartitionIsrResult(
                    change.topic_id, change.partition, refused.code, message=refused.message
                )
            )
            continue
        if new is not None:
            records.append(new[0])
            decided[key] = new[1]
        results.append(result)
    return records, AlterPartitionResult(ErrorCode.none, tuple(results))


def alter_partition(
    image: MetadataImage,
    *,
    broker_id: int,
    broker_epoch: int,
    topic_id: uuid.UUID,
    partition: int,
    leader_epoch: int,
    partition_epoch: int,
    new_isr: Sequence[int | IsrMember],
    is_live: Liveness,
) -> tuple[list[MetadataRecord], PartitionIsrResult]:
    """One partition's AlterPartition; a stale broker epoch is this result's error."""
    change = IsrChange(topic_id, partition, leader_epoch, partition_epoch, members(new_isr))
    records, result = alter_partitions(
        image, broker_id=broker_id, broker_epoch=broker_epoch, changes=[change], is_live=is_live
    )
    if result.error_code != ErrorCode.none:
        return [], PartitionIsrResult(
            topic_id, partition, result.error_code, message=result.message
        )
    return records, result.partitions[0]


def _partition(image: MetadataImage, change: IsrChange) -> PartitionImage:
    topic = image.topics_by_id.get(change.topic_id)
    if topic is None:
        raise Refused(ErrorCode.unknown_topic_id, f"no topic has id {change.topic_id}")
    found = topic.partitions.get(change.partition)
    if found is None:
        raise Refused(
            ErrorCode.unknown_topic_or_partition,
            f"topic {topic.name!r} has no partition {change.partition}",
        )
    return found


def _decide(
    image: MetadataImage,
    broker_id: int,
    change: IsrChange,
    old: PartitionImage,
    is_live: Liveness,
) -> tuple[PartitionIsrResult, tuple[MetadataRecord, PartitionImage] | None]:
    _check(image, broker_id, change, old, is_live)
    isr = tuple(m.broker_id for m in change.new_isr)
    state = replace(PartitionState.of(old), isr=isr)
    record = partition_change(change.topic_id, old, state, is_live)
    new = old if record is None else old.changed(record)
    moved = new.leader != broker_id  # only a completed reassignment moves it
    result = PartitionIsrResult(
        change.topic_id,
        change.partition,
        ErrorCode.new_leader_elected if moved else ErrorCode.none,
        new.leader,
        new.leader_epoch,
        new.isr,
        new.partition_epoch,
        message=f"completing its reassignment moved leadership to {new.leader}" if moved else None,
        changed=record is not None,
        completed_reassignment=old.reassigning and not new.reassigning,
    )
    return result, None if record is None else (record, new)


def _check(
    image: MetadataImage,
    broker_id: int,
    change: IsrChange,
    old: PartitionImage,
    is_live: Liveness,
) -> None:
    where = f"partition {change.partition} of topic {change.topic_id}"
    if change.leader_epoch > old.leader_epoch or change.partition_epoch > old.partition_epoch:
        raise Refused(
            ErrorCode.not_controller,
            f"{where} is at leader epoch {old.leader_epoch} and partition epoch "
            f"{old.partition_epoch} here, older than the request's: this controller is "
            "behind, so most likely no longer active",
        )
    if change.leader_epoch < old.leader_epoch:
        raise Refused(
            ErrorCode.fenced_leader_epoch,
            f"{where} is at leader epoch {old.leader_epoch}, not {change.leader_epoch}",
        )
    if broker_id != old.leader:
        raise Refused(
            ErrorCode.invalid_request, f"{where} is led by {old.leader}, not by {broker_id}"
        )
    if change.partition_epoch < old.partition_epoch:
        raise Refused(
            ErrorCode.invalid_update_version,
            f"{where} is at partition epoch {old.partition_epoch}, not {change.partition_epoch}",
        )
    isr = [m.broker_id for m in change.new_isr]
    if len(set(isr)) != len(isr) or not set(isr) <= set(old.replicas):
        raise Refused(
            ErrorCode.invalid_request,
            f"the new ISR {isr} of {where} repeats a broker or names one that is not among "
            f"its replicas {list(old.replicas)}",
        )
    if broker_id not in isr:
        raise Refused(ErrorCode.invalid_request, f"the new ISR {isr} of {where} lacks its leader")
    for member in change.new_isr:
        problem = _ineligible(image, member, is_live)
        if problem is not None:
            raise Refused(
                ErrorCode.ineligible_replica,
                f"broker {member.broker_id} may not join the ISR of {where}: {problem}",
            )


def _ineligible(image: MetadataImage, member: IsrMember, is_live: Liveness) -> str | None:
    registered = image.brokers.get(member.broker_id)
    if registered is None:
        return "it is not registered"
    if not is_live(member.broker_id):
        return "it is fenced"
    if member.broker_epoch != -1 and member.broker_epoch != registered.epoch:
        return (
            f"it caught up with broker epoch {member.broker_epoch}, but its current "
            f"registration has epoch {registered.epoch}"
        )
    return None
