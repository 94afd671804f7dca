"""TxnOffsetCommit (v0-v5): a transactional producer commits a consumer group's offsets
as part of its transaction (`sendOffsetsToTransaction`).

As Kafka's KafkaApis and group coordinator answer it: offsets of topics or partitions
that do not exist get UNKNOWN_TOPIC_OR_PARTITION, and when none is left the coordinator
is not asked; an empty group id is INVALID_GROUP_ID; then the coordinator's checks
(group/txn_offsets.py) and the write of the offsets as one transactional batch of the
request's producer to the group's `__consumer_offsets` partition. An error of the
coordinator or of that write (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
INVALID_PRODUCER_EPOCH, ...) is every asked partition's. The offsets stay invisible to
OffsetFetch until the transaction's COMMIT marker (`GroupService.complete_txn`).

Before the write, as Kafka's broker does (KIP-890), the transaction's coordinator is asked
whether the group's `__consumer_offsets` partition is in the producer's transaction
(server/txn_verifier.py): v0-v4 only verify (INVALID_TXN_STATE before v4, else
TRANSACTION_ABORTABLE, when it is not), v5 (transaction version 2 clients, which send no
AddOffsetsToTxn) has it added. A failed verification is every offset's error, as Kafka's
group coordinator tells it (a lost coordinator as COORDINATOR_LOAD_IN_PROGRESS).

With an authorizer, first of all, as Kafka's KafkaApis: WRITE on the transactional id
(else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), then READ on the group
(else GROUP_AUTHORIZATION_FAILED on every partition), then READ on each topic (else
TOPIC_AUTHORIZATION_FAILED on its partitions, before whether it exists is asked).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.group.txn_offsets import TxnCommitRequest
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.groups import OffsetCommitResponse
from strom.security.operations import AclOperation, AclResourceType
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.access import Access
from strom.server.handlers.offsets import partition_errors, requested_offsets
from strom.server.handlers.ports import GroupContext
from strom.server.txn_verifier import VerifyOperation, txn_offset_commit_error

__all__ = ["handle_txn_offset_commit"]


async def handle_txn_offset_commit(context: GroupContext, request: Request) -> Any:
    body = request.body
    access = Access.of(context.authorizer(), request)
    refused = _refused(access, body.transactional_id, body.group_id)
    if refused is not None:
        denied: OffsetCommitResponse = {
            "throttle_time": 0,
            "topics": partition_errors(body.topics, lambda _t, _p: refused),
        }
        return build_response(request.api_key, request.api_version, denied)
    image = context.metadata.image
    wanted, errors = requested_offsets(image, body.topics, access)
    commit = TxnCommitRequest(
        group_id=body.group_id,
        producer_id=int(body.producer_id),
        producer_epoch=int(body.producer_epoch),
        transactional_id=body.transactional_id,
        generation_id=int(getattr(body, "generation_id", -1)),
        member_id=getattr(body, "member_id", ""),
        group_instance_id=getattr(body, "group_instance_id", None),
        offsets=tuple(wanted),
    )
    if wanted:
        results = await _commit(context, commit, request.api_version)
        if request.api_version < 2:
            # Producers before 2.0 (KAFKA-7296) do not retry on a loading coordinator.
            results = [
                ErrorCode.coordinator_not_available
                if r is ErrorCode.coordinator_load_in_progress
                else r
                for r in results
            ]
        for each, error in zip(wanted, results, strict=True):
            errors[(each.topic, each.partition)] = error
    response: OffsetCommitResponse = {
        "throttle_time": 0,
        "topics": partition_errors(body.topics, lambda t, p: errors[(t, p)]),
    }
    return build_response(request.api_key, request.api_version, response)


def _refused(access: Access, txn_id: str, group_id: str) -> ErrorCode | None:
    """The error of every partition when the principal may not write in the transaction
    or read the group (the producer id needs no check: the transactional id implies it)."""
    if not access.allows(AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, txn_id):
        return ErrorCode.transactional_id_authorization_failed
    if not access.allows(AclOperation.READ, AclResourceType.GROUP, group_id):
        return ErrorCode.group_authorization_failed
    return None


async def _commit(context: GroupContext, commit: TxnCommitRequest, version: int) -> list[ErrorCode]:
    """One error per offset of `commit`."""
    if not commit.group_id:
        return [ErrorCode.invalid_group_id] * len(commit.offsets)
    try:
        await context.groups.coordinate(commit.group_id)
        refused = await _verify(context, commit, version)
        if refused is not None:
            return [refused] * len(commit.offsets)
        results, out = context.groups.txn_offset_commit(commit)
        await context.groups.apply(out)
    except CoordinatorUnavailable as exc:
        return [exc.error_code] * len(commit.offsets)
    return results


async def _verify(
    context: GroupContext, commit: TxnCommitRequest, version: int
) -> ErrorCode | None:
    """KIP-890: the group's partition must be in the producer's transaction (v5: is
    added to it). None when it is; else the error every offset gets."""
    offsets = (OFFSETS_TOPIC, partition_for(commit.group_id, context.groups.num_partitions))
    errors = await context.verifier.verify(
        commit.transactional_id,
        commit.producer_id,
        commit.producer_epoch,
        [offsets],
        VerifyOperation.for_txn_offset_commit(version),
    )
    error = errors.get(offsets)
    return None if error is None else txn_offset_commit_error(error)
