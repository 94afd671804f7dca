"""The broker's side of one OAUTHBEARER exchange, without a network: parsing the client's
message and checking its token, for an unsecured JWT, an RS256 token (2048-bit key) and
an ES256 token (P-256), each checked against a two-key JWKS. Prints the best of
`--repeats` timings of `--exchanges` exchanges, in µs per exchange.

    .venv/bin/python bench/oauthbearer_exchange.py [--exchanges 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import time
from collections.abc import Callable

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from strom.security.jwt_validation import (
    SignedJwtSettings,
    UnsecuredJwtSettings,
    ValidToken,
    parse_jwks,
    validate_signed,
    validate_unsecured,
)
from strom.security.oauthbearer import OAuthBearerServer, client_initial_response


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exchanges", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    now_s = int(time.time())
    claims = {"sub": "bench", "iat": now_s, "exp": now_s + 3600, "scope": ["kafka"]}
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    keys = parse_jwks(
        json.dumps(
            {
                "keys": [
                    {**RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True), "kid": "r"},
                    {**ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True), "kid": "e"},
                ]
            }
        ).encode()
    )

    def b64(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    def signed_check(token: str) -> ValidToken:
        return validate_signed(token, keys, SignedJwtSettings(), now_s * 1000)

    def unsecured_check(token: str) -> ValidToken:
        return validate_unsecured(token, UnsecuredJwtSettings(), now_s * 1000)

    cases: dict[str, tuple[str, Callable[[str], ValidToken]]] = {
        "unsecured JWT": (f"{b64({'alg': 'none'})}.{b64(claims)}.", unsecured_check),
        "RS256, 2048-bit key": (
            jwt.encode(claims, rsa_key, algorithm="RS256", headers={"kid": "r"}),
            signed_check,
        ),
        "ES256, P-256 key": (
            jwt.encode(claims, ec_key, algorithm="ES256", headers={"kid": "e"}),
            signed_check,
        ),
    }
    for name, (token, check) in cases.items():
        message = client_initial_response(token)
        best = float("inf")
        for _ in range(args.repeats):
            started = time.perf_counter()
            for _ in range(args.exchanges):
                assert OAuthBearerServer(check).step(message).complete
            best = min(best, (time.perf_counter() - started) / args.exchanges)
        print(f"{name}: {best * 1e6:.0f} µs per exchange")


if __name__ == "__main__":
    main()
