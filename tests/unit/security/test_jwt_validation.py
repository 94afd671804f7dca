"""OAUTHBEARER's token checks: Kafka's unsecured validator (KIP-255) and its JWKS
validator (KIP-768, jose4j's rules), at a manual clock."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt_helpers import (
    NOW_MS,
    NOW_S,
    b64url,
    claims,
    ec_key,
    jwks,
    other_rsa_key,
    public_jwk,
    rsa_key,
    signed,
    unsecured,
)

from strom.security.jwt_validation import (
    JwksError,
    KeySet,
    SignedJwtSettings,
    TokenRefused,
    TokenStatus,
    UnsecuredJwtSettings,
    parse_jwks,
    parse_scope,
    validate_signed,
    validate_unsecured,
)

UNSECURED = UnsecuredJwtSettings()


def refused_unsecured(token: str, settings: UnsecuredJwtSettings = UNSECURED) -> TokenRefused:
    with pytest.raises(TokenRefused) as info:
        validate_unsecured(token, settings, NOW_MS)
    return info.value


# --- unsecured ------------------------------------------------------------------------


def test_an_unsecured_token_gives_its_principal_scope_and_expiry() -> None:
    token = validate_unsecured(unsecured(claims(scope=["read", " write "])), UNSECURED, NOW_MS)
    assert token.principal_name == "alice"
    assert token.scope == {"read", "write"}
    assert token.expires_at_ms == (NOW_S + 3600) * 1000
    assert token.issued_at_ms == (NOW_S - 10) * 1000


def test_a_string_scope_is_one_item_as_kafka_reads_it() -> None:
    token = validate_unsecured(unsecured(claims(scope="read write")), UNSECURED, NOW_MS)
    assert token.scope == {"read write"}


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (unsecured(claims(), {"alg": "RS256"}), "'none' for its algorithm"),
        (unsecured(claims(), {}), "'none' for its algorithm"),
        (unsecured(claims()) + "c2ln", "must not have a signature"),
        (unsecured(claims(exp=None)), "no expiration time"),
        (unsecured(claims(exp="tomorrow")), "'exp' claim is not a number"),
        (unsecured(claims(sub=None)), "no principal name"),
        (unsecured(claims(sub="  ")), "no principal name"),
        (unsecured(claims(sub=7)), "'sub' claim is not a string"),
        (unsecured(claims(scope=3)), "neither a string nor a list"),
        (unsecured(claims(iat="yesterday")), "'iat' claim is not a number"),
        ("a..b", "contains '..'"),
        ("a.b", "3 parts"),
        ("a.b.c.d", "3 parts"),
        ("!!!.e30.", "not base64"),
        (f"{b64url(b'[1]')}.e30.", "not a JSON object"),
        (f"{b64url(b'{')}.e30.", "not JSON"),
        (b64url(b'{"alg":"none","x":NaN}') + ".e30.", "not JSON"),
    ],
)
def test_malformed_or_incomplete_unsecured_tokens_are_refused(token: str, reason: str) -> None:
    refused = refused_unsecured(token)
    assert reason in refused.reason
    assert refused.status is TokenStatus.INVALID_TOKEN and refused.scope is None


def test_expiry_and_issue_time_with_and_without_skew() -> None:
    skewed = UnsecuredJwtSettings(allowable_clock_skew_ms=5000)
    expired_now = unsecured(claims(exp=NOW_S))  # now >= exp: expired
    assert "expired" in refused_unsecured(expired_now).reason
    assert validate_unsecured(expired_now, skewed, NOW_MS).principal_name == "alice"
    assert "expired" in refused_unsecured(unsecured(claims(exp=NOW_S - 5)), skewed).reason
    future = unsecured(claims(iat=NOW_S + 3))
    assert "issued at" in refused_unsecured(future).reason
    assert validate_unsecured(future, skewed, NOW_MS).issued_at_ms == (NOW_S + 3) * 1000
    same = unsecured(claims(iat=NOW_S + 1, exp=NOW_S + 1))
    assert "(exp) is not after the issue time (iat)" in refused_unsecured(same, skewed).reason


def test_nbf_is_not_checked_by_kafkas_unsecured_validator() -> None:
    token = unsecured(claims(nbf=NOW_S + 3600))
    assert validate_unsecured(token, UNSECURED, NOW_MS).principal_name == "alice"


def test_other_claim_names_and_a_required_scope() -> None:
    settings = UnsecuredJwtSettings.from_options(
        {
            "unsecuredValidatorPrincipalClaimName": " principal ",
            "unsecuredValidatorScopeClaimName": "scp",
            "unsecuredValidatorRequiredScope": "read  write",
            "unsecuredValidatorAllowableClockSkewMs": "250",
        }
    )
    assert settings == UnsecuredJwtSettings("principal", "scp", ("read", "write"), 250)
    good = unsecured(claims(sub=None, principal="bob", scp=["write", "read", "admin"]))
    assert validate_unsecured(good, settings, NOW_MS).principal_name == "bob"
    refused = refused_unsecured(unsecured(claims(principal="bob", scp=["read"])), settings)
    assert refused.status is TokenStatus.INSUFFICIENT_SCOPE
    assert refused.scope == "[read, write]"  # as Kafka prints the required list


def test_base64_and_base64url_parts_are_both_read() -> None:
    payload = json.dumps(claims(sub="ü?>>")).encode()  # base64 with + and /
    text = base64.b64encode(payload).decode()
    assert "+" in text or "/" in text
    token = base64.b64encode(b'{"alg":"none"}').decode() + f".{text}."
    assert validate_unsecured(token, UNSECURED, NOW_MS).principal_name == "ü?>>"
    token_url = b64url(b'{"alg":"none"}') + f".{b64url(payload)}."
    assert validate_unsecured(token_url, UNSECURED, NOW_MS).principal_name == "ü?>>"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"unsecuredValidatorAllowableClockSkewMs": "-1"}, "non-negative"),
        ({"unsecuredValidatorAllowableClockSkewMs": "soon"}, "non-negative"),
        ({"unsecuredValidatorRequiredScope": 'read "write"'}, "invalid scope value"),
    ],
)
def test_bad_validator_options_are_refused(options: dict[str, str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        UnsecuredJwtSettings.from_options(options)


def test_parse_scope() -> None:
    assert parse_scope("  a b  c ") == ("a", "b", "c")
    assert parse_scope("") == ()


# --- key sets -------------------------------------------------------------------------


def key_set() -> KeySet:
    return parse_jwks(
        jwks(
            public_jwk(rsa_key(), "k1"),
            public_jwk(ec_key(), "e1"),
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
            {"kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"},
            "not a key",
        )
    )


def test_a_jwks_keeps_its_rsa_and_ec_keys_and_counts_the_others() -> None:
    keys = key_set()
    assert [key.kid for key in keys.keys] == ["k1", "e1"]
    assert keys.skipped == 4
    assert keys.kids == {"k1", "e1"}


def test_a_private_jwk_is_read_as_its_public_key() -> None:
    from jwt.algorithms import RSAAlgorithm

    private = {**RSAAlgorithm.to_jwk(rsa_key(), as_dict=True), "kid": "p"}
    keys = parse_jwks(jwks(private))
    assert keys.keys[0].key.public_numbers() == rsa_key().public_key().public_numbers()


@pytest.mark.parametrize("document", [b"", b"[]", b'{"keys": {}}', b"{", b'{"nokeys": []}'])
def test_a_document_that_is_not_a_jwks_is_refused(document: bytes) -> None:
    with pytest.raises(JwksError):
        parse_jwks(document)


# --- signed ---------------------------------------------------------------------------

SIGNED = SignedJwtSettings()


def refused_signed(
    token: str, settings: SignedJwtSettings = SIGNED, keys: KeySet | None = None
) -> TokenRefused:
    with pytest.raises(TokenRefused) as info:
        validate_signed(token, key_set() if keys is None else keys, settings, NOW_MS)
    assert info.value.status is TokenStatus.INVALID_TOKEN
    return info.value


@pytest.mark.parametrize("alg", ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512"])
def test_rsa_signed_tokens_are_accepted(alg: str) -> None:
    token = validate_signed(signed(claims(scope="a b"), alg=alg), key_set(), SIGNED, NOW_MS)
    assert token.principal_name == "alice"
    assert token.scope == {"a b"}
    assert token.expires_at_ms == (NOW_S + 3600) * 1000


@pytest.mark.parametrize(
    ("alg", "curve"), [("ES256", "P-256"), ("ES384", "P-384"), ("ES512", "P-521")]
)
def test_ec_signed_tokens_are_accepted(alg: str, curve: str) -> None:
    keys = parse_jwks(jwks(public_jwk(ec_key(curve), "e")))
    token = signed(claims(), ec_key(curve), alg=alg, kid="e")
    assert validate_signed(token, keys, SIGNED, NOW_MS).principal_name == "alice"


def test_without_a_kid_every_key_of_the_right_type_is_tried() -> None:
    keys = parse_jwks(jwks(public_jwk(other_rsa_key(), "x"), public_jwk(rsa_key(), "y")))
    token = signed(claims(), kid=None)
    assert validate_signed(token, keys, SIGNED, NOW_MS).principal_name == "alice"


def test_an_unknown_kid_is_refused_and_named_for_a_refresh() -> None:
    refused = refused_signed(signed(claims(), kid="rotated"))
    assert refused.unknown_kid == "rotated"
    assert refused_signed(signed(claims(), kid=None), keys=KeySet()).unknown_kid is None


def test_a_key_with_the_kid_but_signed_by_another_key_is_a_bad_signature() -> None:
    refused = refused_signed(signed(claims(), other_rsa_key(), kid="k1"))
    assert "signature does not verify" in refused.reason
    assert refused.unknown_kid is None


def test_a_key_for_another_algorithm_or_use_is_not_used() -> None:
    keys = parse_jwks(jwks({**public_jwk(rsa_key(), "k1"), "alg": "RS512"}))
    assert refused_signed(signed(claims(), alg="RS256"), keys=keys).unknown_kid == "k1"
    enc = parse_jwks(jwks({**public_jwk(rsa_key(), "k1"), "use": "enc"}))
    assert refused_signed(signed(claims()), keys=enc).unknown_kid == "k1"
    # an EC key does not check RS256, and a P-384 key does not check ES256
    assert refused_signed(signed(claims(), kid="e1")).unknown_kid == "e1"
    p384 = parse_jwks(jwks(public_jwk(ec_key("P-384"), "e1")))
    es256 = signed(claims(), ec_key("P-256"), alg="ES256", kid="e1")
    assert refused_signed(es256, keys=p384).unknown_kid == "e1"


def test_alg_none_is_refused_by_the_signed_validator() -> None:
    token = unsecured(claims(), {"alg": "none", "kid": "k1"}) + "c2ln"
    assert "algorithm 'none' is not allowed" in refused_signed(token).reason
    assert "3 non-empty parts" in refused_signed(unsecured(claims())).reason


def test_hs256_with_the_public_key_as_secret_is_refused() -> None:
    """The algorithm-confusion attack: a token "signed" with HMAC keyed by the server's
    public key, which a verifier trusting the header's alg would accept."""
    public_pem = (
        rsa_key()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    header = b64url(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    payload = b64url(json.dumps(claims(sub="mallory")).encode())
    mac = hmac.new(public_pem, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    refused = refused_signed(f"{header}.{payload}.{b64url(mac)}")
    assert "algorithm 'HS256' is not allowed" in refused.reason


def test_crit_headers_are_refused() -> None:
    assert "crit" in refused_signed(signed(claims(), headers={"crit": ["exp"]})).reason


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (claims(exp=None), "no expiration time"),
        (claims(iat=None), "no issue time"),
        (claims(exp=NOW_S - 30), "expired"),  # now - 30 s skew >= exp
        (claims(nbf=NOW_S + 31), "not valid before"),
        (claims(exp=NOW_S + 10, iat=NOW_S + 20), "before the issue time"),
        (claims(nbf=NOW_S + 7200), "before the not-before time"),
        (claims(sub=None), "'sub' claim is not a non-blank string"),
        (claims(sub=" "), "'sub' claim is not a non-blank string"),
        (claims(sub=["alice"]), "'sub' claim is not a non-blank string"),
        (claims(aud="kafka"), "none is expected"),
        (claims(exp="later"), "'exp' claim is not a number"),
        (claims(scope=["a", "a "]), "repeats a scope"),
        (claims(scope=["a", ""]), "blank or non-string scope"),
        (claims(iat=-5), "negative"),
    ],
)
def test_claims_of_a_signed_token_are_checked(payload: dict[str, Any], reason: str) -> None:
    assert reason in refused_signed(signed(payload)).reason


def test_clock_skew_of_a_signed_token() -> None:
    keys = key_set()
    just_expired = signed(claims(iat=NOW_S - 100, exp=NOW_S - 29))
    assert validate_signed(just_expired, keys, SIGNED, NOW_MS).principal_name == "alice"
    strict = SignedJwtSettings(clock_skew_s=0)
    assert "expired" in refused_signed(just_expired, strict).reason
    soon = signed(claims(nbf=NOW_S + 30))
    assert validate_signed(soon, keys, SIGNED, NOW_MS).principal_name == "alice"
    assert "not valid before" in refused_signed(soon, strict).reason
    future_iat = signed(claims(iat=NOW_S + 600))  # jose4j does not check iat's time
    assert validate_signed(future_iat, keys, SIGNED, NOW_MS).principal_name == "alice"


def test_audience_and_issuer() -> None:
    expecting = SignedJwtSettings(
        expected_audiences=frozenset({"kafka", "strom"}), expected_issuer="https://idp"
    )
    keys = key_set()
    good = signed(claims(aud=["other", "strom"], iss="https://idp"))
    assert validate_signed(good, keys, expecting, NOW_MS).principal_name == "alice"
    assert validate_signed(signed(claims(aud="kafka", iss="https://idp")), keys, expecting, NOW_MS)
    for payload, reason in [
        (claims(aud="x", iss="https://idp"), "names none"),
        (claims(iss="https://idp"), "no audience"),
        (claims(aud=5, iss="https://idp"), "not a string"),
        (claims(aud="kafka", iss="x"), "not the expected"),
        (claims(aud="kafka"), "no issuer"),
    ]:
        assert reason in refused_signed(signed(payload), expecting).reason


def test_other_claim_names_and_a_trimmed_subject() -> None:
    settings = SignedJwtSettings(sub_claim_name="client_id", scope_claim_name="scp")
    token = signed(claims(sub=None, client_id=" svc-1 ", scp=["x", "y"]))
    valid = validate_signed(token, key_set(), settings, NOW_MS)
    assert (valid.principal_name, valid.scope) == ("svc-1", {"x", "y"})


@pytest.mark.parametrize(
    "token",
    ["", "   ", "a.b", "a.b.c.d", "a..c", "!!.e30.c2ln", "e30.e30.c2ln", "eyJ.e30.c2ln"],
)
def test_malformed_signed_tokens_are_refused(token: str) -> None:
    refused_signed(token)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_is_a_token_or_a_refusal(text: str) -> None:
    for check in (
        lambda: validate_unsecured(text, UNSECURED, NOW_MS),
        lambda: validate_signed(text, key_set(), SIGNED, NOW_MS),
    ):
        with contextlib.suppress(TokenRefused):
            check()
