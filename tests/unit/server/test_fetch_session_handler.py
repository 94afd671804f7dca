"""Fetch sessions (KIP-227) through the Fetch handler, on real partition logs: a session
reads all its partitions and answers only those with news, for consumers and followers,
by topic name and by topic id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from server_harness import (
    TOPIC,
    TOPIC_ID,
    Node,
    batch,
    image_of,
    node,
    produce_request,
    request,
    run,
)

from strom.protocol.apis import ApiKey
from strom.server.handlers.fetch import handle_fetch
from strom.server.handlers.produce import handle_produce


def produced(at: Node, index: int, *values: bytes) -> None:
    response = run(handle_produce(at.produce, produce_request(batch(*values), index=index)))
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.none


def session_fetch(
    at: Node,
    session_id: int,
    epoch: int,
    partitions: dict[int, int],
    *,
    forgotten: tuple[int, ...] = (),
    replica_id: int = -1,
    version: int = 12,
) -> Any:
    """A fetch in a session; `partitions` maps each index sent to its fetch offset."""
    topic = {"topic": TOPIC, "topic_id": TOPIC_ID}
    body = {
        "cluster_id": None,
        "replica_id": replica_id,
        "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                **topic,
                "partitions": [
                    {
                        "partition": index,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for index, offset in partitions.items()
                ],
            }
        ]
        if partitions
        else [],
        "forgotten_topics_data": [{**topic, "partitions": list(forgotten)}] if forgotten else [],
        "rack_id": "",
    }
    return run(handle_fetch(at.fetch, request(ApiKey.FETCH, version, body)))


def answered(response: Any) -> dict[int, Any]:
    return {p.partition_index: p for topic in response.responses for p in topic.partitions}


def test_a_consumer_session_answers_only_partitions_with_news(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(partitions=3))
    produced(at, 0, b"a")
    first = session_fetch(at, 0, 0, {0: 0, 1: 0, 2: 0})
    assert first.error_code == ErrorCode.none and first.session_id != 0
    assert sorted(answered(first)) == [0, 1, 2]
    assert answered(first)[0].records  # a full answer, records and all
    session_id = first.session_id

    # Partition 0 is read on from offset 1: nothing new anywhere, nothing carried.
    quiet = session_fetch(at, session_id, 1, {0: 1})
    assert quiet.session_id == session_id and answered(quiet) == {}

    produced(at, 2, b"b", b"c")
    news = answered(session_fetch(at, session_id, 2, {}))
    assert list(news) == [2]  # partition 2 was never resent: the session holds its offset
    assert (news[2].high_watermark, news[2].error_code) == (2, ErrorCode.none)
    assert news[2].records

    # Partition 1 forgotten: it no longer comes, even with news.
    produced(at, 1, b"d")
    after = answered(session_fetch(at, session_id, 3, {2: 2}, forgotten=(1,)))
    assert after == {}
    at.close()


def test_session_errors_come_alone_at_the_top(tmp_path: Path) -> None:
    at = node(tmp_path, image_of())
    first = session_fetch(at, 0, 0, {0: 0})
    unknown = session_fetch(at, first.session_id + 1, 1, {})
    assert (unknown.error_code, unknown.session_id, unknown.responses) == (
        ErrorCode.fetch_session_id_not_found,
        0,
        (),
    )
    wrong_epoch = session_fetch(at, first.session_id, 5, {})
    assert wrong_epoch.error_code == ErrorCode.invalid_fetch_session_epoch
    by_id = session_fetch(at, first.session_id, 1, {}, version=13)
    assert by_id.error_code == ErrorCode.fetch_session_topic_id_error
    # A sessionless fetch stays sessionless.
    assert session_fetch(at, 0, -1, {0: 0}).session_id == 0
    at.close()


def test_a_session_by_topic_id(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(partitions=2))
    first = session_fetch(at, 0, 0, {0: 0, 1: 0}, version=13)
    assert first.session_id != 0 and first.responses[0].topic_id == TOPIC_ID
    produced(at, 1, b"x")
    news = session_fetch(at, first.session_id, 1, {}, version=13)
    (topic,) = news.responses
    assert topic.topic_id == TOPIC_ID
    assert [p.partition_index for p in topic.partitions] == [1]
    at.close()


def test_a_follower_in_a_session_still_moves_the_high_watermark(tmp_path: Path) -> None:
    at = node(tmp_path, image_of(replicas=(1, 2)))
    follower = session_fetch(at, 0, 0, {0: 0}, replica_id=2)
    session_id = follower.session_id
    assert session_id != 0
    produced(at, 0, b"a", b"b")
    copied = answered(session_fetch(at, session_id, 1, {}, replica_id=2))
    assert copied[0].records and copied[0].high_watermark == 0
    # The follower says it holds both: the leader's high watermark moves, and the
    # answer carries the partition because of it.
    moved = answered(session_fetch(at, session_id, 2, {0: 2}, replica_id=2))
    assert moved[0].high_watermark == 2 and moved[0].records == b""
    assert at.partition().high_watermark == 2
    # Nothing new: nothing carried, yet the leader still hears from the follower.
    assert answered(session_fetch(at, session_id, 3, {}, replica_id=2)) == {}
    at.close()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["known", "zero", "random"]),
            st.integers(-2, 4),
            st.dictionaries(st.integers(-1, 4), st.integers(-1, 3), max_size=4),
            st.lists(st.integers(-1, 4), max_size=3),
            st.sampled_from([12, 13]),
        ),
        max_size=12,
    )
)
def test_any_sequence_of_session_fetches_gets_an_answer_and_stays_bounded(
    tmp_path_factory: pytest.TempPathFactory, steps: list[Any]
) -> None:
    """Hostile or confused fetchers: made-up session ids and epochs, unknown partitions,
    forgetting what was never added, switching versions. Every fetch gets an answer with
    a session error or partitions, and the cache never holds more than its slots."""
    at = node(tmp_path_factory.mktemp("sessions"), image_of(partitions=2))
    at.fetch_sessions.max_slots = 2
    known = 0
    try:
        for which, epoch, partitions, forgotten, version in steps:
            session_id = {"known": known, "zero": 0, "random": 0x5EED}[which]
            response = session_fetch(
                at, session_id, epoch, partitions, forgotten=tuple(forgotten), version=version
            )
            assert response.error_code in SESSION_ERRORS | {ErrorCode.none}
            if response.error_code != ErrorCode.none:
                assert response.responses == () and response.session_id == 0
            elif response.session_id:
                known = response.session_id
            for entry in answered(response).values():
                assert entry.error_code in PARTITION_ERRORS
            assert len(at.fetch_sessions) <= 2
    finally:
        at.close()


SESSION_ERRORS = {
    ErrorCode.fetch_session_id_not_found,
    ErrorCode.invalid_fetch_session_epoch,
    ErrorCode.fetch_session_topic_id_error,
}
PARTITION_ERRORS = {
    ErrorCode.none,
    ErrorCode.unknown_topic_or_partition,
    ErrorCode.unknown_topic_id,
    ErrorCode.offset_out_of_range,
}
