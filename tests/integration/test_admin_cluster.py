"""Admin through real admin clients over loopback: CreatePartitions, config sources,
DescribeCluster, and all of it surviving a broker restart.

The tests run on the `strom_broker` fixture (one node, stopped after the test), except
the one that kills a `strom serve` process with SIGKILL. Waiting is done by polling with
deadlines; every client a test starts is closed in a `finally`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import kafka
import kafka.admin
import kafka.errors
import pytest
from admin_helpers import (
    NODE_ID,
    TIMEOUT_S,
    ck_admin,
    ck_create,
    ck_describe,
    ck_topic_configs,
    ck_topic_names,
    consume,
    kp_admin,
    partition_dirs,
    produce,
    unique_topic,
    wait_until,
    watermarks,
)
from broker import BrokerProcess
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from node_files import log_dir, port

from strom.testing import StromCluster

# --- partitions ------------------------------------------------------------------------


def test_create_partitions(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    topic = unique_topic("grow")
    ck_create(admin, NewTopic(topic, num_partitions=2, replication_factor=1))
    produce(bootstrap, topic, {0: [b"p0"], 1: [b"p1"]})

    [future] = admin.create_partitions(
        [NewPartitions(topic, 5)], request_timeout=TIMEOUT_S
    ).values()
    future.result(timeout=TIMEOUT_S)
    wait_until(
        lambda: len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 5,
        TIMEOUT_S,
        "5 partitions in metadata",
    )
    assert len(partition_dirs(log_dir(strom_broker), topic)) == 5
    description = ck_describe(admin, topic)
    assert all(p.leader.id == NODE_ID for p in description.partitions)
    produce(bootstrap, topic, {p: [b"new-%d" % p] for p in (2, 3, 4)})
    got = consume(bootstrap, topic, {p: 1 for p in range(5)})
    assert got == {0: [b"p0"], 1: [b"p1"], 2: [b"new-2"], 3: [b"new-3"], 4: [b"new-4"]}

    for count in (3, 5):
        [shrink] = admin.create_partitions(
            [NewPartitions(topic, count)], request_timeout=TIMEOUT_S
        ).values()
        with pytest.raises(KafkaException) as raised:
            shrink.result(timeout=TIMEOUT_S)
        assert raised.value.args[0].code() == KafkaError.INVALID_PARTITIONS, count
    assert len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 5

    [validated] = admin.create_partitions(
        [NewPartitions(topic, 9)], validate_only=True, request_timeout=TIMEOUT_S
    ).values()
    validated.result(timeout=TIMEOUT_S)
    assert len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 5

    [unknown] = admin.create_partitions(
        [NewPartitions(unique_topic("nope"), 3)], request_timeout=TIMEOUT_S
    ).values()
    with pytest.raises(KafkaException) as raised:
        unknown.result(timeout=TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    with kp_admin(bootstrap) as kadmin:
        kadmin.create_partitions({topic: 6})
        [kdesc] = kadmin.describe_topics([topic])
        assert len(kdesc["partitions"]) == 6
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            kadmin.create_partitions({topic: 2})


# --- configs ---------------------------------------------------------------------------


@pytest.mark.strom(config={"log.retention.ms": 1234567})
def test_describe_configs_sources(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    topic = unique_topic("cfg")
    overrides = {"max.message.bytes": "5000", "cleanup.policy": "compact"}
    ck_create(admin, NewTopic(topic, 1, 1, config=overrides))

    entries = ck_topic_configs(admin, topic)
    for key, value in overrides.items():
        assert entries[key].value == value
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, key
        assert not entries[key].is_default
    retention = entries["retention.ms"]
    assert retention.value == "1234567"
    assert retention.source == ConfigSource.STATIC_BROKER_CONFIG.value
    for key in ("segment.bytes", "min.insync.replicas", "message.timestamp.type"):
        assert key in entries, f"{key} missing from {sorted(entries)}"
    inherited = {ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value}
    for key, entry in entries.items():
        if key not in overrides:
            assert entry.source in inherited, (key, entry.source)
            assert entry.is_default == (entry.source == ConfigSource.DEFAULT_CONFIG.value)
    assert entries["message.timestamp.type"].value == "CreateTime"

    [future] = admin.describe_configs(
        [ConfigResource(ResourceType.BROKER, str(NODE_ID))], request_timeout=TIMEOUT_S
    ).values()
    broker_entries = future.result(timeout=TIMEOUT_S)
    assert "num.partitions" in broker_entries
    assert broker_entries["num.partitions"].value == "1"
    assert broker_entries["num.partitions"].source in (
        ConfigSource.DEFAULT_CONFIG.value,
        ConfigSource.STATIC_BROKER_CONFIG.value,
    )
    assert broker_entries["log.retention.ms"].value == "1234567"
    assert broker_entries["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value

    [missing] = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, unique_topic("none"))], request_timeout=TIMEOUT_S
    ).values()
    with pytest.raises(KafkaException) as raised:
        missing.result(timeout=TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    with kp_admin(bootstrap) as kadmin:
        resource = kafka.admin.ConfigResource("TOPIC", topic)
        described = kadmin.describe_configs([resource], config_filter="all")
        topic_configs = described["topic"][topic]
        assert topic_configs["max.message.bytes"]["value"] == "5000"
        assert topic_configs["max.message.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert topic_configs["retention.ms"]["value"] == "1234567"
        assert topic_configs["retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
        modified = kadmin.describe_configs([resource])["topic"][topic]
        assert set(modified) == set(overrides)
        some = kafka.admin.ConfigResource("TOPIC", topic, configs=["retention.ms"])
        only = kadmin.describe_configs([some], config_filter="all")["topic"][topic]
        assert set(only) == {"retention.ms"}

        broker_resource = kafka.admin.ConfigResource("BROKER", str(NODE_ID))
        broker_configs = kadmin.describe_configs([broker_resource], config_filter="all")
        by_name = broker_configs["broker"][str(NODE_ID)]
        assert by_name["num.partitions"]["value"] == "1"
        assert by_name["log.retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"


# --- cluster and restart ---------------------------------------------------------------


def ck_cluster(bootstrap: str) -> Any:
    admin = ck_admin(bootstrap)  # must outlive the future
    return admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)


def test_describe_cluster_stable_across_restart(strom_broker: StromCluster) -> None:
    bootstrap = strom_broker.bootstrap_servers
    before = ck_cluster(bootstrap)
    assert before.cluster_id
    assert before.controller is not None and before.controller.id == NODE_ID
    assert [(n.id, n.host, n.port) for n in before.nodes] == [
        (NODE_ID, "127.0.0.1", port(strom_broker))
    ]
    with kp_admin(bootstrap) as kadmin:
        described = kadmin.describe_cluster()
        assert described["cluster_id"] == before.cluster_id
        assert described["controller_id"] == NODE_ID
        assert [b["broker_id"] for b in described["brokers"]] == [NODE_ID]

    strom_broker.restart_node(NODE_ID)  # a clean stop (NodeError if not) and a start
    after = ck_cluster(bootstrap)
    assert after.cluster_id == before.cluster_id
    assert after.controller.id == NODE_ID
    assert [n.id for n in after.nodes] == [NODE_ID]


def test_authorized_operations_are_every_supported_one_when_asked(
    strom_broker: StromCluster,
) -> None:
    """Without an authorizer Kafka reports every operation a resource type supports when
    a client asks (librdkafka's test suite checks this), and nothing when it does not."""
    bootstrap = strom_broker.bootstrap_servers
    admin = ck_admin(bootstrap)
    topic = unique_topic("ops")
    ck_create(admin, NewTopic(topic, num_partitions=1, replication_factor=1))
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": "ops-group"})
    try:  # a committed offset makes the group exist
        member.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
    finally:
        member.close()

    cluster = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
    assert {op.name for op in cluster.authorized_operations} == {
        "CREATE",
        "CLUSTER_ACTION",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "IDEMPOTENT_WRITE",
        "ALTER",
        "DESCRIBE",
    }
    assert admin.describe_cluster().result(TIMEOUT_S).authorized_operations is None
    [described] = admin.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True
    ).values()
    assert {op.name for op in described.result(TIMEOUT_S).authorized_operations} == {
        "READ",
        "WRITE",
        "CREATE",
        "DESCRIBE",
        "DELETE",
        "ALTER",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    }
    [group] = admin.describe_consumer_groups(
        ["ops-group"], include_authorized_operations=True
    ).values()
    assert {op.name for op in group.result(TIMEOUT_S).authorized_operations} == {
        "READ",
        "DESCRIBE",
        "DELETE",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
    }


def test_a_clean_restart_keeps_everything(
    strom_broker: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    check_restart_keeps_everything(
        strom_broker.bootstrap_servers,
        log_dir(strom_broker),
        "stop",
        lambda: strom_broker.restart_node(NODE_ID),  # NodeError if the stop is not clean
        lambda: caplog.text,
    )


def test_a_kill_9_keeps_everything(broker: BrokerProcess) -> None:
    """SIGKILL on a real `strom serve` process: what survives is what the kernel had."""

    def kill_and_start() -> None:
        broker.kill()
        broker.start()

    check_restart_keeps_everything(
        broker.bootstrap, broker.data_dir, "kill", kill_and_start, broker.read_log
    )


def check_restart_keeps_everything(
    bootstrap: str, logs: Path, how: str, restart: Callable[[], None], log: Callable[[], str]
) -> None:
    """Topics, configs, a deletion, the cluster id and the records all survive `restart`."""
    admin = ck_admin(bootstrap)
    kept = unique_topic("kept")
    gone = unique_topic("gone")
    overrides = {"retention.ms": "7200000", "max.message.bytes": "100000"}
    ck_create(
        admin,
        NewTopic(kept, num_partitions=3, replication_factor=1, config=overrides),
        NewTopic(gone, num_partitions=1, replication_factor=1),
    )
    [future] = admin.create_partitions([NewPartitions(kept, 4)]).values()
    future.result(timeout=TIMEOUT_S)
    values = {
        p: [b"%s-%d-%d" % (how.encode(), p, i) for i in range(50 * (p + 1))] for p in range(4)
    }
    produce(bootstrap, kept, values, **{"compression.type": "zstd", "acks": "all"})
    [deleted] = admin.delete_topics([gone], request_timeout=TIMEOUT_S).values()
    deleted.result(timeout=TIMEOUT_S)
    wait_until(lambda: gone not in ck_topic_names(admin), TIMEOUT_S, "deleted topic to go")
    topic_id = str(ck_describe(admin, kept).topic_id)
    cluster_id = ck_cluster(bootstrap).cluster_id
    del admin

    restart()

    admin = ck_admin(bootstrap)
    names = ck_topic_names(admin)
    assert kept in names and gone not in names, log()
    assert not partition_dirs(logs, gone)
    description = ck_describe(admin, kept)
    assert str(description.topic_id) == topic_id
    assert [p.id for p in description.partitions] == [0, 1, 2, 3]
    assert ck_cluster(bootstrap).cluster_id == cluster_id
    entries = ck_topic_configs(admin, kept)
    for key, value in overrides.items():
        assert entries[key].value == value
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    counts = {p: len(v) for p, v in values.items()}
    assert consume(bootstrap, kept, counts) == values, log()
    produce(bootstrap, kept, {0: [b"after"]})
    assert watermarks(bootstrap, kept, 0) == (0, counts[0] + 1)
    assert consume(bootstrap, kept, {0: counts[0] + 1})[0][-1] == b"after"
