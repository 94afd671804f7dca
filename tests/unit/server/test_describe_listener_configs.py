"""DescribeConfigs of a broker lists its per-listener keys (`listener.name.<l>.<key>`)
that are set, as Kafka does: with their source, and a sensitive one (a password, a
JAAS config) with a null value and is_sensitive set."""

from __future__ import annotations

from pathlib import Path

from admin_harness import controller_with_brokers, describe_configs
from quorum_harness import admin_context, answered
from server_harness import run

from strom.config import BrokerConfig, ConfigSource, load_config
from strom.metadata.records import ConfigResourceType
from strom.server.handlers import configs
from strom.server.handlers.ports import AdminContext

PREFIX = "listener.name.internal."
JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="pw";'
STATIC = ConfigSource.STATIC_BROKER_CONFIG


def config_of(tmp_path: Path) -> BrokerConfig:
    return load_config(
        overrides=[
            "node.id=1",
            f"log.dirs={tmp_path / 'node-1'}",
            "listeners=PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
            f"{PREFIX}ssl.keystore.location=/etc/strom/internal.pem",
            f"{PREFIX}ssl.key.password=s3cret",
            f"{PREFIX}sasl.enabled.mechanisms=PLAIN",
            f"{PREFIX}plain.sasl.jaas.config={JAAS}",
        ]
    )


async def described(
    context: AdminContext, keys: list[str] | None = None
) -> dict[str, tuple[str | None, ConfigSource, bool]]:
    """This broker's configs named `PREFIX`...: name -> (value, source, is_sensitive)."""
    asked = describe_configs(ConfigResourceType.BROKER, "1", keys)
    (result,) = (await answered(configs.handle_describe_configs, context, asked)).results
    return {
        e.name: (e.value, ConfigSource(e.config_source), e.is_sensitive)
        for e in result.configs
        if e.name.startswith(PREFIX)
    }


def test_set_listener_keys_are_listed_and_the_sensitive_ones_hidden(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = admin_context(one, config=config_of(tmp_path))
        assert await described(context) == {
            f"{PREFIX}ssl.keystore.location": ("/etc/strom/internal.pem", STATIC, False),
            f"{PREFIX}ssl.key.password": (None, STATIC, True),
            f"{PREFIX}sasl.enabled.mechanisms": ("PLAIN", STATIC, False),
            f"{PREFIX}plain.sasl.jaas.config": (None, STATIC, True),
        }
        only = await described(context, [f"{PREFIX}ssl.keystore.location", "node.id"])
        assert list(only) == [f"{PREFIX}ssl.keystore.location"]

    run(scenario())


def test_a_dynamic_listener_key_is_listed_with_its_dynamic_source(tmp_path: Path) -> None:
    rotated = {f"{PREFIX}ssl.keystore.location": "/etc/strom/rotated.pem"}
    config = config_of(tmp_path).with_dynamic({}, rotated)

    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        listed = await described(admin_context(one, config=config))
        assert listed[f"{PREFIX}ssl.keystore.location"] == (
            "/etc/strom/rotated.pem",
            ConfigSource.DYNAMIC_BROKER_CONFIG,
            False,
        )
        assert listed[f"{PREFIX}ssl.key.password"] == (None, STATIC, True)

    run(scenario())
