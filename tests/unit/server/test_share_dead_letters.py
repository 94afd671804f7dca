"""The pure parts of copying dead letters to another broker: which partition, which
errors are tried again, how long, and the Produce request the leader gets."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from strom.client.codec import build_request
from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.record_codec import NewRecord, decode_batch, encode_batch
from strom.server.share_dead_letters import (
    PRODUCE_VERSION,
    dead_letter_partition,
    produce_answer,
    produce_request,
    retriable,
    with_retries,
)


def test_a_source_partition_maps_to_its_index_mod_the_dead_letter_partitions() -> None:
    assert [dead_letter_partition(p, 3) for p in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert dead_letter_partition(5, 1) == 0


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ],
)
def test_a_moving_or_short_leader_is_tried_again(error: ErrorCode) -> None:
    assert retriable(error)


@pytest.mark.parametrize(
    "error",
    [
        ErrorCode.none,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.topic_authorization_failed,
        ErrorCode.message_too_large,
        ErrorCode.corrupt_message,
    ],
)
def test_done_or_refused_is_not_tried_again(error: ErrorCode) -> None:
    assert not retriable(error)


def test_retriable_errors_are_tried_until_anproduce_answer_that_is_not() -> None:
    answers = [ErrorCode.not_leader_or_follower, ErrorCode.request_timed_out, ErrorCode.none]
    calls: list[int] = []

    async def attempt() -> ErrorCode:
        calls.append(1)
        return answers[len(calls) - 1]

    result = asyncio.run(with_retries(attempt, retry_s=0, bound_s=60))
    assert result is ErrorCode.none
    assert len(calls) == 3


def test_a_refusal_stops_at_once() -> None:
    calls: list[int] = []

    async def attempt() -> ErrorCode:
        calls.append(1)
        return ErrorCode.topic_authorization_failed

    result = asyncio.run(with_retries(attempt, retry_s=0, bound_s=60))
    assert result is ErrorCode.topic_authorization_failed
    assert len(calls) == 1


def test_the_bound_ends_the_tries_with_the_lastproduce_answer_or_a_timeout() -> None:
    async def hangs() -> ErrorCode:
        await asyncio.Event().wait()
        return ErrorCode.none

    assert asyncio.run(with_retries(hangs, retry_s=0, bound_s=0)) is ErrorCode.request_timed_out

    async def moved() -> ErrorCode:
        return ErrorCode.not_leader_or_follower

    # the first answer comes before the bound fires, the pause after it is cut short
    assert asyncio.run(with_retries(moved, retry_s=60, bound_s=0)) is (
        ErrorCode.not_leader_or_follower
    )


def test_the_produce_names_its_topic_in_a_version_strom_serves() -> None:
    served = SUPPORTED_APIS[ApiKey.PRODUCE]
    assert served.min_version <= PRODUCE_VERSION <= served.max_version
    batch = encode_batch([NewRecord(b"k", b"v", (("h", b"1"),))], base_timestamp_ms=1)
    request = build_request(ApiKey.PRODUCE, PRODUCE_VERSION, produce_request("dlq", 2, batch))
    assert request.acks == -1
    assert request.transactional_id is None
    (topic,) = request.topic_data
    assert topic.name == "dlq"
    (partition,) = topic.partition_data
    assert partition.index == 2
    header, records = decode_batch(bytes(partition.records))
    assert header.producer_id == -1
    assert not header.is_transactional
    assert [(r.key, r.value) for r in records] == [(b"k", b"v")]


class _Partition:
    def __init__(self, index: int, error: ErrorCode) -> None:
        self.index = index
        self.error_code = error


class _Topic:
    def __init__(self, name: str, partitions: list[_Partition]) -> None:
        self.name = name
        self.partition_responses = partitions


class _Response:
    def __init__(self, topics: list[_Topic]) -> None:
        self.responses = topics


def test_theproduce_answer_is_the_partitions_error_or_a_timeout_when_left_out() -> None:
    response = _Response(
        [
            _Topic("other", [_Partition(0, ErrorCode.none)]),
            _Topic(
                "dlq",
                [_Partition(1, ErrorCode.none), _Partition(0, ErrorCode.not_leader_or_follower)],
            ),
        ]
    )
    assert produce_answer(response, "dlq", 0) is ErrorCode.not_leader_or_follower
    assert produce_answer(response, "dlq", 1) is ErrorCode.none
    assert produce_answer(response, "dlq", 2) is ErrorCode.request_timed_out
