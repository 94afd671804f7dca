"""A fetcher's side of a fetch session, alone and against the broker's cache: whatever
requests and answers are lost and whatever sessions the broker drops, each answered fetch
reads exactly what the fetcher wants, and the fetcher never misses a change."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.fetch.fetcher_session import FetcherSession
from strom.fetch.sessions import (
    FetchSessionCache,
    PartitionAnswer,
    PartitionFetch,
    PartitionKey,
    SessionKind,
    SessionRequest,
)


def fetch(index: int, offset: int = 0) -> PartitionFetch:
    return PartitionFetch("t", index, offset, 1 << 20)


def wanted(*fetches: PartitionFetch) -> dict[PartitionKey, PartitionFetch]:
    return {f.key: f for f in fetches}


def test_the_first_fetch_is_full_and_later_ones_send_only_what_changed() -> None:
    session = FetcherSession()
    first = session.plan(wanted(fetch(0), fetch(1), fetch(2)))
    assert first.full and (first.session_id, first.epoch) == (0, 0)
    assert [f.partition for f in first.to_send] == [0, 1, 2]
    assert session.answered(ErrorCode.none, 77, [("t", 0), ("t", 1), ("t", 2)])

    second = session.plan(wanted(fetch(0, offset=9), fetch(2), fetch(3)))
    assert (second.session_id, second.epoch, second.full) == (77, 1, False)
    assert [f.partition for f in second.to_send] == [0, 3]
    assert second.to_forget == (("t", 1),)
    assert session.answered(ErrorCode.none, 77, [("t", 0)])
    assert session.plan(wanted(fetch(0, offset=9), fetch(2), fetch(3))).epoch == 2


def test_errors_and_surprises_start_the_session_over() -> None:
    session = FetcherSession()
    session.plan(wanted(fetch(0)))
    session.answered(ErrorCode.none, 77, [("t", 0)])
    session.plan(wanted(fetch(0)))
    assert not session.answered(ErrorCode.invalid_fetch_session_epoch, 0, [])
    plan = session.plan(wanted(fetch(0)))
    assert (plan.session_id, plan.epoch) == (77, 0)  # closes 77, asks for a new one
    assert session.answered(ErrorCode.none, 78, [("t", 0)])

    session.plan(wanted(fetch(0)))
    assert not session.answered(ErrorCode.none, 78, [("t", 5)])  # never asked for
    assert session.plan(wanted(fetch(0))).epoch == 0

    session.answered(ErrorCode.none, 79, [])
    session.plan(wanted(fetch(0)))
    assert not session.answered(ErrorCode.fetch_session_id_not_found, 0, [])
    assert (session.plan(wanted(fetch(0))).session_id, session.epoch) == (0, 0)

    session.answered(ErrorCode.none, 80, [])
    session.plan(wanted(fetch(0)))
    session.failed()  # no answer: what the broker holds is unknown
    plan = session.plan(wanted(fetch(0)))
    assert plan.full and plan.session_id == 80 and plan.to_send == (fetch(0),)


def test_a_broker_without_sessions_gets_full_fetches() -> None:
    session = FetcherSession()
    for _ in range(3):
        plan = session.plan(wanted(fetch(0)))
        assert plan.full and plan.session_id == 0
        assert session.answered(ErrorCode.none, 0, [("t", 0)])


# --- the two sides together --------------------------------------------------------------

PARTITIONS = range(5)


@dataclass
class World:
    """A broker's partitions (high watermark, log start) and what the fetcher knows."""

    broker: dict[int, tuple[int, int]] = field(
        default_factory=lambda: dict.fromkeys(PARTITIONS, (0, 0))
    )
    known: dict[PartitionKey, tuple[int, int]] = field(default_factory=dict)


exchange = st.tuples(
    st.just("exchange"), st.sampled_from(["ok"] * 6 + ["lose request", "lose answer"])
)
step = st.one_of(
    st.tuples(st.just("want"), st.dictionaries(st.sampled_from(PARTITIONS), st.integers(0, 3))),
    st.tuples(st.just("write"), st.sampled_from(PARTITIONS)),
    st.tuples(st.just("delete records"), st.sampled_from(PARTITIONS)),
    exchange,
    exchange,
    exchange,
    st.tuples(st.just("restart"), st.none()),
)


@settings(max_examples=500, deadline=None)
@given(steps=st.lists(step, max_size=40), follower=st.booleans())
def test_every_answered_fetch_reads_what_is_wanted_and_no_change_is_missed(
    steps: list[tuple[str, object]], follower: bool
) -> None:
    world = World()
    fetcher = FetcherSession()
    broker = FetchSessionCache(1, random.Random(3))
    want: dict[PartitionKey, PartitionFetch] = wanted(fetch(0), fetch(1))
    now_ms = 0
    for kind, arg in steps:
        now_ms += 1
        if kind == "want":
            assert isinstance(arg, dict)
            want = wanted(*(fetch(i, offset) for i, offset in arg.items()))
        elif kind == "write":
            assert isinstance(arg, int)
            hw, start = world.broker[arg]
            world.broker[arg] = (hw + 1, start)
        elif kind == "delete records":
            assert isinstance(arg, int)
            hw, start = world.broker[arg]
            world.broker[arg] = (hw, start + 1)
        elif kind == "restart":
            broker = FetchSessionCache(1, random.Random(now_ms))
        else:
            plan = fetcher.plan(want)
            if arg == "lose request":
                fetcher.failed()
                continue
            served = broker.open(
                SessionRequest(
                    plan.session_id, plan.epoch, False, follower, plan.to_send, plan.to_forget
                ),
                now_ms,
            )
            carried: list[PartitionKey] = []
            if served.kind is not SessionKind.REFUSED:
                # The broker reads exactly the partitions wanted, as wanted.
                assert {f.key: f for f in served.fetches} == want
                for f in served.fetches:
                    hw, start = world.broker[f.partition]
                    answer = PartitionAnswer(ErrorCode.none, hw, hw, start)
                    if served.carries(f, answer):
                        if served.kind is SessionKind.INCREMENTAL:
                            # An incremental answer carries a partition only with news.
                            assert world.known.get(f.key) != (hw, start)
                        carried.append(f.key)
            if arg == "lose answer":
                fetcher.failed()
                continue
            if fetcher.answered(served.error, served.session_id, carried):
                world.known = {
                    key: world.broker[key[1]] if key in carried else world.known[key]
                    for key in want
                }
                # Nothing changed without the fetcher hearing of it.
                assert world.known == {key: world.broker[key[1]] for key in want}
