"""strom.config: properties syntax, Kafka's shipped configs, errors, precedence, topic keys."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.config import (
    CONFIG_KEYS,
    CONFIG_KEYS_BY_NAME,
    TOPIC_CONFIG_KEYS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    Listener,
    ProcessRole,
    QuorumVoter,
    config_key,
    effective_topic_config,
    load_config,
    parse_properties,
    shortcut_overrides,
    validate_topic_configs,
)

STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG
DYNAMIC = ConfigSource.DYNAMIC_TOPIC_CONFIG

# ---------------------------------------------------------------- properties syntax


@pytest.mark.parametrize(
    ("line", "key", "value"),
    [
        ("a=1", "a", "1"),
        ("a:1", "a", "1"),
        ("a 1", "a", "1"),
        ("a\t1", "a", "1"),
        ("  a  =  1  ", "a", "1"),
        ("a = b c ", "a", "b c"),
        ("a : 1", "a", "1"),
        ("a==1", "a", "=1"),
        ("a = = 1", "a", "= 1"),
        ("a 1=2", "a", "1=2"),
        ("a=", "a", ""),
        ("a", "a", ""),
        ("a=x:y=z", "a", "x:y=z"),
        ("listeners=PLAINTEXT://:9092", "listeners", "PLAINTEXT://:9092"),
    ],
)
def test_separators_and_trimming(line: str, key: str, value: str) -> None:
    assert parse_properties(line) == {key: value}


def test_comments_and_blank_lines_are_skipped() -> None:
    text = "# a comment\n! another\n   # indented comment\n\n   \n\t\nkey=value # not a comment\n"
    assert parse_properties(text) == {"key": "value # not a comment"}


def test_backslash_continues_a_line_and_drops_leading_blanks() -> None:
    text = "listeners=PLAINTEXT://:9092,\\\n          CONTROLLER://:9093\nnext=1\n"
    assert parse_properties(text) == {
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "next": "1",
    }


def test_continuation_lines_are_never_comments() -> None:
    assert parse_properties("a=1\\\n  #2\n") == {"a": "1#2"}


def test_even_number_of_backslashes_does_not_continue() -> None:
    assert parse_properties("a=b\\\\\nc=d") == {"a": "b\\", "c": "d"}


def test_comment_ending_in_backslash_does_not_continue() -> None:
    assert parse_properties("# comment \\\na=1") == {"a": "1"}


def test_continuation_at_end_of_text_and_before_blank_line() -> None:
    assert parse_properties("a=1\\") == {"a": "1"}
    assert parse_properties("a=1\\\n\nb=2") == {"a": "1", "b": "2"}


def test_escapes() -> None:
    text = r"k\=e\:y\ x = tab\there\nnew\\back\u0041\u00e9\=\:\q"
    assert parse_properties(text) == {"k=e:y x": "tab\there\nnew\\backAé=:q"}


def test_surrogate_pair_escape_becomes_one_character() -> None:
    assert parse_properties(r"a=\ud83d\ude00") == {"a": "\U0001f600"}


def test_escaped_trailing_blank_is_kept() -> None:
    assert parse_properties("a=b\\ \t ") == {"a": "b "}


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_line_endings(newline: str) -> None:
    text = newline.join(["a=1", "# c", "b=2\\", "  3", ""])
    assert parse_properties(text) == {"a": "1", "b": "23"}


def test_last_value_wins() -> None:
    assert parse_properties("a=1\na=2") == {"a": "2"}


@pytest.mark.parametrize("line", ["=value", ": value", "  = value"])
def test_line_without_key_is_an_error_with_its_line_number(line: str) -> None:
    with pytest.raises(ConfigError, match="line 3") as info:
        parse_properties(f"# header\na=1\n{line}\n")
    assert info.value.line == 3


@pytest.mark.parametrize("escape", [r"\u12", r"\uxyzw", "\\u"])
def test_malformed_unicode_escape_is_an_error(escape: str) -> None:
    with pytest.raises(ConfigError, match="line 2"):
        parse_properties(f"a=1\nb={escape}\n")


@given(st.text())
def test_any_text_parses_or_raises_config_error(text: str) -> None:
    try:
        result = parse_properties(text)
    except ConfigError:
        return
    assert all(isinstance(key, str) and key for key in result)
    assert all(isinstance(value, str) for value in result.values())


@given(st.text(alphabet=st.sampled_from("ab=:#! \t\\\nu0\r\f"), max_size=40))
def test_syntax_heavy_text_parses_or_raises_config_error(text: str) -> None:
    with contextlib.suppress(ConfigError):
        parse_properties(text)


def _escape(text: str) -> str:
    out = []
    for char in text:
        if char.isascii() and char.isalnum():
            out.append(char)
        else:
            encoded = char.encode("utf-16-be")
            for i in range(0, len(encoded), 2):
                out.append(f"\\u{int.from_bytes(encoded[i : i + 2], 'big'):04x}")
    return "".join(out)


@given(st.dictionaries(st.text(min_size=1), st.text()))
def test_escaped_entries_round_trip(entries: dict[str, str]) -> None:
    text = "\n".join(f"{_escape(key)}={_escape(value)}" for key, value in entries.items())
    assert parse_properties(text) == entries


# ---------------------------------------------------------------- Kafka's shipped files

KAFKA_3_KRAFT_COMBINED = """\
# Licensed to the Apache Software Foundation (ASF) under one or more
# contributor license agreements.

#
# This configuration file is intended for use in KRaft mode, where
# Apache ZooKeeper is not present.
#

############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# The connect string for the controller quorum
controller.quorum.voters=1@localhost:9093

############################# Socket Server Settings #############################

# The address the socket server listens on.
# Combined nodes (i.e. those with `process.roles=broker,controller`) must list the controller
# listener here at a minimum. If the broker listener is not defined, the default listener will
# use a host name that is equal to the value of java.net.InetAddress.getCanonicalHostName(),
# with PLAINTEXT listener name, and port 9092.
#   FORMAT:
#     listeners = listener_name://host_name:port
#   EXAMPLE:
#     listeners = PLAINTEXT://your.host.name:9092
listeners=PLAINTEXT://:9092,CONTROLLER://:9093

# Name of listener used for communication between brokers.
inter.broker.listener.name=PLAINTEXT

# Listener name, hostname and port the broker will advertise to clients.
# If not set, it uses the value for "listeners".
advertised.listeners=PLAINTEXT://localhost:9092

# A comma-separated list of the names of the listeners used by the controller.
# If no explicit mapping set in `listener.security.protocol.map`, default will be using
# PLAINTEXT protocol. This is required if running in KRaft mode.
controller.listener.names=CONTROLLER

# Maps listener names to security protocols, the default is for them to be the same.
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL

# The number of threads that the server uses for receiving requests from the network
num.network.threads=3

# The number of threads that the server uses for processing requests, which may include disk I/O
num.io.threads=8

# The send buffer (SO_SNDBUF) used by the socket server
socket.send.buffer.bytes=102400

# The receive buffer (SO_RCVBUF) used by the socket server
socket.receive.buffer.bytes=102400

# The maximum size of a request that the socket server will accept
socket.request.max.bytes=104857600


############################# Log Basics #############################

# A comma separated list of directories under which to store log files
log.dirs=/tmp/kraft-combined-logs

# The default number of log partitions per topic.
num.partitions=1

# The number of threads per data directory to be used for log recovery at startup
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

############################# Log Flush Policy #############################

# The number of messages to accept before forcing a flush of data to disk
#log.flush.interval.messages=10000

# The maximum amount of time a message can sit in a log before we force a flush
#log.flush.interval.ms=1000

############################# Log Retention Policy #############################

# The minimum age of a log file to be eligible for deletion due to age
log.retention.hours=168

# A size-based retention policy for logs.
#log.retention.bytes=1073741824

# The maximum size of a log segment file.
log.segment.bytes=1073741824

# The interval at which log segments are checked to see if they can be deleted
log.retention.check.interval.ms=300000
"""

KAFKA_4_COMBINED = """\
############################# Server Basics #############################

# The role of this server. Setting this puts us in KRaft mode
process.roles=broker,controller

# The node id associated with this instance's roles
node.id=1

# List of controller endpoints used connect to the controller cluster
controller.quorum.bootstrap.servers=localhost:9093

############################# Socket Server Settings #############################
listeners=PLAINTEXT://:9092,CONTROLLER://:9093

# Name of listener used for communication between brokers.
inter.broker.listener.name=PLAINTEXT

# Listener name, hostname and port the broker or the controller will advertise to clients.
advertised.listeners=PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093

controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600

############################# Log Basics #############################
log.dirs=/tmp/kraft-combined-logs
num.partitions=1
num.recovery.threads.per.data.dir=1

############################# Internal Topic Settings  #############################
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
"""

KAFKA_3_ZOOKEEPER = """\
broker.id=0
#listeners=PLAINTEXT://:9092
#advertised.listeners=PLAINTEXT://your.host.name:9092
#listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""

KAFKA_4_BROKER_ONLY = """\
process.roles=broker
node.id=2
controller.quorum.bootstrap.servers=localhost:9093
listeners=PLAINTEXT://localhost:9092
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,\
SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
log.dirs=/tmp/kraft-broker-logs
num.partitions=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.retention.hours=168
"""

KAFKA_3_CONTROLLER_ONLY = """\
process.roles=controller
node.id=1
controller.quorum.voters=1@localhost:9093
listeners=CONTROLLER://:9093
controller.listener.names=CONTROLLER
num.network.threads=3
log.dirs=/tmp/kraft-controller-logs
num.partitions=1
log.retention.hours=168
"""

COMBINED = frozenset({ProcessRole.BROKER, ProcessRole.CONTROLLER})


def test_kafka_3_kraft_combined_config_loads() -> None:
    config = load_config(file_text=KAFKA_3_KRAFT_COMBINED)
    assert config.node_id == 1
    assert config.process_roles == COMBINED
    assert config.is_broker and config.is_controller
    assert config.listeners == (
        Listener("PLAINTEXT", "0.0.0.0", 9092),
        Listener("CONTROLLER", "0.0.0.0", 9093),
    )
    assert config.client_listeners == (Listener("PLAINTEXT", "0.0.0.0", 9092),)
    assert config.controller_listeners == (Listener("CONTROLLER", "0.0.0.0", 9093),)
    assert config.advertised_listeners == (Listener("PLAINTEXT", "localhost", 9092),)
    assert config.controller_listener_names == ("CONTROLLER",)
    assert config.inter_broker_listener_name == "PLAINTEXT"
    assert config.controller_quorum_voters == (QuorumVoter(1, "localhost", 9093),)
    assert config.controller_quorum_voters[0] == (1, "localhost", 9093)
    assert config.log_dir == Path("/tmp/kraft-combined-logs")
    assert config.metadata_log_dir == config.log_dir
    assert config.num_partitions == 1
    assert config.offsets_topic_replication_factor == 1
    assert config.log_retention_ms == 168 * 3_600_000
    assert config.log_segment_bytes == 1073741824
    assert config.log_retention_check_interval_ms == 300000
    assert config.socket_request_max_bytes == 104857600
    assert config.ignored == (
        "num.network.threads",
        "num.io.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "num.recovery.threads.per.data.dir",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
    )
    assert config.raw["log.retention.hours"] == "168"
    assert config.sources["log.retention.hours"] is STATIC
    assert config.sources["message.max.bytes"] is DEFAULT


def test_kafka_4_combined_config_loads_and_keeps_only_client_listeners_for_clients() -> None:
    config = load_config(file_text=KAFKA_4_COMBINED)
    assert config.node_id == 1
    assert config.controller_quorum_voters == ()
    assert [str(e) for e in config.controller_quorum_bootstrap_servers] == ["localhost:9093"]
    assert config.advertised_listeners == (Listener("PLAINTEXT", "localhost", 9092),)
    assert config.controller_listeners == (Listener("CONTROLLER", "0.0.0.0", 9093),)
    assert "share.coordinator.state.topic.min.isr" in config.ignored
    assert config.log_dir == Path("/tmp/kraft-combined-logs")


def test_kafka_3_zookeeper_config_selects_the_zookeeper_store() -> None:
    config = load_config(file_text=KAFKA_3_ZOOKEEPER)
    assert config.node_id == 0
    assert config.process_roles == COMBINED
    assert config.client_listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.controller_listeners == ()
    assert config.group_initial_rebalance_delay_ms == 0
    assert config.log_dir == Path("/tmp/kafka-logs")
    assert config.zookeeper is not None
    assert str(config.zookeeper) == "localhost:2181"
    assert config.zookeeper.chroot == ""
    assert config.zookeeper_session_timeout_ms == 18000
    assert config.zookeeper_connection_timeout_ms == 18000
    assert "zookeeper.connect" not in config.ignored


def test_zookeeper_connect_takes_several_servers_and_a_chroot() -> None:
    config = load_config(
        file_text="broker.id=3\nzookeeper.connect=zk1:2181, zk2:2182/strom/prod\n"
        "zookeeper.session.timeout.ms=6000\n"
    )
    assert config.zookeeper is not None
    assert [(e.host, e.port) for e in config.zookeeper.hosts] == [("zk1", 2181), ("zk2", 2182)]
    assert config.zookeeper.chroot == "/strom/prod"
    assert config.zookeeper_session_timeout_ms == 6000
    assert config.node_id == 3


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("zookeeper.connect=zk1\nbroker.id=1", "zookeeper.connect"),
        ("zookeeper.connect=zk1:2181/strom/\nbroker.id=1", "chroot"),
        ("zookeeper.connect=zk1:2181\nbroker.id=1\ncontroller.quorum.voters=1@h:9093", "two"),
        ("zookeeper.connect=zk1:2181\nbroker.id=1\nprocess.roles=broker", "process.roles"),
        ("zookeeper.connect=zk1:2181", "broker.id"),
    ],
)
def test_zookeeper_connect_mistakes_are_named(text: str, complaint: str) -> None:
    with pytest.raises(ConfigError, match=complaint):
        load_config(file_text=text)


def test_kafka_broker_only_config_loads() -> None:
    config = load_config(file_text=KAFKA_4_BROKER_ONLY)
    assert config.node_id == 2
    assert config.process_roles == frozenset({ProcessRole.BROKER})
    assert config.controller_listeners == ()
    assert config.advertised_listeners == (Listener("PLAINTEXT", "localhost", 9092),)


def test_kafka_controller_only_config_loads() -> None:
    config = load_config(file_text=KAFKA_3_CONTROLLER_ONLY)
    assert config.process_roles == frozenset({ProcessRole.CONTROLLER})
    assert config.client_listeners == ()
    assert config.advertised_listeners == ()
    assert config.inter_broker_listener_name is None


def test_defaults() -> None:
    config = load_config()
    assert config.node_id == 1
    assert config.process_roles == COMBINED
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.advertised_listeners == config.listeners
    assert config.controller_listeners == ()
    assert config.log_dir == Path("data")
    assert config.cluster_name == "strom"
    assert config.log_flush_interval_messages == 1
    assert config.log_flush_interval_ms == 2**63 - 1
    assert config.log_retention_ms == 604_800_000
    assert config.log_roll_ms == 604_800_000
    assert config.log_retention_bytes == -1
    assert config.message_max_bytes == 1048588
    assert config.log_message_timestamp_type == "CreateTime"
    assert config.offsets_topic_num_partitions == 50
    assert config.offsets_retention_ms == 10080 * 60_000
    assert config.connections_max_idle_ms == 600_000
    assert config.auto_create_topics_enable and config.delete_topic_enable
    assert config.ignored == ()
    assert set(config.sources.values()) == {DEFAULT}
    assert "log.retention.ms" not in config.raw
    assert config.values["log.retention.ms"] is None
    assert config.raw["listener.security.protocol.map"].startswith("CONTROLLER:PLAINTEXT,")


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
        ("listeners=SSL://:9093", "listener.security.protocol.map", "PLAINTEXT only"),
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
        ("security.inter.broker.protocol=SSL", "security.inter.broker.protocol", "PLAINTEXT only"),
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


# ---------------------------------------------------------------- listeners


@pytest.mark.parametrize(
    ("text", "listener"),
    [
        ("PLAINTEXT://:9092", Listener("PLAINTEXT", "0.0.0.0", 9092)),
        ("plaintext://host.example:1", Listener("PLAINTEXT", "host.example", 1)),
        ("PLAINTEXT://[::1]:9092", Listener("PLAINTEXT", "::1", 9092)),
        ("PLAINTEXT://[::]:9092", Listener("PLAINTEXT", "::", 9092)),
        ("PLAINTEXT://10.0.0.1:0", Listener("PLAINTEXT", "10.0.0.1", 0)),
        (" CLIENT_1://h:65535 ", Listener("CLIENT_1", "h", 65535)),
    ],
)
def test_listener_parse(text: str, listener: Listener) -> None:
    assert Listener.parse(text) == listener


def test_listener_str() -> None:
    assert str(Listener("PLAINTEXT", "::1", 9092)) == "PLAINTEXT://[::1]:9092"
    assert str(Listener("PLAINTEXT", "h", 1)) == "PLAINTEXT://h:1"


@pytest.mark.parametrize(
    "text", ["PLAINTEXT//:9092", "://h:1", "P://h", "P://h:-1", "P://[::1:9092", "P://h h:1"]
)
def test_bad_listener(text: str) -> None:
    with pytest.raises(ConfigError, match="'listeners'"):
        Listener.parse(text)


def test_advertised_listeners_derived_from_client_listeners() -> None:
    config = load_config(
        overrides=[
            "listeners=PLAINTEXT://:9092,INTERNAL://10.0.0.5:9094,V6://[::]:9095,"
            "CONTROLLER://:9093",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,"
            "V6:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "advertised.listeners=INTERNAL://broker1.internal:19094",
        ]
    )
    assert config.advertised_listeners == (
        Listener("PLAINTEXT", "localhost", 9092),
        Listener("INTERNAL", "broker1.internal", 19094),
        Listener("V6", "localhost", 9095),
    )
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_advertised_listener_with_empty_host_means_localhost() -> None:
    config = load_config(overrides=["advertised.listeners=PLAINTEXT://:19092"])
    assert config.advertised_listeners == (Listener("PLAINTEXT", "localhost", 19092),)


def test_two_listeners_on_port_zero_are_fine() -> None:
    config = load_config(overrides=["listeners=PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:0"])
    assert [listener.port for listener in config.listeners] == [0, 0]


def test_inter_broker_listener_defaults_to_first_client_listener() -> None:
    config = load_config(
        overrides=[
            "listeners=A://:1,B://:2",
            "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT",
        ]
    )
    assert config.inter_broker_listener_name == "A"
    config = load_config(
        overrides=[
            "listeners=A://:1,B://:2",
            "listener.security.protocol.map=A:PLAINTEXT,B:PLAINTEXT",
            "inter.broker.listener.name=b",
        ]
    )
    assert config.inter_broker_listener_name == "B"


# ---------------------------------------------------------------- precedence


def test_file_then_set_then_shortcuts() -> None:
    file_text = "num.partitions=2\nlog.dirs=/from-file\nmessage.max.bytes=100\n"
    config = load_config(
        file_text=file_text,
        overrides=["num.partitions=3", "log.dirs=/from-set"],
        shortcuts={"log.dirs": "/from-shortcut"},
    )
    assert config.num_partitions == 3
    assert config.log_dir == Path("/from-shortcut")
    assert config.message_max_bytes == 100
    assert config.sources["num.partitions"] is STATIC
    assert config.sources["log.dirs"] is STATIC
    assert config.raw["log.dirs"] == "/from-shortcut"


def test_log_dirs_wins_over_log_dir() -> None:
    assert load_config(file_text="log.dir=/one").log_dir == Path("/one")
    assert load_config(file_text="log.dir=/one\nlog.dirs=/two").log_dir == Path("/two")
    assert load_config(file_text="metadata.log.dir=/meta").metadata_log_dir == Path("/meta")


@pytest.mark.parametrize(
    ("settings", "retention_ms"),
    [
        ([], 168 * 3_600_000),
        (["log.retention.hours=1"], 3_600_000),
        (["log.retention.hours=1", "log.retention.minutes=2"], 120_000),
        (["log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=5"], 5),
        (["log.retention.ms=5", "log.retention.hours=1"], 5),
        (["log.retention.ms=-1"], -1),
        (["log.retention.minutes=-1"], -1),
        (["log.retention.hours=-1"], -1),
        (["log.retention.ms=0"], 0),
    ],
)
def test_retention_ms_minutes_hours_precedence(settings: list[str], retention_ms: int) -> None:
    assert load_config(overrides=settings).log_retention_ms == retention_ms


def test_roll_and_flush_synonyms() -> None:
    assert load_config(overrides=["log.roll.hours=2"]).log_roll_ms == 7_200_000
    assert load_config(overrides=["log.roll.hours=2", "log.roll.ms=9"]).log_roll_ms == 9
    config = load_config(overrides=["log.flush.scheduler.interval.ms=500"])
    assert config.log_flush_interval_ms == 500
    config = load_config(
        overrides=["log.flush.scheduler.interval.ms=500", "log.flush.interval.ms=7"]
    )
    assert config.log_flush_interval_ms == 7


def test_values_are_trimmed_and_booleans_case_insensitive() -> None:
    config = load_config(
        file_text="num.partitions =  7  \nauto.create.topics.enable=FALSE\ndelete.topic.enable=True"
    )
    assert config.num_partitions == 7
    assert config.auto_create_topics_enable is False
    assert config.delete_topic_enable is True
    assert config.raw["auto.create.topics.enable"] == "false"


def test_blank_value_for_a_key_without_default_means_unset() -> None:
    config = load_config(file_text="log.retention.ms=\nadvertised.listeners=\n")
    assert config.log_retention_ms == 168 * 3_600_000
    assert "log.retention.ms" not in config.raw


# ---------------------------------------------------------------- CLI shortcuts


def test_shortcut_overrides() -> None:
    assert shortcut_overrides() == {}
    assert shortcut_overrides(data_dir="/d", listen="0.0.0.0:19092", node_id=3) == {
        "log.dirs": "/d",
        "listeners": "PLAINTEXT://0.0.0.0:19092",
        "advertised.listeners": "PLAINTEXT://localhost:19092",
        "node.id": "3",
    }
    assert shortcut_overrides(listen="[::1]:9092") == {
        "listeners": "PLAINTEXT://[::1]:9092",
        "advertised.listeners": "PLAINTEXT://[::1]:9092",
    }
    assert shortcut_overrides(listen=":9092") == {
        "listeners": "PLAINTEXT://:9092",
        "advertised.listeners": "PLAINTEXT://localhost:9092",
    }
    # --listen wins over a file's advertised.listeners, so clients follow the new port.
    kafka_file = "listeners=PLAINTEXT://:9092\nadvertised.listeners=PLAINTEXT://localhost:9092\n"
    moved = load_config(
        file_text=kafka_file, shortcuts=shortcut_overrides(listen="127.0.0.1:19092")
    )
    assert moved.advertised_listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),)
    config = load_config(shortcuts=shortcut_overrides(listen="[::1]:19092", node_id=0))
    assert config.listeners == (Listener("PLAINTEXT", "::1", 19092),)
    assert config.node_id == 0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"listen": "localhost"}, "--listen"),
        ({"listen": "localhost:http"}, "--listen"),
        ({"listen": "localhost:70000"}, "--listen"),
        ({"data_dir": ""}, "--data-dir"),
        ({"data_dir": "/a,/b"}, "--data-dir"),
        ({"node_id": -1}, "--node-id"),
    ],
)
def test_bad_shortcut(kwargs: dict[str, object], name: str) -> None:
    with pytest.raises(ConfigError, match=name):
        shortcut_overrides(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------- the registry


def test_registry_is_consistent() -> None:
    names = [key.name for key in CONFIG_KEYS]
    assert len(names) == len(set(names))
    for key in CONFIG_KEYS:
        key.default_value  # noqa: B018 - every default parses and passes its validator
        assert key.doc and "\n" not in key.doc and len(key.doc) < 100, key.name
    for topic_key in TOPIC_CONFIG_KEYS.values():
        assert topic_key.broker_key in CONFIG_KEYS_BY_NAME, topic_key.name
    assert list(TOPIC_CONFIG_KEYS) == sorted(TOPIC_CONFIG_KEYS)
    assert config_key("num.partitions").default == "1"
    with pytest.raises(ConfigError, match=r"did you mean 'num.partitions'"):
        config_key("num.partition")


def test_compatibility_keys_have_no_effect() -> None:
    for name in (
        "socket.send.buffer.bytes",
        "num.network.threads",
        "num.io.threads",
        "background.threads",
        "queued.max.requests",
        "num.recovery.threads.per.data.dir",
    ):
        assert not CONFIG_KEYS_BY_NAME[name].effect, name
    assert CONFIG_KEYS_BY_NAME["log.segment.bytes"].effect


_KEY_NAMES = sorted(CONFIG_KEYS_BY_NAME)
_PLAUSIBLE = st.text(alphabet=st.sampled_from("0123456789-,:/@[]. aAbPLAINTEXT"), max_size=30)


@given(st.dictionaries(st.sampled_from(_KEY_NAMES), st.one_of(st.text(), _PLAUSIBLE)))
def test_any_values_load_or_raise_config_error(settings: dict[str, str]) -> None:
    try:
        config = load_config(overrides=[f"{key}={value}" for key, value in settings.items()])
    except ConfigError as error:
        assert error.key is None or error.key in CONFIG_KEYS_BY_NAME
        return
    assert isinstance(config, BrokerConfig)
    effective_topic_config(config, {})


# ---------------------------------------------------------------- topic configs


def test_validate_topic_configs() -> None:
    assert validate_topic_configs(
        {
            "retention.ms": " 1000 ",
            "cleanup.policy": "compact, delete",
            "unclean.leader.election.enable": "TRUE",
            "segment.bytes": None,
            "min.cleanable.dirty.ratio": "0.25",
        }
    ) == {
        "retention.ms": "1000",
        "cleanup.policy": "compact,delete",
        "unclean.leader.election.enable": "true",
        "min.cleanable.dirty.ratio": "0.25",
    }


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "retension.ms",
            "1",
            "unknown topic config key 'retension.ms' (did you mean 'retention.ms'?)",
        ),
        ("retention.ms", "abc", "invalid value 'abc' for 'retention.ms': expected a long integer"),
        ("retention.ms", "-2", "invalid value '-2' for 'retention.ms': must be at least -1"),
        ("segment.bytes", "13", "invalid value '13' for 'segment.bytes': must be at least 14"),
        ("cleanup.policy", "delete,keep", "'keep' is not one of compact, delete"),
        ("compression.type", "brotli", "must be one of uncompressed, zstd"),
        ("message.timestamp.type", "Now", "must be one of CreateTime, LogAppendTime"),
        ("min.cleanable.dirty.ratio", "1.5", "must be between 0 and 1"),
        ("min.insync.replicas", "0", "must be at least 1"),
        ("flush.messages", "0", "must be at least 1"),
    ],
)
def test_invalid_topic_config(name: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_topic_configs({name: value})
    assert message in str(info.value)
    assert info.value.key == name


def test_effective_topic_config_sources() -> None:
    broker = load_config(
        file_text="log.retention.hours=1\nlog.segment.bytes=1000\n",
        overrides=["message.max.bytes=2000"],
    )
    effective = effective_topic_config(broker, {"cleanup.policy": "compact"})
    assert set(effective) == set(TOPIC_CONFIG_KEYS)
    assert effective["cleanup.policy"] == ("compact", DYNAMIC)
    assert effective["retention.ms"] == ("3600000", STATIC)
    assert effective["segment.bytes"] == ("1000", STATIC)
    assert effective["max.message.bytes"] == ("2000", STATIC)
    assert effective["segment.ms"] == ("604800000", DEFAULT)
    assert effective["flush.messages"] == ("1", DEFAULT)
    assert effective["flush.ms"] == (str(2**63 - 1), DEFAULT)
    assert effective["message.timestamp.type"] == ("CreateTime", DEFAULT)
    assert effective["min.insync.replicas"] == ("1", DEFAULT)
    assert effective["index.interval.bytes"] == ("4096", DEFAULT)
    assert effective["retention.bytes"] == ("-1", DEFAULT)
    assert all(isinstance(source, ConfigSource) for _, source in effective.values())


def test_effective_topic_config_resolves_broker_synonyms() -> None:
    broker = load_config(
        overrides=["log.roll.hours=2", "log.flush.scheduler.interval.ms=300", "log.retention.ms=-1"]
    )
    effective = effective_topic_config(broker, {})
    assert effective["segment.ms"] == ("7200000", STATIC)
    assert effective["flush.ms"] == ("300", STATIC)
    assert effective["retention.ms"] == ("-1", STATIC)


def test_effective_topic_config_rejects_bad_override() -> None:
    with pytest.raises(ConfigError, match=r"'segment.ms'"):
        effective_topic_config(load_config(), {"segment.ms": "0"})
