"""AddPartitionsToTxn, AddOffsetsToTxn and EndTxn: a transactional producer's requests to
the coordinator of its transactional id (server/transactions.py decides, with the pure
core strom/txn/coordinator.py).

AddPartitionsToTxn comes in two forms. v0-v3 are a producer's: one transaction, its
partitions. v4+ are what brokers send (KIP-890): a batch of transactions, each either
added or only verified (`verify_only`: is each partition in the open transaction?).

The transaction version the coordinator follows is Kafka's rule: 2 when the request
version is above 3 (AddPartitionsToTxn) or above 4 (EndTxn), else 0. Older clients do
not know PRODUCER_FENCED: AddPartitionsToTxn, AddOffsetsToTxn and EndTxn below v2 hear
INVALID_PRODUCER_EPOCH instead.

ACLs, as Kafka checks them before anything else: a producer's AddPartitionsToTxn needs
WRITE on its transactional id (else every partition hears
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then WRITE on each topic (a denied topic's
partitions hear TOPIC_AUTHORIZATION_FAILED, whether it exists or not, and nothing is
added: the others hear UNKNOWN_TOPIC_OR_PARTITION or OPERATION_NOT_ATTEMPTED); a
broker's (v4+) needs CLUSTER_ACTION on the cluster (else the request's error_code is
CLUSTER_AUTHORIZATION_FAILED, with no transaction answered). AddOffsetsToTxn needs WRITE
on the transactional id, then READ on the group; EndTxn WRITE on the transactional id.
Without an authorizer all is allowed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.transactions import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    EndTxnResponse,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.handlers.access import Access
from strom.server.handlers.ports import TxnContext
from strom.server.transactions import TxnUnavailable
from strom.txn.placement import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
"""Written by the brokers only: a producer may not add them to a transaction itself
(AddOffsetsToTxn adds a group's `__consumer_offsets` partition)."""


def client_error(error: ErrorCode, version: int, *, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED as a client of `version` understands it."""
    if error == ErrorCode.producer_fenced and version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return error


def _results(errors: dict[TopicPartition, ErrorCode]) -> list[AddPartitionsToTxnTopicResult]:
    topics: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, index), error in errors.items():
        topics.setdefault(topic, []).append(
            {"partition_index": index, "partition_error_code": error}
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in topics.items()]


def _txn_id_writable(access: Access, txn_id: str) -> bool:
    return access.allows(AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, txn_id)


async def _one_transaction(
    context: TxnContext,
    access: Access,
    version: int,
    txn_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[TopicPartition],
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    """Each partition's answer for one transaction of an AddPartitionsToTxn. A producer's
    (v0-v3) are checked here: WRITE on the transactional id, then on each topic (an
    internal topic is never writable, whatever the ACLs say, as in Kafka)."""
    if version < 4 and not _txn_id_writable(access, txn_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    image = context.metadata.image
    refused: dict[TopicPartition, ErrorCode] = {}
    writable: dict[str, bool] = {}
    for topic, index in partitions:
        if version < 4:
            if topic not in writable:
                writable[topic] = topic not in INTERNAL_TOPICS and access.allows(
                    AclOperation.WRITE, AclResourceType.TOPIC, topic
                )
            if not writable[topic]:
                refused[(topic, index)] = ErrorCode.topic_authorization_failed
                continue
        known = image.topics_by_name.get(topic)
        if known is None or index not in known.partitions:
            refused[(topic, index)] = ErrorCode.unknown_topic_or_partition
    if refused:
        # One partition that cannot be added fails the whole transaction's request; the
        # others are not attempted.
        return {p: refused.get(p, ErrorCode.operation_not_attempted) for p in partitions}
    txns = context.txns
    try:
        if verify_only:
            result = await txns.verify_partitions(txn_id, producer_id, producer_epoch, partitions)
            return {p: result.partition_errors.get(p, result.error) for p in partitions}
        result = await txns.add_partitions(
            txn_id,
            producer_id,
            producer_epoch,
            partitions,
            transaction_version=2 if version > 3 else 0,
        )
        error = client_error(result.error, version, fenced_since=2)
    except TxnUnavailable as exc:
        error = exc.error_code
    return dict.fromkeys(partitions, error)


def _partitions(topics: Any) -> list[TopicPartition]:
    """The request's partitions in order, each once."""
    return list(dict.fromkeys((str(t.name), int(i)) for t in topics for i in t.partitions))


async def handle_add_partitions_to_txn(context: TxnContext, request: Request) -> Any:
    body = request.body
    version = request.api_version
    access = Access.of(context.authorizer(), request)
    response: AddPartitionsToTxnResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "results_by_topic_v3_and_below": [],
        "results_by_transaction": [],
    }
    if version >= 4 and not access.allows_cluster(AclOperation.CLUSTER_ACTION):
        # Only brokers send these: Kafka refuses the whole request, answering no
        # transaction (its getErrorResponse for v4+).
        response["error_code"] = ErrorCode.cluster_authorization_failed
    elif version < 4:
        errors = await _one_transaction(
            context,
            access,
            version,
            str(body.v3_and_below_transactional_id),
            int(body.v3_and_below_producer_id),
            int(body.v3_and_below_producer_epoch),
            _partitions(body.v3_and_below_topics),
            verify_only=False,
        )
        response["results_by_topic_v3_and_below"] = _results(errors)
    else:
        transactions = body.transactions
        answers = await asyncio.gather(
            *(
                _one_transaction(
                    context,
                    access,
                    version,
                    str(t.transactional_id),
                    int(t.producer_id),
                    int(t.producer_epoch),
                    _partitions(t.topics),
                    verify_only=bool(t.verify_only),
                )
                for t in transactions
            )
        )
        results: list[AddPartitionsToTxnResult] = [
            {"transactional_id": str(t.transactional_id), "topic_results": _results(errors)}
            for t, errors in zip(transactions, answers, strict=True)
        ]
        response["results_by_transaction"] = results
    return build_response(ApiKey.ADD_PARTITIONS_TO_TXN, version, response)


async def handle_add_offsets_to_txn(context: TxnContext, request: Request) -> Any:
    """Adds the group's `__consumer_offsets` partition to the transaction, so that the
    offsets a TxnOffsetCommit writes there are committed (or dropped) with it."""
    body = request.body
    version = request.api_version
    access = Access.of(context.authorizer(), request)
    group_id = str(body.group_id)
    response: AddOffsetsToTxnResponse = {"throttle_time": 0, "error_code": ErrorCode.none}
    if not _txn_id_writable(access, str(body.transactional_id)):
        response["error_code"] = ErrorCode.transactional_id_authorization_failed
    elif not access.allows(AclOperation.READ, AclResourceType.GROUP, group_id):
        response["error_code"] = ErrorCode.group_authorization_failed
    else:
        response["error_code"] = await _add_offsets(context, request, group_id)
    return build_response(ApiKey.ADD_OFFSETS_TO_TXN, version, response)


async def _add_offsets(context: TxnContext, request: Request, group_id: str) -> ErrorCode:
    body = request.body
    offsets = (OFFSETS_TOPIC, partition_for(group_id, context.groups.num_partitions))
    try:
        result = await context.txns.add_partitions(
            str(body.transactional_id),
            int(body.producer_id),
            int(body.producer_epoch),
            [offsets],
            transaction_version=0,  # Kafka: only clients before transaction version 2 send it
        )
        return client_error(result.error, request.api_version, fenced_since=2)
    except TxnUnavailable as exc:
        return exc.error_code


async def handle_end_txn(context: TxnContext, request: Request) -> Any:
    """Commit or abort. v5+ clients follow transaction version 2: the coordinator bumps
    the epoch with every end, and the answer carries the producer id and epoch to use
    next."""
    body = request.body
    version = request.api_version
    response: EndTxnResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    if not _txn_id_writable(Access.of(context.authorizer(), request), str(body.transactional_id)):
        response["error_code"] = ErrorCode.transactional_id_authorization_failed
        return build_response(ApiKey.END_TXN, version, response)
    try:
        result = await context.txns.end_txn(
            str(body.transactional_id),
            int(body.producer_id),
            int(body.producer_epoch),
            bool(body.committed),
            transaction_version=2 if version > 4 else 0,
        )
        response["error_code"] = client_error(result.error, version, fenced_since=2)
        response["producer_id"] = result.producer_id
        response["producer_epoch"] = result.producer_epoch
    except TxnUnavailable as exc:
        response["error_code"] = exc.error_code
    return build_response(ApiKey.END_TXN, version, response)
