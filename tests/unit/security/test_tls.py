"""SSL contexts from TLS settings: key and trust stores in every form, the mistakes each
named by its key, client auth, versions and cipher suites, reloading certificates, and a
handshake in memory (ssl.MemoryBIO, no sockets) that yields the client's principal."""

from __future__ import annotations

import os
import ssl
import stat
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from strom.config.errors import ConfigError
from strom.config.security_keys import SSL_KEYS, ClientAuth, TlsSettings, tls_settings
from strom.security.principal import ANONYMOUS, NoMatchingRule, parse_rules
from strom.security.tls import (
    client_context,
    peer_principal,
    principal_rules,
    reload_certificates,
    server_context,
)
from tls_material import DEFAULT_CLIENT_SUBJECT, TlsMaterial, make_tls_material

KEY_PASSWORD = "key-secret"
PREFIX = "listener.name.ssl."


@pytest.fixture(scope="module")
def material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    return make_tls_material(
        tmp_path_factory.mktemp("tls"),
        client_subjects=(DEFAULT_CLIENT_SUBJECT, "CN=bob,O=strom"),
        key_password=KEY_PASSWORD,
    )


@pytest.fixture(scope="module")
def other_material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    """Another CA and server certificate, to reload."""
    return make_tls_material(tmp_path_factory.mktemp("tls-other"))


def server_settings(material: TlsMaterial, **changes: Any) -> TlsSettings:
    """A PEM key store file with an encrypted key, a PEM trust store file."""
    settings = TlsSettings(
        keystore_type="PEM",
        keystore_location=str(material.server.keystore_pem_path),
        key_password=KEY_PASSWORD,
        truststore_type="PEM",
        truststore_location=str(material.ca_cert_path),
    )
    return replace(settings, **changes)


def client_settings(material: TlsMaterial, common_name: str | None = "alice") -> TlsSettings:
    """A PKCS12 key store (None: no client certificate), a PKCS12 trust store."""
    keystore = None if common_name is None else str(material.client(common_name).pkcs12_path)
    return TlsSettings(
        keystore_type="PKCS12",
        keystore_location=keystore,
        keystore_password=material.store_password,
        truststore_type="PKCS12",
        truststore_location=str(material.truststore_pkcs12_path),
        truststore_password=material.store_password,
    )


def refused(build: Callable[[], object], key: str, *words: str) -> str:
    """The message of the ConfigError `build` raises, checked to name `key` and `words`."""
    with pytest.raises(ConfigError) as caught:
        build()
    message = str(caught.value)
    assert caught.value.key == key, message
    assert key in message
    for word in words:
        assert word in message
    return message


def handshake(
    server: ssl.SSLContext, client: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.SSLObject]:
    """Run a TLS handshake between the two contexts through memory buffers."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    from_server, from_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_side = server.wrap_bio(to_server, from_server, server_side=True)
    client_side = client.wrap_bio(to_client, from_client, server_hostname="localhost")
    pending = {server_side, client_side}
    for _ in range(10):
        for side in list(pending):
            try:
                side.do_handshake()
                pending.discard(side)
            except ssl.SSLWantReadError:
                pass
        to_server.write(from_client.read())
        to_client.write(from_server.read())
        if not pending:
            return server_side, client_side
    raise AssertionError("the handshake did not finish")


def der(pem: str) -> bytes:
    return x509.load_pem_x509_certificate(pem.encode()).public_bytes(Encoding.DER)


# --- a real handshake ------------------------------------------------------------------


def test_a_handshake_gives_the_client_s_mapped_principal(material: TlsMaterial) -> None:
    settings = server_settings(
        material,
        client_auth=ClientAuth.REQUIRED,
        principal_mapping_rules="RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L,DEFAULT",
    )
    server = server_context(settings)
    client = client_context(client_settings(material), check_hostname=True)
    server_side, client_side = handshake(server, client)
    rules = principal_rules(settings)
    assert peer_principal(server_side, rules) == "alice@eng"
    assert peer_principal(client_side, parse_rules("DEFAULT")) == "CN=localhost"
    with pytest.raises(NoMatchingRule):
        peer_principal(server_side, parse_rules("RULE:^CN=bob.*$/bob/"))
    bob_side, _ = handshake(
        server, client_context(client_settings(material, "bob"), check_hostname=True)
    )
    assert peer_principal(bob_side, rules) == "CN=bob,O=strom"


def test_a_client_without_a_certificate_is_anonymous_when_one_is_only_requested(
    material: TlsMaterial,
) -> None:
    server = server_context(server_settings(material, client_auth=ClientAuth.REQUESTED))
    client = client_context(client_settings(material, None), check_hostname=True)
    server_side, _ = handshake(server, client)
    assert peer_principal(server_side, parse_rules("DEFAULT")) == ANONYMOUS


def test_client_auth_required_refuses_a_client_without_a_certificate(
    material: TlsMaterial,
) -> None:
    server = server_context(server_settings(material, client_auth=ClientAuth.REQUIRED))
    client = client_context(client_settings(material, None), check_hostname=True)
    with pytest.raises(ssl.SSLError):
        handshake(server, client)


# --- key stores --------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["keystore file", "chain then key", "inline", "pkcs12"])
def test_a_server_certificate_in_every_form(
    material: TlsMaterial, form: str, tmp_path: Path
) -> None:
    server = material.server
    chain_then_key = tmp_path / "chain-then-key.pem"  # a PEM file may hold them in any order
    chain_then_key.write_text(server.chain_pem + server.key_pem)
    settings = {
        "keystore file": server_settings(material),
        "chain then key": server_settings(material, keystore_location=str(chain_then_key)),
        "inline": server_settings(
            material,
            keystore_location=None,
            keystore_certificate_chain=server.chain_pem,
            keystore_key=server.encrypted_key_pem,
        ),
        "pkcs12": server_settings(
            material,
            keystore_type="pkcs12",
            keystore_location=str(server.pkcs12_path),
            keystore_password=material.store_password,
        ),
    }[form]
    context = server_context(settings)
    assert context.verify_mode == ssl.CERT_NONE
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2
    assert context.maximum_version == ssl.TLSVersion.TLSv1_3
    client = client_context(client_settings(material, None), check_hostname=True)
    _, client_side = handshake(context, client)
    assert client_side.getpeercert(binary_form=True) == der(server.cert_pem)


def test_a_key_password_on_a_key_that_is_not_encrypted_is_ignored(material: TlsMaterial) -> None:
    settings = server_settings(
        material,
        keystore_location=None,
        keystore_certificate_chain=material.server.chain_pem,
        keystore_key=material.server.key_pem,
    )
    server_context(settings)


def test_an_encrypted_key_without_its_password(material: TlsMaterial) -> None:
    settings = server_settings(material, key_password=None)
    refused(lambda: server_context(settings), "ssl.key.password", "encrypted")
    prefixed = PREFIX + "ssl.key.password"
    refused(lambda: server_context(settings, key_prefix=PREFIX), prefixed, "encrypted")


def test_a_wrong_key_password(material: TlsMaterial) -> None:
    settings = server_settings(material, key_password="wrong")
    message = refused(lambda: server_context(settings), "ssl.key.password", "wrong password")
    assert "wrong'" not in message  # the password itself is never shown


def test_a_wrong_pkcs12_password(material: TlsMaterial) -> None:
    settings = server_settings(
        material,
        keystore_type="PKCS12",
        keystore_location=str(material.server.pkcs12_path),
        keystore_password="wrong",
    )
    refused(lambda: server_context(settings), "ssl.keystore.password", "PKCS12")


def test_a_pkcs12_file_without_a_key(material: TlsMaterial) -> None:
    settings = server_settings(
        material,
        keystore_type="PKCS12",
        keystore_location=str(material.truststore_pkcs12_path),
        keystore_password=material.store_password,
    )
    refused(lambda: server_context(settings), "ssl.keystore.location", "no private key")


def test_a_key_that_does_not_match_the_certificate(material: TlsMaterial) -> None:
    settings = server_settings(
        material,
        keystore_location=None,
        keystore_certificate_chain=material.server.chain_pem,
        keystore_key=material.client("alice").key_pem,
    )
    refused(lambda: server_context(settings), "ssl.keystore.key", "does not match")


def test_jks_is_refused_with_a_way_out(material: TlsMaterial) -> None:
    settings = server_settings(material, keystore_type="JKS")
    refused(
        lambda: server_context(settings, key_prefix=PREFIX),
        PREFIX + "ssl.keystore.type",
        "JKS",
        "PKCS12",
        "PEM",
    )
    trust = server_settings(material, truststore_type="JKS")
    refused(lambda: server_context(trust), "ssl.truststore.type", "convert it")


def test_an_unknown_store_type(material: TlsMaterial) -> None:
    settings = server_settings(material, keystore_type="BKS")
    refused(lambda: server_context(settings), "ssl.keystore.type", "PEM or PKCS12")


def test_a_server_needs_a_key_store() -> None:
    message = refused(lambda: server_context(TlsSettings()), "ssl.keystore.location")
    assert "ssl.keystore.certificate.chain" in message


def test_a_missing_key_store_file(material: TlsMaterial) -> None:
    missing = str(material.directory / "missing.pem")
    settings = server_settings(material, keystore_location=missing)
    refused(lambda: server_context(settings), "ssl.keystore.location", missing, "cannot read")


def test_a_pem_file_without_a_key_or_a_certificate(material: TlsMaterial) -> None:
    no_key = server_settings(material, keystore_location=str(material.server.chain_path))
    refused(lambda: server_context(no_key), "ssl.keystore.location", "no PEM private key")
    no_cert = server_settings(material, keystore_location=str(material.server.key_path))
    refused(lambda: server_context(no_cert), "ssl.keystore.location", "no PEM certificate")


def test_inline_key_store_mistakes(material: TlsMaterial) -> None:
    both = server_settings(material, keystore_certificate_chain=material.server.chain_pem)
    refused(lambda: server_context(both), "ssl.keystore.location", "not both")
    inline = server_settings(material, keystore_location=None)
    no_key = replace(inline, keystore_certificate_chain=material.server.chain_pem)
    refused(lambda: server_context(no_key), "ssl.keystore.key")
    pkcs12 = replace(no_key, keystore_key=material.server.key_pem, keystore_type="PKCS12")
    refused(lambda: server_context(pkcs12), "ssl.keystore.type", "PEM")


# --- trust stores and client auth --------------------------------------------------------


@pytest.mark.parametrize(
    ("client_auth", "verify_mode"),
    [
        (ClientAuth.NONE, ssl.CERT_NONE),
        (ClientAuth.REQUESTED, ssl.CERT_OPTIONAL),
        (ClientAuth.REQUIRED, ssl.CERT_REQUIRED),
    ],
)
def test_client_auth_modes(
    material: TlsMaterial, client_auth: ClientAuth, verify_mode: ssl.VerifyMode
) -> None:
    context = server_context(server_settings(material, client_auth=client_auth))
    assert context.verify_mode == verify_mode


@pytest.mark.parametrize("client_auth", [ClientAuth.REQUESTED, ClientAuth.REQUIRED])
def test_client_auth_needs_a_trust_store(material: TlsMaterial, client_auth: ClientAuth) -> None:
    settings = server_settings(material, client_auth=client_auth, truststore_location=None)
    refused(
        lambda: server_context(settings, key_prefix=PREFIX),
        PREFIX + "ssl.client.auth",
        "ssl.truststore.location",
    )


@pytest.mark.parametrize("form", ["pem file", "inline", "pkcs12"])
def test_a_trust_store_in_every_form(material: TlsMaterial, form: str) -> None:
    trusts: dict[str, dict[str, str | None]] = {
        "pem file": {},
        "inline": {"truststore_location": None, "truststore_certificates": material.ca_cert_pem},
        "pkcs12": {
            "truststore_type": "PKCS12",
            "truststore_location": str(material.truststore_pkcs12_path),
            "truststore_password": material.store_password,
        },
    }
    settings = server_settings(material, client_auth=ClientAuth.REQUIRED, **trusts[form])
    context = server_context(settings)
    assert [ca["subject"] for ca in context.get_ca_certs()] == [
        ((("commonName", "strom test CA"),),)
    ]


def test_trust_store_mistakes(material: TlsMaterial) -> None:
    wrong = server_settings(
        material,
        truststore_type="PKCS12",
        truststore_location=str(material.truststore_pkcs12_path),
        truststore_password="wrong",
    )
    refused(lambda: server_context(wrong), "ssl.truststore.password", "PKCS12")
    no_certs = server_settings(material, truststore_location=str(material.server.key_path))
    refused(lambda: server_context(no_certs), "ssl.truststore.location", "no PEM certificate")
    both = server_settings(material, truststore_certificates=material.ca_cert_pem)
    refused(lambda: server_context(both), "ssl.truststore.location", "not both")


def test_a_client_context_checks_the_server(material: TlsMaterial) -> None:
    context = client_context(client_settings(material), check_hostname=False)
    assert context.verify_mode == ssl.CERT_REQUIRED and not context.check_hostname
    with_defaults = client_context(TlsSettings(), check_hostname=True)
    assert with_defaults.check_hostname and with_defaults.verify_mode == ssl.CERT_REQUIRED


# --- versions and cipher suites ----------------------------------------------------------


@pytest.mark.parametrize(
    ("protocols", "problem"),
    [
        (("TLSv1.1", "TLSv1.2"), "TLSv1.1 is insecure"),
        (("TLSv1",), "TLSv1 is insecure"),
        (("TLSv9",), "unknown protocol 'TLSv9'"),
        ((), "must name TLSv1.2, TLSv1.3 or both"),
    ],
)
def test_bad_protocols(material: TlsMaterial, protocols: tuple[str, ...], problem: str) -> None:
    settings = server_settings(material, enabled_protocols=protocols)
    refused(lambda: server_context(settings), "ssl.enabled.protocols", problem)


def test_one_protocol_pins_the_version(material: TlsMaterial) -> None:
    context = server_context(server_settings(material, enabled_protocols=("TLSv1.3",)))
    assert context.minimum_version == context.maximum_version == ssl.TLSVersion.TLSv1_3


def test_iana_and_openssl_cipher_names(material: TlsMaterial) -> None:
    suites = ("TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305")
    context = server_context(server_settings(material, cipher_suites=suites))
    tls12 = [c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 == ["ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"]
    assert context.maximum_version == ssl.TLSVersion.TLSv1_2  # no TLS 1.3 suite named
    client = client_context(client_settings(material, None), check_hostname=True)
    server_side, _ = handshake(context, client)
    assert server_side.cipher() == ("ECDHE-ECDSA-AES128-GCM-SHA256", "TLSv1.2", 128)


def test_naming_only_tls13_suites_turns_tls12_off(material: TlsMaterial) -> None:
    settings = server_settings(material, cipher_suites=("TLS_AES_128_GCM_SHA256",))
    assert server_context(settings).minimum_version == ssl.TLSVersion.TLSv1_3
    only_tls12 = replace(settings, enabled_protocols=("TLSv1.2",))
    refused(lambda: server_context(only_tls12), "ssl.cipher.suites", "ssl.enabled.protocols")


def test_an_unknown_cipher_suite(material: TlsMaterial) -> None:
    settings = server_settings(
        material, cipher_suites=("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_MADE_UP")
    )
    refused(lambda: server_context(settings), "ssl.cipher.suites", "'TLS_MADE_UP'")


# --- reloading ---------------------------------------------------------------------------


def test_reload_serves_the_new_certificate_and_keeps_it_on_a_bad_file(
    material: TlsMaterial, other_material: TlsMaterial
) -> None:
    context = server_context(server_settings(material))
    both_cas = TlsSettings(
        truststore_type="PEM",
        truststore_certificates=material.ca_cert_pem + other_material.ca_cert_pem,
    )
    client = client_context(both_cas, check_hostname=True)

    def presented() -> bytes | None:
        return handshake(context, client)[1].getpeercert(binary_form=True)

    assert presented() == der(material.server.cert_pem)
    reload_certificates(context, server_settings(other_material, key_password=None))
    assert presented() == der(other_material.server.cert_pem)

    garbage = material.directory / "garbage.pem"
    garbage.write_text("not a key store")
    for bad in (
        server_settings(other_material, keystore_location=str(garbage)),
        server_settings(material, key_password="wrong"),
        server_settings(other_material, keystore_type="JKS"),
    ):
        with pytest.raises(ConfigError):
            reload_certificates(context, bad, key_prefix=PREFIX)
        assert presented() == der(other_material.server.cert_pem)


# --- how the key reaches OpenSSL ---------------------------------------------------------


def test_without_memfd_the_key_passes_through_a_private_temporary_file(
    material: TlsMaterial, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "memfd_create", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    modes: list[int] = []
    load = ssl.SSLContext.load_cert_chain

    def spy(self: ssl.SSLContext, certfile: str, *args: Any, **kwargs: Any) -> None:
        modes.append(stat.S_IMODE(os.stat(certfile).st_mode))
        load(self, certfile, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    server_context(server_settings(material))
    assert modes == [0o600]
    assert list(tmp_path.iterdir()) == []


# --- the ssl.* keys ----------------------------------------------------------------------


def test_the_ssl_keys_and_their_defaults() -> None:
    names = [key.name for key in SSL_KEYS]
    assert len(names) == len(set(names)) == 16
    assert all(name.startswith("ssl.") for name in names)
    for key in SSL_KEYS:
        key.default_value  # noqa: B018 - every default parses
    assert tls_settings({}) == TlsSettings()


def test_tls_settings_from_typed_values() -> None:
    settings = tls_settings(
        {
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": "/etc/strom/broker.p12",
            "ssl.keystore.password": "secret",
            "ssl.client.auth": "required",
            "ssl.enabled.protocols": ("TLSv1.3",),
            "ssl.cipher.suites": None,
            "ssl.truststore.type": None,
        }
    )
    assert settings.keystore_type == "PKCS12" and settings.truststore_type == "JKS"
    assert settings.client_auth is ClientAuth.REQUIRED
    assert settings.enabled_protocols == ("TLSv1.3",) and settings.cipher_suites == ()
    assert "secret" not in repr(settings) and "/etc/strom/broker.p12" in repr(settings)


def test_a_bad_client_auth_value_is_refused_by_its_key() -> None:
    (key,) = [key for key in SSL_KEYS if key.name == "ssl.client.auth"]
    with pytest.raises(ConfigError, match="none, requested, required"):
        key.parse("sometimes")
