"""ACL checks of DescribeConfigs, AlterConfigs and IncrementalAlterConfigs around a real
ControllerService on the in-memory metadata store (admin_harness): the operation each
resource type needs and on what, Kafka's codes and default texts when refused, refused
resources neither looked up nor forwarded, and without an authorizer nothing changes.
No socket, no sleep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acl_admin_helpers import Kind, Op, acl, by_alice, cluster_acl, guarded
from admin_harness import SET, TOPIC, controller_with_brokers, describe_configs
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to
from server_harness import request, run
from test_acl_admin import forwarded, topics

from strom.metadata.records import ConfigResourceType
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers import configs

E = ErrorCode
BROKER_LOGGER, GROUP = 8, 32


# --- DescribeConfigs ------------------------------------------------------------------


def describe_many(*resources: tuple[int, str]) -> Request:
    return request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        {
            "resources": [
                {"resource_type": kind, "resource_name": name, "configuration_keys": None}
                for kind, name in resources
            ],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )


def outcomes(results: Any) -> list[tuple[int, str, ErrorCode, str | None]]:
    return [
        (r.resource_type, r.resource_name, ErrorCode(r.error_code), r.error_message)
        for r in results
    ]


def test_describe_configs_checks_each_resource_first_and_answers_refusals_last(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, TOPIC, "by-alter", "secret")
        topic, broker = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
        context = guarded(
            admin_context(one),
            acl(Op.DESCRIBE_CONFIGS, TOPIC),
            acl(Op.ALTER_CONFIGS, "by-alter"),  # allows DESCRIBE_CONFIGS
            acl(Op.DESCRIBE_CONFIGS, "gone"),
            acl(Op.DESCRIBE_CONFIGS, "group-a", Kind.GROUP),
        )
        answer = await answered(
            configs.handle_describe_configs,
            context,
            by_alice(
                describe_many(
                    (topic, "secret"),
                    (topic, TOPIC),
                    (broker, "1"),
                    (topic, "ghost"),
                    (topic, "by-alter"),
                    (BROKER_LOGGER, "1"),
                    (topic, "gone"),
                    (GROUP, "group-b"),
                    (GROUP, "group-a"),
                )
            ),
        )
        assert outcomes(answer.results) == [
            (topic, TOPIC, E.none, None),
            (topic, "by-alter", E.none, None),
            (topic, "gone", E.unknown_topic_or_partition, "topic 'gone' does not exist"),
            (GROUP, "group-a", E.none, None),
            (topic, "secret", E.topic_authorization_failed, "Topic authorization failed."),
            (broker, "1", E.cluster_authorization_failed, "Cluster authorization failed."),
            (topic, "ghost", E.topic_authorization_failed, "Topic authorization failed."),
            (BROKER_LOGGER, "1", E.cluster_authorization_failed, "Cluster authorization failed."),
            (GROUP, "group-b", E.group_authorization_failed, "Group authorization failed."),
        ]
        assert answer.results[0].configs != () and answer.results[1].configs != ()
        assert len(answer.results[3].configs) == 11  # every group key, the group unknown
        assert all(r.configs == () for r in (answer.results[2], *answer.results[4:]))

    run(scenario())


def test_describe_configs_of_brokers_needs_describe_configs_on_the_cluster(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        broker = ConfigResourceType.BROKER
        allowed = guarded(admin_context(one), cluster_acl(Op.ALTER_CONFIGS))
        answer = await answered(
            configs.handle_describe_configs, allowed, by_alice(describe_configs(broker, "1"))
        )
        assert answer.results[0].error_code == E.none and answer.results[0].configs != ()
        logger = await answered(
            configs.handle_describe_configs, allowed, by_alice(describe_many((BROKER_LOGGER, "1")))
        )
        assert logger.results[0].error_code == E.invalid_request  # allowed, but strom has none

        unchanged = await answered(
            configs.handle_describe_configs,
            admin_context(one),
            by_alice(describe_many((int(broker), "1"), (int(ConfigResourceType.TOPIC), "gone"))),
        )
        assert [r.error_code for r in unchanged.results] == [E.none, E.unknown_topic_or_partition]

    run(scenario())


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------


def alter_many(*resources: tuple[int, str, str, str | None], incremental: bool = True) -> Request:
    """(Incremental)AlterConfigs setting one key of each (type, name, key, value)."""
    entry = (
        (lambda k, v: {"name": k, "config_operation": SET, "value": v})
        if incremental
        else (lambda k, v: {"name": k, "value": v})
    )
    return request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS if incremental else ApiKey.ALTER_CONFIGS,
        1 if incremental else 2,
        {
            "resources": [
                {"resource_type": kind, "resource_name": name, "configs": [entry(key, value)]}
                for kind, name, key, value in resources
            ],
            "validate_only": False,
        },
    )


def test_alter_configs_needs_alter_configs_per_resource_in_request_order(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, TOPIC, "secret")
        topic, broker = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
        context = guarded(
            admin_context(one),
            acl(Op.ALTER_CONFIGS, TOPIC),
            acl(Op.DESCRIBE_CONFIGS, "secret"),  # does not allow ALTER_CONFIGS
            cluster_acl(Op.DESCRIBE_CONFIGS),
        )
        for incremental in (True, False):
            answer = await answered(
                configs.handle_incremental_alter_configs
                if incremental
                else configs.handle_alter_configs,
                context,
                by_alice(
                    alter_many(
                        (topic, "secret", "retention.ms", "1"),
                        (broker, "", "log.retention.ms", "7000"),
                        (topic, TOPIC, "retention.ms", "5000"),
                        (topic, "ghost", "retention.ms", "1"),
                        (BROKER_LOGGER, "1", "kafka", "DEBUG"),
                        (GROUP, "g", "x", "1"),
                        incremental=incremental,
                    )
                ),
            )
            logger = (
                (BROKER_LOGGER, "1", E.cluster_authorization_failed, None)  # no message
                if incremental
                else (
                    BROKER_LOGGER,
                    "1",
                    E.invalid_request,
                    "config resource type 8 is not "
                    "supported; strom has topic (2), broker (4) and group (32) configs",
                )
            )
            assert outcomes(answer.responses) == [
                (topic, "secret", E.topic_authorization_failed, "Topic authorization failed."),
                (broker, "", E.cluster_authorization_failed, "Cluster authorization failed."),
                (topic, TOPIC, E.none, None),
                (topic, "ghost", E.topic_authorization_failed, "Topic authorization failed."),
                logger,
                (GROUP, "g", E.group_authorization_failed, "Group authorization failed."),
            ]
        image = one.metadata.image
        assert image.topic_configs(TOPIC) == {"retention.ms": "5000"}
        assert image.topic_configs("secret") == {} and image.cluster_default_configs() == {}

    run(scenario())


def test_alter_configs_of_the_cluster_and_twice_named_resources(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, TOPIC)
        topic, broker = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
        context = guarded(admin_context(one), cluster_acl(Op.ALTER_CONFIGS))
        answer = await answered(
            configs.handle_incremental_alter_configs,
            context,
            by_alice(
                alter_many(
                    (broker, "", "log.retention.ms", "7000"),
                    (topic, TOPIC, "retention.ms", "1"),
                    (topic, TOPIC, "retention.ms", "2"),
                )
            ),
        )
        assert [r.error_code for r in answer.responses] == [
            E.none,
            E.invalid_request,  # named twice: refused by the controller, unchecked here
            E.invalid_request,
        ]
        assert one.metadata.image.cluster_default_configs() == {"log.retention.ms": "7000"}
        assert one.metadata.image.topic_configs(TOPIC) == {}

    run(scenario())


def test_a_refused_alter_is_not_forwarded_and_a_partial_one_only_in_part(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        await topics(one, TOPIC, "secret")
        link = loopback_to(one)
        topic = int(ConfigResourceType.TOPIC)
        at_two = guarded(admin_context(two, channel=link), acl(Op.ALTER_CONFIGS, TOPIC))
        answer = await answered(
            configs.handle_incremental_alter_configs,
            at_two,
            by_alice(
                alter_many(
                    (topic, "secret", "retention.ms", "1"), (topic, TOPIC, "retention.ms", "9")
                )
            ),
        )
        assert [r.error_code for r in answer.responses] == [E.topic_authorization_failed, E.none]
        (sent,) = forwarded(link.sent)
        assert [r.resource_name for r in sent.body.resources] == [TOPIC]
        assert two.metadata.image.topic_configs(TOPIC) == {"retention.ms": "9"}

        refused = await answered(
            configs.handle_alter_configs,
            at_two,
            by_alice(alter_many((topic, "secret", "retention.ms", "1"), incremental=False)),
        )
        assert refused.responses[0].error_code == E.topic_authorization_failed
        assert len(link.sent) == 1

    run(scenario())


def test_without_an_authorizer_alters_are_unchanged(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, TOPIC)
        topic = int(ConfigResourceType.TOPIC)
        answer = await answered(
            configs.handle_incremental_alter_configs,
            admin_context(one),
            by_alice(alter_many((topic, TOPIC, "retention.ms", "3"), (GROUP, "g", "x", "1"))),
        )
        assert [r.error_code for r in answer.responses] == [E.none, E.invalid_config]
        assert one.metadata.image.topic_configs(TOPIC) == {"retention.ms": "3"}

    run(scenario())


def test_a_groups_configs_need_alter_configs_on_the_group(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = guarded(
            admin_context(one),
            acl(Op.ALTER_CONFIGS, "mine", Kind.GROUP),
            acl(Op.DESCRIBE_CONFIGS, "theirs", Kind.GROUP),
        )
        session = "consumer.session.timeout.ms"
        answer = await answered(
            configs.handle_incremental_alter_configs,
            context,
            by_alice(
                alter_many((GROUP, "mine", session, "50000"), (GROUP, "theirs", session, "50000"))
            ),
        )
        assert outcomes(answer.responses) == [
            (GROUP, "mine", E.none, None),
            (GROUP, "theirs", E.group_authorization_failed, "Group authorization failed."),
        ]
        assert one.metadata.image.group_configs("mine") == {session: "50000"}
        assert one.metadata.image.group_configs("theirs") == {}

    run(scenario())
