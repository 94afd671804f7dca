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
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.group.txn_offsets import TxnCommitRequest
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.groups import OffsetCommitResponse, TopicPartitionErrors
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.offsets import requested_offsets
from strom.server.handlers.ports import GroupContext
from strom.server.txn_verifier import VerifyOperation, txn_offset_commit_error

__all__ = ["handle_txn_offset_commit"]


async def handle_txn_offset_commit(context: GroupContext, request: Request) -> Any:
    body = request.body
    image = context.metadata.image
    wanted, errors = requested_offsets(image, body.topics)
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
    topics: list[TopicPartitionErrors] = [
        {
            "name": topic.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": errors[(topic.name, int(p.partition_index))],
                }
                for p in topic.partitions
            ],
        }
        for topic in body.topics
    ]
    response: OffsetCommitResponse = {"throttle_time": 0, "topics": topics}
    return build_response(request.api_key, request.api_version, response)


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
