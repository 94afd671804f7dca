"""ACL checks of ListOffsets, OffsetForLeaderEpoch, DeleteRecords and DescribeLogDirs on
real partition logs (server_harness): DESCRIBE (or CLUSTER_ACTION) and DELETE per topic,
DESCRIBE on the cluster, checked before the partition is looked up, refused topics
answered after the others, and without an authorizer nothing changes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from acl_admin_helpers import Op, acl, by_alice, cluster_acl, guarded
from kio.schema.errors import ErrorCode
from server_harness import TOPIC, Node, batch, image_of, node, produce_request, request, run
from test_delete_records_handler import delete_request

from strom.protocol.apis import ApiKey
from strom.server.handlers.delete_records import handle_delete_records
from strom.server.handlers.fetch import handle_list_offsets, handle_offset_for_leader_epoch
from strom.server.handlers.log_dirs import handle_describe_log_dirs
from strom.server.handlers.produce import handle_produce

E = ErrorCode


@pytest.fixture
def at(tmp_path: Path) -> Any:
    """Node 1, leading TOPIC's one partition, with three records in it."""
    built = node(tmp_path, image_of())
    answer = run(handle_produce(built.produce, produce_request(batch(b"a", b"b", b"c"))))
    assert answer.responses[0].partition_responses[0].error_code == E.none
    yield built
    built.close()


def by_topic(answer: Any, name: str = "name") -> list[tuple[str, list[tuple[int, Any]]]]:
    return [(getattr(t, name), [(p.error_code, p) for p in t.partitions]) for t in answer.topics]


# --- ListOffsets ----------------------------------------------------------------------


def list_offsets(*topics: str, replica_id: int = -1) -> Any:
    return request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": replica_id,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}
                    ],
                }
                for topic in topics
            ],
        },
    )


def test_list_offsets_needs_describe_on_each_topic(at: Node) -> None:
    context = guarded(at.fetch, acl(Op.READ, TOPIC), cluster_acl(Op.CLUSTER_ACTION))
    answer = run(handle_list_offsets(context, by_alice(list_offsets("hidden", TOPIC))))
    assert [(t.name, t.partitions[0].error_code) for t in answer.topics] == [
        (TOPIC, E.none),
        ("hidden", E.topic_authorization_failed),  # after the others; not told it is unknown
    ]
    latest, hidden = (t.partitions[0] for t in answer.topics)
    assert latest.offset == 3
    assert (hidden.offset, hidden.timestamp, hidden.leader_epoch) == (-1, -1, -1)

    # A replica id does not make it a follower's request: no cluster-wide way in.
    follower = guarded(at.fetch, cluster_acl(Op.CLUSTER_ACTION))
    answer = run(handle_list_offsets(follower, by_alice(list_offsets(TOPIC, replica_id=2))))
    assert answer.topics[0].partitions[0].error_code == E.topic_authorization_failed

    answer = run(handle_list_offsets(at.fetch, by_alice(list_offsets("hidden", TOPIC))))
    assert [(t.name, t.partitions[0].error_code) for t in answer.topics] == [
        ("hidden", E.unknown_topic_or_partition),
        (TOPIC, E.none),
    ]


# --- OffsetForLeaderEpoch -------------------------------------------------------------


def epochs(*topics: str, replica_id: int = -1) -> Any:
    return request(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        4,
        {
            "replica_id": replica_id,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 3}],
                }
                for topic in topics
            ],
        },
    )


def test_offset_for_leader_epoch_needs_cluster_action_or_describe(at: Node) -> None:
    consumer = guarded(at.fetch, acl(Op.DESCRIBE, TOPIC))
    answer = run(handle_offset_for_leader_epoch(consumer, by_alice(epochs("hidden", TOPIC))))
    assert [(t.topic, t.partitions[0].error_code) for t in answer.topics] == [
        (TOPIC, E.none),
        ("hidden", E.topic_authorization_failed),  # after the others, never looked up
    ]
    (refused,) = answer.topics[1].partitions
    assert (refused.leader_epoch, refused.end_offset) == (-1, -1)
    assert answer.topics[0].partitions[0].end_offset == 3

    follower = guarded(at.fetch, cluster_acl(Op.CLUSTER_ACTION))
    answer = run(
        handle_offset_for_leader_epoch(follower, by_alice(epochs("hidden", TOPIC, replica_id=2)))
    )
    assert [(t.topic, t.partitions[0].error_code) for t in answer.topics] == [
        ("hidden", E.unknown_topic_or_partition),
        (TOPIC, E.none),
    ]

    nobody = guarded(at.fetch, cluster_acl(Op.DESCRIBE))
    answer = run(handle_offset_for_leader_epoch(nobody, by_alice(epochs(TOPIC, replica_id=2))))
    assert answer.topics[0].partitions[0].error_code == E.topic_authorization_failed

    answer = run(handle_offset_for_leader_epoch(at.fetch, by_alice(epochs(TOPIC))))
    assert answer.topics[0].partitions[0].error_code == E.none


# --- DeleteRecords --------------------------------------------------------------------


def test_delete_records_needs_delete_on_each_topic(at: Node) -> None:
    refusing = guarded(at.fetch, acl(Op.DESCRIBE, TOPIC), acl(Op.ALTER, TOPIC))
    answer = run(handle_delete_records(refusing, by_alice(delete_request({0: 2}))))
    ((partition,),) = [t.partitions for t in answer.topics]
    assert (partition.error_code, partition.low_watermark) == (E.topic_authorization_failed, -1)
    assert at.partition().log.log_start_offset == 0
    ghost = run(handle_delete_records(refusing, by_alice(delete_request({0: 0}, topic="nope"))))
    assert ghost.topics[0].partitions[0].error_code == E.topic_authorization_failed

    allowed = guarded(at.fetch, acl(Op.DELETE, TOPIC))
    answer = run(handle_delete_records(allowed, by_alice(delete_request({0: 2}))))
    assert answer.topics[0].partitions[0].error_code == E.none
    assert at.partition().log.log_start_offset == 2
    ghost = run(handle_delete_records(allowed, by_alice(delete_request({0: 0}, topic="nope"))))
    assert ghost.topics[0].partitions[0].error_code == E.topic_authorization_failed

    answer = run(handle_delete_records(at.fetch, by_alice(delete_request({0: 3}))))
    assert answer.topics[0].partitions[0].error_code == E.none


# --- DescribeLogDirs ------------------------------------------------------------------


def log_dirs(version: int) -> Any:
    return request(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": None})


@pytest.mark.parametrize("version", [1, 4])
def test_describe_log_dirs_needs_describe_on_the_cluster(at: Node, version: int) -> None:
    refusing = guarded(at.fetch, cluster_acl(Op.DESCRIBE_CONFIGS), acl(Op.DESCRIBE, TOPIC))
    answer = run(handle_describe_log_dirs(refusing, by_alice(log_dirs(version))))
    assert answer.results == ()
    assert getattr(answer, "error_code", None) == (
        E.cluster_authorization_failed if version >= 3 else None
    )

    for context in (guarded(at.fetch, cluster_acl(Op.ALTER)), at.fetch):  # ALTER: DESCRIBE too
        answer = run(handle_describe_log_dirs(context, by_alice(log_dirs(version))))
        ((topic,),) = [r.topics for r in answer.results]
        assert topic.name == TOPIC and getattr(answer, "error_code", E.none) == E.none
