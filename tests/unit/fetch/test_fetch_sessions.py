"""The broker's fetch session cache (KIP-227): which fetches open, continue, close or are
refused, what an incremental answer carries, and which sessions make place for others."""

from __future__ import annotations

import random
import uuid

from kio.schema.errors import ErrorCode

from strom.fetch.sessions import (
    EVICTION_MS,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    MAX_EPOCH,
    FetchSessionCache,
    PartitionAnswer,
    PartitionFetch,
    SessionContext,
    SessionKind,
    SessionRequest,
)


def fetch(index: int, offset: int = 0, topic: str | uuid.UUID = "t") -> PartitionFetch:
    return PartitionFetch(topic, index, offset, 1 << 20)


def request(
    session_id: int,
    epoch: int,
    *partitions: PartitionFetch,
    forgotten: tuple[tuple[str | uuid.UUID, int], ...] = (),
    follower: bool = False,
    topic_ids: bool = False,
) -> SessionRequest:
    return SessionRequest(session_id, epoch, topic_ids, follower, partitions, forgotten)


def quiet(high_watermark: int = 0) -> PartitionAnswer:
    return PartitionAnswer(ErrorCode.none, high_watermark, high_watermark, 0)


def carried(served: SessionContext, answers: dict[int, PartitionAnswer]) -> list[int]:
    """The partitions the answer carries, given what each partition's read found."""
    return [f.partition for f in served.fetches if served.carries(f, answers[f.partition])]


def cache(slots: int = 10) -> FetchSessionCache:
    return FetchSessionCache(slots, random.Random(1))


def test_a_fetch_without_a_session_reads_what_it_names_and_opens_none() -> None:
    sessions = cache()
    served = sessions.open(request(0, FINAL_EPOCH, fetch(0), fetch(1)), now_ms=0)
    assert served.kind is SessionKind.SESSIONLESS
    assert [f.partition for f in served.fetches] == [0, 1]
    assert served.session_id == 0 and len(sessions) == 0
    assert carried(served, {0: quiet(), 1: quiet()}) == [0, 1]


def test_a_session_answers_in_full_once_then_only_what_changed() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0), fetch(1), fetch(2)), now_ms=0)
    assert first.kind is SessionKind.FULL and first.session_id != 0
    assert carried(first, {0: quiet(5), 1: quiet(5), 2: quiet(5)}) == [0, 1, 2]
    session_id = first.session_id

    # Nothing sent, nothing new: the answer carries nothing, yet every partition is read.
    second = sessions.open(request(session_id, 1), now_ms=10)
    assert second.kind is SessionKind.INCREMENTAL and second.session_id == session_id
    assert sorted(f.partition for f in second.fetches) == [0, 1, 2]
    assert carried(second, {0: quiet(5), 1: quiet(5), 2: quiet(5)}) == []

    # Partition 1's high watermark moved, partition 2 has records, 0 is altered only.
    third = sessions.open(request(session_id, 2, fetch(0, offset=5)), now_ms=20)
    with_records = PartitionAnswer(ErrorCode.none, 5, 5, 0, has_records=True)
    assert carried(third, {0: quiet(5), 1: quiet(6), 2: with_records}) == [1, 2]
    (refetched,) = [f for f in third.fetches if f.partition == 0]
    assert refetched.fetch_offset == 5  # the session holds the altered fetch
    assert sessions.get(session_id) is not None


def test_what_an_incremental_answer_must_carry() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=0)
    carried(first, {0: PartitionAnswer(ErrorCode.none, 5, 4, 1)})
    session_id, epoch = first.session_id, 1
    changes = [
        PartitionAnswer(ErrorCode.none, 5, 5, 1),  # the last stable offset moved
        PartitionAnswer(ErrorCode.none, 5, 5, 2),  # the log start moved
        PartitionAnswer(ErrorCode.none, 5, 5, 2, diverging=True),
        PartitionAnswer(ErrorCode.not_leader_or_follower, 5, 5, 2),
        PartitionAnswer(ErrorCode.none, 5, 5, 2),  # the same as before the error: carried
    ]
    for answer in changes:
        served = sessions.open(request(session_id, epoch), now_ms=epoch)
        assert carried(served, {0: answer}) == [0], answer
        epoch += 1
    served = sessions.open(request(session_id, epoch), now_ms=epoch)
    assert carried(served, {0: PartitionAnswer(ErrorCode.none, 5, 5, 2)}) == []


def test_partitions_just_carried_are_read_last() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0), fetch(1), fetch(2)), now_ms=0)
    carried(first, {0: quiet(), 1: quiet(), 2: quiet()})
    second = sessions.open(request(first.session_id, 1), now_ms=1)
    news = PartitionAnswer(ErrorCode.none, 0, 0, 0, has_records=True)
    assert carried(second, {0: news, 1: quiet(), 2: quiet()}) == [0]
    third = sessions.open(request(first.session_id, 2), now_ms=2)
    assert [f.partition for f in third.fetches] == [1, 2, 0]


def test_forgotten_partitions_leave_and_a_session_left_empty_closes() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0), fetch(1)), now_ms=0)
    second = sessions.open(request(first.session_id, 1, forgotten=(("t", 0),)), now_ms=1)
    assert [f.partition for f in second.fetches] == [1]
    third = sessions.open(request(first.session_id, 2, forgotten=(("t", 1),)), now_ms=2)
    assert third.kind is SessionKind.SESSIONLESS and third.fetches == ()
    assert third.session_id == 0 and len(sessions) == 0


def test_unknown_sessions_wrong_epochs_and_a_change_of_naming_are_refused() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=0)
    unknown = sessions.open(request(first.session_id + 1, 1), now_ms=1)
    assert (unknown.kind, unknown.error) == (
        SessionKind.REFUSED,
        ErrorCode.fetch_session_id_not_found,
    )
    stale = sessions.open(request(first.session_id, 2), now_ms=1)
    assert stale.error == ErrorCode.invalid_fetch_session_epoch
    by_id = sessions.open(request(first.session_id, 1, topic_ids=True), now_ms=1)
    assert by_id.error == ErrorCode.fetch_session_topic_id_error
    # A refusal leaves the session as it was: its next fetch still works.
    assert sessions.open(request(first.session_id, 1), now_ms=1).kind is SessionKind.INCREMENTAL


def test_a_full_fetch_naming_a_session_closes_it() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=0)
    closed = sessions.open(request(first.session_id, FINAL_EPOCH, fetch(0)), now_ms=1)
    assert closed.kind is SessionKind.SESSIONLESS and len(sessions) == 0
    again = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=2)
    renewed = sessions.open(request(again.session_id, INITIAL_EPOCH, fetch(0)), now_ms=3)
    assert renewed.kind is SessionKind.FULL and renewed.session_id != again.session_id
    assert len(sessions) == 1 and sessions.get(again.session_id) is None


def test_the_epoch_wraps_to_one() -> None:
    sessions = cache()
    first = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=0)
    session = sessions.get(first.session_id)
    assert session is not None
    session.epoch = MAX_EPOCH
    sessions.open(request(first.session_id, MAX_EPOCH), now_ms=1)
    assert session.epoch == 1


def test_sessions_name_partitions_by_topic_id_from_fetch_v13() -> None:
    sessions = cache()
    topic_id = uuid.uuid4()
    first = sessions.open(
        request(0, INITIAL_EPOCH, fetch(0, topic=topic_id), topic_ids=True), now_ms=0
    )
    forgotten = ((topic_id, 0),)
    served = sessions.open(
        request(first.session_id, 1, fetch(1, topic=topic_id), forgotten=forgotten, topic_ids=True),
        now_ms=1,
    )
    assert [(f.topic, f.partition) for f in served.fetches] == [(topic_id, 1)]


def test_a_full_cache_makes_place_for_followers_bigger_sessions_and_after_two_minutes() -> None:
    sessions = cache(slots=2)
    small = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=0).session_id
    pair = sessions.open(request(0, INITIAL_EPOCH, fetch(0), fetch(1)), now_ms=0).session_id
    # Young consumer sessions stay: a new consumer gets a full answer and no session.
    refused = sessions.open(request(0, INITIAL_EPOCH, fetch(0), fetch(1), fetch(2)), now_ms=1)
    assert refused.kind is SessionKind.FULL and refused.session is None
    # A follower's session is worth more: the smallest consumer session goes.
    follower = sessions.open(request(0, INITIAL_EPOCH, fetch(0), follower=True), now_ms=1)
    assert follower.session is not None and sessions.get(small) is None
    assert sessions.evictions == 1
    # Once old enough, a session may go for a bigger one...
    later = EVICTION_MS + 10
    sessions.open(request(pair, 1), now_ms=later)  # used: not stale
    sessions.open(request(follower.session_id, 1), now_ms=later)
    bigger = sessions.open(request(0, INITIAL_EPOCH, fetch(0), fetch(1), fetch(2)), now_ms=later)
    assert bigger.session is not None and sessions.get(pair) is None
    # ...but never for one no bigger.
    same = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=later)
    assert same.session is None
    # A session unused for two minutes makes place for anyone.
    stale_at = later + EVICTION_MS + 1
    sessions.open(request(bigger.session_id, 1), now_ms=stale_at)
    anyone = sessions.open(request(0, INITIAL_EPOCH, fetch(0)), now_ms=stale_at)
    assert anyone.session is not None and sessions.get(follower.session_id) is None
    assert sessions.evictions == 3 and len(sessions) == 2


def test_no_slots_means_no_sessions() -> None:
    sessions = cache(slots=0)
    served = sessions.open(request(0, INITIAL_EPOCH, fetch(0), follower=True), now_ms=0)
    assert served.kind is SessionKind.FULL and served.session_id == 0
    assert len(sessions) == 0
