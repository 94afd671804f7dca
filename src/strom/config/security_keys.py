"""The `ssl.*` keys of SSL listeners and the TLS settings they make; the SASL keys, the
OAUTHBEARER validator's `sasl.oauthbearer.*` keys (KIP-768) and the settings they make.

Kafka's names and defaults. strom reads key and trust stores in PEM and PKCS12, not JKS
(Kafka's default type): convert one with `keytool -importkeystore -deststoretype PKCS12`.
`TlsSettings` lives here, not in `strom.security.tls` (which builds the SSL contexts
from it and re-exports it), so that config, a pure package, can build it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import Enum

from strom.config.schema import AtLeast, ConfigKey, ConfigType, ConfigValue, OneOf

__all__ = [
    "AUTHORIZER_KEYS",
    "JWKS_VALIDATOR_CLASSES",
    "LOGIN_COMPAT_KEYS",
    "NODE_LOGIN_MECHANISMS",
    "OAUTHBEARER_KEYS",
    "SASL_KEYS",
    "SASL_MECHANISMS",
    "SECURITY_COMPAT_KEYS",
    "SERVED_SASL_MECHANISMS",
    "SERVER_CALLBACK_HANDLER_KEY",
    "SSL_KEYS",
    "UNSECURED_VALIDATOR_CLASS",
    "ClientAuth",
    "OAuthBearerSettings",
    "SaslSettings",
    "TlsSettings",
    "tls_settings",
]

STRING = ConfigType.STRING
LIST = ConfigType.LIST
INT = ConfigType.INT
LONG = ConfigType.LONG


class ClientAuth(Enum):
    """`ssl.client.auth`: whether a server asks its clients for a certificate."""

    NONE = "none"
    """Never asks: every client is ANONYMOUS."""
    REQUESTED = "requested"
    """Asks; a client without one is ANONYMOUS, one with a bad one is refused."""
    REQUIRED = "required"
    """Refuses a client without a certificate the trust store vouches for."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The TLS settings of one listener (or of strom's own connections), as Kafka's
    `ssl.*` keys give them. None: the key is not set.

    Key store: a file (`keystore_location`, of `keystore_type` PEM or PKCS12; a PEM file
    holds the private key and the certificate chain) or inline PEM text
    (`keystore_certificate_chain` and `keystore_key`, with `keystore_type` PEM). A PEM
    key may be encrypted with `key_password`. Trust store: a file (`truststore_location`,
    PEM certificates or PKCS12) or inline PEM certificates (`truststore_certificates`).
    """

    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None
    client_auth: ClientAuth = ClientAuth.NONE
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    """Empty: the TLS library's defaults. IANA names (as Kafka takes them) or OpenSSL's."""
    principal_mapping_rules: str = "DEFAULT"

    def __repr__(self) -> str:
        """Without the passwords and the inline private key."""
        hidden = {"keystore_password", "key_password", "truststore_password", "keystore_key"}
        shown = (
            f"{field.name}={'<hidden>' if field.name in hidden else repr(value)}"
            for field in fields(self)
            if (value := getattr(self, field.name)) is not None
        )
        return f"TlsSettings({', '.join(shown)})"


SSL_KEYS: tuple[ConfigKey, ...] = (
    # --- key store: this side's certificate
    ConfigKey(
        "ssl.keystore.type",
        STRING,
        "JKS",
        "Key store format: strom reads PEM and PKCS12, not JKS (Kafka's default): convert it.",
    ),
    ConfigKey(
        "ssl.keystore.location",
        STRING,
        None,
        "Key store file: this side's private key and certificate chain.",
    ),
    ConfigKey(
        "ssl.keystore.password",
        STRING,
        None,
        "Password of a PKCS12 key store file.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.key.password",
        STRING,
        None,
        "Password of an encrypted PEM private key (file or ssl.keystore.key).",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.keystore.certificate.chain",
        STRING,
        None,
        "Certificate chain as PEM text, this side's certificate first (with type PEM).",
        sensitive=True,  # Kafka's type PASSWORD: DescribeConfigs never shows it
    ),
    ConfigKey(
        "ssl.keystore.key",
        STRING,
        None,
        "Private key as PEM text, PKCS#8, maybe encrypted (with type PEM).",
        sensitive=True,
    ),
    # --- trust store: who is believed
    ConfigKey(
        "ssl.truststore.type",
        STRING,
        "JKS",
        "Format of the trust store: strom reads PEM and PKCS12 (not JKS).",
    ),
    ConfigKey(
        "ssl.truststore.location",
        STRING,
        None,
        "Trust store file: the CA certificates peers' certificates are checked against.",
    ),
    ConfigKey(
        "ssl.truststore.password",
        STRING,
        None,
        "Password of a PKCS12 trust store file.",
        sensitive=True,
    ),
    ConfigKey(
        "ssl.truststore.certificates",
        STRING,
        None,
        "Trusted certificates as PEM text (with type PEM).",
        sensitive=True,  # Kafka's type PASSWORD
    ),
    # --- the handshake
    ConfigKey(
        "ssl.client.auth",
        STRING,
        "none",
        "Whether an SSL listener asks clients for a certificate: none, requested, required.",
        OneOf(tuple(mode.value for mode in ClientAuth)),
    ),
    ConfigKey(
        "ssl.enabled.protocols",
        LIST,
        "TLSv1.2,TLSv1.3",
        "TLS versions allowed; strom allows TLSv1.2 and TLSv1.3 only.",
    ),
    ConfigKey(
        "ssl.protocol",
        STRING,
        "TLSv1.3",
        "Kafka's SSLContext protocol; strom accepts it, ssl.enabled.protocols decides.",
        effect=False,
    ),
    ConfigKey(
        "ssl.cipher.suites",
        LIST,
        "",
        "TLS 1.2 suites, IANA or OpenSSL names; empty: OpenSSL's. TLS 1.3 suites: all or none.",
    ),
    ConfigKey(
        "ssl.principal.mapping.rules",
        STRING,
        "DEFAULT",
        "Client certificate name to principal: RULE:pattern/replacement/[LU] or DEFAULT, ...",
    ),
    ConfigKey(
        "ssl.endpoint.identification.algorithm",
        STRING,
        "https",
        "https: a node checks the host name in the certificate of a node it connects to.",
    ),
)

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
"""Kafka's SASL mechanisms, as Kafka spells them."""
SERVED_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""The ones strom's SASL listeners offer so far."""
NODE_LOGIN_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The ones strom's nodes log in to each other with (not OAUTHBEARER: a node has no
token provider)."""

SASL_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "sasl.enabled.mechanisms",
        LIST,
        "GSSAPI",
        "Mechanisms a SASL listener offers: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.",
    ),
    ConfigKey(
        "connection.failed.authentication.delay.ms",
        ConfigType.INT,
        "100",
        "How long a broker waits before closing a connection whose authentication failed.",
        AtLeast(0),
    ),
    ConfigKey(
        "connections.max.reauth.ms",
        LONG,
        "0",
        "A SASL session's longest life before the client re-authenticates (KIP-368); 0: none.",
        AtLeast(0),
    ),
    ConfigKey(
        "sasl.mechanism.inter.broker.protocol",
        STRING,
        "GSSAPI",
        "Mechanism a broker logs in with on a SASL inter-broker listener: PLAIN or SCRAM-*.",
    ),
    ConfigKey(
        "sasl.mechanism.controller.protocol",
        STRING,
        "GSSAPI",
        "Mechanism a node logs in with on a SASL controller listener: PLAIN or SCRAM-*.",
    ),
)


OAUTHBEARER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "sasl.oauthbearer.jwks.endpoint.url",
        STRING,
        None,
        "OAUTHBEARER with Kafka's JWKS validator: the key set's URL (https:, http: or file:).",
    ),
    ConfigKey(
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        LONG,
        "3600000",
        "How often an http(s) JWKS is fetched again (a file is read once, at start).",
        AtLeast(1),
    ),
    ConfigKey(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        LONG,
        "100",
        "First wait between attempts to fetch the JWKS again; it doubles each time.",
        AtLeast(0),
    ),
    ConfigKey(
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        LONG,
        "10000",
        "How long a JWKS refresh keeps retrying before the old keys stay in use.",
        AtLeast(0),
    ),
    ConfigKey(
        "sasl.oauthbearer.expected.audience",
        LIST,
        None,
        "Audiences a signed token's aud must name one of; unset: a token with aud is refused.",
    ),
    ConfigKey(
        "sasl.oauthbearer.expected.issuer",
        STRING,
        None,
        "The iss a signed token must have; unset: not checked.",
    ),
    ConfigKey(
        "sasl.oauthbearer.clock.skew.seconds",
        INT,
        "30",
        "Leeway, in seconds, when a signed token's exp and nbf are checked.",
        AtLeast(0),
    ),
    ConfigKey(
        "sasl.oauthbearer.sub.claim.name",
        STRING,
        "sub",
        "The claim of a signed token that holds the principal's name.",
    ),
    ConfigKey(
        "sasl.oauthbearer.scope.claim.name",
        STRING,
        "scope",
        "The claim of a signed token that holds its scope.",
    ),
)
"""Kafka's KIP-768 keys of the signed-token validator; each may also be set for one
listener, `listener.name.<l>.` or `listener.name.<l>.oauthbearer.` first, as Kafka reads
them."""

SERVER_CALLBACK_HANDLER_KEY = "oauthbearer.sasl.server.callback.handler.class"
"""Set per listener only (`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`),
as in Kafka."""
JWKS_VALIDATOR_CLASSES = (
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
    "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerValidatorCallbackHandler",
)
UNSECURED_VALIDATOR_CLASS = (
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
    "OAuthBearerUnsecuredValidatorCallbackHandler"
)


@dataclass(frozen=True, slots=True)
class OAuthBearerSettings:
    """How one listener checks OAUTHBEARER tokens: unsecured JWTs (`jwks_endpoint_url`
    None, the options in the JAAS config) or signed ones against a JWKS."""

    jwks_endpoint_url: str | None = None
    jwks_refresh_ms: int = 3_600_000
    jwks_retry_backoff_ms: int = 100
    jwks_retry_backoff_max_ms: int = 10_000
    expected_audiences: tuple[str, ...] = ()
    expected_issuer: str | None = None
    clock_skew_s: int = 30
    sub_claim_name: str = "sub"
    scope_claim_name: str = "scope"


AUTHORIZER_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey(
        "authorizer.class.name",
        STRING,
        "",
        "Turns ACLs on: Kafka's StandardAuthorizer (or AclAuthorizer) class name; empty: off.",
    ),
    ConfigKey(
        "super.users",
        STRING,
        "",
        "Principals allowed everything, separated by ';' (e.g. User:admin;User:node).",
    ),
    ConfigKey(
        "allow.everyone.if.no.acl.found",
        ConfigType.BOOLEAN,
        "false",
        "Allow an operation on a resource no ACL names at all (default: deny).",
    ),
)


def _kafka_only(name: str, type_: ConfigType, default: str | None, doc: str) -> ConfigKey:
    return ConfigKey(name, type_, default, doc, effect=False, sensitive=name == "sasl.jaas.config")


LOGIN_COMPAT_KEYS: tuple[ConfigKey, ...] = tuple(
    ConfigKey(name, type_, default, doc, effect=False)
    for name, type_, default, doc in (
        (
            "sasl.server.callback.handler.class",
            STRING,
            None,
            "Kafka's server callback handler; per listener and mechanism it picks OAUTHBEARER's.",
        ),
        ("sasl.client.callback.handler.class", STRING, None, "Kafka's client callback handler."),
        ("sasl.login.class", STRING, None, "Kafka's login class."),
        ("sasl.login.callback.handler.class", STRING, None, "Kafka's login callback handler."),
        ("sasl.login.connect.timeout.ms", INT, None, "Kafka's token endpoint connect timeout."),
        ("sasl.login.read.timeout.ms", INT, None, "Kafka's token endpoint read timeout."),
        ("sasl.login.retry.backoff.ms", LONG, "100", "Kafka's token endpoint retry wait."),
        ("sasl.login.retry.backoff.max.ms", LONG, "10000", "Kafka's longest retry wait."),
        ("sasl.oauthbearer.token.endpoint.url", STRING, None, "Where Kafka's broker gets tokens."),
        ("sasl.oauthbearer.header.urlencode", ConfigType.BOOLEAN, "false", "Kafka's login."),
    )
)
"""Kafka's keys for a broker's own SASL login (OAUTHBEARER's token retrieval above all),
which strom accepts without acting on them, also for one listener
(`listener.name.<l>.[oauthbearer.]<key>`): strom's nodes log in to each other with PLAIN
or SCRAM, never with a token. Static, as in Kafka."""

DOUBLE = ConfigType.DOUBLE
SECURITY_COMPAT_KEYS: tuple[ConfigKey, ...] = (
    _kafka_only("sasl.jaas.config", STRING, None, "Kafka's JAAS config without a listener."),
    _kafka_only("sasl.kerberos.service.name", STRING, None, "Kafka's Kerberos service name."),
    _kafka_only("sasl.kerberos.kinit.cmd", STRING, "/usr/bin/kinit", "Kafka's kinit command."),
    _kafka_only(
        "sasl.kerberos.ticket.renew.window.factor", DOUBLE, "0.8", "Kafka's ticket renewal."
    ),
    _kafka_only("sasl.kerberos.ticket.renew.jitter", DOUBLE, "0.05", "Kafka's renewal jitter."),
    _kafka_only(
        "sasl.kerberos.min.time.before.relogin", LONG, "60000", "Kafka's Kerberos relogin wait."
    ),
    _kafka_only(
        "sasl.kerberos.principal.to.local.rules", LIST, "DEFAULT", "Kafka's Kerberos names."
    ),
    _kafka_only("sasl.login.refresh.window.factor", DOUBLE, "0.8", "Kafka's login refresh."),
    _kafka_only("sasl.login.refresh.window.jitter", DOUBLE, "0.05", "Kafka's refresh jitter."),
    _kafka_only("sasl.login.refresh.min.period.seconds", INT, "60", "Kafka's refresh period."),
    _kafka_only("sasl.login.refresh.buffer.seconds", INT, "300", "Kafka's refresh buffer."),
    _kafka_only("ssl.provider", STRING, None, "Kafka's JSSE security provider."),
    _kafka_only("ssl.keymanager.algorithm", STRING, "SunX509", "Kafka's JSSE key manager."),
    _kafka_only("ssl.trustmanager.algorithm", STRING, "PKIX", "Kafka's JSSE trust manager."),
    _kafka_only("ssl.secure.random.implementation", STRING, None, "Kafka's SecureRandom."),
    _kafka_only("ssl.engine.factory.class", STRING, None, "Kafka's SSLEngine factory class."),
    _kafka_only(
        "principal.builder.class",
        STRING,
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
        "Kafka's principal builder class.",
    ),
)
"""Kafka's security keys strom accepts, static or as dynamic per-broker configs as Kafka
does, without acting on them: Kerberos and JSSE have no counterpart here."""


@dataclass(frozen=True, slots=True)
class SaslSettings:
    """The SASL settings of one SASL listener: the mechanisms it offers, in order, and
    the JAAS config text of each (`listener.name.<l>.<mechanism>.sasl.jaas.config`),
    parsed when the listener starts."""

    mechanisms: tuple[str, ...]
    jaas_configs: tuple[tuple[str, str], ...]
    """(mechanism, its sasl.jaas.config text) for each mechanism that has one (PLAIN
    must; SCRAM's users are in the cluster metadata, and its JAAS config is optional)."""
    failed_authentication_delay_ms: int
    oauthbearer: OAuthBearerSettings | None = None
    """With OAUTHBEARER enabled: how its tokens are checked."""
    max_reauth_ms: tuple[tuple[str, int], ...] = ()
    """(mechanism, its `connections.max.reauth.ms`) for each mechanism whose sessions
    expire after a time (KIP-368); the others' last until their credential expires."""

    def __repr__(self) -> str:
        """Without the JAAS texts, which hold passwords."""
        return f"SaslSettings(mechanisms={self.mechanisms!r})"


_DEFAULTS: dict[str, ConfigValue] = {key.name: key.default_value for key in SSL_KEYS}


def tls_settings(values: Mapping[str, ConfigValue]) -> TlsSettings:
    """TlsSettings from typed values keyed by the plain `ssl.*` names.

    A key missing from `values` takes its default; a key whose value is None is unset
    (the types, client auth and mapping rules then take their defaults, the protocols
    and cipher suites become empty).
    """

    def text(name: str) -> str | None:
        value = values.get(name, _DEFAULTS[name])
        assert value is None or isinstance(value, str), name
        return value

    def text_or_default(name: str) -> str:
        value = text(name)
        if value is None:
            default = _DEFAULTS[name]
            assert isinstance(default, str), name
            return default
        return value

    def strings(name: str) -> tuple[str, ...]:
        value = values.get(name, _DEFAULTS[name])
        assert value is None or isinstance(value, tuple), name
        return value or ()

    return TlsSettings(
        keystore_type=text_or_default("ssl.keystore.type"),
        keystore_location=text("ssl.keystore.location"),
        keystore_password=text("ssl.keystore.password"),
        key_password=text("ssl.key.password"),
        keystore_certificate_chain=text("ssl.keystore.certificate.chain"),
        keystore_key=text("ssl.keystore.key"),
        truststore_type=text_or_default("ssl.truststore.type"),
        truststore_location=text("ssl.truststore.location"),
        truststore_password=text("ssl.truststore.password"),
        truststore_certificates=text("ssl.truststore.certificates"),
        client_auth=ClientAuth(text_or_default("ssl.client.auth")),
        enabled_protocols=strings("ssl.enabled.protocols"),
        cipher_suites=strings("ssl.cipher.suites"),
        principal_mapping_rules=text_or_default("ssl.principal.mapping.rules"),
    )
