"""Group configs (config resource type GROUP) through confluent-kafka's AdminClient on a
one-node cluster, on both metadata stores: an override set with
IncrementalAlterConfigs is described as the group's own with the other keys as defaults,
a value out of the broker's bounds is refused with INVALID_CONFIG naming the bound,
DELETE brings the default back, and an override outlives a restart (on ZooKeeper it is
also in /config/groups, where an operator's znode with a change notice is taken in)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cluster import TestCluster, running_cluster
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from zookeeper import kazoo_client

from conftest import store_settings

TIMEOUT_S = 20.0
SESSION = "consumer.session.timeout.ms"
GROUP_KEYS = {
    "consumer.heartbeat.interval.ms",
    "consumer.session.timeout.ms",
    "errors.deadletterqueue.copy.record.enable",
    "errors.deadletterqueue.topic.name",
    "share.auto.offset.reset",
    "share.delivery.count.limit",
    "share.partition.max.record.locks",
    "share.renew.acknowledge.enable",
    "share.heartbeat.interval.ms",
    "share.record.lock.duration.ms",
    "share.session.timeout.ms",
}


@pytest.fixture
def cluster(tmp_path: Path, store: str | None) -> Iterator[TestCluster]:
    settings = ["broker.session.timeout.ms=3000", *store_settings(store, 3000)]
    with running_cluster(tmp_path, 1, settings=settings, zookeeper=store) as started:
        yield started


def set_group(admin: AdminClient, group: str, key: str, value: str | None) -> None:
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=op)],
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT_S)


def described(admin: AdminClient, group: str) -> dict[str, tuple[str, ConfigSource]]:
    resource = ConfigResource(ResourceType.GROUP, group)
    found = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    return {name: (e.value, ConfigSource(e.source)) for name, e in found.items()}


def test_a_groups_config_is_set_described_bounded_deleted_and_kept(
    cluster: TestCluster, store: str | None
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    set_group(admin, "orders", SESSION, "50000")
    configs = described(admin, "orders")
    assert set(configs) == GROUP_KEYS
    assert configs[SESSION] == ("50000", ConfigSource.GROUP_CONFIG)
    assert configs["consumer.heartbeat.interval.ms"] == ("5000", ConfigSource.DEFAULT_CONFIG)
    assert configs["share.auto.offset.reset"] == ("latest", ConfigSource.DEFAULT_CONFIG)

    with pytest.raises(KafkaException) as refused:
        set_group(admin, "orders", SESSION, "61000")
    error = refused.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "group.consumer.max.session.timeout.ms (60000)" in error.str()
    with pytest.raises(KafkaException) as unknown:
        set_group(admin, "orders", "session.timeout.ms", "50000")
    assert "Unknown group config name: session.timeout.ms" in unknown.value.args[0].str()
    assert described(admin, "orders")[SESSION] == ("50000", ConfigSource.GROUP_CONFIG)

    set_group(admin, "other group", "share.record.lock.duration.ms", "20000")
    set_group(admin, "other group", "share.record.lock.duration.ms", None)
    assert described(admin, "other group")["share.record.lock.duration.ms"] == (
        "30000",
        ConfigSource.DEFAULT_CONFIG,
    )
    set_group(admin, "a/b c", "share.auto.offset.reset", "by_duration:PT1H")

    if store is not None:
        with kazoo_client(store) as zk:
            data, _stat = zk.get("/config/groups/orders")
            assert json.loads(data) == {"version": 1, "config": {SESSION: "50000"}}
            assert zk.exists("/config/groups/other%20group") is None
            assert zk.exists("/config/groups/a%2Fb%20c") is not None

    assert cluster.stop(1) == 0
    cluster.start(1)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert described(admin, "orders")[SESSION] == ("50000", ConfigSource.GROUP_CONFIG)
    assert described(admin, "a/b c")["share.auto.offset.reset"] == (
        "by_duration:PT1H",
        ConfigSource.GROUP_CONFIG,
    )

    if store is not None:  # an operator's znode and notice are taken in, Kafka's way
        with kazoo_client(store) as zk:
            config = {"version": 1, "config": {"consumer.heartbeat.interval.ms": "6000"}}
            zk.create("/config/groups/hand%2Bmade", json.dumps(config).encode())
            notice = {"version": 2, "entity_path": "groups/hand%2Bmade"}
            zk.create("/config/changes/config_change_", json.dumps(notice).encode(), sequence=True)
        cluster.wait_until(
            lambda: (
                described(admin, "hand+made")["consumer.heartbeat.interval.ms"]
                == ("6000", ConfigSource.GROUP_CONFIG)
            ),
            TIMEOUT_S,
            "the hand-written group config to be taken in",
        )


def test_quick_changes_are_not_undone_by_the_echo_of_earlier_ones(
    cluster: TestCluster, store: str | None
) -> None:
    """Set then delete, again and again: the last change stands. On ZooKeeper the
    controller also sees its own change notices; reading one back after a later change
    re-applied the earlier value (a DELETE undone)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for round_ in range(15):
        set_group(admin, "flip", SESSION, str(46000 + round_))
        set_group(admin, "flip", SESSION, None)
    if store is not None:
        # Notices are taken in order: once an operator's later one is in, so are ours.
        with kazoo_client(store) as zk:
            config = {"version": 1, "config": {SESSION: "47000"}}
            zk.create("/config/groups/marker", json.dumps(config).encode())
            notice = {"version": 2, "entity_path": "groups/marker"}
            zk.create("/config/changes/config_change_", json.dumps(notice).encode(), sequence=True)
        cluster.wait_until(
            lambda: described(admin, "marker")[SESSION] == ("47000", ConfigSource.GROUP_CONFIG),
            TIMEOUT_S,
            "the marker notice to be taken in",
        )
        with kazoo_client(store) as zk:
            assert zk.exists("/config/groups/flip") is None
    assert described(admin, "flip")[SESSION] == ("45000", ConfigSource.DEFAULT_CONFIG)
