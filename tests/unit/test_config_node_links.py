"""strom.config.node_links: how a node secures its connections to the brokers and to
the controllers, from its listeners' protocols, ssl.* keys and JAAS configs."""

from __future__ import annotations

import pytest

from strom.config import ConfigError, load_config
from strom.config.node_links import LinkLogin

_PLAIN = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret";'
)
_SCRAM = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="link" password="link-secret";'
)
_RAFT_SECURED = [
    "process.roles=broker,controller",
    "node.id=1",
    "controller.quorum.voters=1@localhost:9093,2@localhost:9193,3@localhost:9293",
    "listeners=CLIENT://:9092,CONTROLLER://:9093,INTERNAL://:9094",
    "listener.security.protocol.map=CLIENT:PLAINTEXT,CONTROLLER:SASL_SSL,INTERNAL:SSL",
    "inter.broker.listener.name=INTERNAL",
    "ssl.keystore.type=PEM",
    "ssl.keystore.location=/etc/strom/node.pem",
    "ssl.truststore.type=PEM",
    "ssl.truststore.location=/etc/strom/ca.pem",
    "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
    "sasl.mechanism.controller.protocol=PLAIN",
    f"listener.name.controller.plain.sasl.jaas.config={_PLAIN}",
]


def test_a_single_node_reaches_nobody_securely() -> None:
    links = load_config().node_links
    assert links.inter_broker is not None and links.inter_broker.plaintext
    assert links.inter_broker.listener == "PLAINTEXT"
    assert links.controller is None  # a quorum of one: no controller to reach


def test_each_link_speaks_its_listeners_protocol() -> None:
    links = load_config(overrides=_RAFT_SECURED).node_links
    inter_broker, controller = links.inter_broker, links.controller
    assert inter_broker is not None and controller is not None
    assert (inter_broker.listener, inter_broker.protocol) == ("INTERNAL", "SSL")
    assert inter_broker.tls is not None and inter_broker.login is None
    assert inter_broker.tls.truststore_location == "/etc/strom/ca.pem"
    assert inter_broker.tls.keystore_location == "/etc/strom/node.pem"  # its client cert
    assert inter_broker.check_hostname
    assert (controller.listener, controller.protocol) == ("CONTROLLER", "SASL_SSL")
    assert controller.login == LinkLogin("PLAIN", "broker", "broker-secret")
    assert "broker-secret" not in repr(controller)


def test_a_listeners_own_keys_win_and_the_host_name_check_can_be_turned_off() -> None:
    links = load_config(
        overrides=[
            *_RAFT_SECURED,
            "listener.name.internal.ssl.truststore.location=/etc/strom/internal-ca.pem",
            "listener.name.internal.ssl.endpoint.identification.algorithm=",
        ]
    ).node_links
    assert links.inter_broker is not None and links.inter_broker.tls is not None
    assert links.inter_broker.tls.truststore_location == "/etc/strom/internal-ca.pem"
    assert not links.inter_broker.check_hostname
    assert links.controller is not None and links.controller.check_hostname


def test_a_broker_only_node_reaches_a_controller_listener_it_does_not_serve() -> None:
    links = load_config(
        overrides=[
            "process.roles=broker",
            "node.id=4",
            "controller.quorum.voters=1@localhost:9093",
            "listeners=PLAINTEXT://:9092",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "listener.name.controller.ssl.truststore.type=PEM",
            "listener.name.controller.ssl.truststore.location=/etc/strom/ca.pem",
        ]
    ).node_links
    assert links.controller is not None and links.controller.tls is not None
    assert links.controller.tls.truststore_location == "/etc/strom/ca.pem"
    assert links.controller.tls.keystore_location is None


def test_on_zookeeper_the_controller_is_reached_on_the_inter_broker_listener() -> None:
    links = load_config(
        overrides=[
            "zookeeper.connect=localhost:2181",
            "broker.id=1",
            "listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
            "security.inter.broker.protocol=SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
            f"listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={_SCRAM}",
        ]
    ).node_links
    assert links.inter_broker is not None
    assert links.inter_broker.listener == "SASL_PLAINTEXT"
    assert links.inter_broker.login == LinkLogin("SCRAM-SHA-512", "link", "link-secret")
    assert links.controller == links.inter_broker


_SASL_INTERNAL = [
    "listeners=PLAINTEXT://:9092,INTERNAL://:9094",
    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name=INTERNAL",
    "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
    f"listener.name.internal.plain.sasl.jaas.config={_PLAIN}",
]


@pytest.mark.parametrize(
    ("more", "key", "fragment"),
    [
        ([], "sasl.mechanism.inter.broker.protocol", "GSSAPI, needs Kerberos"),
        (
            ["sasl.mechanism.inter.broker.protocol=OAUTHBEARER"],
            "sasl.mechanism.inter.broker.protocol",
            "not OAUTHBEARER",
        ),
        (
            ["sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512"],
            "sasl.mechanism.inter.broker.protocol",
            "does not offer it",
        ),
        (
            [
                "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256",
                "listener.name.internal.scram-sha-256.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            ],
            "listener.name.internal.scram-sha-256.sasl.jaas.config",
            "set the username and password this node logs in with",
        ),
        (
            ["sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256"],
            "listener.name.internal.scram-sha-256.sasl.jaas.config",
            "set the username and password",
        ),
        (
            [
                "sasl.mechanism.inter.broker.protocol=PLAIN",
                "ssl.endpoint.identification.algorithm=x",
            ],
            "ssl.endpoint.identification.algorithm",
            "expected https",
        ),
    ],
)
def test_link_mistakes_name_the_key(more: list[str], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as info:
        load_config(overrides=[*_SASL_INTERNAL, *more])
    assert info.value.key == key


def test_security_inter_broker_protocol_names_the_inter_broker_listener() -> None:
    config = load_config(
        overrides=["listeners=PLAINTEXT://:9092,SSL://:9093", "security.inter.broker.protocol=SSL"]
    )
    assert config.inter_broker_listener_name == "SSL"
    assert config.node_links.inter_broker is not None
    assert config.node_links.inter_broker.protocol == "SSL"
