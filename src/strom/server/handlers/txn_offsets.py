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

Kafka's broker also verifies, before the write, that the transaction coordinator knows
the group's partition is in the producer's ongoing transaction (KIP-890); that check,
with its TRANSACTION_ABORTABLE (v4+) and INVALID_TXN_STATE answers, belongs between
`coordinate` and the decision below, and is the transaction coordinator's to give.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.offsets import OffsetToCommit
from strom.group.txn_offsets import TxnCommitRequest
from strom.metadata.image import MetadataImage
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.groups import OffsetCommitResponse, TopicPartitionErrors
from strom.server.groups import CoordinatorUnavailable
from strom.server.handlers.ports import GroupContext

__all__ = ["handle_txn_offset_commit"]


def _exists(image: MetadataImage, topic: str, partition: int) -> bool:
    found = image.topics_by_name.get(topic)
    return found is not None and partition in found.partitions


async def handle_txn_offset_commit(context: GroupContext, request: Request) -> Any:
    body = request.body
    image = context.metadata.image
    wanted: list[OffsetToCommit] = []
    errors: dict[tuple[str, int], ErrorCode] = {}
    for topic in body.topics:
        for p in topic.partitions:
            key = (topic.name, int(p.partition_index))
            if not _exists(image, *key):
                errors[key] = ErrorCode.unknown_topic_or_partition
                continue
            wanted.append(
                OffsetToCommit(
                    topic.name,
                    key[1],
                    int(p.committed_offset),
                    int(getattr(p, "committed_leader_epoch", -1)),
                    p.committed_metadata,
                )
            )
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
        results = await _commit(context, commit)
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


async def _commit(context: GroupContext, commit: TxnCommitRequest) -> list[ErrorCode]:
    """One error per offset of `commit`."""
    if not commit.group_id:
        return [ErrorCode.invalid_group_id] * len(commit.offsets)
    try:
        await context.groups.coordinate(commit.group_id)
        # KIP-890's verification of the transaction goes here (see the module docstring).
        results, out = context.groups.txn_offset_commit(commit)
        await context.groups.apply(out)
    except CoordinatorUnavailable as exc:
        return [exc.error_code] * len(commit.offsets)
    return results
