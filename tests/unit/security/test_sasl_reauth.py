"""Re-authentication (KIP-368) in the server side of SASL (strom.security.sasl): a
session's lifetime by Kafka's rule, expiry, and SaslHandshake and SaslAuthenticate again
on an authenticated connection, with Kafka's refusals. A manual clock; no socket."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.security.sasl import (
    PLAIN,
    REAUTH_MIN_INTERVAL_MS,
    SCRAM_SHA_256,
    Mechanism,
    MechanismStep,
    PlainServer,
    SaslServer,
    SaslState,
    session_lifetime_ms,
)

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
ALICE = b"\0alice\0alice-secret"
BOB = b"\0bob\0bob-secret"
WRONG = b"\0alice\0guess"
PRODUCE, SASL_HANDSHAKE, SASL_AUTHENTICATE = 0, 17, 36


class Token(Mechanism):
    """One message naming the principal, with a credential that expires at `expires_ms`."""

    def __init__(self, expires_ms: int | None) -> None:
        self.expires_ms = expires_ms

    def step(self, token: bytes) -> MechanismStep:
        return MechanismStep(b"", True, token.decode(), expires_at_ms=self.expires_ms)


def plain_server(max_reauth_ms: int = 10_000, **extra: Callable[[], Mechanism]) -> SaslServer:
    mechanisms: dict[str, Callable[[], Mechanism]] = {PLAIN: lambda: PlainServer(USERS), **extra}
    return SaslServer(mechanisms, {PLAIN: max_reauth_ms})


def signed_in(sasl: SaslServer, now_ms: int, token: bytes = ALICE) -> int:
    """Authenticate `sasl` with PLAIN at `now_ms`; the session lifetime it was told."""
    assert sasl.handshake(PLAIN).error_code == ErrorCode.none
    result = sasl.authenticate(token, now_ms=now_ms)
    assert result.complete and result.error_code == ErrorCode.none
    return result.session_lifetime_ms


@pytest.mark.parametrize(
    ("max_reauth_ms", "expires_ms", "now_ms", "lifetime"),
    [
        (0, None, 1_000, None),  # neither: the session never expires
        (5_000, None, 1_000, 5_000),
        (0, 4_000, 1_000, 3_000),  # a token's expiry alone sets it, as in Kafka
        (5_000, 4_000, 1_000, 3_000),  # the shorter of the two
        (2_000, 4_000, 1_000, 2_000),
        (5_000, 500, 1_000, 0),  # already expired: 0, never below
        (0, 1_000, 1_000, 0),
    ],
)
def test_a_session_lasts_by_kafkas_rule(
    max_reauth_ms: int, expires_ms: int | None, now_ms: int, lifetime: int | None
) -> None:
    assert session_lifetime_ms(max_reauth_ms, expires_ms, now_ms) == lifetime


def test_a_session_without_a_limit_never_expires_and_cannot_re_authenticate() -> None:
    sasl = plain_server(max_reauth_ms=0)
    assert signed_in(sasl, 1_000) == 0
    assert not sasl.expired(10**15)
    assert sasl.reauthenticate(PLAIN, 5_000) is None
    assert sasl.state is SaslState.COMPLETE and sasl.principal == "User:alice"


def test_a_session_expires_after_its_lifetime_and_is_renewed_by_re_authenticating() -> None:
    sasl = plain_server()
    assert signed_in(sasl, 1_000) == 10_000
    assert not sasl.expired(11_000) and sasl.expired(11_001)

    handshake = sasl.reauthenticate(PLAIN, 9_000)
    assert handshake is not None and handshake.error_code == ErrorCode.none
    # While re-authenticating the connection serves nothing else.
    assert sasl.principal is None and sasl.reauthenticating
    assert not sasl.allows(PRODUCE) and sasl.allows(SASL_AUTHENTICATE)
    assert not sasl.expired(20_000)  # not authenticated: nothing to expire

    result = sasl.authenticate(ALICE, now_ms=9_500)
    assert (result.error_code, result.complete, result.session_lifetime_ms) == (
        ErrorCode.none,
        True,
        10_000,
    )
    assert sasl.principal == "User:alice" and not sasl.reauthenticating
    assert not sasl.expired(19_500) and sasl.expired(19_501)


def test_a_late_client_may_still_re_authenticate() -> None:
    sasl = plain_server(max_reauth_ms=1_000)
    signed_in(sasl, 0)
    assert sasl.expired(5_000)
    assert sasl.reauthenticate(PLAIN, 5_000) is not None
    assert sasl.authenticate(ALICE, now_ms=5_001).complete
    assert not sasl.expired(5_002)


def test_re_authenticating_twice_within_a_second_is_not_the_gates() -> None:
    sasl = plain_server()
    signed_in(sasl, 0)
    assert sasl.reauthenticate(PLAIN, 100) is not None  # the first may come at once
    sasl.authenticate(ALICE, now_ms=150)
    assert sasl.reauthenticate(PLAIN, 100 + REAUTH_MIN_INTERVAL_MS - 1) is None
    assert sasl.state is SaslState.COMPLETE
    assert sasl.reauthenticate(PLAIN, 100 + REAUTH_MIN_INTERVAL_MS) is not None


def test_re_authenticating_with_another_mechanism_fails_at_the_authenticate() -> None:
    sasl = plain_server(**{SCRAM_SHA_256: lambda: Token(None)})
    signed_in(sasl, 0)
    handshake = sasl.reauthenticate(SCRAM_SHA_256, 2_000)
    assert handshake is not None and handshake.error_code == ErrorCode.none  # as Kafka
    result = sasl.authenticate(b"alice", now_ms=2_001)
    assert (result.error_code, result.close) == (ErrorCode.sasl_authentication_failed, True)
    assert result.error_message == (
        "SASL mechanism 'SCRAM-SHA-256' requested by client is not supported for "
        "re-authentication of mechanism 'PLAIN'"
    )
    assert sasl.state is SaslState.FAILED and sasl.principal is None


def test_re_authenticating_with_a_mechanism_not_enabled_is_refused_at_once() -> None:
    sasl = plain_server()
    signed_in(sasl, 0)
    handshake = sasl.reauthenticate("GSSAPI", 2_000)
    assert handshake is not None
    assert (handshake.error_code, handshake.close) == (ErrorCode.unsupported_sasl_mechanism, True)
    assert sasl.state is SaslState.FAILED


def test_re_authenticating_as_another_principal_fails() -> None:
    sasl = plain_server()
    signed_in(sasl, 0)
    sasl.reauthenticate(PLAIN, 2_000)
    result = sasl.authenticate(BOB, now_ms=2_001)
    assert (result.error_code, result.close) == (ErrorCode.sasl_authentication_failed, True)
    assert result.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )
    assert sasl.state is SaslState.FAILED and sasl.principal is None


def test_a_wrong_password_when_re_authenticating_fails_the_connection() -> None:
    sasl = plain_server()
    signed_in(sasl, 0)
    sasl.reauthenticate(PLAIN, 2_000)
    result = sasl.authenticate(WRONG, now_ms=2_001)
    assert (result.error_code, result.close) == (ErrorCode.sasl_authentication_failed, True)
    assert sasl.state is SaslState.FAILED and not sasl.allows(PRODUCE)


def test_a_credential_that_expires_bounds_the_session() -> None:
    sasl = SaslServer({"TOKEN": lambda: Token(expires_ms=4_000)}, {"TOKEN": 60_000})
    sasl.handshake("TOKEN")
    result = sasl.authenticate(b"alice", now_ms=1_000)
    assert result.session_lifetime_ms == 3_000
    assert not sasl.expired(4_000) and sasl.expired(4_001)


# --- any sequence of calls, at any time ------------------------------------------------------

_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["handshake", "reauthenticate", "authenticate", "wait"]),
        st.sampled_from([PLAIN, SCRAM_SHA_256, "GSSAPI"]),
        st.sampled_from([ALICE, BOB, WRONG]),
        st.integers(min_value=0, max_value=3_000),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(steps=_STEPS)
def test_any_sequence_keeps_the_first_principal_and_expires_exactly(
    steps: list[tuple[str, str, bytes, int]],
) -> None:
    sasl = SaslServer(
        {PLAIN: lambda: PlainServer(USERS), SCRAM_SHA_256: lambda: Token(None)},
        {PLAIN: 2_000, SCRAM_SHA_256: 2_000},
    )
    now = 0
    first: str | None = None
    expires: int | None = None
    for kind, mechanism, token, wait in steps:
        now += wait
        if kind == "handshake":
            result = sasl.handshake(mechanism)
            assert result.close == (sasl.state is SaslState.FAILED)
        elif kind == "reauthenticate":
            was = sasl.state
            began = sasl.reauthenticate(mechanism, now)
            if began is None:
                assert sasl.state is was
        elif kind == "authenticate":
            done = sasl.authenticate(token, now_ms=now)
            assert done.close == (sasl.state is SaslState.FAILED)
            if done.complete:
                assert done.session_lifetime_ms == 2_000
                expires = now + 2_000
        if sasl.state is SaslState.COMPLETE:
            first = first or sasl.principal
            assert sasl.principal == first  # re-authentication never changes it
            assert expires is not None and sasl.expired(now) == (now > expires)
        else:
            assert sasl.principal is None and not sasl.expired(now)
            assert not sasl.allows(PRODUCE)
