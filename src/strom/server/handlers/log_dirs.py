"""DescribeLogDirs: where this broker keeps each partition's log and how big it is, for
`kafka-log-dirs.sh`, consoles and `strom cluster log-dirs`.

strom keeps every partition in one directory (`log.dirs`), so the answer has one log
directory: the partitions held here (leader or follower) that the request names, or
all of them, each with its size on disk and how far its log end is below its high
watermark (`offset_lag`, as Kafka computes it for a current log; strom has no future
logs, AlterReplicaLogDirs having nowhere to move them). Partitions not held here are
left out, as Kafka leaves them out. From v4 the answer has the volume's total and
usable bytes.

ACLs, as Kafka checks them: DESCRIBE on the cluster, else no log directories and, from
v3, CLUSTER_AUTHORIZATION_FAILED (v1-2 have no error field: the answer is just empty).
"""

from __future__ import annotations

import os
from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.admin import (
    DescribeLogDirsPartition,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
)
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.handlers.ports import FetchContext


async def handle_describe_log_dirs(context: FetchContext, request: Request) -> Any:
    if not Access.of(context.authorizer(), request).allows_cluster(AclOperation.DESCRIBE):
        refused: DescribeLogDirsResponse = {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "results": [],
        }
        return build_response(ApiKey.DESCRIBE_LOG_DIRS, request.api_version, refused)
    wanted = _wanted(request.body.topics)
    by_topic: dict[str, list[DescribeLogDirsPartition]] = {}
    for partition in context.partitions:
        if wanted is not None and partition.index not in wanted.get(partition.topic, ()):
            continue
        log = partition.log
        by_topic.setdefault(partition.topic, []).append(
            {
                "partition_index": partition.index,
                "partition_size": log.size_bytes,
                "offset_lag": max(partition.high_watermark - log.log_end_offset, 0),
                "is_future_key": False,
            }
        )
    directory = context.partitions.log_dir.resolve()
    total, usable = _volume(directory)
    result: DescribeLogDirsResult = {
        "error_code": ErrorCode.none,
        "log_dir": str(directory),
        "topics": [
            {"name": topic, "partitions": sorted(parts, key=lambda p: p["partition_index"])}
            for topic, parts in sorted(by_topic.items())
        ],
        "total_bytes": total,
        "usable_bytes": usable,
    }
    response: DescribeLogDirsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results": [result],
    }
    return build_response(ApiKey.DESCRIBE_LOG_DIRS, request.api_version, response)


def _wanted(topics: Any) -> dict[str, set[int]] | None:
    """topic -> partition indexes the request names; None for every partition."""
    if topics is None:
        return None
    wanted: dict[str, set[int]] = {}
    for topic in topics:
        wanted.setdefault(topic.topic, set()).update(int(p) for p in topic.partitions)
    return wanted


def _volume(directory: os.PathLike[str]) -> tuple[int, int]:
    """(total, usable) bytes of the volume `directory` is on; -1 each if unknown."""
    try:
        stats = os.statvfs(directory)
    except OSError:
        return -1, -1
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
