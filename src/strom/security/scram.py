"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as a Kafka broker does them:
credentials (what AlterUserScramCredentials stores, and ZooKeeper's text of them), the
broker's side of an authentication (`ScramServer`, a sasl.Mechanism of two steps) and the
client's (`ScramClient`). Pure: the caller passes the nonces and the fake-salt key.

Kafka's facts: its mechanism type bytes, its iteration bounds, no SASLprep (a password is
hashed as its UTF-8 bytes), the `tokenauth` extension (refused: no delegation tokens), the
text a refused client sees, and an authorization id must be the user's name. Where strom
does better: an unknown user gets a server-first like a known one (a salt the same on
every attempt) and is refused only at the end, as a wrong password is (RFC 5802, section
9); the authorization id is checked only once the proof is right; the channel binding must
be the GS2 header; the AuthMessage is the client's own text (Kafka rebuilds it, dropping
extensions of the final message); names may be any UTF-8 (Kafka's parser takes ASCII);
the GS2 flag "y" is accepted and a mandatory extension "m=" refused (RFC 5802).

Written by hand: scramp (pg8000's) does both sides of RFC 5802, but applies SASLprep, which
Kafka does not (a password it changes would not match a credential Kafka's tools made),
and has none of Kafka's rules or messages; hashlib's PBKDF2 and hmac do the cryptography.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum

from strom.security.sasl import Mechanism, MechanismStep, SaslAuthenticationFailed

__all__ = [
    "MAX_SCRAM_MESSAGE_BYTES",
    "ScramClient",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "credential_from_password",
    "credential_from_salted_password",
    "decode_saslname",
    "encode_saslname",
    "format_scram_config",
    "invalid_credentials_message",
    "parse_scram_config",
    "salted_password",
    "validate_iterations",
]

MAX_SCRAM_MESSAGE_BYTES = 64 * 1024
"""A longer client message is refused as malformed before it is decoded."""


class ScramMechanism(Enum):
    """A SCRAM mechanism, its value spelled as clients send it in SaslHandshake."""

    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"

    @property
    def mechanism_name(self) -> str:
        return str(self.value)

    @property
    def hash_name(self) -> str:
        """hashlib's name of the hash: `sha256`, `sha512`."""
        return "sha" + self.mechanism_name.rsplit("-", 1)[1]

    @property
    def kafka_type(self) -> int:
        """Kafka's ScramMechanism type byte (AlterUserScramCredentials and its records)."""
        return 1 if self is ScramMechanism.SCRAM_SHA_256 else 2

    @property
    def min_iterations(self) -> int:
        return 4096

    @property
    def max_iterations(self) -> int:
        return 16384

    @classmethod
    def from_name(cls, name: str) -> ScramMechanism | None:
        return next((m for m in cls if m.mechanism_name == name), None)

    @classmethod
    def from_kafka_type(cls, kafka_type: int) -> ScramMechanism | None:
        return next((m for m in cls if m.kafka_type == kafka_type), None)


def invalid_credentials_message(mechanism: ScramMechanism) -> str:
    """What a client with a wrong password, or no such user, is told: Kafka's text (its
    SCRAM server's own reasons never reach the client)."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism.mechanism_name}"
    )


_OTHER_AUTHZID = (
    "Authentication failed: Client requested an authorization id that is different from username"
)
_TOKEN_AUTH = (
    "Authentication failed: delegation tokens (SCRAM extension tokenauth) are not supported"
)
_CHANNEL_BINDING = "Authentication failed: SCRAM channel binding is not supported"
_TWO_MESSAGES = "Authentication failed: the SCRAM exchange takes two client messages"
_ALREADY_FAILED = "Authentication failed: this SCRAM exchange has already failed"


# --- credentials ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, repr=False)
class ScramCredential:
    """What the broker stores for one user and mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ValueError("a SCRAM credential's iteration count must be positive")

    def __repr__(self) -> str:
        return (
            f"ScramCredential(salt=<{len(self.salt)} bytes>, stored_key=<{len(self.stored_key)}"
            f" bytes>, server_key=<{len(self.server_key)} bytes>, iterations={self.iterations})"
        )


def _hmac(mechanism: ScramMechanism, key: bytes, message: bytes) -> bytes:
    return hmac.digest(key, message, mechanism.hash_name)


def _hash(mechanism: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mechanism.hash_name, data).digest()


def salted_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> bytes:
    """Hi(password, salt, iterations): PBKDF2-HMAC of the password's UTF-8 bytes, as
    Kafka does (no SASLprep)."""
    if iterations < 1:
        raise ValueError("the iteration count must be positive")
    encoded = password.encode("utf-8", "surrogatepass")
    return hashlib.pbkdf2_hmac(mechanism.hash_name, encoded, salt, iterations)


def credential_from_salted_password(
    mechanism: ScramMechanism, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    """The stored credential (what the controller makes of an AlterUserScramCredentials
    upsertion, which carries the salted password)."""
    client_key = _hmac(mechanism, salted, b"Client Key")
    server_key = _hmac(mechanism, salted, b"Server Key")
    return ScramCredential(salt, _hash(mechanism, client_key), server_key, iterations)


def credential_from_password(
    mechanism: ScramMechanism, password: str, salt: bytes, iterations: int
) -> ScramCredential:
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted_password(mechanism, salted, salt, iterations)


def validate_iterations(mechanism: ScramMechanism, iterations: int) -> str | None:
    """None if a credential may have `iterations`, else Kafka's controller's reason."""
    if iterations < mechanism.min_iterations:
        return "Too few iterations"
    if iterations > mechanism.max_iterations:
        return "Too many iterations"
    return None


_CONFIG_KEYS = ("salt", "stored_key", "server_key", "iterations")


def format_scram_config(credential: ScramCredential) -> str:
    """Kafka's text of a credential in a /config/users znode."""
    salt, stored, server = (
        base64.b64encode(b).decode("ascii")
        for b in (credential.salt, credential.stored_key, credential.server_key)
    )
    return f"salt={salt},stored_key={stored},server_key={server},iterations={credential.iterations}"


def parse_scram_config(text: str) -> ScramCredential:
    """The credential of Kafka's text; ValueError (naming no secret) if it is malformed."""
    fields: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError("SCRAM credential: expected key=value items separated by commas")
        if key not in _CONFIG_KEYS:
            raise ValueError(f"SCRAM credential: unknown key (expected {', '.join(_CONFIG_KEYS)})")
        if key in fields:
            raise ValueError(f"SCRAM credential: {key} given twice")
        fields[key] = value
    missing = [key for key in _CONFIG_KEYS if key not in fields]
    if missing:
        raise ValueError(f"SCRAM credential: missing {', '.join(missing)}")
    decoded = {}
    for key in _CONFIG_KEYS[:3]:
        value = fields[key]
        raw = _b64decode(value + "=" * (-len(value) % 4))
        if raw is None or (not raw and key != "salt"):
            raise ValueError(f"SCRAM credential: {key} is not base64 of some bytes")
        decoded[key] = raw
    iterations = fields["iterations"]
    if not _ITERATIONS.fullmatch(iterations) or not 0 < int(iterations) < 2**31:
        raise ValueError("SCRAM credential: iterations is not a positive 32-bit integer")
    return ScramCredential(
        decoded["salt"], decoded["stored_key"], decoded["server_key"], int(iterations)
    )


# --- message parts --------------------------------------------------------------------

_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII but ","
_EXTENSION = re.compile(r"([A-Za-z]+)=([^\x00,]+)")
_ITERATIONS = re.compile(r"[0-9]{1,10}")
_SASLNAME = re.compile(r"(?:[^\x00=,]|=2C|=3D)+")


def _b64decode(text: str) -> bytes | None:
    return base64.b64decode(text) if _BASE64.fullmatch(text) else None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def encode_saslname(name: str) -> str:
    """A name as SCRAM sends it: "=" as "=3D", "," as "=2C"."""
    return name.replace("=", "=3D").replace(",", "=2C")


def decode_saslname(text: str) -> str | None:
    """The name `text` encodes; None if it is empty, holds NUL, or another "=" escape."""
    if not _SASLNAME.fullmatch(text):
        return None
    return text.replace("=2C", ",").replace("=3D", "=")


def _extensions(items: list[str]) -> dict[str, str] | None:
    found: dict[str, str] = {}
    for item in items:
        match = _EXTENSION.fullmatch(item)
        if match is None:
            return None
        found[match[1]] = match[2]
    return found


def _malformed(problem: str) -> SaslAuthenticationFailed:
    return SaslAuthenticationFailed(f"Authentication failed: malformed SCRAM message: {problem}")


def _text(token: bytes) -> str:
    if len(token) > MAX_SCRAM_MESSAGE_BYTES:
        raise _malformed(f"longer than {MAX_SCRAM_MESSAGE_BYTES} bytes")
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise _malformed("not valid UTF-8") from None


def _kafka_like_salt(digest: bytes) -> bytes:
    """A salt shaped like those Kafka's tools make (130 random bits in base 36, as ASCII)."""
    number, digits = int.from_bytes(digest[:17], "big") >> 6, list[str]()
    while number or not digits:
        number, digit = divmod(number, 36)
        digits.append("0123456789abcdefghijklmnopqrstuvwxyz"[digit])
    return "".join(reversed(digits)).encode("ascii")


# --- the server -----------------------------------------------------------------------


class _State(Enum):
    AWAITING_CLIENT_FIRST = "awaiting client-first"
    AWAITING_CLIENT_FINAL = "awaiting client-final"
    COMPLETE = "complete"
    FAILED = "failed"


class ScramServer(Mechanism):
    """The broker's side of one SCRAM authentication.

    Legal transitions:
        AWAITING_CLIENT_FIRST --step(client-first): server-first-->  AWAITING_CLIENT_FINAL
        AWAITING_CLIENT_FINAL --step(client-final), proof right-->  COMPLETE
        any state             --a refusal, or a step once COMPLETE-->  FAILED (terminal)

    `credentials(name)` is the user's stored credential for this mechanism, or None. An
    unknown user (or one whose credential has fewer iterations than the mechanism's
    minimum) is answered with a salt made from `fake_salt_key` (a per-cluster secret of at
    least 16 bytes, the same across restarts) and refused at the final step exactly as a
    wrong password is.
    """

    def __init__(
        self,
        mechanism: ScramMechanism,
        credentials: Callable[[str], ScramCredential | None],
        server_nonce: str,
        fake_salt_key: bytes,
    ) -> None:
        if not _NONCE.fullmatch(server_nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without commas, and not empty")
        if len(fake_salt_key) < 16:
            raise ValueError("the fake salt key must have at least 16 bytes")
        self._mechanism = mechanism
        self._credentials = credentials
        self._server_nonce = server_nonce
        self._fake_salt_key = fake_salt_key
        self._state = _State.AWAITING_CLIENT_FIRST
        self._gs2_header = self._client_first_bare = self._server_first = self._nonce = ""
        self._username = self._authzid = ""
        self._credential: ScramCredential | None = None

    def step(self, token: bytes) -> MechanismStep:
        if self._state is _State.FAILED:
            raise SaslAuthenticationFailed(_ALREADY_FAILED)
        try:
            if self._state is _State.AWAITING_CLIENT_FIRST:
                return self._client_first(token)
            if self._state is _State.AWAITING_CLIENT_FINAL:
                return self._client_final(token)
            raise SaslAuthenticationFailed(_TWO_MESSAGES)
        except BaseException:
            self._state = _State.FAILED
            self._credential = None
            raise

    def _client_first(self, token: bytes) -> MechanismStep:
        text = _text(token)
        parts = text.split(",")
        if len(parts) < 4:
            raise _malformed("expected a GS2 header, then n=<name>,r=<nonce>")
        flag, authz, name, nonce = parts[:4]
        if flag.startswith("p="):
            raise SaslAuthenticationFailed(_CHANNEL_BINDING)
        if flag not in ("n", "y"):
            raise _malformed("the GS2 header's channel binding flag is not n or y")
        authzid = decode_saslname(authz[2:]) if authz.startswith("a=") else None
        if authz and authzid is None:
            raise _malformed("the GS2 header's authorization id is not a=<saslname>")
        if name.startswith("m="):
            raise _malformed("mandatory extensions (m=) are not supported")
        username = decode_saslname(name[2:]) if name.startswith("n=") else None
        if username is None:
            raise _malformed("expected n=<saslname> with = escaped as =3D and , as =2C")
        if not (nonce.startswith("r=") and _NONCE.fullmatch(nonce[2:])):
            raise _malformed("expected r=<nonce> of printable ASCII")
        extensions = _extensions(parts[4:])
        if extensions is None:
            raise _malformed("expected extensions as <letters>=<value>")
        if extensions.get("tokenauth", "").lower() == "true":
            raise SaslAuthenticationFailed(_TOKEN_AUTH)
        credential = self._credentials(username)
        if credential is not None and credential.iterations < self._mechanism.min_iterations:
            credential = None  # Kafka refuses it too; told apart from no user by nobody
        if credential is None:
            key_message = f"{self._mechanism.mechanism_name}\0{username}".encode()
            digest = _hmac(self._mechanism, self._fake_salt_key, key_message)
            salt, iterations = _kafka_like_salt(digest), self._mechanism.min_iterations
        else:
            salt, iterations = credential.salt, credential.iterations
        self._gs2_header = f"{flag},{authz},"
        self._client_first_bare = text[len(self._gs2_header) :]
        self._nonce = nonce[2:] + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(salt)},i={iterations}"
        self._username, self._authzid, self._credential = username, authzid or "", credential
        self._state = _State.AWAITING_CLIENT_FINAL
        return MechanismStep(self._server_first.encode("ascii"), complete=False)

    def _client_final(self, token: bytes) -> MechanismStep:
        text = _text(token)
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep or "," in proof_text:
            raise _malformed("expected the proof p=<base64> last")
        parts = without_proof.split(",")
        if len(parts) < 2 or not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise _malformed("expected c=<channel binding>,r=<nonce> first")
        if _b64decode(parts[0][2:]) != self._gs2_header.encode():
            raise _malformed("the channel binding is not the GS2 header of the first message")
        # RFC 5802's nonce, or librdkafka's before 2.6.1, which put its own nonce in front
        # of it once more (Kafka accepts any nonce that ends with the right one since 3.8.1).
        client_nonce = self._nonce.removesuffix(self._server_nonce)
        if parts[1][2:] not in (self._nonce, client_nonce + self._nonce):
            raise _malformed("the nonce is not the one the server sent")
        if _extensions(parts[2:]) is None:
            raise _malformed("expected extensions as <letters>=<value>")
        proof = _b64decode(proof_text)
        if proof is None:
            raise _malformed("the proof is not base64")
        mechanism, credential = self._mechanism, self._credential
        # An unknown user's keys are zeros: the same work, then refused.
        dummy = bytes(hashlib.new(mechanism.hash_name).digest_size)
        stored_key = dummy if credential is None else credential.stored_key
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        signature = _hmac(mechanism, stored_key, auth_message.encode())
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=False))
        matches = len(proof) == len(signature) and hmac.compare_digest(
            _hash(mechanism, client_key), stored_key
        )
        if credential is None or not matches:
            raise SaslAuthenticationFailed(invalid_credentials_message(mechanism))
        # As in Kafka's rule, but told only to a client that knows the password.
        if self._authzid and self._authzid != self._username:
            raise SaslAuthenticationFailed(_OTHER_AUTHZID)
        server_signature = _hmac(mechanism, credential.server_key, auth_message.encode())
        self._state, self._credential = _State.COMPLETE, None
        return MechanismStep(
            f"v={_b64(server_signature)}".encode("ascii"),
            complete=True,
            principal_name=self._username,
        )


# --- the client -----------------------------------------------------------------------


class ScramClient:
    """The client's side of one SCRAM authentication: `first_message()`, then
    `final_message(server_first)`, then `verify_server_final(server_final)`. Each refusal
    raises SaslAuthenticationFailed. A server asking for fewer iterations than the
    mechanism's minimum, or more than its maximum (a server making the client burn CPU),
    is refused; Kafka's client has no maximum."""

    def __init__(
        self,
        mechanism: ScramMechanism,
        username: str,
        password: str,
        client_nonce: str,
        *,
        authorization_id: str = "",
        extensions: Mapping[str, str] | None = None,
    ) -> None:
        if not username or "\0" in username or "\0" in authorization_id:
            raise ValueError("a SCRAM name is not empty and holds no NUL")
        if not _NONCE.fullmatch(client_nonce):
            raise ValueError("a SCRAM nonce is printable ASCII without commas, and not empty")
        items = [f"{key}={value}" for key, value in (extensions or {}).items()]
        if _extensions(items) is None:
            raise ValueError("a SCRAM extension is <letters>=<value without commas or NUL>")
        authz = f"a={encode_saslname(authorization_id)}" if authorization_id else ""
        self._mechanism = mechanism
        self._password = password
        self._nonce = client_nonce
        self._gs2_header = f"n,{authz},"
        self._first_bare = ",".join([f"n={encode_saslname(username)},r={client_nonce}", *items])
        self._first = (self._gs2_header + self._first_bare).encode()  # ValueError if unencodable
        self._auth_message: str | None = None
        self._server_key: bytes | None = None
        self.complete = False

    def first_message(self) -> bytes:
        return self._first

    def final_message(self, server_first: bytes) -> bytes:
        if self._auth_message is not None:
            raise SaslAuthenticationFailed("SCRAM client: the server-first message came twice")
        text = _server_text(server_first)
        parts = text.split(",")
        if len(parts) < 3 or _extensions(parts[3:]) is None:
            raise _server_malformed("expected r=<nonce>,s=<salt>,i=<iterations>")
        nonce, salt_text, iterations_text = parts[0][2:], parts[1][2:], parts[2][2:]
        salt = _b64decode(salt_text) if parts[1].startswith("s=") else None
        if not parts[0].startswith("r=") or not _NONCE.fullmatch(nonce) or salt is None:
            raise _server_malformed("expected r=<nonce>,s=<base64 salt>")
        if not parts[2].startswith("i=") or not _ITERATIONS.fullmatch(iterations_text):
            raise _server_malformed("expected i=<iterations>")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationFailed("SCRAM client: the server nonce does not extend ours")
        mechanism, iterations = self._mechanism, int(iterations_text)
        if not mechanism.min_iterations <= iterations <= mechanism.max_iterations:
            raise SaslAuthenticationFailed(
                f"SCRAM client: the server asks for {iterations} iterations, outside "
                f"{mechanism.min_iterations}..{mechanism.max_iterations}"
            )
        salted = salted_password(mechanism, self._password, salt, iterations)
        client_key = _hmac(mechanism, salted, b"Client Key")
        without_proof = f"c={_b64(self._gs2_header.encode())},r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}"
        signature = _hmac(mechanism, _hash(mechanism, client_key), self._auth_message.encode())
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = _hmac(mechanism, salted, b"Server Key")
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def verify_server_final(self, server_final: bytes) -> None:
        if self._auth_message is None or self._server_key is None or self.complete:
            raise SaslAuthenticationFailed("SCRAM client: a server-final message out of order")
        text = _server_text(server_final)
        first, _, rest = text.partition(",")
        if first.startswith("e="):
            raise SaslAuthenticationFailed(f"SCRAM client: the server refused: {first[2:]}")
        signature = _b64decode(first[2:]) if first.startswith("v=") else None
        if signature is None or (rest and _extensions(rest.split(",")) is None):
            raise _server_malformed("expected v=<base64 server signature>")
        expected = _hmac(self._mechanism, self._server_key, self._auth_message.encode())
        if not hmac.compare_digest(signature, expected):
            raise SaslAuthenticationFailed("SCRAM client: the server's signature is wrong")
        self.complete = True


def _server_malformed(problem: str) -> SaslAuthenticationFailed:
    return SaslAuthenticationFailed(f"SCRAM client: malformed server message: {problem}")


def _server_text(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise _server_malformed("not valid UTF-8") from None
