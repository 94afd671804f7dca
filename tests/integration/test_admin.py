"""Admin APIs through real admin clients (confluent-kafka and kafka-python) over loopback.

Topics, partitions, configs and the cluster description, as a client sees them, and
that all of it survives a broker restart. Waiting is done by polling with deadlines;
every broker and client a test starts is closed in a `finally`.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kafka
import kafka.admin
import kafka.errors
import pytest
from broker import BrokerProcess
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)

TIMEOUT_S = 30.0
NODE_ID = 1  # strom's default node.id


# --- helpers ---------------------------------------------------------------------------


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.05)


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def ck_admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


@contextmanager
def kp_admin(broker: BrokerProcess) -> Iterator[kafka.KafkaAdminClient]:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        yield admin
    finally:
        admin.close()


@contextmanager
def own_broker(tmp_path: Path, *settings: str) -> Iterator[BrokerProcess]:
    extra: list[str] = []
    for setting in settings:
        extra += ["--set", setting]
    process = BrokerProcess(tmp_path / "own", extra=extra)
    process.start()
    try:
        yield process
    finally:
        process.kill()


def ck_create(admin: AdminClient, *topics: NewTopic, validate_only: bool = False) -> None:
    futures = admin.create_topics(
        list(topics), validate_only=validate_only, request_timeout=TIMEOUT_S
    )
    for future in futures.values():
        future.result(timeout=TIMEOUT_S)


def ck_create_error(admin: AdminClient, topic: NewTopic, **kwargs: Any) -> KafkaError:
    """The error the broker answers a create with (fails the test if it succeeds)."""
    [future] = admin.create_topics([topic], request_timeout=TIMEOUT_S, **kwargs).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=TIMEOUT_S)
    error: KafkaError = raised.value.args[0]
    return error


def kp_create_codes(admin: kafka.KafkaAdminClient, topics: dict[str, Any]) -> dict[str, int]:
    result = admin.create_topics(topics, raise_errors=False)
    return {t["name"]: t["error_code"] for t in result["topics"]}


def ck_topic_names(admin: AdminClient) -> set[str]:
    return set(admin.list_topics(timeout=TIMEOUT_S).topics)


def ck_describe(admin: AdminClient, topic: str) -> Any:
    [future] = admin.describe_topics(TopicCollection([topic]), request_timeout=TIMEOUT_S).values()
    return future.result(timeout=TIMEOUT_S)


def ck_topic_configs(admin: AdminClient, topic: str) -> dict[str, Any]:
    [future] = admin.describe_configs(
        [ConfigResource(ResourceType.TOPIC, topic)], request_timeout=TIMEOUT_S
    ).values()
    return dict(future.result(timeout=TIMEOUT_S))


def partition_dirs(broker: BrokerProcess, topic: str) -> list[Path]:
    return sorted(broker.data_dir.glob(f"{topic}-*"))


def produce(broker: BrokerProcess, topic: str, values: dict[int, list[bytes]], **conf: Any) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, **conf})
    errors: list[Any] = []
    try:
        for partition, batch in values.items():
            for value in batch:
                producer.produce(
                    topic,
                    value=value,
                    key=b"k",
                    partition=partition,
                    on_delivery=lambda err, _msg: err is not None and errors.append(err),
                )
        assert producer.flush(TIMEOUT_S) == 0
    finally:
        producer.purge()
        producer.flush(5)
    assert not errors, errors


def consume(broker: BrokerProcess, topic: str, counts: dict[int, int]) -> dict[int, list[bytes]]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "strom-admin-it",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    got: dict[int, list[bytes]] = {p: [] for p in counts}
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in counts])
        deadline = time.monotonic() + TIMEOUT_S
        while any(len(got[p]) < n for p, n in counts.items()):
            assert time.monotonic() < deadline, f"consumed {got} of {counts}"
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error() is None:
                    got[msg.partition()].append(msg.value())
    finally:
        consumer.close()
    return got


def watermarks(broker: BrokerProcess, topic: str, partition: int) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "strom-admin-wm"})
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, partition), timeout=TIMEOUT_S
        )
    finally:
        consumer.close()
    return int(low), int(high)


# --- create, describe, list ------------------------------------------------------------


def test_create_describe_list_confluent(broker: BrokerProcess) -> None:
    admin = ck_admin(broker)
    topic = unique_topic("ck")
    configs = {"retention.ms": "86400000", "max.message.bytes": "50000"}
    ck_create(admin, NewTopic(topic, num_partitions=3, replication_factor=1, config=configs))

    assert topic in ck_topic_names(admin)
    description = ck_describe(admin, topic)
    assert description.name == topic
    assert str(description.topic_id) not in ("", "AAAAAAAAAAAAAAAAAAAAAA")
    assert not description.is_internal
    assert [p.id for p in description.partitions] == [0, 1, 2]
    for partition in description.partitions:
        assert partition.leader.id == NODE_ID
        assert [n.id for n in partition.replicas] == [NODE_ID]
        assert [n.id for n in partition.isr] == [NODE_ID]
    assert [p.name for p in partition_dirs(broker, topic)] == [f"{topic}-{i}" for i in range(3)]

    metadata = admin.list_topics(topic, timeout=TIMEOUT_S)
    assert sorted(metadata.topics[topic].partitions) == [0, 1, 2]
    assert [b.id for b in metadata.brokers.values()] == [NODE_ID]

    entries = ck_topic_configs(admin, topic)
    assert entries["retention.ms"].value == "86400000"
    assert entries["max.message.bytes"].value == "50000"

    missing = unique_topic("missing")
    with pytest.raises(KafkaException) as raised:
        ck_describe(admin, missing)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert missing not in ck_topic_names(admin), "describing must not auto-create"


def test_create_describe_list_kafka_python(broker: BrokerProcess) -> None:
    topic = unique_topic("kp")
    with kp_admin(broker) as admin:
        codes = kp_create_codes(
            admin,
            {
                topic: {
                    "num_partitions": 2,
                    "replication_factor": 1,
                    "configs": {"cleanup.policy": "delete", "segment.bytes": "1048576"},
                }
            },
        )
        assert codes == {topic: 0}
        assert topic in admin.list_topics()
        [description] = admin.describe_topics([topic])
        assert description["name"] == topic
        assert description["error_code"] == 0
        partitions = sorted(description["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in partitions] == [0, 1]
        for partition in partitions:
            assert partition["leader_id"] == NODE_ID
            assert list(partition["replica_nodes"]) == [NODE_ID]
            assert list(partition["isr_nodes"]) == [NODE_ID]

        missing = unique_topic("missing")
        [absent] = admin.describe_topics([missing])
        assert absent["error_code"] == kafka.errors.UnknownTopicOrPartitionError.errno
        assert missing not in admin.list_topics(), "describing must not auto-create"

        # Created with kafka-python, visible to confluent-kafka's admin.
        assert topic in ck_topic_names(ck_admin(broker))


def test_create_topic_errors_confluent(broker: BrokerProcess) -> None:
    admin = ck_admin(broker)
    topic = unique_topic("dup")
    ck_create(admin, NewTopic(topic, num_partitions=1, replication_factor=1))

    again = ck_create_error(admin, NewTopic(topic, num_partitions=1, replication_factor=1))
    assert again.code() == KafkaError.TOPIC_ALREADY_EXISTS, again

    validated = unique_topic("validate")
    ck_create(
        admin, NewTopic(validated, num_partitions=4, replication_factor=1), validate_only=True
    )
    assert validated not in ck_topic_names(admin)
    assert partition_dirs(broker, validated) == []
    invalid_validated = ck_create_error(
        admin, NewTopic(topic, num_partitions=1, replication_factor=1), validate_only=True
    )
    assert invalid_validated.code() == KafkaError.TOPIC_ALREADY_EXISTS

    for bad in ("has space", "x" * 250, "..", ".", "bad/slash"):
        error = ck_create_error(admin, NewTopic(bad, num_partitions=1, replication_factor=1))
        assert error.code() == KafkaError.TOPIC_EXCEPTION, (bad, error)
    assert not any(" " in name or name == ".." for name in ck_topic_names(admin))

    # The longest legal name works.
    longest = "y" * 249
    ck_create(admin, NewTopic(longest, num_partitions=1, replication_factor=1))
    assert longest in ck_topic_names(admin)

    base = f"col.{uuid.uuid4().hex[:6]}"
    ck_create(admin, NewTopic(base, num_partitions=1, replication_factor=1))
    clash = ck_create_error(
        admin, NewTopic(base.replace(".", "_"), num_partitions=1, replication_factor=1)
    )
    assert clash.code() == KafkaError.TOPIC_EXCEPTION, clash

    factor = ck_create_error(admin, NewTopic(unique_topic("rf2"), 1, replication_factor=2))
    assert factor.code() == KafkaError.INVALID_REPLICATION_FACTOR, factor

    unknown_broker = ck_create_error(
        admin, NewTopic(unique_topic("asg"), 2, replica_assignment=[[NODE_ID], [NODE_ID + 41]])
    )
    assert unknown_broker.code() in (
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
        KafkaError.BROKER_NOT_AVAILABLE,
    ), unknown_broker

    assigned = unique_topic("asg")
    ck_create(admin, NewTopic(assigned, 2, replica_assignment=[[NODE_ID], [NODE_ID]]))
    description = ck_describe(admin, assigned)
    assert [p.id for p in description.partitions] == [0, 1]
    assert all([n.id for n in p.replicas] == [NODE_ID] for p in description.partitions)

    bad_config = ck_create_error(
        admin,
        NewTopic(unique_topic("cfg"), 1, 1, config={"cleanup.policy": "sometimes"}),
    )
    assert bad_config.code() == KafkaError.INVALID_CONFIG, bad_config


def test_create_topic_errors_kafka_python(broker: BrokerProcess) -> None:
    topic = unique_topic("kdup")
    with kp_admin(broker) as admin:
        one = {"num_partitions": 1, "replication_factor": 1}
        assert kp_create_codes(admin, {topic: one}) == {topic: 0}
        assert kp_create_codes(admin, {topic: one}) == {
            topic: kafka.errors.TopicAlreadyExistsError.errno
        }
        with pytest.raises(kafka.errors.TopicAlreadyExistsError):
            admin.create_topics({topic: one})

        validated = unique_topic("kval")
        result = admin.create_topics({validated: one}, validate_only=True)
        assert [t["error_code"] for t in result["topics"]] == [0]
        assert validated not in admin.list_topics()

        invalid = kafka.errors.InvalidTopicError.errno
        for bad in ("a b", "z" * 250, ".."):
            assert kp_create_codes(admin, {bad: one}) == {bad: invalid}

        dotted = f"kcol.{uuid.uuid4().hex[:6]}"
        underscored = dotted.replace(".", "_")
        assert kp_create_codes(admin, {underscored: one}) == {underscored: 0}
        assert kp_create_codes(admin, {dotted: one}) == {dotted: invalid}

        factor = unique_topic("krf")
        assert kp_create_codes(admin, {factor: {"num_partitions": 1, "replication_factor": 2}}) == {
            factor: kafka.errors.InvalidReplicationFactorError.errno
        }

        assigned = unique_topic("kasg")
        codes = kp_create_codes(admin, {assigned: {"assignments": {0: [NODE_ID], 1: [NODE_ID]}}})
        assert codes == {assigned: 0}
        [description] = admin.describe_topics([assigned])
        assert sorted(p["partition_index"] for p in description["partitions"]) == [0, 1]

        defaults = unique_topic("kdef")
        assert kp_create_codes(admin, {defaults: {}}) == {defaults: 0}
        [description] = admin.describe_topics([defaults])
        assert len(description["partitions"]) == 1  # num.partitions defaults to 1


# --- delete ----------------------------------------------------------------------------


def test_delete_and_recreate(broker: BrokerProcess) -> None:
    admin = ck_admin(broker)
    topic = unique_topic("del")
    ck_create(admin, NewTopic(topic, num_partitions=2, replication_factor=1))
    first_id = str(ck_describe(admin, topic).topic_id)
    produce(broker, topic, {0: [b"a", b"b"], 1: [b"c"]})
    assert watermarks(broker, topic, 0) == (0, 2)
    assert len(partition_dirs(broker, topic)) == 2

    [future] = admin.delete_topics([topic], request_timeout=TIMEOUT_S).values()
    future.result(timeout=TIMEOUT_S)
    wait_until(lambda: topic not in ck_topic_names(admin), TIMEOUT_S, "topic to leave metadata")
    wait_until(lambda: not partition_dirs(broker, topic), TIMEOUT_S, "partition dirs to go")
    # librdkafka asks for auto-creation when a producer-type handle names a topic.
    no_auto = AdminClient(
        {"bootstrap.servers": broker.bootstrap, "allow.auto.create.topics": False}
    )
    metadata = no_auto.list_topics(topic, timeout=TIMEOUT_S)
    assert metadata.topics[topic].error is not None
    assert metadata.topics[topic].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    [missing] = admin.delete_topics([topic], request_timeout=TIMEOUT_S).values()
    with pytest.raises(KafkaException) as raised:
        missing.result(timeout=TIMEOUT_S)
    assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    ck_create(admin, NewTopic(topic, num_partitions=1, replication_factor=1))
    second = ck_describe(admin, topic)
    assert str(second.topic_id) != first_id, "a re-created topic gets a new id"
    assert [p.id for p in second.partitions] == [0]
    assert watermarks(broker, topic, 0) == (0, 0), "a re-created topic starts empty"
    produce(broker, topic, {0: [b"fresh"]})
    assert consume(broker, topic, {0: 1}) == {0: [b"fresh"]}


def test_delete_kafka_python(broker: BrokerProcess) -> None:
    topic = unique_topic("kdel")
    with kp_admin(broker) as admin:
        admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}})
        assert len(partition_dirs(broker, topic)) == 3
        result = admin.delete_topics([topic])
        assert [(t["name"], t["error_code"]) for t in result["topics"]] == [(topic, 0)]
        wait_until(lambda: topic not in admin.list_topics(), TIMEOUT_S, "topic to go")
        wait_until(lambda: not partition_dirs(broker, topic), TIMEOUT_S, "partition dirs to go")
        with pytest.raises(kafka.errors.UnknownTopicOrPartitionError):
            admin.delete_topics([topic])

        # By topic id (DeleteTopics v6, KIP-516), after describing it by id (Metadata v12).
        by_id = unique_topic("kdelid")
        admin.create_topics({by_id: {"num_partitions": 1, "replication_factor": 1}})
        [description] = admin.describe_topics([by_id])
        topic_id = uuid.UUID(str(description["topic_id"]))
        assert topic_id.int != 0
        [same] = admin.describe_topics([topic_id])
        assert same["name"] == by_id
        result = admin.delete_topics([topic_id])
        assert [t["error_code"] for t in result["topics"]] == [0]
        wait_until(lambda: by_id not in admin.list_topics(), TIMEOUT_S, "topic to go")
        assert not partition_dirs(broker, by_id)
        with pytest.raises(kafka.errors.UnknownTopicIdError):
            admin.delete_topics([topic_id])


def test_delete_topic_while_producing(broker: BrokerProcess) -> None:
    admin = ck_admin(broker)
    victim = unique_topic("victim")
    ck_create(admin, NewTopic(victim, num_partitions=4, replication_factor=1))
    stop = threading.Event()
    sent = [0, 0]

    def pump(slot: int) -> None:
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "linger.ms": 0,
                "acks": "all",
                "allow.auto.create.topics": False,
                "message.timeout.ms": 3000,
            }
        )
        try:
            while not stop.is_set():
                for _ in range(100):
                    with contextlib.suppress(BufferError):
                        producer.produce(victim, value=b"x" * 100)
                        sent[slot] += 1
                producer.poll(0.001)
        finally:
            producer.purge()
            producer.flush(1)

    threads = [threading.Thread(target=pump, args=(slot,), daemon=True) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: sum(sent) > 5_000, TIMEOUT_S, "producers to get going")
        [future] = admin.delete_topics([victim], request_timeout=TIMEOUT_S).values()
        future.result(timeout=TIMEOUT_S)
        wait_until(lambda: victim not in ck_topic_names(admin), TIMEOUT_S, "topic to go")
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)

    survivor = unique_topic("survivor")
    ck_create(admin, NewTopic(survivor, num_partitions=1, replication_factor=1))
    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    try:
        producer.produce(survivor, value=b"still here", on_delivery=lambda e, _m: errors.append(e))
        producer.flush(TIMEOUT_S)
    finally:
        producer.purge()
        producer.flush(1)
    assert len(errors) == 1 and errors[0] is None, (
        f"produce after the delete: {errors}\n{broker.read_log()[-3000:]}"
    )
    assert "background task flusher failed" not in broker.read_log()


# --- partitions ------------------------------------------------------------------------


def test_create_partitions(broker: BrokerProcess) -> None:
    admin = ck_admin(broker)
    topic = unique_topic("grow")
    ck_create(admin, NewTopic(topic, num_partitions=2, replication_factor=1))
    produce(broker, topic, {0: [b"p0"], 1: [b"p1"]})

    [future] = admin.create_partitions(
        [NewPartitions(topic, 5)], request_timeout=TIMEOUT_S
    ).values()
    future.result(timeout=TIMEOUT_S)
    wait_until(
        lambda: len(admin.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions) == 5,
        TIMEOUT_S,
        "5 partitions in metadata",
    )
    assert len(partition_dirs(broker, topic)) == 5
    description = ck_describe(admin, topic)
    assert all(p.leader.id == NODE_ID for p in description.partitions)
    produce(broker, topic, {p: [b"new-%d" % p] for p in (2, 3, 4)})
    got = consume(broker, topic, {p: 1 for p in range(5)})
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

    with kp_admin(broker) as kadmin:
        kadmin.create_partitions({topic: 6})
        [kdesc] = kadmin.describe_topics([topic])
        assert len(kdesc["partitions"]) == 6
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            kadmin.create_partitions({topic: 2})


# --- configs ---------------------------------------------------------------------------


def test_describe_configs_sources(tmp_path: Path) -> None:
    with own_broker(tmp_path, "log.retention.ms=1234567") as broker:
        admin = ck_admin(broker)
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
        assert broker_entries["log.retention.ms"].source == (
            ConfigSource.STATIC_BROKER_CONFIG.value
        )

        [missing] = admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, unique_topic("none"))], request_timeout=TIMEOUT_S
        ).values()
        with pytest.raises(KafkaException) as raised:
            missing.result(timeout=TIMEOUT_S)
        assert raised.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

        with kp_admin(broker) as kadmin:
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


def ck_cluster(broker: BrokerProcess) -> Any:
    admin = ck_admin(broker)  # must outlive the future
    return admin.describe_cluster(request_timeout=TIMEOUT_S).result(TIMEOUT_S)


def test_describe_cluster_stable_across_restart(broker: BrokerProcess) -> None:
    before = ck_cluster(broker)
    assert before.cluster_id
    assert before.controller is not None and before.controller.id == NODE_ID
    assert [(n.id, n.host, n.port) for n in before.nodes] == [(NODE_ID, "127.0.0.1", broker.port)]
    with kp_admin(broker) as kadmin:
        described = kadmin.describe_cluster()
        assert described["cluster_id"] == before.cluster_id
        assert described["controller_id"] == NODE_ID
        assert [b["broker_id"] for b in described["brokers"]] == [NODE_ID]

    assert broker.stop() == 0, broker.read_log()
    broker.start()
    after = ck_cluster(broker)
    assert after.cluster_id == before.cluster_id
    assert after.controller.id == NODE_ID
    assert [n.id for n in after.nodes] == [NODE_ID]


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_restart_keeps_everything(broker: BrokerProcess, how: str) -> None:
    admin = ck_admin(broker)
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
    produce(broker, kept, values, **{"compression.type": "zstd", "acks": "all"})
    [deleted] = admin.delete_topics([gone], request_timeout=TIMEOUT_S).values()
    deleted.result(timeout=TIMEOUT_S)
    wait_until(lambda: gone not in ck_topic_names(admin), TIMEOUT_S, "deleted topic to go")
    topic_id = str(ck_describe(admin, kept).topic_id)
    cluster_id = ck_cluster(broker).cluster_id
    del admin

    if how == "stop":
        assert broker.stop() == 0, broker.read_log()
    else:
        broker.kill()
    broker.start()

    admin = ck_admin(broker)
    names = ck_topic_names(admin)
    assert kept in names and gone not in names, broker.read_log()
    assert not partition_dirs(broker, gone)
    description = ck_describe(admin, kept)
    assert str(description.topic_id) == topic_id
    assert [p.id for p in description.partitions] == [0, 1, 2, 3]
    assert ck_cluster(broker).cluster_id == cluster_id
    entries = ck_topic_configs(admin, kept)
    for key, value in overrides.items():
        assert entries[key].value == value
        assert entries[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value

    counts = {p: len(v) for p, v in values.items()}
    assert consume(broker, kept, counts) == values, broker.read_log()
    produce(broker, kept, {0: [b"after"]})
    assert watermarks(broker, kept, 0) == (0, counts[0] + 1)
    assert consume(broker, kept, {0: counts[0] + 1})[0][-1] == b"after"
