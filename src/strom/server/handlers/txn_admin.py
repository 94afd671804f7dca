"""DescribeTransactions, ListTransactions and DescribeProducers: what admin tools
(`kafka-transactions.sh`, Admin.describeTransactions/listTransactions/describeProducers)
ask to find hanging or long transactions.

DescribeTransactions and ListTransactions answer from the transactional ids this broker
coordinates (a client asks each coordinator, or every broker for ListTransactions);
DescribeProducers from the producer state of the partitions held here, leader or
follower, as Kafka does.

ACLs, as Kafka checks them: DescribeTransactions needs DESCRIBE on each transactional id
(else that id's entry is TRANSACTIONAL_ID_AUTHORIZATION_FAILED) and lists, of each
transaction's topics, only those the principal may DESCRIBE; ListTransactions lists only
the ids the principal may DESCRIBE, and never fails for it; DescribeProducers needs READ
on each topic (after the topic name is checked; every partition of a denied topic is
TOPIC_AUTHORIZATION_FAILED, whether the topic exists or not).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.controller import validate_topic_name
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.transactions import (
    DescribedTransaction,
    DescribeProducersResponse,
    DescribeTransactionsResponse,
    ListedTransaction,
    ListTransactionsResponse,
    ProducersOfPartition,
    ProducersOfTopic,
    ProducerState,
    TopicData,
)
from strom.security.operations import AclOperation, AclResourceType
from strom.server.clock import now_ms
from strom.server.handlers.access import Access
from strom.server.handlers.ports import TxnContext
from strom.server.partition import Partition
from strom.server.transactions import TxnUnavailable
from strom.txn.metadata import TxnEntry
from strom.txn.state import TxnState

_STATES_BY_NAME = {state.wire_name: state for state in TxnState}
_TOPIC_AUTHORIZATION_FAILED = "Topic authorization failed."
"""DescribeProducers' message for a denied topic: Kafka's default text for the error."""


def _described(txn_id: str, entry: TxnEntry | None, error: ErrorCode) -> DescribedTransaction:
    described: DescribedTransaction = {
        "error_code": error,
        "transactional_id": txn_id,
        "transaction_state": "",
        "transaction_timeout": 0,
        "transaction_start_time": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }
    if entry is None or error != ErrorCode.none:
        return described
    value = entry.value
    topics: dict[str, list[int]] = {}
    for topic, index in sorted(value.partitions):
        topics.setdefault(topic, []).append(index)
    topic_data: list[TopicData] = [{"topic": t, "partitions": p} for t, p in topics.items()]
    described["transaction_state"] = value.state.wire_name
    described["transaction_timeout"] = value.timeout_ms
    described["transaction_start_time"] = value.start_ms
    described["producer_id"] = value.producer_id
    described["producer_epoch"] = value.producer_epoch
    described["topics"] = topic_data
    return described


def _describe(context: TxnContext, access: Access, txn_id: str) -> DescribedTransaction:
    if not access.allows(AclOperation.DESCRIBE, AclResourceType.TRANSACTIONAL_ID, txn_id):
        return _described(txn_id, None, ErrorCode.transactional_id_authorization_failed)
    if not txn_id:
        return _described(txn_id, None, ErrorCode.invalid_request)
    try:
        entry = context.txns.entry(txn_id)
    except TxnUnavailable as exc:
        return _described(txn_id, None, exc.error_code)
    if entry is None or entry.value.state is TxnState.DEAD:
        # A dead id is being removed: as good as gone.
        return _described(txn_id, None, ErrorCode.transactional_id_not_found)
    described = _described(txn_id, entry, ErrorCode.none)
    described["topics"] = [
        topic
        for topic in described["topics"]
        if access.allows(AclOperation.DESCRIBE, AclResourceType.TOPIC, topic["topic"])
    ]
    return described


async def handle_describe_transactions(context: TxnContext, request: Request) -> Any:
    access = Access.of(context.authorizer(), request)
    response: DescribeTransactionsResponse = {
        "throttle_time": 0,
        "transaction_states": [
            _describe(context, access, str(txn_id)) for txn_id in request.body.transactional_ids
        ],
    }
    return build_response(ApiKey.DESCRIBE_TRANSACTIONS, request.api_version, response)


def _listed(
    entry: TxnEntry,
    states: frozenset[TxnState],
    filtered_states: bool,
    producer_ids: frozenset[int],
    duration_ms: int,
    current_ms: int,
) -> bool:
    """Kafka's filters: every one given must hold. The duration filter keeps the
    transactions that started more than `duration_ms` ago (an id with no transaction
    open has started at -1, so it is always "older")."""
    value = entry.value
    if value.state is TxnState.DEAD:
        return False
    if producer_ids and value.producer_id not in producer_ids:
        return False
    if filtered_states and value.state not in states:
        return False
    return not (duration_ms >= 0 and current_ms - value.start_ms <= duration_ms)


async def handle_list_transactions(context: TxnContext, request: Request) -> Any:
    body = request.body
    asked_states = [str(s) for s in body.state_filters]
    states = frozenset(_STATES_BY_NAME[s] for s in asked_states if s in _STATES_BY_NAME)
    producer_ids = frozenset(int(p) for p in body.producer_id_filters)
    duration_ms = int(getattr(body, "duration_filter", -1))
    response: ListTransactionsResponse = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": [s for s in asked_states if s not in _STATES_BY_NAME],
        "transaction_states": [],
    }
    try:
        entries = context.txns.entries()
    except TxnUnavailable as exc:
        response["error_code"] = exc.error_code
        entries = []
    access = Access.of(context.authorizer(), request)
    current_ms = now_ms()
    listed: list[ListedTransaction] = [
        {
            "transactional_id": entry.txn_id,
            "producer_id": entry.value.producer_id,
            "transaction_state": entry.value.state.wire_name,
        }
        for entry in sorted(entries, key=lambda e: e.txn_id)
        if _listed(entry, states, bool(asked_states), producer_ids, duration_ms, current_ms)
        and access.allows(AclOperation.DESCRIBE, AclResourceType.TRANSACTIONAL_ID, entry.txn_id)
    ]
    response["transaction_states"] = listed
    return build_response(ApiKey.LIST_TRANSACTIONS, request.api_version, response)


def _producers(partition: Partition) -> list[ProducerState]:
    return [
        {
            "producer_id": entry.producer_id,
            "producer_epoch": entry.epoch,
            "last_sequence": entry.last_seq,
            "last_timestamp": entry.last_timestamp,
            "coordinator_epoch": entry.coordinator_epoch,
            "current_txn_start_offset": (
                -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
            ),
        }
        for entry in partition.log.producers.entries()
    ]


async def handle_describe_producers(context: TxnContext, request: Request) -> Any:
    image = context.metadata.image
    access = Access.of(context.authorizer(), request)
    topics: list[ProducersOfTopic] = []
    for asked in request.body.topics:
        name = str(asked.name)
        topic_error: tuple[ErrorCode, str | None] | None = None
        reason = validate_topic_name(name)
        if reason:
            topic_error = (ErrorCode.invalid_topic_exception, reason)
        elif not access.allows(AclOperation.READ, AclResourceType.TOPIC, name):
            topic_error = (ErrorCode.topic_authorization_failed, _TOPIC_AUTHORIZATION_FAILED)
        elif name not in image.topics_by_name:
            topic_error = (ErrorCode.unknown_topic_or_partition, None)
        partitions: list[ProducersOfPartition] = []
        for index in asked.partition_indexes:
            entry: ProducersOfPartition = {
                "partition_index": int(index),
                "error_code": ErrorCode.none,
                "error_message": None,
                "active_producers": [],
            }
            partitions.append(entry)
            if topic_error is not None:
                entry["error_code"], entry["error_message"] = topic_error
                continue
            partition = context.partitions.get(name, int(index))
            if partition is None:
                known = int(index) in image.topics_by_name[name].partitions
                entry["error_code"] = (
                    ErrorCode.not_leader_or_follower
                    if known
                    else ErrorCode.unknown_topic_or_partition
                )
                continue
            entry["active_producers"] = _producers(partition)
        topics.append({"name": name, "partitions": partitions})
    response: DescribeProducersResponse = {"throttle_time": 0, "topics": topics}
    return build_response(ApiKey.DESCRIBE_PRODUCERS, request.api_version, response)
