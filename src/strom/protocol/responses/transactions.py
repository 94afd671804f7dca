"""Transaction responses: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
DescribeTransactions, ListTransactions and DescribeProducers (see
protocol/responses/__init__.py)."""

from __future__ import annotations

from typing import TypedDict

from kio.schema.errors import ErrorCode


class AddPartitionsToTxnPartitionResult(TypedDict):
    partition_index: int
    partition_error_code: ErrorCode


class AddPartitionsToTxnTopicResult(TypedDict):
    name: str
    results_by_partition: list[AddPartitionsToTxnPartitionResult]


class AddPartitionsToTxnResult(TypedDict):
    transactional_id: str
    topic_results: list[AddPartitionsToTxnTopicResult]


class AddPartitionsToTxnResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    """v4+: the request's own error (every transaction failed with it)."""
    results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult]
    """v0-v3: the one transaction's partitions."""
    results_by_transaction: list[AddPartitionsToTxnResult]
    """v4+: each transaction's partitions."""


class AddOffsetsToTxnResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode


class EndTxnResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    producer_id: int
    """v5+: the producer id and epoch to use next (transaction version 2)."""
    producer_epoch: int


class TopicData(TypedDict):
    topic: str
    partitions: list[int]


class DescribedTransaction(TypedDict):
    error_code: ErrorCode
    transactional_id: str
    transaction_state: str
    transaction_timeout: int
    transaction_start_time: int
    producer_id: int
    producer_epoch: int
    topics: list[TopicData]


class DescribeTransactionsResponse(TypedDict):
    throttle_time: int
    transaction_states: list[DescribedTransaction]


class ListedTransaction(TypedDict):
    transactional_id: str
    producer_id: int
    transaction_state: str


class ListTransactionsResponse(TypedDict):
    throttle_time: int
    error_code: ErrorCode
    unknown_state_filters: list[str]
    transaction_states: list[ListedTransaction]


class ProducerState(TypedDict):
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


class ProducersOfPartition(TypedDict):
    partition_index: int
    error_code: ErrorCode
    error_message: str | None
    active_producers: list[ProducerState]


class ProducersOfTopic(TypedDict):
    name: str
    partitions: list[ProducersOfPartition]


class DescribeProducersResponse(TypedDict):
    throttle_time: int
    topics: list[ProducersOfTopic]
