"""OAUTHBEARER's listener settings: the JAAS entry it needs, the server callback handler
that picks the JWKS validator, and the `sasl.oauthbearer.*` keys read as Kafka reads them
(`listener.name.<l>.oauthbearer.<key>`, then `listener.name.<l>.<key>`, then `<key>`)."""

from __future__ import annotations

import pytest

from strom.config import ConfigError, load_config
from strom.config.security_keys import OAuthBearerSettings
from strom.server.sasl_gate import ListenerSasl

MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required"
HANDLER = "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler"
BASE = [
    "listeners=PLAINTEXT://:9092,SASL_PLAINTEXT://:9093",
    "sasl.enabled.mechanisms=OAUTHBEARER",
    f"listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={MODULE};",
]
JWKS = [
    f"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class={HANDLER}",
    "sasl.oauthbearer.jwks.endpoint.url=https://idp.example/jwks",
]


def oauthbearer(*more: str) -> OAuthBearerSettings:
    config = load_config(overrides=[*BASE, *more])
    settings = dict(config.listener_sasl)["SASL_PLAINTEXT"].oauthbearer
    assert settings is not None
    return settings


def test_without_a_callback_handler_tokens_are_unsecured_jwts() -> None:
    assert oauthbearer() == OAuthBearerSettings()
    unsecured = (
        "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class="
        "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
        "OAuthBearerUnsecuredValidatorCallbackHandler"
    )
    assert oauthbearer(unsecured).jwks_endpoint_url is None


def test_kafkas_jwks_validator_with_its_defaults() -> None:
    settings = oauthbearer(*JWKS)
    assert settings == OAuthBearerSettings(jwks_endpoint_url="https://idp.example/jwks")


def test_kafka_3s_class_name_is_accepted_too() -> None:
    secured = HANDLER.replace("oauthbearer.OAuth", "oauthbearer.secured.OAuth")
    handler = (
        f"listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class={secured}"
    )
    assert oauthbearer(handler, JWKS[1]).jwks_endpoint_url == "https://idp.example/jwks"


def test_the_most_specific_key_wins_as_in_kafka() -> None:
    settings = oauthbearer(
        *JWKS,
        "sasl.oauthbearer.expected.audience=a,b",
        "sasl.oauthbearer.clock.skew.seconds=5",
        "listener.name.sasl_plaintext.sasl.oauthbearer.clock.skew.seconds=6",
        "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.clock.skew.seconds=7",
        "listener.name.sasl_plaintext.sasl.oauthbearer.expected.issuer=https://idp.example",
        "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.sub.claim.name=client_id",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms=1000",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms=10",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms=20",
    )
    assert settings.expected_audiences == ("a", "b")
    assert settings.clock_skew_s == 7
    assert settings.expected_issuer == "https://idp.example"
    assert settings.sub_claim_name == "client_id"
    assert (settings.jwks_refresh_ms, settings.jwks_retry_backoff_ms) == (1000, 10)
    assert settings.jwks_retry_backoff_max_ms == 20


@pytest.mark.parametrize(
    ("more", "key", "fragment"),
    [
        (
            ["listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config="],
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config",
            "OAuthBearerLoginModule required;",
        ),
        (
            [JWKS[0]],
            "sasl.oauthbearer.jwks.endpoint.url",
            "set sasl.oauthbearer.jwks.endpoint.url",
        ),
        (
            [JWKS[0], "sasl.oauthbearer.jwks.endpoint.url=ftp://idp/jwks"],
            "sasl.oauthbearer.jwks.endpoint.url",
            "https:, http: or file:",
        ),
        (
            [
                JWKS[0],
                "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url=x",
            ],
            "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
            "https:, http: or file:",
        ),
        (
            [
                "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class="
                "com.example.MyHandler"
            ],
            "listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class",
            "runs no Java classes",
        ),
        (
            [*JWKS, "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms=50"],
            "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            "at least sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        ),
        (
            [*JWKS, "listener.name.sasl_plaintext.sasl.oauthbearer.clock.skew.seconds=-1"],
            "listener.name.sasl_plaintext.sasl.oauthbearer.clock.skew.seconds",
            "at least 0",
        ),
        (
            ["listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.nope=1"],
            "listener.name.sasl_plaintext.oauthbearer.sasl.oauthbearer.nope",
            "unknown config key",
        ),
    ],
)
def test_oauthbearer_mistakes_name_the_key(more: list[str], key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(overrides=[*BASE, *more])
    assert info.value.key == key
    assert fragment in str(info.value)


def test_bad_unsecured_validator_options_stop_the_listener_naming_the_key() -> None:
    config = load_config(
        overrides=[
            *BASE,
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config="
            f'{MODULE} unsecuredValidatorAllowableClockSkewMs="-5";',
        ]
    )
    settings = dict(config.listener_sasl)["SASL_PLAINTEXT"]
    with pytest.raises(ConfigError) as info:
        ListenerSasl("SASL_PLAINTEXT", settings, lambda name, mechanism: None)
    assert info.value.key == "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
    assert "non-negative" in str(info.value)


def test_kafkas_broker_login_keys_are_accepted_and_named_as_having_no_effect() -> None:
    config = load_config(
        overrides=[
            *BASE,
            *JWKS,
            "listener.name.sasl_plaintext.oauthbearer.sasl.login.callback.handler.class="
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
            "sasl.oauthbearer.token.endpoint.url=https://idp.example/token",
            "sasl.login.connect.timeout.ms=5000",
        ]
    )
    assert set(config.ignored) >= {
        "listener.name.sasl_plaintext.oauthbearer.sasl.login.callback.handler.class",
        "sasl.oauthbearer.token.endpoint.url",
        "sasl.login.connect.timeout.ms",
    }
    assert "sasl.oauthbearer.jwks.endpoint.url" not in config.ignored
