"""strom.config's listeners: parsing and printing them, advertised listeners and the
inter-broker listener derived from the client listeners.
"""

from __future__ import annotations

import pytest

from strom.config import ConfigError, Listener, load_config

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
