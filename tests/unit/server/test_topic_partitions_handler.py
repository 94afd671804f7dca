"""DescribeTopicPartitions (KIP-966): the paging decision on its own (with Hypothesis: any
page size walks every partition once, in order) and the handler around a real
ControllerService on the in-memory metadata store, read as a client reads it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from admin_harness import controller_with_brokers, create_topics
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered
from server_harness import request, run
from test_cluster_handlers import context_of

from strom.protocol.apis import ApiKey
from strom.server.handlers import admin
from strom.server.handlers.topic_partitions import (
    ALL_TOPIC_OPERATIONS,
    Slice,
    handle_describe_topic_partitions,
    page,
)


def test_a_page_stops_at_the_limit_and_names_where_the_next_starts() -> None:
    topics = [("a", 3), ("b", 5), ("c", 1)]
    assert page(topics, None, 4) == ([Slice("a", 0, 3, 3), Slice("b", 0, 1, 5)], ("b", 1))
    assert page(topics, ("b", 1), 4) == ([Slice("b", 1, 5, 5)], ("c", 0))
    assert page(topics, ("c", 0), 4) == ([Slice("c", 0, 1, 1)], None)
    assert page(topics, None, 100) == (
        [Slice("a", 0, 3, 3), Slice("b", 0, 5, 5), Slice("c", 0, 1, 1)],
        None,
    )


def test_missing_topics_take_no_room_and_a_cursor_skips_earlier_names() -> None:
    topics = [("a", 2), ("gone", None), ("z", 2)]
    assert page(topics, None, 2) == ([Slice("a", 0, 2, 2), Slice("gone", 0, 0, None)], ("z", 0))
    assert page(topics, ("m", 0), 5) == ([Slice("z", 0, 2, 2)], None)  # "m" itself is gone


@given(
    st.lists(st.integers(1, 7), min_size=1, max_size=6),
    st.integers(1, 9),
)
def test_paging_with_any_limit_gives_every_partition_once_in_order(
    counts: list[int], limit: int
) -> None:
    topics = [(f"t{i}", count) for i, count in enumerate(counts)]
    seen: list[tuple[str, int]] = []
    cursor: tuple[str, int] | None = None
    for _ in range(sum(counts) + len(counts) + 1):
        slices, cursor = page(topics, cursor, limit)
        assert sum(s.stop - s.start for s in slices) <= limit
        seen += [(s.name, i) for s in slices for i in range(s.start, s.stop)]
        if cursor is None:
            break
    assert cursor is None
    assert seen == [(name, i) for name, count in topics for i in range(count)]


def describe(*names: str, limit: int = 2000, cursor: tuple[str, int] | None = None) -> Any:
    return request(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        0,
        {
            "topics": [{"name": name} for name in names],
            "response_partition_limit": limit,
            "cursor": None
            if cursor is None
            else {"topic_name": cursor[0], "partition_index": cursor[1]},
        },
    )


def test_topics_page_by_page_as_kafka_topics_describe_asks(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await answered(
            admin.handle_create_topics,
            admin_context(one),
            create_topics(("beta", 3, 2, {}), ("alpha", 2, 3, {})),
        )
        context = context_of(one)
        handle = handle_describe_topic_partitions

        first = await answered(handle, context, describe(limit=3))
        assert [(t.name, [p.partition_index for p in t.partitions]) for t in first.topics] == [
            ("alpha", [0, 1]),
            ("beta", [0]),
        ]
        assert (first.next_cursor.topic_name, first.next_cursor.partition_index) == ("beta", 1)
        rest = await answered(handle, context, describe(cursor=("beta", 1), limit=3))
        assert [p.partition_index for t in rest.topics for p in t.partitions] == [1, 2]
        assert rest.next_cursor is None

        image = one.metadata.image
        alpha = first.topics[0]
        assert alpha.error_code == ErrorCode.none and alpha.is_internal is False
        assert alpha.topic_id == image.topics_by_name["alpha"].topic_id
        assert alpha.topic_authorized_operations == ALL_TOPIC_OPERATIONS == 3576
        for partition in alpha.partitions:
            state = image.topics_by_name["alpha"].partitions[partition.partition_index]
            assert partition.leader_id == state.leader
            assert partition.leader_epoch == state.leader_epoch
            assert partition.replica_nodes == state.replicas
            assert partition.isr_nodes == state.isr
            assert partition.eligible_leader_replicas == ()
            assert partition.offline_replicas == ()

        named = await answered(handle, context, describe("beta", "nope"))
        assert [(t.name, t.error_code) for t in named.topics] == [
            ("beta", ErrorCode.none),
            ("nope", ErrorCode.unknown_topic_or_partition),
        ]
        assert named.topics[1].topic_id is None  # the zero UUID, as clients read it
        assert named.topics[1].partitions == ()
        wrong = await answered(handle, context, describe("beta", cursor=("alpha", 0)))
        assert [(t.name, t.error_code) for t in wrong.topics] == [
            ("beta", ErrorCode.invalid_request)
        ]

    run(scenario())
