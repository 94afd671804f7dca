"""DeleteRecords: move partitions' log start forward, for `kafka-delete-records.sh`,
admin clients' `delete_records` and `strom topic delete-records`.

Admin clients send each partition to its leader. The leader checks the offset (-1 means
the high watermark; anything else must lie between 0 and the high watermark, else
OFFSET_OUT_OF_RANGE), refuses topics whose cleanup.policy lacks "delete"
(POLICY_VIOLATION, as Kafka refuses them: a compacted topic's history is its state),
stores the new start durably and answers once every in-sync follower starts there too,
with the low watermark: the smallest log start among the in-sync replicas. Followers
learn the leader's start from its fetch answers and report their own in their fetches.
A wait longer than the request's `timeout_ms` ends in REQUEST_TIMED_OUT for that
partition (the deletion stands; followers catch up later); a leadership that moves
meanwhile ends in NOT_LEADER_OR_FOLLOWER.

ACLs, as Kafka checks them: DELETE on each topic, before anything else; a partition of
a topic without it is TOPIC_AUTHORIZATION_FAILED (low watermark -1), whether it exists
or not.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response, ms
from strom.protocol.responses.admin import (
    DeleteRecordsPartitionResult,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.access import Access
from strom.server.handlers.ports import FetchContext
from strom.server.partition import LeadershipMoved, Partition

log = logging.getLogger(__name__)

_TO_HIGH_WATERMARK = -1


async def handle_delete_records(context: FetchContext, request: Request) -> Any:
    image = context.metadata.image
    timeout_s = max(ms(request.body.timeout), 0) / 1000
    access = Access.of(context.authorizer(), request)
    topics: list[DeleteRecordsTopicResult] = []
    waits: list[asyncio.Task[None]] = []
    for topic in request.body.topics:
        results: list[DeleteRecordsPartitionResult] = []
        topics.append({"name": topic.name, "partitions": results})
        allowed = access.allows(AclOperation.DELETE, AclResourceType.TOPIC, topic.name)
        for wanted in topic.partitions:
            result: DeleteRecordsPartitionResult = {
                "partition_index": wanted.partition_index,
                "low_watermark": -1,
                "error_code": ErrorCode.none,
            }
            results.append(result)
            if not allowed:
                result["error_code"] = ErrorCode.topic_authorization_failed
                continue
            partition, error = context.partitions.led(topic.name, wanted.partition_index, image, -1)
            if partition is None:
                result["error_code"] = error
                continue
            offset = _checked(partition, int(wanted.offset), result)
            if offset is not None:
                waits.append(asyncio.create_task(_delete(partition, offset, timeout_s, result)))
    if waits:
        await asyncio.gather(*waits)
    response: DeleteRecordsResponse = {"throttle_time": 0, "topics": topics}
    return build_response(ApiKey.DELETE_RECORDS, request.api_version, response)


def _checked(partition: Partition, asked: int, result: DeleteRecordsPartitionResult) -> int | None:
    """The offset to start at, or None with the result's error set."""
    if not partition.log.config.delete:
        result["error_code"] = ErrorCode.policy_violation
        return None
    high_watermark = partition.high_watermark
    offset = high_watermark if asked == _TO_HIGH_WATERMARK else asked
    if not 0 <= offset <= high_watermark:
        result["error_code"] = ErrorCode.offset_out_of_range
        return None
    return offset


async def _delete(
    partition: Partition, offset: int, timeout_s: float, result: DeleteRecordsPartitionResult
) -> None:
    before = partition.log.log_start_offset
    try:
        result["low_watermark"] = await partition.delete_records(offset, timeout_s)
    except TimeoutError:
        result["error_code"] = ErrorCode.request_timed_out
    except LeadershipMoved:
        result["error_code"] = ErrorCode.not_leader_or_follower
    if partition.log.log_start_offset > before:
        log.info(
            "[node %d] %s-%d: records before %d deleted (DeleteRecords)",
            partition.node_id,
            partition.topic,
            partition.index,
            partition.log.log_start_offset,
        )
