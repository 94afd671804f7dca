"""SASL/OAUTHBEARER's server side: the client's initial response (RFC 7628 with Kafka's
rules), the two-step error flow, the authzid rule, and the JWKS refresh rate limit."""

from __future__ import annotations

from functools import partial

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jwt_helpers import NOW_MS, NOW_S, claims, jwks, public_jwk, rsa_key, signed, unsecured
from kio.schema.errors import ErrorCode

from strom.security.jwks_refresh import MISSING_KID_INTERVAL_MS, MissingKidRefreshes, retry_wait_ms
from strom.security.jwt_validation import (
    SignedJwtSettings,
    UnsecuredJwtSettings,
    ValidToken,
    parse_jwks,
    validate_signed,
    validate_unsecured,
)
from strom.security.oauthbearer import (
    GENERIC_FAILURE,
    OAuthBearerServer,
    client_initial_response,
    parse_client_initial_response,
)
from strom.security.sasl import OAUTHBEARER, SaslAuthenticationFailed, SaslServer, SaslState

INVALID_TOKEN = b'{"status":"invalid_token"}'


def check_unsecured(token: str) -> ValidToken:
    return validate_unsecured(token, UnsecuredJwtSettings(required_scope=("write",)), NOW_MS)


def server() -> OAuthBearerServer:
    return OAuthBearerServer(check_unsecured)


GOOD = unsecured(claims(scope=["write"]))


# --- the client's message ---------------------------------------------------------------


def test_a_kafka_client_message_is_read() -> None:
    message = b"n,a=alice,\x01auth=Bearer abc.def.\x01traceId=42 x\x01\x01"
    response = parse_client_initial_response(message)
    assert response.token == "abc.def."
    assert response.authorization_id == "alice"
    assert dict(response.extensions) == {"traceId": "42 x"}


def test_the_scheme_is_bearer_in_any_case_and_the_authzid_is_decoded() -> None:
    response = parse_client_initial_response(b"n,a=a=2Cb=3Dc,\x01auth=BEARER t\x01\x01")
    assert (response.token, response.authorization_id) == ("t", "a,b=c")
    assert client_initial_response("t", "a,b=c") == b"n,a=a=2Cb=3Dc,\x01auth=Bearer t\x01\x01"


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"\x01",
        b"y,,\x01auth=Bearer t\x01\x01",  # only n: no channel binding at all
        b"p=tls-unique,,\x01auth=Bearer t\x01\x01",
        b"n,,\x01auth=Bearer t\x01",  # no final ^A
        b"n,,\x01\x01",  # no auth
        b"n,,\x01auth=Basic dDp0\x01\x01",
        b"n,,\x01auth=Bearer\x01\x01",
        b"n,,\x01auth=Bearer t t\x01\x01",
        b"n,,\x01auth=Bearer t\x01bad-key=1\x01\x01",
        b"n,,\x01auth=Bearer t\x01key=\x01\x01",
        b"n,,\x01auth=Bearer t\x01key=\xc3\xa9\x01\x01",  # a value is ASCII
        b"n,a=al,ice,\x01auth=Bearer t\x01\x01",
        b"n,a=,\x01auth=Bearer t\x01\x01",
        b"n,,\x01auth=Bearer t\x01\x01\xff",
        b"\xff\xfe",
        b"n,,\x01auth=Bearer " + b"t" * 70_000 + b"\x01\x01",
    ],
)
def test_malformed_messages_are_refused_with_kafkas_generic_words(message: bytes) -> None:
    with pytest.raises(SaslAuthenticationFailed) as info:
        parse_client_initial_response(message)
    assert str(info.value) == GENERIC_FAILURE
    assert info.value.log_reason is not None and "malformed" in info.value.log_reason


def test_extensions_are_checked_when_written() -> None:
    with pytest.raises(ValueError, match="auth"):
        client_initial_response("t", extensions={"auth": "x"})
    with pytest.raises(ValueError, match="invalid value"):
        client_initial_response("t", extensions={"k": ""})


# --- one authentication ----------------------------------------------------------------


def test_a_good_token_completes_with_its_principal_and_expiry() -> None:
    step = server().step(client_initial_response(GOOD, extensions={"traceId": "1"}))
    assert step.complete and step.challenge == b""
    assert step.principal_name == "alice"
    assert step.expires_at_ms == (NOW_S + 3600) * 1000


def test_a_refused_token_is_a_json_challenge_then_a_failure_with_that_json() -> None:
    mechanism = server()
    step = mechanism.step(client_initial_response(unsecured(claims(exp=NOW_S - 1))))
    assert not step.complete and step.challenge == INVALID_TOKEN
    with pytest.raises(SaslAuthenticationFailed) as info:
        mechanism.step(b"\x01")
    assert str(info.value) == INVALID_TOKEN.decode()  # nothing more than Kafka sends
    assert info.value.log_reason is not None and "expired" in info.value.log_reason
    with pytest.raises(SaslAuthenticationFailed):
        mechanism.step(client_initial_response(GOOD))  # FAILED is terminal


def test_a_missing_scope_is_insufficient_scope_with_the_scope_as_kafka_writes_it() -> None:
    step = server().step(client_initial_response(unsecured(claims(scope="read"))))
    assert step.challenge == b'{"status":"insufficient_scope", "scope":"[write]"}'


def test_after_an_error_another_initial_response_is_checked_again_as_in_kafka() -> None:
    mechanism = server()
    assert mechanism.step(client_initial_response("x.y.")).challenge == INVALID_TOKEN
    assert mechanism.step(client_initial_response(GOOD)).complete


def test_0x01_as_a_first_message_is_malformed() -> None:
    with pytest.raises(SaslAuthenticationFailed, match=r"^Authentication failed during"):
        server().step(b"\x01")


def test_an_authzid_other_than_the_principal_is_refused_as_kafka_refuses_it() -> None:
    assert server().step(client_initial_response(GOOD, "alice")).principal_name == "alice"
    with pytest.raises(SaslAuthenticationFailed) as info:
        server().step(client_initial_response(GOOD, "admin"))
    assert str(info.value) == (
        "Authentication failed: Client requested an authorization id (admin) that is "
        "different from the token's principal name (alice)"
    )


def test_a_step_after_completion_is_refused() -> None:
    mechanism = server()
    mechanism.step(client_initial_response(GOOD))
    with pytest.raises(SaslAuthenticationFailed):
        mechanism.step(client_initial_response(GOOD))


def test_the_flow_through_a_connections_sasl_server() -> None:
    sasl = SaslServer({OAUTHBEARER: server})
    assert sasl.handshake(OAUTHBEARER).error_code == ErrorCode.none
    first = sasl.authenticate(
        client_initial_response(unsecured(claims(exp=NOW_S - 1))), now_ms=NOW_S * 1000
    )
    assert (first.error_code, first.auth_bytes, first.close) == (
        ErrorCode.none,
        INVALID_TOKEN,
        False,
    )
    final = sasl.authenticate(b"\x01", now_ms=NOW_S * 1000)
    assert final.error_code == ErrorCode.sasl_authentication_failed
    assert final.error_message == INVALID_TOKEN.decode() and final.close
    assert final.log_reason is not None and "expired" in final.log_reason
    assert sasl.state is SaslState.FAILED

    sasl = SaslServer({OAUTHBEARER: server})
    sasl.handshake(OAUTHBEARER)
    done = sasl.authenticate(client_initial_response(GOOD), now_ms=NOW_S * 1000)
    assert done.complete and sasl.principal == "User:alice"
    assert sasl.credential_expires_at_ms == (NOW_S + 3600) * 1000
    # The token's expiry bounds the session, with no connections.max.reauth.ms (KIP-368).
    assert done.session_lifetime_ms == 3600 * 1000
    assert not sasl.expired((NOW_S + 3600) * 1000) and sasl.expired((NOW_S + 3600) * 1000 + 1)


# --- hostile input ---------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=3))
def test_arbitrary_bytes_only_ever_get_the_mechanisms_refusal(messages: list[bytes]) -> None:
    mechanism = server()
    for message in messages:
        try:
            step = mechanism.step(message)
        except SaslAuthenticationFailed:
            return
        assert not step.complete or step.principal_name == "alice"


KEYS = parse_jwks(jwks(public_jwk(rsa_key(), "k1")))


def check_signed(token: str) -> ValidToken:
    return validate_signed(token, KEYS, SignedJwtSettings(), NOW_MS)


SIGNED_TOKEN = signed(claims(sub="alice"))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, len(SIGNED_TOKEN) - 1), st.integers(0x21, 0x7E)),
        min_size=1,
        max_size=4,
    )
)
def test_a_mutated_signed_token_is_never_accepted_as_someone_else(
    changes: list[tuple[int, int]],
) -> None:
    token = bytearray(SIGNED_TOKEN.encode())
    for at, byte in changes:
        token[at] = byte
    message = b"n,,\x01auth=Bearer " + bytes(token) + b"\x01\x01"
    mechanism = OAuthBearerServer(check_signed)
    try:
        step = mechanism.step(message)
    except SaslAuthenticationFailed:
        return
    if step.complete:  # only a change base64url decodes away, or none at all
        assert step.principal_name == "alice"
    else:
        assert step.challenge == INVALID_TOKEN


# --- the JWKS refresh rate limit -------------------------------------------------------


def test_a_missing_kid_refreshes_once_a_minute() -> None:
    refreshes = MissingKidRefreshes()
    assert refreshes.missing("k9", 0)
    assert not refreshes.missing("k9", MISSING_KID_INTERVAL_MS - 1)
    assert refreshes.missing("other", 1)
    assert refreshes.missing("k9", MISSING_KID_INTERVAL_MS)
    refreshes.found(["k9"])
    assert refreshes.missing("k9", MISSING_KID_INTERVAL_MS + 1)


def test_at_most_16_kids_are_remembered_and_long_ones_never_refresh() -> None:
    refreshes = MissingKidRefreshes()
    for i in range(17):
        assert refreshes.missing(f"k{i}", 0)
    assert refreshes.missing("k0", 1)  # forgotten: the oldest of 17
    assert not refreshes.missing("k16", 1)
    assert not refreshes.missing("x" * 1001, 0)


def test_retry_waits_double_within_the_budget() -> None:
    wait = partial(retry_wait_ms, started_ms=0, backoff_ms=100, max_ms=1000)
    assert [wait(attempt, now_ms=0) for attempt in (1, 2, 3, 4, 5)] == [100, 200, 400, 800, 1000]
    assert wait(3, now_ms=900) == 100
    assert wait(1, now_ms=1000) == 0
