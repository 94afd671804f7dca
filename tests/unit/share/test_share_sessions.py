"""Share sessions (KIP-932): epochs, limits, the partitions a fetch reads, against
Kafka's ShareSessionCache rules; a Hypothesis model checks every sequence of requests."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.share.sessions import (
    FINAL_EPOCH,
    ShareSessionCache,
    ShareSessionKind,
    TopicIdPartition,
    next_epoch,
)

T = uuid.UUID(int=1)
P0, P1, P2 = (T, 0), (T, 1), (T, 2)


def fetch(
    cache: ShareSessionCache,
    member: str,
    epoch: int,
    partitions: tuple[TopicIdPartition, ...] = (),
    forgotten: tuple[TopicIdPartition, ...] = (),
    acks: bool = False,
    connection: str | None = None,
):
    return cache.fetch(
        "g",
        member,
        epoch,
        partitions,
        forgotten,
        has_acknowledgements=acks,
        connection_id="c-" + member if connection is None else connection,
        now_ms=0,
    )


def test_a_full_fetch_opens_a_session_at_epoch_one() -> None:
    cache = ShareSessionCache(10)
    context = fetch(cache, "m", 0, (P0, P1))
    assert context.kind is ShareSessionKind.FULL and context.partitions == (P0, P1)
    session = cache.get("g", "m")
    assert session is not None and session.epoch == 1


def test_subsequent_fetches_grow_and_shrink_the_session() -> None:
    cache = ShareSessionCache(10)
    fetch(cache, "m", 0, (P0,))
    grown = fetch(cache, "m", 1, (P1, P2))
    assert grown.kind is ShareSessionKind.SUBSEQUENT and grown.partitions == (P0, P1, P2)
    shrunk = fetch(cache, "m", 2, (), (P0, P2))
    assert shrunk.partitions == (P1,)


def test_epoch_errors() -> None:
    cache = ShareSessionCache(10)
    assert fetch(cache, "m", 1).error is ErrorCode.share_session_not_found
    assert fetch(cache, "m", FINAL_EPOCH).error is ErrorCode.share_session_not_found
    fetch(cache, "m", 0, (P0,))
    assert fetch(cache, "m", 5).error is ErrorCode.invalid_share_session_epoch
    assert fetch(cache, "m", 1).kind is ShareSessionKind.SUBSEQUENT
    assert fetch(cache, "m", 1).error is ErrorCode.invalid_share_session_epoch


def test_acknowledgements_cannot_open_a_session() -> None:
    cache = ShareSessionCache(10)
    assert fetch(cache, "m", 0, (P0,), acks=True).error is ErrorCode.invalid_request
    assert cache.get("g", "m") is None


def test_share_acknowledge_epochs() -> None:
    cache = ShareSessionCache(10)
    assert cache.acknowledge("g", "m", 1, 0) is ErrorCode.share_session_not_found
    fetch(cache, "m", 0, (P0,))
    assert cache.acknowledge("g", "m", 0, 0) is ErrorCode.invalid_share_session_epoch
    assert cache.acknowledge("g", "m", 2, 0) is ErrorCode.invalid_share_session_epoch
    assert cache.acknowledge("g", "m", 1, 0) is ErrorCode.none
    assert fetch(cache, "m", 2).kind is ShareSessionKind.SUBSEQUENT
    assert cache.acknowledge("g", "m", FINAL_EPOCH, 0) is ErrorCode.none
    assert cache.close("g", "m") is not None and cache.get("g", "m") is None


def test_the_session_limit_counts_other_members_only() -> None:
    cache = ShareSessionCache(1)
    fetch(cache, "a", 0, (P0,))
    assert fetch(cache, "b", 0, (P0,)).error is ErrorCode.share_session_limit_reached
    assert fetch(cache, "a", 0, (P1,)).kind is ShareSessionKind.FULL  # replaces its own


def test_partitions_that_answered_records_move_last() -> None:
    cache = ShareSessionCache(10)
    fetch(cache, "m", 0, (P0, P1, P2))
    cache.answered("g", "m", [P0])
    assert fetch(cache, "m", 1).partitions == (P1, P2, P0)


def test_a_closed_connection_ends_its_sessions() -> None:
    cache = ShareSessionCache(10)
    fetch(cache, "a", 0, (P0,))
    fetch(cache, "b", 0, (P0,))
    assert cache.disconnected("c-a") == [("g", "a")]
    assert cache.get("g", "a") is None and len(cache) == 1
    assert cache.disconnected("c-a") == []  # once
    assert cache.connections() == 1


def test_a_session_belongs_to_the_connection_that_opened_it() -> None:
    """Kafka records the connection of the epoch-0 fetch only: later requests on another
    connection do not move the session, and its opener's close ends it."""
    cache = ShareSessionCache(10)
    fetch(cache, "m", 0, (P0,), connection="one")
    fetch(cache, "m", 1, connection="two")
    assert cache.acknowledge("g", "m", 2, 0) is ErrorCode.none
    assert cache.disconnected("two") == []
    assert cache.disconnected("one") == [("g", "m")] and len(cache) == 0


def test_a_new_session_on_another_connection_outlives_the_old_connection() -> None:
    """Epoch 0 on a new connection replaces the member's session (Kafka marks the old
    connection's entry stale): the old connection's close leaves the new one alone."""
    cache = ShareSessionCache(10)
    fetch(cache, "m", 0, (P0,), connection="old")
    fetch(cache, "m", 0, (P1,), connection="new")
    assert cache.disconnected("old") == []
    session = cache.get("g", "m")
    assert session is not None and session.connection_id == "new"
    assert cache.disconnected("new") == [("g", "m")]
    assert cache.connections() == 0


def test_a_closed_session_is_not_ended_again_by_its_connection() -> None:
    cache = ShareSessionCache(10)
    fetch(cache, "m", 0, (P0,), connection="one")
    assert fetch(cache, "m", FINAL_EPOCH, connection="one").kind is ShareSessionKind.FINAL
    cache.close("g", "m")
    assert cache.connections() == 0 and cache.disconnected("one") == []


def test_every_session_a_connection_opened_ends_with_it() -> None:
    cache = ShareSessionCache(10)
    fetch(cache, "a", 0, (P0,), connection="shared")
    fetch(cache, "b", 0, (P0,), connection="shared")
    assert sorted(cache.disconnected("shared")) == [("g", "a"), ("g", "b")]


def test_a_session_without_a_connection_never_ends_by_one() -> None:
    cache = ShareSessionCache(10)
    fetch(cache, "m", 0, (P0,), connection="")
    assert cache.disconnected("") == [] and len(cache) == 1 and cache.connections() == 0


def test_next_epoch_wraps_to_one() -> None:
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH
    assert next_epoch(3) == 4


_steps = st.lists(
    st.tuples(
        st.sampled_from(["fetch", "ack", "close", "disconnect"]),
        st.sampled_from(["a", "b", "c"]),
        st.integers(-1, 4),
        st.sets(st.sampled_from([P0, P1, P2])),
        st.sets(st.sampled_from([P0, P1, P2])),
        st.sampled_from(["x", "y"]),
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(_steps, st.integers(1, 3))
def test_sessions_follow_the_model(
    steps: list[tuple[str, str, int, set[TopicIdPartition], set[TopicIdPartition], str]],
    limit: int,
) -> None:
    cache = ShareSessionCache(limit)
    model: dict[str, tuple[int, list[TopicIdPartition]]] = {}
    opened_on: dict[str, str] = {}  # member -> the connection that opened its session
    for kind, member, epoch, added, forgotten, connection in steps:
        adds, drops = tuple(sorted(added)), tuple(sorted(forgotten))
        for gone in set(opened_on) - set(model):
            del opened_on[gone]
        if kind == "disconnect":
            ended = sorted(m for _, m in cache.disconnected(connection))
            assert ended == sorted(m for m, c in opened_on.items() if c == connection)
            for name in ended:
                del model[name]
            assert len(cache) == len(model)
            continue
        if kind == "close":
            closed = cache.close("g", member)
            assert (closed is not None) == (member in model)
            model.pop(member, None)
            continue
        if kind == "ack":
            error = cache.acknowledge("g", member, epoch, 0)
            if epoch == 0:
                assert error is ErrorCode.invalid_share_session_epoch
            elif member not in model:
                assert error is ErrorCode.share_session_not_found
            elif epoch not in (-1, model[member][0]):
                assert error is ErrorCode.invalid_share_session_epoch
            else:
                assert error is ErrorCode.none
                if epoch != -1:
                    model[member] = (model[member][0] + 1, model[member][1])
            continue
        context = fetch(cache, member, epoch, adds, drops, connection=connection)
        if epoch == 0:
            model.pop(member, None)
            if len(model) >= limit:
                assert context.error is ErrorCode.share_session_limit_reached
            else:
                model[member] = (1, list(adds))
                opened_on[member] = connection
                assert context.partitions == adds
        elif member not in model:
            assert context.error is ErrorCode.share_session_not_found
        elif epoch == -1:
            assert context.kind is ShareSessionKind.FINAL and context.partitions == ()
        elif epoch != model[member][0]:
            assert context.error is ErrorCode.invalid_share_session_epoch
        else:
            now = model[member][1] + [p for p in adds if p not in model[member][1]]
            now = [p for p in now if p not in drops]
            model[member] = (epoch + 1, now)
            assert context.partitions == tuple(now)
        assert len(cache) == len(model) <= limit
        for name, (expected, _) in model.items():
            session = cache.get("g", name)
            assert session is not None and session.epoch == expected
            assert session.connection_id == opened_on[name]
        assert cache.connections() == len({opened_on[name] for name in model})
