"""strom.config's errors: every bad setting is a ConfigError naming its key, and the
role, quorum and listener combinations Kafka refuses are refused.
"""

from __future__ import annotations

import pytest

from strom.config import ConfigError, ConfigSource, load_config

STATIC = ConfigSource.STATIC_BROKER_CONFIG

# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("setting", "key", "fragment"),
    [
        ("log.retension.ms=1", "log.retension.ms", "did you mean 'log.retention.ms'?"),
        (
            "num.partitions=abc",
            "num.partitions",
            "invalid value 'abc' for 'num.partitions': expected an integer",
        ),
        (
            "log.segment.bytes=0",
            "log.segment.bytes",
            "invalid value '0' for 'log.segment.bytes': must be at least 14",
        ),
        ("num.partitions=3000000000", "num.partitions", "between"),
        ("auto.create.topics.enable=yes", "auto.create.topics.enable", "true or false"),
        ("log.message.timestamp.type=createtime", "log.message.timestamp.type", "CreateTime"),
        ("process.roles=broker,router", "process.roles", "'router' is not one of"),
        ("process.roles=", "process.roles", "broker, controller or both"),
        ("process.roles=broker,broker", "process.roles", "twice"),
        ("log.dirs=/a,/b", "log.dirs", "one data directory"),
        ("log.dir=", "log.dir", "must not be empty"),
        ("listeners=PLAINTEXT:9092", "listeners", "NAME://HOST:PORT"),
        ("listeners=PLAINTEXT://host:99999", "listeners", "0 to 65535"),
        ("listeners=PLAINTEXT://host:", "listeners", "0 to 65535"),
        ("listeners=PLAINTEXT://:9092,plaintext://:9093", "listeners", "used twice"),
        ("listeners=A://:9092,B://:9092", "listeners", "both use port 9092"),
        (
            "listeners=PLAINTEXT://:9092,SASL_SSL://:9093",
            "sasl.enabled.mechanisms",
            "needs mechanisms strom serves (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER "
            "so far)",
        ),
        (
            "listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
            "sasl.enabled.mechanisms",
            "invalid value 'GSSAPI'",
        ),
        (
            "listener.name.ssl.ssl.keystore.locaton=/k",
            "listener.name.ssl.ssl.keystore.locaton",
            "did you mean listener.name.ssl.ssl.keystore.location?",
        ),
        (
            "listener.name.ssl.num.partitions=3",
            "listener.name.ssl.num.partitions",
            "a listener may override the ssl.* keys",
        ),
        (
            "listener.name.other.ssl.keystore.location=/k",
            "listener.name.other.ssl.keystore.location",
            "not in 'listeners'",
        ),
        ("listener.name.ssl=x", "listener.name.ssl", "listener.name.<listener>.<key>"),
        ("ssl.client.auth=always", "ssl.client.auth", "must be one of none, requested"),
        ("listeners=INTERNAL://:9093", "listener.security.protocol.map", "INTERNAL:PLAINTEXT"),
        ("listeners=CONTROLLER://:9093", "listeners", "client listener"),
        (
            "listener.security.protocol.map=PLAINTEXT",
            "listener.security.protocol.map",
            "NAME:PROTOCOL",
        ),
        ("advertised.listeners=PLAINTEXT://0.0.0.0:9092", "advertised.listeners", "0.0.0.0"),
        ("advertised.listeners=OTHER://h:1", "advertised.listeners", "not in 'listeners'"),
        ("inter.broker.listener.name=OTHER", "inter.broker.listener.name", "client listener"),
        (
            "security.inter.broker.protocol=SSL",
            "security.inter.broker.protocol",
            "must name a client listener",
        ),
        ("controller.quorum.voters=1@localhost", "controller.quorum.voters", "HOST:PORT"),
        ("controller.quorum.voters=x@localhost:9093", "controller.quorum.voters", "ID@HOST:PORT"),
        ("controller.quorum.voters=2@localhost:9093", "controller.quorum.voters", "node.id 1"),
        (
            "controller.quorum.bootstrap.servers=localhost",
            "controller.quorum.bootstrap.servers",
            "HOST:PORT",
        ),
        ("broker.id=7", "broker.id", "differ"),
        ("node.id=-2", "node.id", "at least -1"),
        ("group.min.session.timeout.ms=9999999", "group.min.session.timeout.ms", "must not exceed"),
        ("default.replication.factor=0", "default.replication.factor", "between 1 and 32767"),
    ],
)
def test_every_error_names_the_key(setting: str, key: str, fragment: str) -> None:
    overrides = [setting, "node.id=1"] if setting.startswith("broker.id") else [setting]
    with pytest.raises(ConfigError) as info:
        load_config(overrides=overrides)
    message = str(info.value)
    assert f"'{key}'" in message or f"{key}=" in message, message
    assert fragment in message
    assert info.value.key == key


def test_broker_id_and_node_id_conflict_in_the_same_file() -> None:
    with pytest.raises(ConfigError, match=r"broker.id"):
        load_config(file_text="node.id=1\nbroker.id=2\n")


def test_inter_broker_listener_name_and_protocol_are_exclusive() -> None:
    with pytest.raises(ConfigError, match="only one of") as info:
        load_config(
            overrides=[
                "inter.broker.listener.name=PLAINTEXT",
                "security.inter.broker.protocol=PLAINTEXT",
            ]
        )
    assert info.value.key == "inter.broker.listener.name"


def test_unknown_key_without_a_close_match_has_no_suggestion() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(file_text="completely.different=1")
    assert str(info.value) == "unknown config key 'completely.different'"


@pytest.mark.parametrize("item", ["num.partitions", "=3", "  =3"])
def test_override_without_key_value_is_an_error(item: str) -> None:
    with pytest.raises(ConfigError, match="key=value") as info:
        load_config(overrides=[item])
    assert repr(item) in str(info.value)


def test_multi_node_controller_needs_a_controller_listener() -> None:
    with pytest.raises(ConfigError, match=r"'controller.listener.names'") as info:
        load_config(overrides=["controller.quorum.voters=1@a:9093,2@b:9093,3@c:9093"])
    assert info.value.key == "controller.listener.names"
    config = load_config(
        overrides=[
            "controller.quorum.voters=1@a:9093,2@b:9093,3@c:9093",
            "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
        ]
    )
    assert [v.node_id for v in config.controller_quorum_voters] == [1, 2, 3]


def test_duplicate_voter_is_an_error() -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        load_config(overrides=["controller.quorum.voters=1@a:9093,1@b:9093"])


def test_broker_only_node_needs_the_quorum_and_no_controller_listener() -> None:
    with pytest.raises(ConfigError, match=r"controller.quorum.voters"):
        load_config(overrides=["process.roles=broker"])
    with pytest.raises(ConfigError, match="must not include controller listener"):
        load_config(
            overrides=[
                "process.roles=broker",
                "controller.quorum.voters=1@a:9093",
                "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
            ]
        )


def test_controller_only_node_rejects_client_listeners() -> None:
    with pytest.raises(ConfigError, match="controller only") as info:
        load_config(overrides=["process.roles=controller"])
    assert info.value.key == "listeners"


def test_node_id_minus_one() -> None:
    assert load_config(overrides=["node.id=-1"]).node_id == 1
    with pytest.raises(ConfigError, match=r"'node.id'"):
        load_config(
            overrides=[
                "node.id=-1",
                "controller.quorum.voters=1@a:9093,2@b:9093",
                "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
            ]
        )


def test_broker_id_is_an_alias_of_node_id() -> None:
    config = load_config(file_text="broker.id=4")
    assert config.node_id == 4
    assert config.raw["node.id"] == config.raw["broker.id"] == "4"
    assert config.sources["node.id"] is STATIC
    assert load_config(file_text="node.id=4\nbroker.id=4").node_id == 4
    # a later layer wins over an earlier one, whichever of the two names it uses
    assert load_config(file_text="broker.id=0", shortcuts={"node.id": "3"}).node_id == 3
    assert load_config(file_text="node.id=0", overrides=["broker.id=5"]).node_id == 5
