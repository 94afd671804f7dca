"""Client settings as librdkafka names them (a `client.properties`, a Spark query's
`kafka.*` options) turned into strom's client security: security.protocol,
ssl.ca.location, ssl.ca.pem, ssl.certificate.location, ssl.key.location,
ssl.key.password, ssl.endpoint.identification.algorithm,
enable.ssl.certificate.verification, sasl.mechanism (or sasl.mechanisms), sasl.username
and sasl.password, and for OAUTHBEARER the keys of strom.client.oauth_settings
(enable.sasl.oauthbearer.unsecure.jwt, sasl.oauthbearer.config, sasl.oauthbearer.method,
sasl.oauthbearer.client.id, sasl.oauthbearer.client.secret,
sasl.oauthbearer.token.endpoint.url, sasl.oauthbearer.scope,
sasl.oauthbearer.extensions, https.ca.location, https.ca.pem). Other keys are
librdkafka's own and are left alone.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from strom.client.security import ClientSecurity, SaslLogin
from strom.security.sasl import OAUTHBEARER

if TYPE_CHECKING:
    from strom.client.oauth_login import OAuthBearerTokens

__all__ = ["SECURITY_PROTOCOLS", "security_from_settings"]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def security_from_settings(settings: Mapping[str, str]) -> ClientSecurity | None:
    """What the settings ask for; None for plaintext. ValueError saying what strom's
    client cannot do (a mechanism it has no login for) or which file it cannot use; for
    OAUTHBEARER an OAuthBearerSettingError, which names the setting to change."""
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ValueError(
            f"security.protocol={protocol} is not one of {', '.join(SECURITY_PROTOCOLS)}"
        )
    if protocol == "PLAINTEXT":
        return None
    tls = _tls_context(settings) if protocol.endswith("SSL") else None
    sasl = None
    if protocol.startswith("SASL"):
        mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))
        mechanism = mechanism.strip().upper()
        if mechanism == OAUTHBEARER:
            sasl = SaslLogin(mechanism, tokens=_bearer_tokens(settings))
        else:
            sasl = SaslLogin(
                mechanism, settings.get("sasl.username", ""), settings.get("sasl.password", "")
            )
    return ClientSecurity(tls, sasl)


def _bearer_tokens(settings: Mapping[str, str]) -> OAuthBearerTokens:
    """The process's token source for the OAUTHBEARER login the settings describe."""
    from strom.client.oauth_login import tokens_for
    from strom.client.oauth_settings import oauthbearer_login

    return tokens_for(oauthbearer_login(settings))


def _tls_context(settings: Mapping[str, str]) -> ssl.SSLContext:
    """The client's TLS context: the CA (ssl.ca.location or ssl.ca.pem; the system's by
    default), a client certificate if one is given, and host name checks unless turned
    off, as librdkafka does."""
    context = ssl.create_default_context()
    try:
        ca = settings.get("ssl.ca.location", "").strip()
        if ca and ca != "probe" and Path(ca).is_dir():
            context.load_verify_locations(capath=ca)
        elif ca and ca != "probe":
            context.load_verify_locations(cafile=ca)
        if settings.get("ssl.ca.pem", "").strip():
            context.load_verify_locations(cadata=settings["ssl.ca.pem"])
        certificate = settings.get("ssl.certificate.location", "").strip()
        if certificate:
            context.load_cert_chain(
                certificate,
                settings.get("ssl.key.location", "").strip() or None,
                password=settings.get("ssl.key.password") or None,
            )
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use its TLS settings: {exc}") from None
    identification = settings.get("ssl.endpoint.identification.algorithm", "https")
    if identification.strip().lower() == "none":
        context.check_hostname = False
    if settings.get("enable.ssl.certificate.verification", "true").strip().lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context
