"""Which OAUTHBEARER login librdkafka's settings ask strom's client for, and the one
clear sentence, naming the setting, when they ask for none or for one it cannot do."""

from __future__ import annotations

import pytest

from strom.client.oauth_oidc import OidcLogin
from strom.client.oauth_settings import (
    OAuthBearerSettingError,
    OAuthBearerUnsupported,
    oauthbearer_login,
)
from strom.client.oauth_tokens import UnsecuredLogin

UNSECURED = {
    "enable.sasl.oauthbearer.unsecure.jwt": "true",
    "sasl.oauthbearer.config": "principal=alice scope=kafka",
}
OIDC = {
    "sasl.oauthbearer.method": "oidc",
    "sasl.oauthbearer.client.id": "orders",
    "sasl.oauthbearer.client.secret": "orders-secret",
    "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
}


def test_unsecured_tokens() -> None:
    login = oauthbearer_login(UNSECURED | {"enable.sasl.oauthbearer.unsecure.jwt": " True "})
    assert login == UnsecuredLogin("alice", scope=("kafka",))
    # librdkafka ignores the oidc-only keys here, and so does strom's client.
    assert oauthbearer_login(UNSECURED | {"sasl.oauthbearer.extensions": "a=1"}) == login


def test_client_credentials() -> None:
    login = oauthbearer_login(
        OIDC
        | {
            "sasl.oauthbearer.method": "OIDC",
            "sasl.oauthbearer.scope": " kafka ",
            "sasl.oauthbearer.extensions": "logicalCluster=lkc-1,identityPoolId=pool-2",
            "https.ca.location": "/etc/ssl/idp-ca.pem",
            "sasl.oauthbearer.config": "ignored by librdkafka with oidc",
        }
    )
    assert login == OidcLogin(
        "https://idp.example/token",
        "orders",
        "orders-secret",
        scope="kafka",
        extensions=(("logicalCluster", "lkc-1"), ("identityPoolId", "pool-2")),
        https_ca_location="/etc/ssl/idp-ca.pem",
    )
    assert "orders-secret" not in repr(login)
    hash(login)  # one token source per login and process


def test_librdkafkas_aliases_for_the_client_id_and_secret() -> None:
    aliased = {
        "sasl.oauthbearer.method": "oidc",
        "sasl.oauthbearer.client.credentials.client.id": "orders",
        "sasl.oauthbearer.client.credentials.client.secret": "orders-secret",
        "sasl.oauthbearer.token.endpoint.url": "https://idp.example/token",
    }
    assert oauthbearer_login(aliased) == oauthbearer_login(OIDC)


@pytest.mark.parametrize(
    ("settings", "key", "message"),
    [
        (
            {},
            "sasl.oauthbearer.method",
            "sasl.mechanism=OAUTHBEARER needs a way to get tokens: set "
            "sasl.oauthbearer.method=oidc with sasl.oauthbearer.client.id, "
            "sasl.oauthbearer.client.secret and sasl.oauthbearer.token.endpoint.url, or, "
            "for development, enable.sasl.oauthbearer.unsecure.jwt=true with "
            "sasl.oauthbearer.config=principal=<name>",
        ),
        (
            {"sasl.oauthbearer.config": "principal=alice"},
            "sasl.oauthbearer.method",
            "needs a way to get tokens",
        ),
        (
            {"enable.sasl.oauthbearer.unsecure.jwt": "true"},
            "sasl.oauthbearer.config",
            "sasl.oauthbearer.config has no principal=<name>: an unsecured token needs one "
            "(for example sasl.oauthbearer.config=principal=alice)",
        ),
        (
            {"enable.sasl.oauthbearer.unsecure.jwt": "yes"},
            "enable.sasl.oauthbearer.unsecure.jwt",
            "enable.sasl.oauthbearer.unsecure.jwt=yes is not true or false",
        ),
        (
            UNSECURED | OIDC,
            "enable.sasl.oauthbearer.unsecure.jwt",
            "enable.sasl.oauthbearer.unsecure.jwt=true and sasl.oauthbearer.method=oidc are "
            "two ways to get tokens; set one of them",
        ),
        (
            {"sasl.oauthbearer.method": "kerberos"},
            "sasl.oauthbearer.method",
            "sasl.oauthbearer.method=kerberos is not one of default, oidc",
        ),
        (
            {"sasl.oauthbearer.method": "oidc"},
            "sasl.oauthbearer.client.id",
            "sasl.oauthbearer.method=oidc also needs sasl.oauthbearer.client.id, "
            "sasl.oauthbearer.client.secret and sasl.oauthbearer.token.endpoint.url",
        ),
        (
            OIDC | {"sasl.oauthbearer.client.secret": " "},
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.method=oidc also needs sasl.oauthbearer.client.secret",
        ),
        (
            OIDC | {"sasl.oauthbearer.token.endpoint.url": "idp.example/token"},
            "sasl.oauthbearer.token.endpoint.url",
            "sasl.oauthbearer.token.endpoint.url is not an https:// (or http://) URL",
        ),
        (
            OIDC | {"sasl.oauthbearer.token.endpoint.url": "https://idp.example:port/token"},
            "sasl.oauthbearer.token.endpoint.url",
            "is not an https:// (or http://) URL",
        ),
        (
            OIDC | {"sasl.oauthbearer.extensions": "tenant"},
            "sasl.oauthbearer.extensions",
            "sasl.oauthbearer.extensions: 'tenant' is not name=value",
        ),
        (
            OIDC | {"https.ca.location": "/ca.pem", "https.ca.pem": "-----BEGIN"},
            "https.ca.pem",
            "https.ca.location and https.ca.pem are two ways",
        ),
    ],
)
def test_settings_strom_s_client_cannot_log_in_with(
    settings: dict[str, str], key: str, message: str
) -> None:
    with pytest.raises(OAuthBearerSettingError) as caught:
        oauthbearer_login(settings)
    assert not isinstance(caught.value, OAuthBearerUnsupported)
    assert caught.value.key == key
    assert message in str(caught.value)
    assert "orders-secret" not in str(caught.value)


@pytest.mark.parametrize(
    ("more", "key"),
    [
        (
            {"sasl.oauthbearer.grant.type": "urn:ietf:params:oauth:grant-type:jwt-bearer"},
            "sasl.oauthbearer.grant.type",
        ),
        (
            {"sasl.oauthbearer.metadata.authentication.type": "azure_imds"},
            "sasl.oauthbearer.metadata.authentication.type",
        ),
    ],
)
def test_logins_librdkafka_has_and_strom_s_client_has_not(more: dict[str, str], key: str) -> None:
    with pytest.raises(OAuthBearerUnsupported) as caught:
        oauthbearer_login(OIDC | more)
    assert caught.value.key == key
    assert "strom's client gets tokens with" in str(caught.value)
