"""The server side of SASL: PLAIN (RFC 4616, with Kafka's PlainSaslServer rules) and one
connection's handshake/authenticate state machine (Kafka's SaslServerAuthenticator)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.security.sasl import (
    MAX_PLAIN_MESSAGE_BYTES,
    MECHANISM_NAMES,
    PLAIN,
    SCRAM_SHA_256,
    AuthenticateResult,
    HandshakeResult,
    Mechanism,
    MechanismStep,
    PlainServer,
    SaslAuthenticationFailed,
    SaslServer,
    SaslState,
)

USERS = {"admin": "admin-secret", "alice": "alice-secret", "émile": "mot-de-passe-é"}
INVALID = "Authentication failed: Invalid username or password"
OTHER_AUTHZID = (
    "Authentication failed: Client requested an authorization id that is different from username"
)

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
PRODUCE, FETCH, METADATA = 0, 1, 3


def plain(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{username}\0{password}".encode()


def step(token: bytes, users: dict[str, str] = USERS) -> MechanismStep:
    return PlainServer(users).step(token)


def refusal(token: bytes, users: dict[str, str] = USERS) -> str:
    with pytest.raises(SaslAuthenticationFailed) as caught:
        step(token, users)
    return str(caught.value)


# --- PLAIN ------------------------------------------------------------------------------


def test_plain_names_as_kafka_spells_them() -> None:
    assert MECHANISM_NAMES == ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")


@pytest.mark.parametrize(
    "token",
    [
        plain("alice", "alice-secret"),
        plain("alice", "alice-secret", authzid="alice"),
        plain("émile", "mot-de-passe-é"),
    ],
)
def test_plain_accepts_the_right_password(token: bytes) -> None:
    result = step(token)
    assert result == MechanismStep(
        b"", complete=True, principal_name=token.split(b"\0")[1].decode()
    )


@pytest.mark.parametrize(
    "token",
    [
        plain("alice", "admin-secret"),  # another user's password
        plain("alice", "alice-secret "),
        plain("alice", "Alice-secret"),
        plain("alice", "alice-secre"),
        plain("Alice", "alice-secret"),  # names are case-sensitive
        plain("mallory", "alice-secret"),  # no such user
        plain("mallory", "x"),
        plain("user_alice", "alice-secret"),
    ],
)
def test_wrong_passwords_and_unknown_users_get_the_same_message(token: bytes) -> None:
    assert refusal(token) == INVALID


def test_an_empty_name_or_password_is_refused_as_kafka_does() -> None:
    assert refusal(plain("", "alice-secret")) == "Authentication failed: username not specified"
    assert refusal(plain("alice", "")) == "Authentication failed: password not specified"
    assert refusal(plain("", "")) == "Authentication failed: username not specified"


def test_an_authorization_id_must_be_the_name() -> None:
    assert refusal(plain("alice", "alice-secret", authzid="admin")) == OTHER_AUTHZID
    # Told only to a client that knows the password: otherwise the usual refusal.
    assert refusal(plain("alice", "wrong", authzid="admin")) == INVALID


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        (b"", "expected 3 parts separated by NUL, got 1"),
        (b"alice-secret", "got 1"),
        (b"alice\0alice-secret", "got 2"),
        (b"\0alice\0alice-secret\0", "got more than 3"),
        (b"\0\0\0\0\0", "got more than 3"),
        (b"\0alice\0alice-secret\xff", "not valid UTF-8"),
        (b"\0ali\xc3\0alice-secret", "not valid UTF-8"),
        (b"\0alice\0" + b"x" * MAX_PLAIN_MESSAGE_BYTES, f"longer than {MAX_PLAIN_MESSAGE_BYTES}"),
    ],
)
def test_malformed_plain_messages(token: bytes, problem: str) -> None:
    message = refusal(token)
    assert message.startswith("Authentication failed: malformed SASL/PLAIN message: ")
    assert problem in message


def test_plain_takes_a_message_of_the_limit() -> None:
    password = "p" * (MAX_PLAIN_MESSAGE_BYTES - len("\0bob\0"))
    assert step(plain("bob", password), {"bob": password}).complete


def test_plain_is_single_use() -> None:
    server = PlainServer(USERS)
    assert server.step(plain("alice", "alice-secret")).complete
    with pytest.raises(SaslAuthenticationFailed, match="one message"):
        server.step(plain("alice", "alice-secret"))


def test_plain_with_no_users_refuses_everyone() -> None:
    assert refusal(plain("alice", "alice-secret"), {}) == INVALID


def test_a_step_names_its_principal_exactly_when_complete() -> None:
    with pytest.raises(ValueError):
        MechanismStep(b"", complete=True)
    with pytest.raises(ValueError):
        MechanismStep(b"x", complete=False, principal_name="alice")


_NAMES = st.sampled_from([*USERS, "", "mallory", "Alice"])
_PASSWORDS = st.sampled_from([*USERS.values(), "", "wrong"])
_CRAFTED = st.builds(
    lambda authzid, name, password: plain(name, password, authzid),
    st.one_of(st.just(""), _NAMES),
    _NAMES,
    _PASSWORDS,
)
_TOKENS = st.one_of(_CRAFTED, st.binary(max_size=64), st.text(max_size=30).map(str.encode))


def _is_right(token: bytes) -> bool:
    """Whether `token` is a well-formed PLAIN message with a right (name, password)."""
    parts = token.split(b"\0")
    if len(parts) != 3:
        return False
    try:
        authzid, name, password = (part.decode() for part in parts)
    except UnicodeDecodeError:
        return False
    return bool(password) and USERS.get(name) == password and authzid in ("", name)


@settings(max_examples=500, deadline=None)
@given(token=_TOKENS)
def test_plain_completes_for_exactly_the_right_credentials(token: bytes) -> None:
    try:
        result = step(token)
    except SaslAuthenticationFailed:
        assert not _is_right(token)
    else:
        assert _is_right(token)
        assert result.complete and result.principal_name == token.split(b"\0")[1].decode()


# --- the state machine ------------------------------------------------------------------

ENABLED: dict[str, Callable[[], Mechanism]] = {PLAIN: lambda: PlainServer(USERS)}
GOOD = plain("alice", "alice-secret")
BAD = plain("alice", "wrong")


class TwoSteps(Mechanism):
    """A mechanism of two rounds (as SCRAM has): a challenge, then completion."""

    def __init__(self) -> None:
        self.round = 0

    def step(self, token: bytes) -> MechanismStep:
        self.round += 1
        if token == b"bad":
            raise SaslAuthenticationFailed("Authentication failed: bad proof")
        if self.round == 1:
            return MechanismStep(b"challenge:" + token, complete=False)
        return MechanismStep(b"final", complete=True, principal_name="bob")


def server(**extra: Callable[[], Mechanism]) -> SaslServer:
    return SaslServer({**ENABLED, **extra})


Call = tuple[str, object]


def run(sasl: SaslServer, calls: list[Call]) -> HandshakeResult | AuthenticateResult | None:
    result: HandshakeResult | AuthenticateResult | None = None
    for kind, argument in calls:
        if kind == "handshake":
            assert isinstance(argument, str)
            result = sasl.handshake(argument)
        else:
            assert isinstance(argument, bytes)
            result = sasl.authenticate(argument, now_ms=0)
    return result


H_PLAIN: Call = ("handshake", PLAIN)
H_TWO: Call = ("handshake", "TWO")
A_GOOD: Call = ("authenticate", GOOD)
A_BAD: Call = ("authenticate", BAD)
A_HI: Call = ("authenticate", b"hi")
A_PROOF_BAD: Call = ("authenticate", b"bad")
NONE, UNSUPPORTED = ErrorCode.none, ErrorCode.unsupported_sasl_mechanism
ILLEGAL, REFUSED = ErrorCode.illegal_sasl_state, ErrorCode.sasl_authentication_failed
AWAITING_HANDSHAKE, AWAITING_AUTHENTICATE = (
    SaslState.AWAITING_HANDSHAKE,
    SaslState.AWAITING_AUTHENTICATE,
)
COMPLETE, FAILED = SaslState.COMPLETE, SaslState.FAILED

# (calls, the state after them, the last result's error code, whether it says close)
TRANSITIONS: list[tuple[list[Call], SaslState, ErrorCode, bool]] = [
    ([], AWAITING_HANDSHAKE, NONE, False),
    ([H_PLAIN], AWAITING_AUTHENTICATE, NONE, False),
    ([("handshake", SCRAM_SHA_256)], FAILED, UNSUPPORTED, True),
    ([("handshake", "plain")], FAILED, UNSUPPORTED, True),
    ([("handshake", "")], FAILED, UNSUPPORTED, True),
    ([A_GOOD], FAILED, ILLEGAL, True),
    ([H_PLAIN, H_PLAIN], FAILED, ILLEGAL, True),
    ([H_PLAIN, A_GOOD], COMPLETE, NONE, False),
    ([H_PLAIN, A_BAD], FAILED, REFUSED, True),
    ([H_PLAIN, A_GOOD, H_PLAIN], FAILED, ILLEGAL, True),
    ([H_PLAIN, A_GOOD, A_GOOD], FAILED, ILLEGAL, True),
    ([H_PLAIN, A_BAD, A_GOOD], FAILED, ILLEGAL, True),
    ([H_PLAIN, A_BAD, H_PLAIN], FAILED, ILLEGAL, True),
    ([("handshake", "X"), H_PLAIN], FAILED, ILLEGAL, True),
    ([H_TWO, A_HI], AWAITING_AUTHENTICATE, NONE, False),
    ([H_TWO, A_HI, A_HI], COMPLETE, NONE, False),
    ([H_TWO, A_PROOF_BAD], FAILED, REFUSED, True),
    ([H_TWO, A_HI, A_PROOF_BAD], FAILED, REFUSED, True),
    ([H_TWO, A_HI, H_PLAIN], FAILED, ILLEGAL, True),
    ([H_TWO, A_HI, A_HI, A_HI], FAILED, ILLEGAL, True),
]


@pytest.mark.parametrize(("calls", "state", "error_code", "close"), TRANSITIONS)
def test_transitions(calls: list[Call], state: SaslState, error_code: int, close: bool) -> None:
    sasl = server(TWO=TwoSteps)
    result = run(sasl, calls)
    assert sasl.state is state
    if result is not None:
        assert (result.error_code, result.close) == (error_code, close)
        assert isinstance(result.error_code, ErrorCode)
        if isinstance(result, HandshakeResult):
            assert result.mechanisms == (PLAIN, "TWO")
    assert (sasl.principal is not None) == (state is SaslState.COMPLETE)


def test_a_plain_authentication() -> None:
    sasl = SaslServer({SCRAM_SHA_256: TwoSteps, PLAIN: lambda: PlainServer(USERS)})
    assert sasl.state is SaslState.AWAITING_HANDSHAKE and sasl.principal is None
    assert sasl.handshake(PLAIN) == HandshakeResult(
        ErrorCode.none, (SCRAM_SHA_256, PLAIN), close=False
    )
    assert sasl.mechanism == PLAIN and sasl.principal is None
    assert sasl.authenticate(GOOD, now_ms=0) == AuthenticateResult(
        ErrorCode.none, None, b"", complete=True, close=False
    )
    assert sasl.state is SaslState.COMPLETE and sasl.principal == "User:alice"


def test_a_two_step_mechanism_sends_its_challenges() -> None:
    sasl = server(TWO=TwoSteps)
    sasl.handshake("TWO")
    first = sasl.authenticate(b"client-first", now_ms=0)
    assert (first.auth_bytes, first.complete, first.close) == (
        b"challenge:client-first",
        False,
        False,
    )
    assert sasl.principal is None
    last = sasl.authenticate(b"client-final", now_ms=0)
    assert (last.auth_bytes, last.complete) == (b"final", True)
    assert sasl.principal == "User:bob"


def test_an_unsupported_mechanism_lists_the_enabled_ones() -> None:
    sasl = SaslServer({PLAIN: ENABLED[PLAIN], SCRAM_SHA_256: TwoSteps})
    assert sasl.handshake("GSSAPI") == HandshakeResult(
        ErrorCode.unsupported_sasl_mechanism, (PLAIN, SCRAM_SHA_256), close=True
    )
    assert SaslServer({}).handshake(PLAIN).error_code == ErrorCode.unsupported_sasl_mechanism


def test_refusals_carry_a_message_for_the_client() -> None:
    sasl = server()
    sasl.handshake(PLAIN)
    assert sasl.authenticate(BAD, now_ms=0) == AuthenticateResult(
        ErrorCode.sasl_authentication_failed, INVALID, b"", complete=False, close=True
    )
    assert sasl.principal is None
    again = sasl.authenticate(GOOD, now_ms=0)
    assert again.error_code == ErrorCode.illegal_sasl_state and again.error_message


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        ([A_GOOD], "before a SaslHandshake"),
        ([H_PLAIN, A_GOOD, A_GOOD], "received after successful authentication"),
        ([H_PLAIN, A_BAD, A_GOOD], "already failed"),
    ],
)
def test_out_of_order_messages(calls: list[Call], message: str) -> None:
    result = run(server(), calls)
    assert isinstance(result, AuthenticateResult)
    assert result.error_code == ErrorCode.illegal_sasl_state and result.close
    assert result.error_message is not None and message in result.error_message


def test_each_handshake_gets_a_fresh_mechanism() -> None:
    made: list[TwoSteps] = []

    def factory() -> Mechanism:
        made.append(TwoSteps())
        return made[-1]

    first, second = SaslServer({"TWO": factory}), SaslServer({"TWO": factory})
    assert not made
    first.handshake("TWO")
    second.handshake("TWO")
    assert len(made) == 2 and made[0] is not made[1]


def test_a_bug_in_a_mechanism_fails_the_connection_and_propagates() -> None:
    class Broken(Mechanism):
        def step(self, token: bytes) -> MechanismStep:
            raise RuntimeError("bug")

    sasl = SaslServer({"BROKEN": Broken})
    sasl.handshake("BROKEN")
    with pytest.raises(RuntimeError):
        sasl.authenticate(b"x", now_ms=0)
    assert sasl.state is SaslState.FAILED


@pytest.mark.parametrize(
    ("calls", "allowed", "refused"),
    [
        ([], {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE}, {PRODUCE, FETCH, METADATA, 19}),
        ([H_PLAIN], {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE}, {PRODUCE, METADATA}),
        ([H_PLAIN, A_GOOD], {PRODUCE, FETCH, METADATA, API_VERSIONS, 19, 1000}, {17, 36}),
        ([H_PLAIN, A_BAD], set(), {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, PRODUCE}),
    ],
)
def test_allows(calls: list[Call], allowed: set[int], refused: set[int]) -> None:
    sasl = server()
    run(sasl, calls)
    assert all(sasl.allows(key) for key in allowed)
    assert not any(sasl.allows(key) for key in refused)


# --- any sequence of calls ----------------------------------------------------------------

_MECHANISMS = st.one_of(st.sampled_from([PLAIN, PLAIN, *MECHANISM_NAMES]), st.text(max_size=12))
_CALLS = st.lists(
    st.one_of(
        st.tuples(st.just("handshake"), _MECHANISMS),
        st.tuples(st.just("authenticate"), _TOKENS),
    ),
    max_size=6,
)


@settings(max_examples=500, deadline=None)
@given(calls=_CALLS)
def test_any_sequence_of_calls(calls: list[Call]) -> None:
    sasl = server()
    failed = False
    for kind, argument in calls:
        before = sasl.state
        result = run(sasl, [(kind, argument)])
        assert result is not None
        assert result.close == (sasl.state is SaslState.FAILED)
        if failed:
            assert sasl.state is SaslState.FAILED and result.close
        failed = sasl.state is SaslState.FAILED
        if sasl.state is SaslState.COMPLETE and before is not SaslState.COMPLETE:
            assert kind == "authenticate" and isinstance(argument, bytes)
            assert _is_right(argument)
            name = argument.split(b"\0")[1].decode()
            assert sasl.principal == f"User:{name}"
        if sasl.state is not SaslState.COMPLETE:
            assert sasl.principal is None
