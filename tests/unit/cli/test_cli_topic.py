"""Rows of the topic tables, built from confluent-kafka's metadata objects."""

from __future__ import annotations

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    ClusterMetadata,
    ConfigEntry,
    ConfigSource,
    PartitionMetadata,
    TopicMetadata,
)

from strom.cli.topic import config_rows, partition_rows, topic_rows


def topic(name: str, replicas: list[list[int]], leaders: list[int]) -> TopicMetadata:
    result = TopicMetadata()
    result.topic = name
    for index, (nodes, leader) in enumerate(zip(replicas, leaders, strict=True)):
        partition = PartitionMetadata()
        partition.id = index
        partition.leader = leader
        partition.replicas = nodes
        partition.isrs = nodes[:1]
        result.partitions[index] = partition
    return result


def cluster(*topics: TopicMetadata) -> ClusterMetadata:
    result = ClusterMetadata()
    for t in topics:
        assert t.topic is not None
        result.topics[t.topic] = t
    return result


def test_topics_sorted_with_internal_ones_hidden_unless_asked() -> None:
    metadata = cluster(
        topic("orders", [[1, 2, 3], [2, 3, 1]], [1, 2]),
        topic("__consumer_offsets", [[1]], [1]),
        topic("audit", [[1]], [1]),
    )
    assert topic_rows(metadata, include_internal=False) == [("audit", 1, 1), ("orders", 2, 3)]
    assert topic_rows(metadata, include_internal=True)[0] == ("__consumer_offsets", 1, 1)


def test_partition_rows_show_missing_leader_and_errors() -> None:
    t = topic("orders", [[1, 2], [2, 1]], [1, -1])
    rows = partition_rows(t)
    assert rows == [("0", "1", "1,2", "1", ""), ("1", "none", "2,1", "2", "")]


def test_only_non_default_configs_are_listed() -> None:
    entries = {
        "retention.ms": ConfigEntry(
            "retention.ms", "1000", source=ConfigSource.DYNAMIC_TOPIC_CONFIG
        ),
        "segment.bytes": ConfigEntry(
            "segment.bytes", "1073741824", source=ConfigSource.DEFAULT_CONFIG, is_default=True
        ),
        "sasl.secret": ConfigEntry(
            "sasl.secret", None, source=ConfigSource.STATIC_BROKER_CONFIG, is_sensitive=True
        ),
    }
    assert config_rows(entries) == [
        ("retention.ms", "1000", "dynamic topic config"),
        ("sasl.secret", "(sensitive)", "static broker config"),
    ]
