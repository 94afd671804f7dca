"""What `strom dev --secure` secures a local cluster with: a private CA and a server
certificate, an admin user's SCRAM password, and the client settings that use them.

Kept in the cluster's directory (`tls/`), so a second run reuses the CA and the password
that clients were given; the server certificate is made again for the hosts of each run.
Made with `cryptography` (EC P-256 keys, valid ten years for the CA, one for the server).
For development only: the keys are written unencrypted, readable by their owner alone.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "ADMIN_USER",
    "DevSecurity",
    "add_admin_user",
    "client_properties",
    "dev_security",
    "write_private",
]

ADMIN_USER = "admin"
SCRAM_MECHANISM = "SCRAM-SHA-512"
_CA_DAYS, _SERVER_DAYS = 3650, 365


@dataclass(frozen=True, slots=True)
class DevSecurity:
    ca_path: Path
    """PEM: the CA certificate clients trust (ssl.ca.location)."""
    keystore_path: Path
    """PEM: the server's key, then its certificate and the CA's (ssl.keystore.location)."""
    password: str
    """The admin user's SCRAM password."""


def dev_security(directory: Path, hosts: Sequence[str]) -> DevSecurity:
    """The CA (made once), a server certificate for `hosts` plus localhost, and the admin
    password (made once), in `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_path, ca_key_path = directory / "ca.pem", directory / "ca-key.pem"
    if ca_path.exists() and ca_key_path.exists():
        ca_cert = x509.load_pem_x509_certificate(ca_path.read_bytes())
        loaded = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
        assert isinstance(loaded, ec.EllipticCurvePrivateKey)
        ca_key = loaded
    else:
        ca_key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "strom dev CA")])
        ca_cert = (
            _builder(name, name, ca_key.public_key(), now, _CA_DAYS)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        write_private(ca_key_path, _key_pem(ca_key))
        write_private(ca_path, ca_cert.public_bytes(serialization.Encoding.PEM))
    names = list(dict.fromkeys(["localhost", *hosts]))
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])])
    server = (
        _builder(subject, ca_cert.subject, key.public_key(), now, _SERVER_DAYS)
        .add_extension(x509.SubjectAlternativeName([_general_name(h) for h in names]), False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .sign(ca_key, hashes.SHA256())
    )
    keystore_path = directory / "server.pem"
    write_private(
        keystore_path,
        _key_pem(key)
        + server.public_bytes(serialization.Encoding.PEM)
        + ca_cert.public_bytes(serialization.Encoding.PEM),
    )
    password_path = directory / "admin.password"
    if not password_path.exists():
        write_private(password_path, secrets.token_urlsafe(18).encode())
    return DevSecurity(ca_path, keystore_path, password_path.read_text().strip())


def client_properties(security: DevSecurity) -> str:
    """A client.properties for librdkafka (and strom's --command-config) to log in."""
    return (
        "security.protocol=SASL_SSL\n"
        f"ssl.ca.location={security.ca_path}\n"
        f"sasl.mechanism={SCRAM_MECHANISM}\n"
        f"sasl.username={ADMIN_USER}\n"
        f"sasl.password={security.password}\n"
    )


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    days: int,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=days))
    )


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def write_private(path: Path, data: bytes) -> None:
    """Written readable by its owner only: keys and a password."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)


async def add_admin_user(host: str, port: int, password: str, timeout_s: float = 30.0) -> None:
    """Give the admin user `password` (SCRAM-SHA-512, 4096 iterations) through the broker
    at host:port, with AlterUserScramCredentials: the salted password goes, never the
    password. RuntimeError with the broker's message if it refuses."""
    from strom.client import KafkaConnection
    from strom.security.scram import ScramMechanism, salted_password

    mechanism = ScramMechanism.SCRAM_SHA_512
    salt, iterations = secrets.token_bytes(16), 4096
    upsertion = {
        "name": ADMIN_USER,
        "mechanism": mechanism.kafka_type,
        "iterations": iterations,
        "salt": salt,
        "salted_password": salted_password(mechanism, password, salt, iterations),
    }
    connection = await KafkaConnection.connect(host, port, timeout_s=timeout_s)
    try:
        answer = await connection.request(
            51, 0, {"deletions": [], "upsertions": [upsertion]}, timeout_s=timeout_s
        )
    finally:
        connection.close()
        await connection.wait_closed()
    for result in answer.results:
        if int(result.error_code) != 0:
            raise RuntimeError(f"the cluster refused the admin user: {result.error_message}")
