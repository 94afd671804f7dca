"""strom.config's listeners: parsing and printing them, advertised listeners and the
inter-broker listener derived from the client listeners.
"""

from __future__ import annotations

import pytest

from strom.config import ConfigError, Listener, load_config
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


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        (["listeners=SSL://:9092,PLAINTEXT://:9093"], None),  # PLAINTEXT is inter-broker
        (["listeners=SSL://:9092", "inter.broker.listener.name=SSL"], "inter.broker.listener.name"),
        (
            [
                "listeners=PLAINTEXT://:9092,CONTROLLER://:9093",
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
                "controller.quorum.voters=1@localhost:9093",
            ],
            "listener.security.protocol.map",
        ),
    ],
)
def test_strom_s_own_links_stay_plaintext(settings: list[str], key: str | None) -> None:
    if key is None:
        assert load_config(overrides=settings).inter_broker_listener_name == "PLAINTEXT"
        return
    with pytest.raises(ConfigError, match="PLAINTEXT only so far") as info:
        load_config(overrides=settings)
    assert info.value.key == key


def test_listener_keys_are_kept_with_the_given_keys() -> None:
    config = load_config(overrides=[_TWO, "listener.name.ssl.ssl.keystore.type=PEM"])
    assert config.given["listener.name.ssl.ssl.keystore.type"] == "PEM"
    assert "listener.name.ssl.ssl.keystore.type" not in config.raw
