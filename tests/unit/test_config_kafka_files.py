"""strom.config loads the server.properties files Kafka ships (KRaft combined, broker-only,
controller-only, ZooKeeper mode) and fills in Kafka's defaults.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from strom.config import ConfigError, ConfigSource, Listener, ProcessRole, QuorumVoter, load_config

STATIC = ConfigSource.STATIC_BROKER_CONFIG
DEFAULT = ConfigSource.DEFAULT_CONFIG

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
    )
    assert config.transaction_state_log_replication_factor == 1
    assert config.transaction_state_log_min_isr == 1
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
    assert config.share_coordinator.state_topic_min_isr == 1
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
