"""Which OAUTHBEARER login librdkafka's client settings ask strom's client for.

librdkafka gets its tokens one of three ways: its unsecured tokens
(`enable.sasl.oauthbearer.unsecure.jwt=true`, made from `sasl.oauthbearer.config`), a
token endpoint (`sasl.oauthbearer.method=oidc`, with `sasl.oauthbearer.client.id`,
`sasl.oauthbearer.client.secret` (or their `sasl.oauthbearer.client.credentials.*`
aliases) and `sasl.oauthbearer.token.endpoint.url`; `sasl.oauthbearer.scope`,
`sasl.oauthbearer.extensions`, `https.ca.location` or `https.ca.pem` optional), or the
application's callback, which a settings file cannot hold. The first two are
`UnsecuredLogin` and `OidcLogin`; settings that ask for neither, or for both, are
refused as librdkafka refuses them. Settings librdkafka takes for a login strom's client
does not have (`sasl.oauthbearer.grant.type` other than client_credentials,
`sasl.oauthbearer.metadata.authentication.type` other than none) are
`OAuthBearerUnsupported`, so that a caller that has librdkafka at hand (Spark's reader)
can fall back to it. Settings that only apply to the other way are ignored, as
librdkafka ignores them.

Pure.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

from strom.client.oauth_oidc import (
    CLIENT_ID_KEY,
    CLIENT_SECRET_KEY,
    SCOPE_KEY,
    TOKEN_ENDPOINT_KEY,
    OidcLogin,
)
from strom.client.oauth_tokens import UNSECURED_CONFIG_KEY, UnsecuredLogin, parse_extensions
from strom.client.oauth_tokens import parse_unsecured_config as _parse_unsecured

__all__ = [
    "METHOD_KEY",
    "UNSECURE_JWT_KEY",
    "OAuthBearerLogin",
    "OAuthBearerSettingError",
    "OAuthBearerUnsupported",
    "oauthbearer_login",
]

UNSECURE_JWT_KEY = "enable.sasl.oauthbearer.unsecure.jwt"
METHOD_KEY = "sasl.oauthbearer.method"
EXTENSIONS_KEY = "sasl.oauthbearer.extensions"
GRANT_TYPE_KEY = "sasl.oauthbearer.grant.type"
METADATA_AUTHENTICATION_KEY = "sasl.oauthbearer.metadata.authentication.type"
_ALIASES = {
    CLIENT_ID_KEY: "sasl.oauthbearer.client.credentials.client.id",
    CLIENT_SECRET_KEY: "sasl.oauthbearer.client.credentials.client.secret",
}

OAuthBearerLogin = UnsecuredLogin | OidcLogin


class OAuthBearerSettingError(ValueError):
    """Settings strom's client cannot log in with; `key` is the setting to change."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class OAuthBearerUnsupported(OAuthBearerSettingError):
    """A login librdkafka has and strom's client has not."""


def oauthbearer_login(settings: Mapping[str, str]) -> OAuthBearerLogin:
    """The login that `settings` (librdkafka's keys) ask for with sasl.mechanism
    OAUTHBEARER; OAuthBearerSettingError saying what to set."""
    unsecured = _boolean(settings, UNSECURE_JWT_KEY)
    method = settings.get(METHOD_KEY, "default").strip().lower()
    if method not in ("default", "oidc"):
        raise OAuthBearerSettingError(
            METHOD_KEY, f"{METHOD_KEY}={settings[METHOD_KEY]} is not one of default, oidc"
        )
    if unsecured and method == "oidc":
        raise OAuthBearerSettingError(
            UNSECURE_JWT_KEY,
            f"{UNSECURE_JWT_KEY}=true and {METHOD_KEY}=oidc are two ways to get tokens; "
            "set one of them",
        )
    if unsecured:
        try:
            return _parse_unsecured(settings.get(UNSECURED_CONFIG_KEY, ""))
        except ValueError as exc:
            raise OAuthBearerSettingError(UNSECURED_CONFIG_KEY, str(exc)) from None
    if method == "oidc":
        return _oidc(settings)
    raise OAuthBearerSettingError(
        METHOD_KEY,
        f"sasl.mechanism=OAUTHBEARER needs a way to get tokens: set {METHOD_KEY}=oidc with "
        f"{CLIENT_ID_KEY}, {CLIENT_SECRET_KEY} and {TOKEN_ENDPOINT_KEY}, or, for development, "
        f"{UNSECURE_JWT_KEY}=true with {UNSECURED_CONFIG_KEY}=principal=<name>",
    )


def _boolean(settings: Mapping[str, str], key: str) -> bool:
    text = settings.get(key, "false").strip().lower()
    if text not in ("true", "false"):
        raise OAuthBearerSettingError(key, f"{key}={settings[key]} is not true or false")
    return text == "true"


def _oidc(settings: Mapping[str, str]) -> OidcLogin:
    grant_type = settings.get(GRANT_TYPE_KEY, "client_credentials").strip()
    if grant_type != "client_credentials":
        raise OAuthBearerUnsupported(
            GRANT_TYPE_KEY,
            f"{GRANT_TYPE_KEY}={grant_type}: strom's client gets tokens with "
            "client_credentials only",
        )
    metadata = settings.get(METADATA_AUTHENTICATION_KEY, "none").strip().lower()
    if metadata != "none":
        raise OAuthBearerUnsupported(
            METADATA_AUTHENTICATION_KEY,
            f"{METADATA_AUTHENTICATION_KEY}={metadata}: strom's client gets tokens with "
            "a client id and secret only",
        )
    values = {key: _setting(settings, key) for key in (CLIENT_ID_KEY, CLIENT_SECRET_KEY)}
    values[TOKEN_ENDPOINT_KEY] = settings.get(TOKEN_ENDPOINT_KEY, "").strip()
    missing = [key for key, value in values.items() if not value]
    if missing:
        raise OAuthBearerSettingError(
            missing[0], f"{METHOD_KEY}=oidc also needs {_listed(missing)}"
        )
    url = values[TOKEN_ENDPOINT_KEY]
    _check_url(url)
    ca_location = settings.get("https.ca.location", "").strip()
    ca_pem = settings.get("https.ca.pem", "").strip()
    if ca_location and ca_pem:
        raise OAuthBearerSettingError(
            "https.ca.pem",
            "https.ca.location and https.ca.pem are two ways to give the "
            "token endpoint's CA; set one of them",
        )
    try:
        extensions = parse_extensions(settings.get(EXTENSIONS_KEY, ""), EXTENSIONS_KEY)
    except ValueError as exc:
        raise OAuthBearerSettingError(EXTENSIONS_KEY, str(exc)) from None
    return OidcLogin(
        token_endpoint_url=url,
        client_id=values[CLIENT_ID_KEY],
        client_secret=values[CLIENT_SECRET_KEY],
        scope=settings.get(SCOPE_KEY, "").strip(),
        extensions=extensions,
        https_ca_location=ca_location,
        https_ca_pem=ca_pem,
    )


def _setting(settings: Mapping[str, str], key: str) -> str:
    """The setting under its name, else under librdkafka's alias for it."""
    value = settings.get(key, "").strip()
    return value or settings.get(_ALIASES[key], "").strip()


def _listed(keys: list[str]) -> str:
    return keys[0] if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"


def _check_url(url: str) -> None:
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise OAuthBearerSettingError(
            TOKEN_ENDPOINT_KEY, f"{TOKEN_ENDPOINT_KEY} is not an https:// (or http://) URL"
        )
