"""WriteTxnMarkers: a transaction coordinator (server/txn_markers.py, on this broker or
another) asks this broker to end a producer's transaction on the partitions it leads.

Each marker is appended to each of its partitions (a COMMIT or ABORT control batch) and
answered once committed, as Kafka's handler does: UNKNOWN_TOPIC_OR_PARTITION for a
partition this broker does not have, NOT_LEADER_OR_FOLLOWER where it does not lead,
INVALID_PRODUCER_EPOCH for a producer epoch older than the partition's,
TRANSACTION_COORDINATOR_FENCED for an older coordinator, NOT_ENOUGH_REPLICAS or
REQUEST_TIMED_OUT when it is not committed. A marker on a `__consumer_offsets`
partition then completes the transaction's offsets in its group coordinator. The
answers are grouped by producer id, as Kafka's are.

ACLs, as Kafka checks them before anything else: the sender needs ALTER on the cluster
(what Admin.abortTransaction needs, KIP-664) or else CLUSTER_ACTION (a coordinator
broker's); otherwise nothing is written and every partition of every marker is
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.codec import Request, build_response
from strom.protocol.responses.txn_markers import (
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from strom.security.authorizer import Authorizer
from strom.security.operations import AclOperation
from strom.server.handlers.access import Access
from strom.server.txn_markers import WRITE_TXN_MARKERS, MarkerAppender, TopicPartition, TxnMarker


@dataclass(frozen=True, slots=True)
class TxnMarkersContext:
    """WriteTxnMarkers."""

    markers: MarkerAppender
    """Writes markers to the partitions led here (server/txn_markers.py)."""
    authorizer: Callable[[], Authorizer | None] = lambda: None
    """The ACL decisions now; None: no authorizer configured."""


async def handle_write_txn_markers(context: TxnMarkersContext, request: Request) -> Any:
    markers = [
        TxnMarker(
            producer_id=int(entry.producer_id),
            producer_epoch=int(entry.producer_epoch),
            commit=bool(entry.transaction_result),
            coordinator_epoch=int(entry.coordinator_epoch),
            partitions=tuple(
                (str(topic.name), int(index))
                for topic in entry.topics
                for index in topic.partition_indexes
            ),
        )
        for entry in request.body.markers
    ]
    access = Access.of(context.authorizer(), request)
    if access.allows_cluster(AclOperation.ALTER) or access.allows_cluster(
        AclOperation.CLUSTER_ACTION
    ):
        answers = await asyncio.gather(*(context.markers.write(marker) for marker in markers))
    else:
        denied = ErrorCode.cluster_authorization_failed
        answers = [dict.fromkeys(marker.partitions, denied) for marker in markers]
    by_producer: dict[int, dict[TopicPartition, ErrorCode]] = {}
    for marker, answer in zip(markers, answers, strict=True):
        by_producer.setdefault(marker.producer_id, {}).update(answer)
    results: list[WritableTxnMarkerResult] = []
    for producer_id, errors in by_producer.items():
        topics: dict[str, WritableTxnMarkerTopicResult] = {}
        for (topic, index), error in errors.items():
            entry = topics.setdefault(topic, {"name": topic, "partitions": []})
            entry["partitions"].append({"partition_index": index, "error_code": error})
        results.append({"producer_id": producer_id, "topics": list(topics.values())})
    response: WriteTxnMarkersResponse = {"markers": results}
    return build_response(WRITE_TXN_MARKERS, request.api_version, response)
