"""Tokens and key sets for the OAUTHBEARER tests: unsecured JWTs written by hand, signed
ones made with PyJWT and keys made once per test run."""

from __future__ import annotations

import base64
import json
from functools import cache
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

NOW_MS = 1_800_000_000_000
NOW_S = NOW_MS // 1000


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsecured(claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    """An unsecured JWT (alg none, no signature) with `claims`."""
    head = {"alg": "none"} if header is None else header
    return f"{b64url(json.dumps(head).encode())}.{b64url(json.dumps(claims).encode())}."


def claims(**more: Any) -> dict[str, Any]:
    """A token's claims valid at NOW_MS for principal alice, with `more` on top (None
    removes a claim)."""
    base: dict[str, Any] = {"sub": "alice", "iat": NOW_S - 10, "exp": NOW_S + 3600}
    base.update(more)
    return {name: value for name, value in base.items() if value is not None}


@cache
def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@cache
def other_rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@cache
def ec_key(curve: str = "P-256") -> ec.EllipticCurvePrivateKey:
    curves = {"P-256": ec.SECP256R1(), "P-384": ec.SECP384R1(), "P-521": ec.SECP521R1()}
    return ec.generate_private_key(curves[curve])


def public_jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    else:
        jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
    return {**jwk, "kid": kid, "use": "sig"}


def jwks(*keys: dict[str, Any]) -> bytes:
    return json.dumps({"keys": list(keys)}).encode()


def signed(
    payload: dict[str, Any],
    key: Any = None,
    *,
    alg: str = "RS256",
    kid: str | None = "k1",
    headers: dict[str, Any] | None = None,
) -> str:
    """A JWS of `payload` signed with `key` (the test RSA key by default)."""
    head = dict(headers or {})
    if kid is not None:
        head["kid"] = kid
    return jwt.encode(payload, rsa_key() if key is None else key, algorithm=alg, headers=head)
