"""SSL contexts from a listener's TLS settings (Kafka's `ssl.*` keys).

Python's `ssl` (OpenSSL) does the TLS; `cryptography` reads the key stores first, so that
each mistake becomes a ConfigError naming its key (`key_prefix` + the `ssl.*` name, the
prefix being "" or `listener.name.<listener>.`) rather than an OpenSSL error:
PEM files, inline PEM text and PKCS12 files are read, the key decrypted and checked
against the certificate, and the result handed to OpenSSL through a private file
(`_private_file`), since `ssl` loads certificate chains only from files.

Kafka's JKS is refused with a hint to convert it. Cipher suites take IANA names (Kafka's)
or OpenSSL's. OpenSSL cannot restrict TLS 1.3 suites through `ssl`: naming any TLS 1.3
suite allows TLS 1.3 with all of them, naming none turns TLS 1.3 off (and naming only
TLS 1.3 suites turns TLS 1.2 off), so the versions agree with what Kafka would allow.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.types import PrivateKeyTypes
from cryptography.hazmat.primitives.serialization import pkcs12

from strom.config.errors import ConfigError
from strom.config.schema import invalid_value
from strom.config.security_keys import ClientAuth, TlsSettings
from strom.security.principal import RULES_KEY, PrincipalRule, parse_rules, principal_name

__all__ = [
    "TlsSettings",
    "client_context",
    "peer_principal",
    "principal_rules",
    "reload_certificates",
    "server_context",
]

_VERSIONS = {"tlsv1.2": ssl.TLSVersion.TLSv1_2, "tlsv1.3": ssl.TLSVersion.TLSv1_3}
_OLD_VERSIONS = frozenset({"sslv2hello", "sslv2", "sslv3", "tlsv1", "tlsv1.1"})
_VERIFY_MODES = {
    ClientAuth.NONE: ssl.CERT_NONE,
    ClientAuth.REQUESTED: ssl.CERT_OPTIONAL,
    ClientAuth.REQUIRED: ssl.CERT_REQUIRED,
}
_TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
_OPENSSL_NAMES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CCM": "ECDHE-ECDSA-AES128-CCM",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CCM": "ECDHE-ECDSA-AES256-CCM",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_AES_128_CCM": "DHE-RSA-AES128-CCM",
    "TLS_DHE_RSA_WITH_AES_256_CCM": "DHE-RSA-AES256-CCM",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}
"""IANA names (Kafka's, Java's) of TLS 1.2 suites and OpenSSL's names for them."""
_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----.*?-----END \1-----", re.DOTALL)


@dataclass(frozen=True, slots=True)
class _Prepared:
    """Settings read and checked, ready to be loaded into an SSLContext."""

    minimum_version: ssl.TLSVersion
    maximum_version: ssl.TLSVersion
    ciphers: str | None  # OpenSSL cipher list for TLS 1.2; None: OpenSSL's defaults
    keystore_pem: bytes | None  # unencrypted private key, then the certificate chain
    truststore_pem: str | None  # trusted certificates
    client_auth: ClientAuth
    key_prefix: str


def server_context(settings: TlsSettings, *, key_prefix: str = "") -> ssl.SSLContext:
    """An SSL listener's context: its certificate, its trust store (for client
    certificates) and `ssl.client.auth`. ConfigError naming the key for any mistake."""
    return _server(_prepare(settings, key_prefix, server=True))


def client_context(
    settings: TlsSettings, *, key_prefix: str = "", check_hostname: bool
) -> ssl.SSLContext:
    """A context for strom's own TLS connections: the server's certificate is checked
    against the trust store (the system's CAs when none is set), its host name too when
    `check_hostname` (ssl.endpoint.identification.algorithm=https); the key store, when
    set, is the client certificate. ConfigError naming the key for any mistake."""
    prepared = _prepare(settings, key_prefix, server=False)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = check_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    _configure(context, prepared)
    if prepared.truststore_pem is None:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    return context


def reload_certificates(
    context: ssl.SSLContext, settings: TlsSettings, *, key_prefix: str = ""
) -> None:
    """Load the key store and trust store of `settings` into a running server context:
    handshakes from now on use them; connections already made keep theirs.

    All of `settings` is checked first (a throwaway context is built from it), so a
    mistake raises ConfigError and leaves `context` as it was. Only the stores are
    reloaded (as Kafka reconfigures only those): versions, cipher suites and client
    auth keep their values. OpenSSL adds to a context's trusted certificates and cannot
    drop any, so a CA removed from the trust store stays trusted until a restart.
    """
    prepared = _prepare(settings, key_prefix, server=True)
    _server(prepared)
    _load_stores(context, prepared)


def principal_rules(settings: TlsSettings, *, key_prefix: str = "") -> tuple[PrincipalRule, ...]:
    """The parsed `ssl.principal.mapping.rules`; ConfigError naming the (prefixed) key."""
    return parse_rules(settings.principal_mapping_rules, key=key_prefix + RULES_KEY)


def peer_principal(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, rules: Sequence[PrincipalRule]
) -> str:
    """The principal name of the peer of a finished handshake: its certificate's subject
    (as Java writes it) mapped by `rules`, or ANONYMOUS when it sent no certificate.
    NoMatchingRule when no rule maps it (Kafka refuses such a client)."""
    return principal_name(rules, ssl_object.getpeercert(binary_form=True))


# --- building a context ---------------------------------------------------------------


def _server(prepared: _Prepared) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, prepared)
    context.verify_mode = _VERIFY_MODES[prepared.client_auth]
    return context


def _configure(context: ssl.SSLContext, prepared: _Prepared) -> None:
    context.minimum_version = prepared.minimum_version
    context.maximum_version = prepared.maximum_version
    if prepared.ciphers is not None:
        context.set_ciphers(prepared.ciphers)
    _load_stores(context, prepared)


def _load_stores(context: ssl.SSLContext, prepared: _Prepared) -> None:
    if prepared.keystore_pem is not None:
        with _private_file(prepared.keystore_pem) as path:
            try:
                context.load_cert_chain(path, password=b"")
            except ssl.SSLError as exc:
                key = prepared.key_prefix + "ssl.keystore.location"
                raise ConfigError(f"OpenSSL refused the key store: {exc}", key=key) from None
    if prepared.truststore_pem is not None:
        context.load_verify_locations(cadata=prepared.truststore_pem)


@contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    """A path to `data` that no other user can read, gone when the block ends: an
    anonymous in-memory file on Linux (never on disk), else a temporary file of mode 0600."""
    if hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd"):
        descriptor = os.memfd_create("strom-tls", os.MFD_CLOEXEC)
        try:
            with os.fdopen(descriptor, "wb", closefd=False) as file:
                file.write(data)
            yield f"/proc/self/fd/{descriptor}"
        finally:
            os.close(descriptor)
        return
    descriptor, path = tempfile.mkstemp(prefix="strom-tls-", suffix=".pem")
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
        yield path
    finally:
        os.unlink(path)


# --- reading the settings -------------------------------------------------------------


def _prepare(settings: TlsSettings, prefix: str, *, server: bool) -> _Prepared:
    minimum, maximum = _versions(settings.enabled_protocols, prefix)
    ciphers, minimum, maximum = _ciphers(settings.cipher_suites, prefix, minimum, maximum)
    keystore = _keystore(settings, prefix)
    truststore = _truststore(settings, prefix)
    if server and keystore is None:
        for_one = f" (or the same keys prefixed with '{prefix}' for this listener only)"
        raise ConfigError(
            "an SSL listener needs a certificate: set 'ssl.keystore.location' (with "
            "'ssl.keystore.type' PEM or PKCS12), or 'ssl.keystore.certificate.chain' and "
            f"'ssl.keystore.key' (with type PEM){for_one if prefix else ''}",
            key=f"{prefix}ssl.keystore.location",
        )
    client_auth = settings.client_auth if server else ClientAuth.NONE
    if client_auth is not ClientAuth.NONE and truststore is None:
        raise ConfigError(
            f"'{prefix}ssl.client.auth' is {client_auth.value}, which needs a trust store to "
            f"check client certificates: set '{prefix}ssl.truststore.location' or "
            f"'{prefix}ssl.truststore.certificates'",
            key=f"{prefix}ssl.client.auth",
        )
    return _Prepared(minimum, maximum, ciphers, keystore, truststore, client_auth, prefix)


def _versions(protocols: Sequence[str], prefix: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    key, text = f"{prefix}ssl.enabled.protocols", ",".join(protocols)
    versions: list[ssl.TLSVersion] = []
    for protocol in protocols:
        name = protocol.strip().lower()
        if name in _OLD_VERSIONS:
            raise invalid_value(
                key, text, f"{protocol} is insecure and not supported: use TLSv1.2 and TLSv1.3"
            )
        if name not in _VERSIONS:
            raise invalid_value(key, text, f"unknown protocol {protocol!r}: use TLSv1.2, TLSv1.3")
        versions.append(_VERSIONS[name])
    if not versions:
        raise invalid_value(key, text, "must name TLSv1.2, TLSv1.3 or both")
    return min(versions), max(versions)


def _ciphers(
    suites: Sequence[str], prefix: str, minimum: ssl.TLSVersion, maximum: ssl.TLSVersion
) -> tuple[str | None, ssl.TLSVersion, ssl.TLSVersion]:
    """(OpenSSL's cipher list for TLS 1.2, the versions the suites leave allowed)."""
    if not suites:
        return None, minimum, maximum
    key, text = f"{prefix}ssl.cipher.suites", ",".join(suites)
    tls12: list[str] = []
    has_tls13 = False
    for suite in (suite.strip() for suite in suites):
        if suite in _TLS13_SUITES:
            has_tls13 = True
            continue
        name = _OPENSSL_NAMES.get(suite, suite)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(name)
        except ssl.SSLError:
            raise invalid_value(
                key, text, f"{suite!r} names no cipher suite OpenSSL knows"
            ) from None
        tls12.append(name)
    if not has_tls13:
        maximum = min(maximum, ssl.TLSVersion.TLSv1_2)
    if not tls12:
        minimum = max(minimum, ssl.TLSVersion.TLSv1_3)
    if minimum > maximum:
        raise invalid_value(key, text, "names no suite of the versions in ssl.enabled.protocols")
    return (":".join(tls12) if tls12 else None), minimum, maximum


def _given(value: str | None) -> str | None:
    return value if value is not None and value.strip() else None


def _store_type(store_type: str, key: str, what: str) -> str:
    upper = store_type.strip().upper()
    if upper == "JKS":
        raise invalid_value(
            key,
            store_type,
            f"strom cannot read JKS {what}s: convert it to PKCS12 (keytool -importkeystore "
            "-deststoretype PKCS12) or PEM, and set the type to match",
        )
    if upper not in ("PEM", "PKCS12"):
        raise invalid_value(key, store_type, "must be PEM or PKCS12")
    return upper


def _read(location: str, key: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise invalid_value(key, location, f"cannot read it: {exc.strerror or exc}") from None


def _keystore(settings: TlsSettings, prefix: str) -> bytes | None:
    """The key and certificate chain of the key store as PEM, or None when none is set."""
    location = _given(settings.keystore_location)
    chain = _given(settings.keystore_certificate_chain)
    key_text = _given(settings.keystore_key)
    type_key = f"{prefix}ssl.keystore.type"
    if chain is not None or key_text is not None:
        if location is not None:
            raise ConfigError(
                f"set '{prefix}ssl.keystore.location' or '{prefix}ssl.keystore.certificate."
                f"chain' and '{prefix}ssl.keystore.key', not both",
                key=f"{prefix}ssl.keystore.location",
            )
        if chain is None or key_text is None:
            missing = "certificate.chain" if chain is None else "key"
            raise ConfigError(
                f"an inline key store needs both '{prefix}ssl.keystore.certificate.chain' "
                f"and '{prefix}ssl.keystore.key': set '{prefix}ssl.keystore.{missing}'",
                key=f"{prefix}ssl.keystore.{missing}",
            )
        if settings.keystore_type.strip().upper() != "PEM":
            raise invalid_value(
                type_key, settings.keystore_type, "must be PEM with an inline key store"
            )
        where = (f"{prefix}ssl.keystore.certificate.chain", f"{prefix}ssl.keystore.key")
        return _pem_keystore(chain, key_text, settings.key_password, prefix, where)
    if location is None:
        return None
    location_key = f"{prefix}ssl.keystore.location"
    store_type = _store_type(settings.keystore_type, type_key, "key store")
    data = _read(location, location_key)
    if store_type == "PEM":
        text = data.decode("utf-8", "replace")
        where = (location_key, location_key)
        return _pem_keystore(text, text, settings.key_password, prefix, where)
    return _pkcs12_keystore(data, settings, prefix)


def _pem_keystore(
    chain_text: str,
    key_text: str,
    password: str | None,
    prefix: str,
    where: tuple[str, str],
) -> bytes:
    """`where`: the keys holding the chain and the private key, for messages."""
    chain = _pem_certificates(chain_text, where[0])
    blocks = [block for label, block in _pem_blocks(key_text) if label.endswith("PRIVATE KEY")]
    if not blocks:
        raise ConfigError(f"'{where[1]}' holds no PEM private key", key=where[1])
    password_key = f"{prefix}ssl.key.password"
    secret = None if password is None else password.encode()
    try:
        key = serialization.load_pem_private_key(blocks[0].encode(), secret)
    except TypeError:
        if secret is None:
            raise ConfigError(
                f"the private key of '{where[1]}' is encrypted: set '{password_key}'",
                key=password_key,
            ) from None
        key = serialization.load_pem_private_key(blocks[0].encode(), None)  # not encrypted
    except ValueError:
        if secret is None:
            raise ConfigError(f"'{where[1]}' holds a malformed private key", key=where[1]) from None
        raise ConfigError(
            f"cannot decrypt the private key of '{where[1]}' with '{password_key}': "
            "wrong password?",
            key=password_key,
        ) from None
    return _keystore_pem(key, chain, where[1])


def _pkcs12_keystore(data: bytes, settings: TlsSettings, prefix: str) -> bytes:
    location_key = f"{prefix}ssl.keystore.location"
    key, certificate, extra = _open_pkcs12(
        data,
        settings.keystore_password or settings.key_password,
        f"key store '{location_key}' ({settings.keystore_location})",
        f"{prefix}ssl.keystore.password",
    )
    if key is None or certificate is None:
        raise ConfigError(
            f"the PKCS12 key store '{location_key}' ({settings.keystore_location}) holds no "
            "private key with its certificate",
            key=location_key,
        )
    return _keystore_pem(key, [certificate, *extra], location_key)


def _open_pkcs12(
    data: bytes, password: str | None, what: str, password_key: str
) -> tuple[PrivateKeyTypes | None, x509.Certificate | None, list[x509.Certificate]]:
    """The key, certificate and other certificates of a PKCS12 store; ConfigError naming
    `password_key` when it does not open."""
    try:
        return pkcs12.load_key_and_certificates(
            data, None if password is None else password.encode()
        )
    except ValueError:
        raise ConfigError(
            f"cannot open the PKCS12 {what}: wrong '{password_key}', or not a PKCS12 file",
            key=password_key,
        ) from None


def _keystore_pem(
    key: PrivateKeyTypes, chain: Sequence[x509.Certificate], source_key: str
) -> bytes:
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if key.public_key().public_bytes(der, spki) != chain[0].public_key().public_bytes(der, spki):
        raise ConfigError(
            f"the private key of '{source_key}' does not match its certificate (the "
            "chain must start with this side's own certificate)",
            key=source_key,
        )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem + b"".join(
        certificate.public_bytes(serialization.Encoding.PEM) for certificate in chain
    )


def _truststore(settings: TlsSettings, prefix: str) -> str | None:
    """The trusted certificates as PEM, or None when no trust store is set."""
    location = _given(settings.truststore_location)
    inline = _given(settings.truststore_certificates)
    type_key = f"{prefix}ssl.truststore.type"
    location_key = f"{prefix}ssl.truststore.location"
    if inline is not None:
        inline_key = f"{prefix}ssl.truststore.certificates"
        if location is not None:
            raise ConfigError(f"set '{location_key}' or '{inline_key}', not both", key=location_key)
        if settings.truststore_type.strip().upper() != "PEM":
            raise invalid_value(
                type_key, settings.truststore_type, "must be PEM with inline certificates"
            )
        return _certificates_pem(_pem_certificates(inline, inline_key))
    if location is None:
        return None
    store_type = _store_type(settings.truststore_type, type_key, "trust store")
    data = _read(location, location_key)
    if store_type == "PEM":
        text = data.decode("utf-8", "replace")
        return _certificates_pem(_pem_certificates(text, location_key))
    _, certificate, extra = _open_pkcs12(
        data,
        settings.truststore_password,
        f"trust store '{location_key}' ({location})",
        f"{prefix}ssl.truststore.password",
    )
    certificates = [*([certificate] if certificate is not None else []), *extra]
    if not certificates:
        raise invalid_value(location_key, location, "the PKCS12 trust store holds no certificate")
    return _certificates_pem(certificates)


def _pem_blocks(text: str) -> list[tuple[str, str]]:
    return [(match[1], match[0]) for match in _PEM_BLOCK.finditer(text)]


def _pem_certificates(text: str, key: str) -> list[x509.Certificate]:
    blocks = [block for label, block in _pem_blocks(text) if label == "CERTIFICATE"]
    if not blocks:
        raise ConfigError(f"'{key}' holds no PEM certificate", key=key)
    try:
        return [x509.load_pem_x509_certificate(block.encode()) for block in blocks]
    except ValueError as exc:
        raise ConfigError(f"'{key}' holds a malformed certificate: {exc}", key=key) from None


def _certificates_pem(certificates: Sequence[x509.Certificate]) -> str:
    return "".join(
        certificate.public_bytes(serialization.Encoding.PEM).decode()
        for certificate in certificates
    )
