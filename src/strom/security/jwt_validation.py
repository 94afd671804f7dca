"""The checks a broker makes on an OAUTHBEARER token (a JWT), as Kafka's two server-side
validators make them. Pure: the current time and the key set come in as arguments.

- **Unsecured** (`validate_unsecured`, Kafka's OAuthBearerUnsecuredValidatorCallbackHandler,
  KIP-255; for development): the header says `"alg":"none"` and there is no signature.
  `exp` is required, `iat` optional; `nbf` is not looked at (Kafka does not either). A
  token has expired when now - skew >= exp; it is refused when iat > now + skew, or exp
  <= iat. The principal is the principal claim (a non-blank JSON string), the scope is
  the scope claim (one string, taken whole, or a list of strings). A required scope
  missing from the token is `insufficient_scope` with the required scope in the error.
- **Signed** (`validate_signed`, Kafka's OAuthBearerValidatorCallbackHandler of KIP-768,
  which uses jose4j): the signature is checked with a key of the JWKS chosen by `kid`
  (without a `kid`, every key of the right type is tried), for RS256/384/512,
  PS256/384/512 and ES256/384/512 only: `none`, the HS* algorithms (whose "secret" would
  be a public key: the algorithm-confusion attack) and anything else are refused. Then
  jose4j's rules, in whole seconds: `exp` and `iat` are required; expired when now - skew
  >= exp; not yet valid when now + skew < nbf; exp before iat or before nbf is refused.
  With expected audiences, `aud` must name one of them; without, a token that has an
  `aud` at all is refused (jose4j's default). With an expected issuer, `iss` must be it.
  Then Kafka's: the subject claim is a non-blank string (trimmed), the scope claim's
  strings are non-blank and not repeated.

What differs from Kafka: JSON that is not an object, a claim of the wrong JSON type
(Kafka takes the text of a boolean as a principal) and a `crit` header are refused as
invalid tokens rather than answered with an internal error or read loosely; an unsecured
token's parts may be base64url as well as base64 (Kafka's unsecured parser takes base64
only, which refuses many tokens librdkafka makes).

Refusals are `TokenRefused`, whose `reason` is for the broker's log: it names claims and
times, never the token. PyJWT loads the keys and checks the signatures; the rest is
written here because the rules are Kafka's and jose4j's, not PyJWT's (its claim checks
read the system clock).
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import Algorithm, ECAlgorithm, RSAAlgorithm, RSAPSSAlgorithm
from jwt.exceptions import InvalidKeyError

__all__ = [
    "SIGNED_ALGORITHMS",
    "JwksError",
    "KeySet",
    "SignedJwtSettings",
    "TokenRefused",
    "TokenStatus",
    "UnsecuredJwtSettings",
    "ValidToken",
    "VerificationKey",
    "parse_jwks",
    "parse_scope",
    "validate_signed",
    "validate_unsecured",
]


class TokenStatus(Enum):
    """The `status` of the error a client is sent (RFC 7628, section 3.2.2)."""

    INVALID_TOKEN = "invalid_token"
    INSUFFICIENT_SCOPE = "insufficient_scope"


class TokenRefused(ValueError):
    """A token that does not pass. `reason` is for the broker's log; `scope` is the
    required scope the client is told about (insufficient_scope); `unknown_kid` is the
    key id no key of the set has (a reason to fetch the key set again)."""

    def __init__(
        self,
        reason: str,
        *,
        status: TokenStatus = TokenStatus.INVALID_TOKEN,
        scope: str | None = None,
        unknown_kid: str | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        self.scope = scope
        self.unknown_kid = unknown_kid


@dataclass(frozen=True, slots=True)
class ValidToken:
    """What a token that passed says."""

    principal_name: str
    scope: frozenset[str]
    expires_at_ms: int
    issued_at_ms: int | None = None


# --- JSON and base64 as the tokens carry them -----------------------------------------

_MAX_MS = 2**63 - 1
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(parse_constant=_refuse_constant)
"""Strict JSON (no NaN or Infinity, which Jackson refuses too), made once."""


def _json_object(data: bytes, part: str) -> dict[str, Any]:
    try:
        value = _JSON.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise TokenRefused(f"the {part} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenRefused(f"the {part} is not a JSON object")
    return value


def _b64_either(text: str, part: str) -> bytes:
    """base64 or base64url, padding optional (an unsecured token's part)."""
    if not _BASE64.fullmatch(text):
        raise TokenRefused(f"the {part} is not base64")
    text = text.rstrip("=").replace("-", "+").replace("_", "/")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise TokenRefused(f"the {part} is not base64") from None


def _b64url(text: str, part: str) -> bytes:
    """base64url without padding (RFC 7515), as a signed token's parts are."""
    if not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise TokenRefused(f"the {part} is not base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _seconds_to_ms(value: float) -> int:
    if isinstance(value, float):
        if math.isnan(value):
            return 0
        if math.isinf(value):
            return _MAX_MS if value > 0 else -_MAX_MS
        return max(-_MAX_MS, min(_MAX_MS, round(value * 1000)))
    return max(-_MAX_MS, min(_MAX_MS, int(value) * 1000))


def _whole_seconds(value: float) -> int:
    """A NumericDate as jose4j reads it: whole seconds, the fraction cut off."""
    if isinstance(value, float) and not math.isfinite(value):
        return _MAX_MS if value > 0 else -_MAX_MS
    return int(value)


def _number_claim(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if not _is_number(value):
        raise TokenRefused(f"the '{name}' claim is not a number")
    number: float = value
    return number


# --- unsecured JWTs -------------------------------------------------------------------

_SCOPE_ITEM = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


def parse_scope(text: str) -> tuple[str, ...]:
    """A space-separated scope (RFC 6749, section 3.3); ValueError naming a bad item."""
    items = tuple(item for item in text.split(" ") if item)
    for item in items:
        if not _SCOPE_ITEM.fullmatch(item):
            raise ValueError(f"invalid scope value {item!r}")
    return items


@dataclass(frozen=True, slots=True)
class UnsecuredJwtSettings:
    """The unsecuredValidator* options of the OAuthBearerLoginModule JAAS entry."""

    principal_claim_name: str = "sub"
    scope_claim_name: str = "scope"
    required_scope: tuple[str, ...] = ()
    allowable_clock_skew_ms: int = 0

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> UnsecuredJwtSettings:
        """From JAAS options, with Kafka's defaults for blank ones; ValueError (naming
        the option, never showing other options) for a bad scope or clock skew."""
        principal = options.get("unsecuredValidatorPrincipalClaimName", "").strip() or "sub"
        scope = options.get("unsecuredValidatorScopeClaimName", "").strip() or "scope"
        try:
            required = parse_scope(options.get("unsecuredValidatorRequiredScope", "").strip())
        except ValueError as exc:
            raise ValueError(f"unsecuredValidatorRequiredScope: {exc}") from None
        skew_text = options.get("unsecuredValidatorAllowableClockSkewMs", "").strip() or "0"
        if not re.fullmatch(r"[+-]?[0-9]{1,10}", skew_text) or not (
            0 <= int(skew_text) <= 2**31 - 1
        ):
            raise ValueError(
                "unsecuredValidatorAllowableClockSkewMs must be a non-negative integer "
                "(milliseconds)"
            )
        return cls(principal, scope, required, int(skew_text))


def validate_unsecured(token: str, settings: UnsecuredJwtSettings, now_ms: int) -> ValidToken:
    """The unsecured token `token` (compact serialization, `alg` none) checked at
    `now_ms` (see the module docstring); TokenRefused if it does not pass."""
    if ".." in token:
        raise TokenRefused("malformed token: it contains '..'")
    parts = token.split(".")
    if len(parts) != 3:
        raise TokenRefused("malformed token: an unsecured JWT has 3 parts separated by '.'")
    header = _json_object(_b64_either(parts[0], "header"), "header")
    claims = _json_object(_b64_either(parts[1], "payload"), "payload")
    if header.get("alg") != "none":
        raise TokenRefused("an unsecured JWT must have 'none' for its algorithm")
    if parts[2]:
        raise TokenRefused("an unsecured JWT must not have a signature")
    scope = _unsecured_scope(claims, settings.scope_claim_name)
    exp = _number_claim(claims, "exp")
    if exp is None:
        raise TokenRefused("no expiration time (exp) in the token")
    principal = claims.get(settings.principal_claim_name)
    if principal is not None and not isinstance(principal, str):
        raise TokenRefused(f"the '{settings.principal_claim_name}' claim is not a string")
    if principal is None or not principal.strip():
        raise TokenRefused(f"no principal name in the '{settings.principal_claim_name}' claim")
    iat = _number_claim(claims, "iat")
    skew_ms = settings.allowable_clock_skew_ms
    if iat is not None and _seconds_to_ms(iat) > now_ms + skew_ms:
        raise TokenRefused(f"issued at {iat} s, after now ({now_ms} ms) plus {skew_ms} ms skew")
    if now_ms - skew_ms >= _seconds_to_ms(exp):
        raise TokenRefused(f"expired at {exp} s (now {now_ms} ms, {skew_ms} ms skew)")
    if iat is not None and exp <= iat:
        raise TokenRefused("the expiration time (exp) is not after the issue time (iat)")
    for item in settings.required_scope:
        if item not in scope:
            raise TokenRefused(
                f"the token's scope lacks the required {item!r}",
                status=TokenStatus.INSUFFICIENT_SCOPE,
                scope="[" + ", ".join(settings.required_scope) + "]",  # as Java prints a list
            )
    issued_at_ms = None if iat is None else _seconds_to_ms(iat)
    return ValidToken(principal, scope, _seconds_to_ms(exp), issued_at_ms)


def _unsecured_scope(claims: Mapping[str, Any], name: str) -> frozenset[str]:
    value = claims.get(name)
    if value is None:
        return frozenset()
    if isinstance(value, str):
        return frozenset({value.strip()}) if value.strip() else frozenset()
    if not isinstance(value, list):
        raise TokenRefused(f"the '{name}' claim is neither a string nor a list")
    items = [item if isinstance(item, str) else json.dumps(item) for item in value]
    return frozenset(item.strip() for item in items if item.strip())


# --- key sets -------------------------------------------------------------------------


class JwksError(ValueError):
    """A JWKS document that cannot be used at all (not JSON, no `keys` list)."""


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """One public key of a JWKS."""

    kid: str | None
    kty: str
    crv: str | None
    alg: str | None
    use: str | None
    key: rsa.RSAPublicKey | ec.EllipticCurvePublicKey = field(repr=False)


@dataclass(frozen=True, slots=True)
class KeySet:
    """The usable keys of a JWKS (RSA and EC public keys); `skipped` counts the others
    (symmetric, Ed25519, malformed), which can verify nothing here."""

    keys: tuple[VerificationKey, ...] = ()
    skipped: int = 0

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(key.kid for key in self.keys if key.kid is not None)

    def candidates(self, alg: str, kid: str | None) -> tuple[VerificationKey, ...]:
        """The keys that may have signed with `alg` under `kid` (any kid when None)."""
        kty, crv = _KEY_TYPES[alg]
        return tuple(
            key
            for key in self.keys
            if (kid is None or key.kid == kid)
            and key.kty == kty
            and (crv is None or key.crv == crv)
            and key.use in (None, "sig")
            and key.alg in (None, alg)
        )


def parse_jwks(data: bytes) -> KeySet:
    """The key set of a JWKS document (RFC 7517); JwksError if it is not one."""
    try:
        document = _JSON.decode(data.decode("utf-8"))
    except (ValueError, RecursionError):
        raise JwksError("the JWKS is not JSON") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise JwksError('the JWKS is not a JSON object with a "keys" list')
    keys, skipped = [], 0
    for item in document["keys"]:
        key = _verification_key(item)
        if key is None:
            skipped += 1
        else:
            keys.append(key)
    return KeySet(tuple(keys), skipped)


def _verification_key(jwk: object) -> VerificationKey | None:
    if not isinstance(jwk, dict):
        return None
    kty, kid, alg, use = (jwk.get(name) for name in ("kty", "kid", "alg", "use"))
    if not all(value is None or isinstance(value, str) for value in (kid, alg, use)):
        return None
    public: rsa.RSAPublicKey | ec.EllipticCurvePublicKey
    try:
        if kty == "RSA":  # only the public members: a private key in a JWKS is ignored
            loaded = RSAAlgorithm.from_jwk({"kty": "RSA", "n": jwk.get("n"), "e": jwk.get("e")})
            if not isinstance(loaded, rsa.RSAPublicKey):
                return None
            public = loaded
        elif kty == "EC":
            members = {name: jwk.get(name) for name in ("kty", "crv", "x", "y")}
            loaded_ec = ECAlgorithm.from_jwk(members)
            if not isinstance(loaded_ec, ec.EllipticCurvePublicKey):
                return None
            public = loaded_ec
        else:
            return None
    except (InvalidKeyError, ValueError, TypeError, KeyError, AttributeError):
        return None
    crv = jwk.get("crv") if kty == "EC" else None
    return VerificationKey(kid, kty, crv if isinstance(crv, str) else None, alg, use, public)


# --- signed JWTs ----------------------------------------------------------------------

_ALGORITHMS: dict[str, Algorithm] = {
    "RS256": RSAAlgorithm(RSAAlgorithm.SHA256),
    "RS384": RSAAlgorithm(RSAAlgorithm.SHA384),
    "RS512": RSAAlgorithm(RSAAlgorithm.SHA512),
    "PS256": RSAPSSAlgorithm(RSAPSSAlgorithm.SHA256),
    "PS384": RSAPSSAlgorithm(RSAPSSAlgorithm.SHA384),
    "PS512": RSAPSSAlgorithm(RSAPSSAlgorithm.SHA512),
    "ES256": ECAlgorithm(ECAlgorithm.SHA256, ec.SECP256R1),
    "ES384": ECAlgorithm(ECAlgorithm.SHA384, ec.SECP384R1),
    "ES512": ECAlgorithm(ECAlgorithm.SHA512, ec.SECP521R1),
}
_KEY_TYPES: dict[str, tuple[str, str | None]] = {
    **{f"{family}{bits}": ("RSA", None) for family in ("RS", "PS") for bits in (256, 384, 512)},
    "ES256": ("EC", "P-256"),
    "ES384": ("EC", "P-384"),
    "ES512": ("EC", "P-521"),
}
SIGNED_ALGORITHMS = tuple(_ALGORITHMS)
"""The algorithms a signed token may use: asymmetric ones only."""


@dataclass(frozen=True, slots=True)
class SignedJwtSettings:
    """Kafka's `sasl.oauthbearer.*` validation keys."""

    expected_audiences: frozenset[str] = frozenset()
    expected_issuer: str | None = None
    clock_skew_s: int = 30
    sub_claim_name: str = "sub"
    scope_claim_name: str = "scope"


def validate_signed(
    token: str, keys: KeySet, settings: SignedJwtSettings, now_ms: int
) -> ValidToken:
    """The signed token `token` checked against `keys` at `now_ms` (see the module
    docstring); TokenRefused if it does not pass, with `unknown_kid` when no key of the
    set has its key id."""
    parts = token.strip().split(".")
    if len(parts) != 3 or not all(part.strip() for part in parts):
        raise TokenRefused("malformed token: a signed JWT has 3 non-empty parts")
    header = _json_object(_b64url(parts[0], "header"), "header")
    alg = header.get("alg")
    if alg not in _ALGORITHMS:
        shown = alg if isinstance(alg, str) and len(alg) <= 16 else "?"
        raise TokenRefused(f"algorithm {shown!r} is not allowed (only RS*, PS*, ES*)")
    if "crit" in header:
        raise TokenRefused("the header names critical extensions (crit), none understood")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenRefused("the key id (kid) is not a string")
    candidates = keys.candidates(alg, kid)
    if not candidates:
        if kid is not None:
            raise TokenRefused(f"no {alg} key with the token's key id", unknown_kid=kid)
        raise TokenRefused(f"no {alg} key to check the signature with")
    signature = _b64url(parts[2], "signature")
    signed = f"{parts[0]}.{parts[1]}".encode("ascii")
    algorithm = _ALGORITHMS[alg]
    if not any(algorithm.verify(signed, key.key, signature) for key in candidates):
        raise TokenRefused("the signature does not verify")
    claims = _json_object(_b64url(parts[1], "payload"), "payload")
    return _signed_claims(claims, settings, now_ms)


def _signed_claims(
    claims: Mapping[str, Any], settings: SignedJwtSettings, now_ms: int
) -> ValidToken:
    _check_audience(claims.get("aud"), settings.expected_audiences)
    if settings.expected_issuer is not None:
        issuer = claims.get("iss")
        if issuer is None:
            raise TokenRefused("no issuer (iss) claim, and an issuer is expected")
        if issuer != settings.expected_issuer:
            raise TokenRefused("the issuer (iss) is not the expected one")
    exp, iat, nbf = (_number_claim(claims, name) for name in ("exp", "iat", "nbf"))
    if exp is None:
        raise TokenRefused("no expiration time (exp) claim")
    if iat is None:
        raise TokenRefused("no issue time (iat) claim")
    now_s, skew_s = now_ms // 1000, settings.clock_skew_s
    exp_s, iat_s = _whole_seconds(exp), _whole_seconds(iat)
    if now_s - skew_s >= exp_s:
        raise TokenRefused(f"expired at {exp_s} s (now {now_s} s, {skew_s} s skew)")
    if exp_s < iat_s:
        raise TokenRefused("the expiration time (exp) is before the issue time (iat)")
    if nbf is not None and exp_s < _whole_seconds(nbf):
        raise TokenRefused("the expiration time (exp) is before the not-before time (nbf)")
    if nbf is not None and now_s + skew_s < _whole_seconds(nbf):
        raise TokenRefused(f"not valid before {_whole_seconds(nbf)} s (now {now_s} s)")
    scope = _signed_scope(claims.get(settings.scope_claim_name), settings.scope_claim_name)
    subject = claims.get(settings.sub_claim_name)
    if not isinstance(subject, str) or not subject.strip():
        raise TokenRefused(f"the '{settings.sub_claim_name}' claim is not a non-blank string")
    if exp_s < 0 or iat_s < 0:
        raise TokenRefused("a negative exp or iat")
    return ValidToken(subject.strip(), scope, min(exp_s * 1000, _MAX_MS), iat_s * 1000)


def _check_audience(value: object, expected: frozenset[str]) -> None:
    if value is None:
        if expected:
            raise TokenRefused("no audience (aud) claim, and an audience is expected")
        return
    audiences: object = [value] if isinstance(value, str) else value
    if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
        raise TokenRefused("the audience (aud) claim is not a string or a list of strings")
    if not expected:
        raise TokenRefused("the token has an audience (aud) but none is expected (jose4j's rule)")
    if not expected.intersection(audiences):
        raise TokenRefused("the audience (aud) names none of the expected audiences")


def _signed_scope(value: object, name: str) -> frozenset[str]:
    if isinstance(value, str):
        items: list[object] = [value]
    elif isinstance(value, list):
        items = value
    else:
        return frozenset()
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise TokenRefused(f"the '{name}' claim holds a blank or non-string scope")
        if item.strip() in seen:
            raise TokenRefused(f"the '{name}' claim repeats a scope")
        seen.add(item.strip())
    return frozenset(seen)
