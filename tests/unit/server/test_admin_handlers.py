"""CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs, (Incremental)AlterConfigs
and the partition reassignment APIs, called with their context around a real
ControllerService on the in-memory metadata store: no broker started, no socket, no
sleep. Every answer is read as a client reads it (encoded and decoded again)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

from admin_harness import (
    DELETE,
    SET,
    TOPIC,
    alter_configs,
    codes,
    controller_with_brokers,
    create_partitions,
    create_topics,
    created,
    delete_named,
    delete_topic_ids,
    delete_topics,
    describe_configs,
    entries,
    incremental_alter,
    list_reassignments,
    reassign,
)
from kio.schema.errors import ErrorCode
from quorum_harness import active, admin_context, answered, loopback_to, until, wire
from server_harness import request, run

from strom.config import ConfigSource, load_config
from strom.metadata.records import ConfigResourceType
from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.server.handlers import admin, configs, reassignments
from strom.server.private import PrivateApi

# --- CreateTopics ---------------------------------------------------------------------


def test_create_topics_commits_the_topic_with_its_partitions_replicas_and_configs(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = await answered(
            admin.handle_create_topics,
            admin_context(one),
            create_topics((TOPIC, 3, 2, {"retention.ms": "1000"})),
        )
        (topic,) = answer.topics
        assert (topic.name, topic.error_code, topic.error_message) == (TOPIC, ErrorCode.none, None)
        assert (topic.num_partitions, topic.replication_factor) == (3, 2)
        reported = {c.name: (c.value, ConfigSource(c.config_source)) for c in topic.configs}
        assert reported["retention.ms"] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert reported["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)

        image = one.metadata.image
        committed = image.topics_by_name[TOPIC]
        assert committed.topic_id == topic.topic_id and topic.topic_id.int != 0
        assert sorted(committed.partitions) == [0, 1, 2]
        for partition in committed.partitions.values():
            assert len(set(partition.replicas)) == 2 and set(partition.replicas) <= {1, 2, 3}
            assert partition.leader == partition.replicas[0]
        assert image.topic_configs(TOPIC) == {"retention.ms": "1000"}

    run(scenario())


def test_create_topics_refuses_bad_topics_with_kafka_s_errorcodes(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await created(one)
        before = one.metadata.image
        answer = await answered(
            admin.handle_create_topics,
            admin_context(one),
            create_topics(
                ("too-many-replicas", 1, 4, {}),  # three live brokers
                ("no-replicas", 1, 0, {}),
                ("no-partitions", 0, 1, {}),
                (TOPIC, 1, 1, {}),
                ("bad-value", 1, 1, {"cleanup.policy": "sometimes"}),
                ("bad-key", 1, 1, {"no.such.config": "1"}),
                ("bad/name", 1, 1, {}),
            ),
        )
        codes = {t.name: ErrorCode(t.error_code) for t in answer.topics}
        assert codes == {
            "too-many-replicas": ErrorCode.invalid_replication_factor,
            "no-replicas": ErrorCode.invalid_replication_factor,
            "no-partitions": ErrorCode.invalid_partitions,
            TOPIC: ErrorCode.topic_already_exists,
            "bad-value": ErrorCode.invalid_config,
            "bad-key": ErrorCode.invalid_config,
            "bad/name": ErrorCode.invalid_topic_exception,
        }
        for topic in answer.topics:
            assert topic.error_message
            assert (topic.num_partitions, topic.replication_factor) == (-1, -1)
            assert topic.topic_id is None and topic.configs == ()  # the null uuid
        assert one.metadata.image.topics_by_name.keys() == before.topics_by_name.keys()
        assert one.metadata.image.offset == before.offset

    run(scenario())


def test_create_topics_validate_only_answers_and_changes_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        offset = one.metadata.image.offset
        answer = await answered(
            admin.handle_create_topics,
            admin_context(one),
            create_topics((TOPIC, 4, 3, {}), ("bad", 1, 9, {}), validate_only=True),
        )
        ok, refused = answer.topics
        assert (ok.error_code, ok.num_partitions, ok.replication_factor) == (ErrorCode.none, 4, 3)
        assert refused.error_code == ErrorCode.invalid_replication_factor
        assert TOPIC not in one.metadata.image.topics_by_name
        assert one.metadata.image.offset == offset

    run(scenario())


# --- DeleteTopics and CreatePartitions ------------------------------------------------


def test_delete_topics_by_name_and_by_id_and_unknown_ones(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        await created(one)
        answer = await answered(admin.handle_delete_topics, context, delete_topics(TOPIC, "nope"))
        codes = [(r.name, ErrorCode(r.error_code)) for r in answer.responses]
        assert codes == [(TOPIC, ErrorCode.none), ("nope", ErrorCode.unknown_topic_or_partition)]
        assert TOPIC not in one.metadata.image.topics_by_name

        topic_id = await created(one)
        unknown = uuid.UUID(int=99)
        answer = await answered(
            admin.handle_delete_topics, context, delete_topic_ids(topic_id, unknown)
        )
        codes = [(r.name, r.topic_id, ErrorCode(r.error_code)) for r in answer.responses]
        assert codes == [
            (TOPIC, topic_id, ErrorCode.none),
            (None, unknown, ErrorCode.unknown_topic_id),
        ]
        assert topic_id not in one.metadata.image.topics_by_id

    run(scenario())


def test_delete_topics_is_refused_while_delete_topic_enable_is_false(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await created(one)
        disabled = load_config(
            overrides=["node.id=1", f"log.dirs={tmp_path / 'x'}", "delete.topic.enable=false"]
        )
        answer = await answered(
            admin.handle_delete_topics,
            admin_context(one, config=disabled),
            delete_named(TOPIC),
        )
        (result,) = answer.responses
        assert (result.name, result.error_code) == (TOPIC, ErrorCode.topic_deletion_disabled)
        assert result.error_message == "delete.topic.enable is false"
        assert TOPIC in one.metadata.image.topics_by_name

    run(scenario())


def test_create_partitions_grows_a_topic_and_refuses_to_shrink_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        await created(one, partitions=1, factor=2)

        trial = await answered(
            admin.handle_create_partitions, context, create_partitions(5, validate_only=True)
        )
        assert trial.results[0].error_code == ErrorCode.none
        assert len(one.metadata.image.topics_by_name[TOPIC].partitions) == 1

        answer = await answered(admin.handle_create_partitions, context, create_partitions(3))
        assert [(r.name, r.error_code) for r in answer.results] == [(TOPIC, ErrorCode.none)]
        grown = one.metadata.image.topics_by_name[TOPIC].partitions
        assert sorted(grown) == [0, 1, 2]
        assert all(len(p.replicas) == 2 for p in grown.values())

        answer = await answered(admin.handle_create_partitions, context, create_partitions(2))
        (result,) = answer.results
        assert result.error_code == ErrorCode.invalid_partitions and result.error_message
        assert sorted(one.metadata.image.topics_by_name[TOPIC].partitions) == [0, 1, 2]

    run(scenario())


# --- DescribeConfigs and (Incremental)AlterConfigs ------------------------------------


def test_describe_configs_of_a_topic_names_each_value_s_source(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        await answered(
            admin.handle_create_topics,
            context,
            create_topics((TOPIC, 1, 1, {"retention.ms": "1000"})),
        )
        answer = await answered(
            configs.handle_describe_configs,
            context,
            describe_configs(ConfigResourceType.TOPIC, TOPIC),
        )
        described = entries(answer)
        assert described["retention.ms"] == ("1000", ConfigSource.DYNAMIC_TOPIC_CONFIG)
        assert described["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)

        only = await answered(
            configs.handle_describe_configs,
            context,
            describe_configs(ConfigResourceType.TOPIC, TOPIC, keys=["retention.ms"]),
        )
        assert list(entries(only)) == ["retention.ms"]

        missing = await answered(
            configs.handle_describe_configs,
            context,
            describe_configs(ConfigResourceType.TOPIC, "nope"),
        )
        assert missing.results[0].error_code == ErrorCode.unknown_topic_or_partition
        assert missing.results[0].configs == ()

    run(scenario())


def test_describe_configs_of_this_broker_is_its_static_config(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        answer = await answered(
            configs.handle_describe_configs,
            context,
            describe_configs(ConfigResourceType.BROKER, "1"),
        )
        described = entries(answer)
        assert described["node.id"] == ("1", ConfigSource.STATIC_BROKER_CONFIG)
        assert described["log.dirs"] == (
            str(tmp_path / "node-1"),
            ConfigSource.STATIC_BROKER_CONFIG,
        )
        assert described["num.partitions"] == ("1", ConfigSource.DEFAULT_CONFIG)

        other = await answered(
            configs.handle_describe_configs,
            context,
            describe_configs(ConfigResourceType.BROKER, "2"),
        )
        (result,) = other.results
        assert result.error_code == ErrorCode.invalid_request
        assert result.error_message.startswith("this is broker 1; ask broker 2")

    run(scenario())


def test_incremental_alter_configs_set_and_delete_round_trip_through_describe(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        await created(one, factor=1)
        describe = describe_configs(ConfigResourceType.TOPIC, TOPIC)

        answer = await answered(
            configs.handle_incremental_alter_configs,
            context,
            incremental_alter(
                ConfigResourceType.TOPIC, TOPIC, ("retention.ms", SET, "5000"), ("x", 7, "1")
            ),
        )
        (refused,) = answer.responses  # an unknown operation refuses the whole resource
        assert refused.error_code == ErrorCode.invalid_request
        assert "retention.ms" not in one.metadata.image.topic_configs(TOPIC)

        answer = await answered(
            configs.handle_incremental_alter_configs,
            context,
            incremental_alter(ConfigResourceType.TOPIC, TOPIC, ("retention.ms", SET, "5000")),
        )
        assert [(r.resource_name, r.error_code) for r in answer.responses] == [
            (TOPIC, ErrorCode.none)
        ]
        described = entries(await answered(configs.handle_describe_configs, context, describe))
        assert described["retention.ms"] == ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG)

        answer = await answered(
            configs.handle_incremental_alter_configs,
            context,
            incremental_alter(ConfigResourceType.TOPIC, TOPIC, ("retention.ms", DELETE, None)),
        )
        assert answer.responses[0].error_code == ErrorCode.none
        described = entries(await answered(configs.handle_describe_configs, context, describe))
        assert described["retention.ms"][1] == ConfigSource.DEFAULT_CONFIG
        assert one.metadata.image.topic_configs(TOPIC) == {}

        bad = await answered(
            configs.handle_incremental_alter_configs,
            context,
            incremental_alter(ConfigResourceType.TOPIC, TOPIC, ("retention.ms", SET, "soon")),
        )
        assert bad.responses[0].error_code == ErrorCode.invalid_config

    run(scenario())


def test_alter_configs_replaces_overrides_and_sets_cluster_defaults(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        await answered(
            admin.handle_create_topics,
            context,
            create_topics((TOPIC, 1, 1, {"retention.ms": "1000"})),
        )
        answer = await answered(
            configs.handle_alter_configs,
            context,
            alter_configs(ConfigResourceType.TOPIC, TOPIC, {"cleanup.policy": "compact"}),
        )
        assert answer.responses[0].error_code == ErrorCode.none
        assert one.metadata.image.topic_configs(TOPIC) == {"cleanup.policy": "compact"}

        answer = await answered(
            configs.handle_incremental_alter_configs,
            context,
            incremental_alter(ConfigResourceType.BROKER, "", ("log.retention.ms", SET, "7000")),
        )
        assert answer.responses[0].error_code == ErrorCode.none
        described = entries(
            await answered(
                configs.handle_describe_configs,
                context,
                describe_configs(ConfigResourceType.BROKER, ""),
            )
        )
        assert described == {
            "log.retention.ms": ("7000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        }

    run(scenario())


# --- AlterPartitionReassignments and ListPartitionReassignments ------------------------


def test_a_reassignment_is_listed_until_it_is_cancelled(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one)
        await created(one, factor=2)
        (before,) = one.metadata.image.topics_by_name[TOPIC].partitions.values()
        target = sorted({1, 2, 3} - {before.replicas[1]})  # move one replica elsewhere
        (adding,) = set(target) - set(before.replicas)

        answer = await answered(
            reassignments.handle_alter_partition_reassignments, context, reassign(0, target)
        )
        assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
        ((name, (partition,)),) = [(t.name, t.partitions) for t in answer.responses]
        assert (name, partition.partition_index, partition.error_code) == (TOPIC, 0, ErrorCode.none)

        for asked in (list_reassignments(), list_reassignments([0])):
            listed = await answered(
                reassignments.handle_list_partition_reassignments, context, asked
            )
            assert listed.error_code == ErrorCode.none
            ((name, (ongoing,)),) = [(t.name, t.partitions) for t in listed.topics]
            assert (name, ongoing.partition_index) == (TOPIC, 0)
            assert tuple(ongoing.adding_replicas) == (adding,)
            assert tuple(ongoing.removing_replicas) == (before.replicas[1],)
            assert set(ongoing.replicas) == {*before.replicas, adding}

        missing = await answered(
            reassignments.handle_alter_partition_reassignments, context, reassign(5, target)
        )
        assert missing.responses[0].partitions[0].error_code == (
            ErrorCode.unknown_topic_or_partition
        )

        cancel = await answered(
            reassignments.handle_alter_partition_reassignments, context, reassign(0, None)
        )
        assert cancel.responses[0].partitions[0].error_code == ErrorCode.none
        listed = await answered(
            reassignments.handle_list_partition_reassignments, context, list_reassignments()
        )
        assert listed.error_code == ErrorCode.none and listed.topics == ()
        (after,) = one.metadata.image.topics_by_name[TOPIC].partitions.values()
        assert after.replicas == before.replicas
        again = await answered(
            reassignments.handle_alter_partition_reassignments, context, reassign(0, None)
        )
        assert again.responses[0].partitions[0].error_code == (
            ErrorCode.no_reassignment_in_progress
        )

    run(scenario())


# --- at the active controller, wherever the request arrives ---------------------------


def test_a_node_that_is_not_the_controller_forwards_and_sees_the_change_at_once(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        link = loopback_to(one)
        at_two = admin_context(two, channel=link)
        answer = await answered(
            admin.handle_create_topics, at_two, create_topics((TOPIC, 2, 3, {}))
        )
        assert [(t.name, t.error_code, t.num_partitions) for t in answer.topics] == [
            (TOPIC, ErrorCode.none, 2)
        ]
        assert [(key, version) for key, version, _ in link.sent] == [(PrivateApi.FORWARD, 0)]
        assert TOPIC in one.metadata.image.topics_by_name
        assert TOPIC in two.metadata.image.topics_by_name  # served here as soon as it is answered

        answer = await answered(
            configs.handle_incremental_alter_configs,
            at_two,
            incremental_alter(ConfigResourceType.TOPIC, TOPIC, ("retention.ms", SET, "9")),
        )
        assert answer.responses[0].error_code == ErrorCode.none
        assert two.metadata.image.topic_configs(TOPIC) == {"retention.ms": "9"}
        assert len(link.sent) == 2

        # Auto-creation by Metadata (handlers/cluster.py) goes the same way.
        results = await admin.create_topics(at_two, [admin.controller.NewTopic("auto", -1, -1)])
        assert [(r.name, r.error_code) for r in results] == [("auto", ErrorCode.none)]
        assert "auto" in two.metadata.image.topics_by_name and len(link.sent) == 3

    run(scenario())


def test_on_the_controller_listener_a_node_that_is_not_the_controller_refuses(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        log = MemoryLog()
        one, two = await controller_with_brokers(tmp_path, 1, 2, log=log)
        await created(one)
        offset = one.metadata.image.offset
        at_two = admin_context(two)  # built once, like the broker's
        for handler, asked in [
            (admin.controller_create_topics, create_topics(("new", 1, 1, {}))),
            (admin.controller_delete_topics, delete_topics(TOPIC)),
            (admin.controller_create_partitions, create_partitions(4)),
            (
                configs.controller_incremental_alter_configs,
                incremental_alter(ConfigResourceType.TOPIC, TOPIC, ("retention.ms", SET, "1")),
            ),
            (
                configs.controller_alter_configs,
                alter_configs(ConfigResourceType.TOPIC, TOPIC, {"retention.ms": "1"}),
            ),
            (reassignments.controller_alter_partition_reassignments, reassign(0, [3])),
            (reassignments.controller_list_partition_reassignments, list_reassignments()),
        ]:
            answer = await answered(handler, at_two, asked)
            assert codes(answer) == {ErrorCode.not_controller}, asked.api_key
            body = await two.dispatch_controller(asked)  # the broker binds the same handlers
            assert codes(wire(asked.api_key, asked.api_version, body)) == {ErrorCode.not_controller}
        answer = await answered(
            admin.controller_create_topics, at_two, create_topics(("x", 1, 1, {}))
        )
        assert answer.topics[0].error_message == (
            "not the active controller (the active controller is 1)"
        )
        assert one.metadata.image.offset == offset

        log.elect(2)  # the same context now reaches an active controller
        await until(two, lambda _image: active(two))
        answer = await answered(
            admin.controller_create_topics, at_two, create_topics(("x", 1, 1, {}))
        )
        assert answer.topics[0].error_code == ErrorCode.none
        assert "x" in two.metadata.image.topics_by_name
        answer = await answered(
            admin.controller_delete_topics, admin_context(one), delete_topics("x")
        )
        assert codes(answer) == {ErrorCode.not_controller}

    run(scenario())


def test_the_broker_binds_the_handlers_and_reads_its_config_at_each_request(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        body = await one.dispatch(create_topics((TOPIC, 2, 1, {})))
        assert wire(ApiKey.CREATE_TOPICS, 7, body).topics[0].error_code == ErrorCode.none

        one.config = replace(one.config, delete_topic_enable=False)  # a dynamic config
        body = await one.dispatch(delete_topics(TOPIC))
        (result,) = wire(ApiKey.DELETE_TOPICS, 4, body).responses
        assert result.error_code == ErrorCode.topic_deletion_disabled

        one.config = replace(one.config, delete_topic_enable=True)
        body = await one.dispatch_controller(delete_topics(TOPIC))
        (result,) = wire(ApiKey.DELETE_TOPICS, 4, body).responses
        assert result.error_code == ErrorCode.none
        assert TOPIC not in one.metadata.image.topics_by_name

        # Metadata (still a legacy handler) auto-creates through the broker's admin context.
        asked = request(
            ApiKey.METADATA,
            12,
            {
                "topics": [{"name": "auto", "topic_id": uuid.UUID(int=0)}],
                "allow_auto_topic_creation": True,
                "include_topic_authorized_operations": False,
            },
        )
        answer = wire(ApiKey.METADATA, 12, await one.dispatch(asked))
        assert [(t.name, t.error_code) for t in answer.topics] == [("auto", ErrorCode.none)]
        assert "auto" in one.metadata.image.topics_by_name

    run(scenario())
