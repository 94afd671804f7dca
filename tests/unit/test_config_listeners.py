"""strom.config's listeners: parsing and printing them, advertised listeners and the
inter-broker listener derived from the client listeners.
"""

from __future__ import annotations

import pytest

from strom.config import ConfigError, Listener, load_config
from strom.config.dynamic import validate_dynamic_broker_configs
from strom.config.security_keys import ClientAuth

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


# ---------------------------------------------------------------- SSL listeners

_TWO = "listeners=PLAINTEXT://:9092,SSL://:9093"


def test_an_ssl_listener_takes_the_ssl_keys_and_its_own_overrides() -> None:
    config = load_config(
        overrides=[
            _TWO + ",EXTERNAL://:9094",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,EXTERNAL:SSL",
            "ssl.keystore.type=PEM",
            "ssl.keystore.location=/etc/strom/broker.pem",
            "ssl.client.auth=requested",
            "listener.name.external.ssl.keystore.location=/etc/strom/external.pem",
            "listener.name.EXTERNAL.ssl.client.auth=required",
        ]
    )
    assert dict(config.listener_protocols) == {
        "PLAINTEXT": "PLAINTEXT",
        "SSL": "SSL",
        "EXTERNAL": "SSL",
    }
    tls = dict(config.listener_tls)
    assert set(tls) == {"SSL", "EXTERNAL"}
    assert tls["SSL"].keystore_location == "/etc/strom/broker.pem"
    assert tls["SSL"].client_auth is ClientAuth.REQUESTED
    assert tls["EXTERNAL"].keystore_location == "/etc/strom/external.pem"
    assert tls["EXTERNAL"].client_auth is ClientAuth.REQUIRED
    assert tls["EXTERNAL"].keystore_type == "PEM"  # not overridden: the plain key's
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_an_override_value_is_checked_under_its_own_name() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[_TWO, "listener.name.ssl.ssl.client.auth=sometimes"])
    assert info.value.key == "listener.name.ssl.ssl.client.auth"
    assert "'listener.name.ssl.ssl.client.auth'" in str(info.value)


def test_listener_keys_are_kept_with_the_given_keys() -> None:
    config = load_config(overrides=[_TWO, "listener.name.ssl.ssl.keystore.type=PEM"])
    assert config.given["listener.name.ssl.ssl.keystore.type"] == "PEM"
    assert "listener.name.ssl.ssl.keystore.type" not in config.raw


# ---------------------------------------------------------------- SASL listeners

_JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="s3cret";'


def test_a_sasl_listener_takes_its_mechanisms_and_its_jaas_config() -> None:
    config = load_config(
        overrides=[
            "listeners=PLAINTEXT://:9092,SASL_SSL://:9093,SASL_PLAINTEXT://:9094",
            "sasl.enabled.mechanisms=GSSAPI",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms=plain",
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={_JAAS}",
            f"listener.name.sasl_plaintext.plain.sasl.jaas.config={_JAAS}",
            "connection.failed.authentication.delay.ms=250",
        ]
    )
    sasl = dict(config.listener_sasl)
    assert set(sasl) == {"SASL_SSL", "SASL_PLAINTEXT"}
    assert sasl["SASL_SSL"].mechanisms == ("PLAIN",)
    assert sasl["SASL_SSL"].jaas_configs == (("PLAIN", _JAAS),)
    assert sasl["SASL_SSL"].failed_authentication_delay_ms == 250
    assert set(dict(config.listener_tls)) == {"SASL_SSL"}  # TLS under SASL_SSL only
    assert "s3cret" not in repr(sasl["SASL_SSL"])


def test_scram_needs_no_jaas_config_but_plain_beside_it_does() -> None:
    config = load_config(
        overrides=[
            "listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
            "sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256",
        ]
    )
    sasl = dict(config.listener_sasl)["SASL_PLAINTEXT"]
    assert sasl.mechanisms == ("SCRAM-SHA-512", "SCRAM-SHA-256")
    assert sasl.jaas_configs == ()


@pytest.mark.parametrize(
    ("settings", "key", "fragment"),
    [
        (
            ["sasl.enabled.mechanisms=PLAIN"],
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            "offers PLAIN",
        ),
        (
            [
                "sasl.enabled.mechanisms=PLAIN,GSSAPI",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={_JAAS}",
            ],
            "sasl.enabled.mechanisms",
            "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER so far",
        ),
        (
            ["listener.name.sasl_plaintext.sasl.enabled.mechanisms=GSSAPI"],
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            "OAUTHBEARER so far",
        ),
        (
            ["sasl.enabled.mechanisms=OAUTHBEARER"],
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
            "OAuthBearerLoginModule required;",
        ),
    ],
)
def test_sasl_mistakes_name_the_key(settings: list[str], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9093", *settings])
    assert info.value.key == key
    assert fragment in str(info.value)
    assert "s3cret" not in str(info.value)


def test_connection_limits_with_listener_overrides_and_the_protected_listener() -> None:
    config = load_config(
        overrides=[
            "listeners=PLAINTEXT://:9092,EXTERNAL://:9093",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
            "EXTERNAL:PLAINTEXT",
            "max.connections=100",
            "max.connections.per.ip=7",
            "max.connections.per.ip.overrides=10.0.0.1:50, [::1]:3,db.example:9",
            "max.connection.creation.rate=20",
            "listener.name.external.max.connections=60",
            "listener.name.external.max.connection.creation.rate=5",
        ]
    )
    limits = config.connection_limits
    assert (limits.max_connections, limits.max_connections_per_ip) == (100, 7)
    assert dict(limits.per_ip_overrides) == {"10.0.0.1": 50, "::1": 3, "db.example": 9}
    assert limits.max_creation_rate == 20
    assert dict(limits.listener_max_connections) == {"EXTERNAL": 60}
    assert dict(limits.listener_max_creation_rate) == {"EXTERNAL": 5}
    assert limits.protected_listener == "PLAINTEXT"
    single = load_config(overrides=["listeners=PLAINTEXT://:9092"]).connection_limits
    assert single.protected_listener is None  # Kafka protects it only beside others


@pytest.mark.parametrize(
    ("setting", "key", "fragment"),
    [
        ("max.connections.per.ip=0", "max.connections.per.ip", "overrides must be set"),
        (
            "max.connections.per.ip.overrides=10.0.0.1",
            "max.connections.per.ip.overrides",
            "host:count",
        ),
        ("max.connections.per.ip.overrides=a:b", "max.connections.per.ip.overrides", "host:count"),
        ("max.connections=-1", "max.connections", "at least 0"),
        (
            "listener.name.plaintext.max.connections=x",
            "listener.name.plaintext.max.connections",
            "x",
        ),
    ],
)
def test_connection_limit_mistakes_name_the_key(setting: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=["listeners=PLAINTEXT://:9092", setting])
    assert info.value.key == key
    assert fragment in str(info.value)


def test_connection_limits_may_change_at_run_time_listener_prefixed_too() -> None:
    for name, value in [
        ("max.connections", "10"),
        ("max.connections.per.ip.overrides", "127.0.0.1:5"),
        ("listener.name.external.max.connection.creation.rate", "3"),
    ]:
        validate_dynamic_broker_configs({name: value}, per_broker=False)


def test_kafkas_security_keys_without_a_counterpart_change_per_broker_and_do_nothing() -> None:
    """Kafka lets these change for one broker at run time; strom accepts them the same
    way and acts on none (docs/operations.md says so)."""
    for name, value in [
        ("sasl.kerberos.min.time.before.relogin", "30000"),
        ("sasl.kerberos.service.name", "kafka"),
        ("sasl.login.refresh.window.factor", "0.9"),
        ("ssl.keymanager.algorithm", "PKIX"),
        ("principal.builder.class", "com.example.Builder"),
    ]:
        validate_dynamic_broker_configs({name: value}, per_broker=True)
        with pytest.raises(ConfigError, match="only be set for one broker"):
            validate_dynamic_broker_configs({name: value}, per_broker=False)
    with pytest.raises(ConfigError, match="static broker setting"):
        validate_dynamic_broker_configs({"connections.max.reauth.ms": "1000"}, per_broker=True)
    config = load_config(overrides=["sasl.kerberos.min.time.before.relogin=5000"])
    assert "sasl.kerberos.min.time.before.relogin" in config.ignored
