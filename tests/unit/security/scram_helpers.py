"""Shared pieces of the SCRAM tests: credentials, servers, exchanges and hand-made messages."""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable

import pytest

from strom.security.sasl import (
    MechanismStep,
    SaslAuthenticationFailed,
)
from strom.security.scram import (
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_password,
)

SHA_256, SHA_512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
MECHANISMS = [SHA_256, SHA_512]
FAKE_SALT_KEY = b"a per-cluster secret of 32 bytes"
SERVER_NONCE = "3rfcNHYJY1ZVvWVs7j"
CLIENT_NONCE = "fyko+d2lbbFgONRv9qkxdawL"
PASSWORDS = {"alice": "alice-secret", "a,b=c": "comma=and,equals", "émile": "mot-de-passe-é"}
OTHER_AUTHZID = (
    "Authentication failed: Client requested an authorization id that is different from username"
)
ALREADY_FAILED = "Authentication failed: this SCRAM exchange has already failed"
MALFORMED = "Authentication failed: malformed SCRAM message: "


def credentials(
    mechanism: ScramMechanism, passwords: dict[str, str] = PASSWORDS, iterations: int = 4096
) -> Callable[[str], ScramCredential | None]:
    stored = {
        name: credential_from_password(mechanism, password, f"salt-{name}".encode(), iterations)
        for name, password in passwords.items()
    }
    return stored.get


_CREDENTIALS = {mechanism: credentials(mechanism) for mechanism in MECHANISMS}


def server(mechanism: ScramMechanism, key: bytes = FAKE_SALT_KEY) -> ScramServer:
    return ScramServer(mechanism, _CREDENTIALS[mechanism], SERVER_NONCE, key)


def exchange(
    mechanism: ScramMechanism,
    username: str,
    password: str,
    authorization_id: str = "",
    extensions: dict[str, str] | None = None,
) -> MechanismStep:
    """A whole authentication, the client checking the server's signature."""
    client = ScramClient(
        mechanism,
        username,
        password,
        CLIENT_NONCE,
        authorization_id=authorization_id,
        extensions=extensions,
    )
    broker = server(mechanism)
    first = broker.step(client.first_message())
    assert not first.complete
    final = broker.step(client.final_message(first.challenge))
    client.verify_server_final(final.challenge)
    assert client.complete
    return final


def refusal(action: Callable[[], object]) -> str:
    with pytest.raises(SaslAuthenticationFailed) as caught:
        action()
    return str(caught.value)


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def hand_made_final(
    mechanism: ScramMechanism,
    password: str,
    gs2: str,
    bare: str,
    server_first: bytes,
    ext: str = "",
    nonce_prefix: str = "",
) -> bytes:
    """A client-final message computed straight from RFC 5802, without ScramClient;
    `nonce_prefix` is written before the nonce the server sent."""
    fields = dict(item.split("=", 1) for item in server_first.decode().split(","))
    salt, iterations = base64.b64decode(fields["s"]), int(fields["i"])
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode(), salt, iterations)
    client_key = hmac.new(salted, b"Client Key", mechanism.hash_name).digest()
    stored_key = hashlib.new(mechanism.hash_name, client_key).digest()
    without_proof = (
        f"c={base64.b64encode(gs2.encode()).decode()},r={nonce_prefix}{fields['r']}{ext}"
    )
    auth_message = f"{bare},{server_first.decode()},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, mechanism.hash_name).digest()
    return f"{without_proof},p={base64.b64encode(_xor(client_key, signature)).decode()}".encode()


def hand_made(
    mechanism: ScramMechanism, password: str, gs2: str, bare: str, ext: str = ""
) -> MechanismStep:
    """Both client messages written by hand, for what ScramClient does not send."""
    broker = server(mechanism)
    first = broker.step((gs2 + bare).encode())
    return broker.step(hand_made_final(mechanism, password, gs2, bare, first.challenge, ext))


# RFC 7677's example
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
