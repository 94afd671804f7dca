"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs of groups (config resource
type GROUP) around a real ControllerService on the in-memory metadata store: every key
described with its source, the defaults from this broker's keys, the bounds from the
controller's, the change forwarded to the active controller. No socket, no sleep."""

from __future__ import annotations

from pathlib import Path

from admin_harness import (
    DELETE,
    SET,
    alter_configs,
    codes,
    controller_with_brokers,
    describe_configs,
    entries,
    incremental_alter,
)
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to, until
from server_harness import run

from strom.config import ConfigSource
from strom.metadata.records import ConfigResourceType
from strom.server.handlers import configs

GROUP = ConfigResourceType.GROUP
SESSION = "consumer.session.timeout.ms"
DEFAULT, OWN = ConfigSource.DEFAULT_CONFIG, ConfigSource.GROUP_CONFIG


def test_a_group_is_described_with_its_own_values_and_the_brokers_defaults(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        settings = ["group.share.record.lock.duration.ms=20000"]
        (one,) = await controller_with_brokers(tmp_path, 1, config=settings)
        context = admin_context(one)
        done = await answered(
            configs.handle_incremental_alter_configs,
            context,
            incremental_alter(GROUP, "orders", (SESSION, SET, "50000")),
        )
        assert codes(done) == {ErrorCode.none}
        answer = await answered(
            configs.handle_describe_configs, context, describe_configs(GROUP, "orders")
        )
        assert entries(answer) == {
            SESSION: ("50000", OWN),
            "consumer.heartbeat.interval.ms": ("5000", DEFAULT),
            "share.session.timeout.ms": ("45000", DEFAULT),
            "share.heartbeat.interval.ms": ("5000", DEFAULT),
            "share.record.lock.duration.ms": ("20000", DEFAULT),
            "share.auto.offset.reset": ("latest", DEFAULT),
            "share.delivery.count.limit": ("5", DEFAULT),
            "share.partition.max.record.locks": ("2000", DEFAULT),
            "share.renew.acknowledge.enable": ("true", DEFAULT),
            "errors.deadletterqueue.topic.name": ("", DEFAULT),
            "errors.deadletterqueue.copy.record.enable": ("false", DEFAULT),
        }
        only = await answered(
            configs.handle_describe_configs,
            context,
            describe_configs(GROUP, "never-seen", keys=[SESSION]),
        )
        assert entries(only) == {SESSION: ("45000", DEFAULT)}
        empty = await answered(
            configs.handle_describe_configs, context, describe_configs(GROUP, "")
        )
        assert empty.results[0].error_code == ErrorCode.invalid_request
        assert empty.results[0].error_message == "Group name must not be empty"

    run(scenario())


def test_group_alters_are_decided_by_the_active_controller(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        at_two = admin_context(two, channel=loopback_to(one))
        refused = await answered(
            configs.handle_incremental_alter_configs,
            at_two,
            incremental_alter(GROUP, "g", (SESSION, SET, "61000")),
        )
        assert codes(refused) == {ErrorCode.invalid_config}
        assert refused.responses[0].error_message == (
            "consumer.session.timeout.ms must be less than or equal to "
            "group.consumer.max.session.timeout.ms (60000); it would be 61000"
        )
        checked = await answered(
            configs.handle_alter_configs,
            at_two,
            alter_configs(GROUP, "g", {SESSION: "50000"}),
        )
        assert codes(checked) == {ErrorCode.none}
        await until(two, lambda image: image.group_configs("g") == {SESSION: "50000"})
        gone = await answered(
            configs.handle_incremental_alter_configs,
            at_two,
            incremental_alter(GROUP, "g", (SESSION, DELETE, None)),
        )
        assert codes(gone) == {ErrorCode.none}
        await until(two, lambda image: (GROUP, "g") not in image.configs)

    run(scenario())
