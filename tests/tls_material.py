"""Certificates and keys for tests of TLS listeners, made with `cryptography`.

`make_tls_material(directory)` makes a private CA, a server certificate for `localhost`
(and 127.0.0.1, ::1) and one client certificate per subject, all with EC P-256 keys, and
writes every form a Kafka client or strom's settings may want into `directory`:

- PEM files: each certificate alone, its chain (certificate then CA), its key (PKCS#8,
  unencrypted, and encrypted with `key_password` when one is given), and Kafka's PEM
  key store file (the key, encrypted when `key_password` is given, then the chain);
- PKCS#12 key stores (key and chain, password `store_password`) and a PKCS#12 trust store
  holding the CA (written as Java writes trust stores, so Java clients read it too).

For example, an SSL listener and a client of it:

    material = make_tls_material(tmp_path)
    server = TlsSettings(
        keystore_type="PEM",
        keystore_location=str(material.server.keystore_pem_path),
        truststore_type="PEM",
        truststore_location=str(material.ca_cert_path),
        client_auth=ClientAuth.REQUIRED,
    )
    alice = material.client("alice")  # ssl.certificate.location=alice.cert_path, ...
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["DEFAULT_CLIENT_SUBJECT", "Identity", "TlsMaterial", "make_tls_material"]

DEFAULT_CLIENT_SUBJECT = "CN=alice,OU=eng,O=strom,C=US"
STORE_PASSWORD = "strom-store"
VALID_DAYS = 365


@dataclass(frozen=True, slots=True)
class Identity:
    """One certificate and its key, in every form, as files and as PEM text."""

    subject: str
    """The subject as RFC 4514 text, most specific name first: what Java's
    X500Principal.getName() prints for it, e.g. `CN=alice,OU=eng,O=strom,C=US`."""
    common_name: str
    cert_path: Path
    """PEM: the certificate alone."""
    key_path: Path
    """PEM: the private key, PKCS#8, unencrypted."""
    encrypted_key_path: Path | None
    """PEM: the private key, PKCS#8, encrypted with the material's key_password (None
    when no key_password was given)."""
    chain_path: Path
    """PEM: the certificate, then the CA's."""
    keystore_pem_path: Path
    """PEM: Kafka's PEM key store file, the key (encrypted when a key_password was given)
    then the chain (ssl.keystore.type=PEM, ssl.keystore.location, ssl.key.password)."""
    pkcs12_path: Path
    """PKCS#12: the key and the chain, password `TlsMaterial.store_password`."""
    cert_pem: str
    key_pem: str
    encrypted_key_pem: str | None
    chain_pem: str


@dataclass(frozen=True, slots=True)
class TlsMaterial:
    """A CA, a server identity for localhost and client identities, in `directory`."""

    directory: Path
    ca_cert_path: Path
    """PEM: the CA certificate, the trust store of servers and clients alike."""
    ca_cert_pem: str
    truststore_pkcs12_path: Path
    """PKCS#12 trust store holding the CA certificate, password `store_password`."""
    store_password: str
    key_password: str | None
    server: Identity
    clients: tuple[Identity, ...]

    def client(self, common_name: str) -> Identity:
        """The client identity whose subject has this CN."""
        for identity in self.clients:
            if identity.common_name == common_name:
                return identity
        known = ", ".join(identity.common_name for identity in self.clients)
        raise KeyError(f"no client with CN={common_name} (have: {known})")


def make_tls_material(
    directory: Path,
    *,
    client_subjects: Sequence[str] = (DEFAULT_CLIENT_SUBJECT,),
    key_password: str | None = None,
    server_hosts: Sequence[str] = ("localhost", "127.0.0.1", "::1"),
    store_password: str = STORE_PASSWORD,
) -> TlsMaterial:
    """Make and write the material into `directory` (made if missing).

    `client_subjects` are RFC 4514 subjects, most specific name first, each with a
    distinct CN (the file names come from it). `server_hosts` become the server
    certificate's subject alternative names (IP addresses as IP entries); the first is
    its CN. Files of two calls on one directory overwrite each other.
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "strom test CA")])
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_cert_pem = _pem(ca_cert)
    ca_cert_path = _write(directory / "ca.pem", ca_cert_pem)
    truststore_path = directory / "truststore.p12"
    truststore_path.write_bytes(
        pkcs12.serialize_java_truststore(
            [pkcs12.PKCS12Certificate(ca_cert, b"ca")],
            serialization.BestAvailableEncryption(store_password.encode()),
        )
    )

    def identity(subject: x509.Name, server: bool) -> Identity:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            _builder(subject, ca_name, key.public_key(), now)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_key_usage(ca=False), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(host) for host in server_hosts]),
                critical=False,
            )
        cert = builder.sign(ca_key, hashes.SHA256())
        return _write_identity(directory, subject, key, cert, ca_cert, key_password, store_password)

    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, server_hosts[0])])
    clients = tuple(
        identity(x509.Name.from_rfc4514_string(subject), server=False)
        for subject in client_subjects
    )
    return TlsMaterial(
        directory=directory,
        ca_cert_path=ca_cert_path,
        ca_cert_pem=ca_cert_pem,
        truststore_pkcs12_path=truststore_path,
        store_password=store_password,
        key_password=key_password,
        server=identity(server_name, server=True),
        clients=clients,
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
    )


def _key_usage(*, ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not ca,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not ca,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write_identity(
    directory: Path,
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    cert: x509.Certificate,
    ca_cert: x509.Certificate,
    key_password: str | None,
    store_password: str,
) -> Identity:
    common_names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not common_names:
        raise ValueError(f"subject {subject.rfc4514_string()!r} has no CN")
    common_name = str(common_names[0].value)
    stem = "".join(c if c.isalnum() or c in "-_." else "_" for c in common_name)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    encrypted_key_pem = None
    if key_password is not None:
        encrypted_key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(key_password.encode()),
        ).decode()
    cert_pem = _pem(cert)
    chain_pem = cert_pem + _pem(ca_cert)
    pkcs12_path = directory / f"{stem}.p12"
    pkcs12_path.write_bytes(
        pkcs12.serialize_key_and_certificates(
            common_name.encode(),
            key,
            cert,
            [ca_cert],
            serialization.BestAvailableEncryption(store_password.encode()),
        )
    )
    return Identity(
        subject=subject.rfc4514_string(),
        common_name=common_name,
        cert_path=_write(directory / f"{stem}.cert.pem", cert_pem),
        key_path=_write(directory / f"{stem}.key.pem", key_pem),
        encrypted_key_path=(
            None
            if encrypted_key_pem is None
            else _write(directory / f"{stem}.key.encrypted.pem", encrypted_key_pem)
        ),
        chain_path=_write(directory / f"{stem}.chain.pem", chain_pem),
        keystore_pem_path=_write(
            directory / f"{stem}.keystore.pem", (encrypted_key_pem or key_pem) + chain_pem
        ),
        pkcs12_path=pkcs12_path,
        cert_pem=cert_pem,
        key_pem=key_pem,
        encrypted_key_pem=encrypted_key_pem,
        chain_pem=chain_pem,
    )


def _pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path
