"""SCRAM's refusals: malformed and tampered messages on the broker's side, bad server
messages on the client's."""

from __future__ import annotations

import ast
import base64
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scram_helpers import (
    _CREDENTIALS,
    ALREADY_FAILED,
    CLIENT_NONCE,
    FAKE_SALT_KEY,
    MALFORMED,
    MECHANISMS,
    RFC_SERVER_FINAL,
    RFC_SERVER_FIRST,
    SERVER_NONCE,
    SHA_256,
    exchange,
    refusal,
    server,
)

import strom.security.scram as scram_module
from strom.security.sasl import (
    SaslAuthenticationFailed,
)
from strom.security.scram import (
    MAX_SCRAM_MESSAGE_BYTES,
    ScramClient,
    ScramMechanism,
    ScramServer,
    credential_from_password,
)

# --- refusals ---------------------------------------------------------------------------------

_TOO_LONG = b"n,,n=alice,r=" + b"x" * MAX_SCRAM_MESSAGE_BYTES


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"", MALFORMED),
        (b"n,,n=alice", MALFORMED),
        (b"n,,r=abc,n=alice", MALFORMED),
        (b"n,n=alice,r=abc", MALFORMED),
        (b"x,,n=alice,r=abc", MALFORMED),
        (b"n,x=alice,n=alice,r=abc", MALFORMED),
        (b"n,a=,n=alice,r=abc", MALFORMED),
        (b"n,,m=ext,n=alice,r=abc", MALFORMED),
        (b"n,,n=,r=abc", MALFORMED),
        (b"n,,n=alice,r=", MALFORMED),
        (b"n,,n=alice,r=a b", MALFORMED),
        (b"n,,n=alice,r=abc\x7f", MALFORMED),
        (b"n,,n=alice,r=abc,bad", MALFORMED),
        (b"n,,n=alice,r=abc,x=", MALFORMED),
        (b"n,,n=alice,r=abc,1=2", MALFORMED),
        (b"n,,n=ali\xc3,r=abc", MALFORMED + "not valid UTF-8"),
        (b"\xff", MALFORMED + "not valid UTF-8"),
        (_TOO_LONG, MALFORMED + f"longer than {MAX_SCRAM_MESSAGE_BYTES} bytes"),
        (
            b"p=tls-unique,,n=alice,r=abc",
            "Authentication failed: SCRAM channel binding is not supported",
        ),
        (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
        (b"n,,n=alice,r=abc,tokenauth=TRUE", "delegation tokens"),
        (b"n,,n=alice,r=abc,x=1,tokenauth=True", "delegation tokens"),
    ],
)
def test_a_bad_first_message_is_refused_and_ends_the_exchange(token: bytes, message: str) -> None:
    broker = server(SHA_256)
    assert message in refusal(lambda: broker.step(token))
    good = ScramClient(SHA_256, "alice", "alice-secret", CLIENT_NONCE).first_message()
    assert refusal(lambda: broker.step(good)) == ALREADY_FAILED


def _final(mechanism: ScramMechanism = SHA_256) -> tuple[ScramServer, str]:
    """A server awaiting the final message, and the right final message, as text."""
    broker = server(mechanism)
    client = ScramClient(mechanism, "alice", "alice-secret", CLIENT_NONCE)
    first = broker.step(client.first_message())
    return broker, client.final_message(first.challenge).decode()


def _swap(old: str, new: str) -> Callable[[str], bytes]:
    return lambda final: final.replace(old, new, 1).encode()


_TAMPERINGS: dict[str, Callable[[str], bytes]] = {
    "a changed nonce": _swap(SERVER_NONCE, SERVER_NONCE[:-1] + "X"),
    "the client's nonce only": _swap(SERVER_NONCE, ""),
    "the channel binding of y": _swap("c=biws", "c=eSws"),
    "the channel binding of another authzid": _swap("c=biws", "c=bixhPWFsaWNlLA=="),
    "no channel binding": _swap("c=biws,", ""),
    "a channel binding not base64": _swap("c=biws", "c=biw"),
    "no nonce": lambda final: re.sub(r",r=[^,]+", "", final).encode(),
    "no proof": lambda final: final.rsplit(",p=", 1)[0].encode(),
    "the proof not last": lambda final: (final + ",x=1").encode(),
    "the proof first": lambda final: ("p=" + final.rsplit(",p=", 1)[1] + ",c=biws").encode(),
    "a proof not base64": lambda final: final[:-2].encode(),
    "a short proof": lambda final: final.rsplit(",p=", 1)[0].encode() + b",p=AAAA",
    "a flipped proof": lambda final: (
        final[:-5] + ("A" if final[-5] != "A" else "B") + final[-4:]
    ).encode(),
    "a bad extension": _swap(",p=", ",ext,p="),
    "an extension not signed": _swap(",p=", ",x=1,p="),
    "non-UTF-8": lambda final: final.encode() + b"\xff",
    "too long": lambda final: final.encode() + b"A" * MAX_SCRAM_MESSAGE_BYTES,
}


@pytest.mark.parametrize("tampering", sorted(_TAMPERINGS))
def test_a_tampered_final_message_is_refused_and_ends_the_exchange(tampering: str) -> None:
    broker, final = _final()
    tampered = _TAMPERINGS[tampering](final)
    assert tampered != final.encode()
    assert refusal(lambda: broker.step(tampered)).startswith("Authentication failed")
    assert refusal(lambda: broker.step(final.encode())) == ALREADY_FAILED


def test_a_third_message_is_refused() -> None:
    broker, final = _final()
    assert broker.step(final.encode()).complete
    assert "two client messages" in refusal(lambda: broker.step(b""))
    assert refusal(lambda: broker.step(final.encode())) == ALREADY_FAILED


def test_no_refusal_echoes_the_name() -> None:
    name = "secret-name"
    messages = [
        refusal(lambda: server(SHA_256).step(f"n,,n={name},r=a b".encode())),
        refusal(lambda: server(SHA_256).step(f"n,a={name}=,n={name},r=abc".encode())),
        refusal(lambda: exchange(SHA_256, name, "x")),
        refusal(lambda: exchange(SHA_256, "alice", "alice-secret", authorization_id=name)),
    ]
    assert all(name not in message for message in messages)


# --- the client's checks ------------------------------------------------------------------------


def _client() -> ScramClient:
    client = ScramClient(SHA_256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    client.first_message()
    return client


@pytest.mark.parametrize(
    ("server_first", "problem"),
    [
        (RFC_SERVER_FIRST.replace(b"r=rOpr", b"r=XOpr"), "does not extend ours"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "does not extend ours"),
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=4095"), "4095 iterations"),
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=16385"), "16385 iterations"),
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=" + b"9" * 5000), "malformed"),
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=x"), "malformed"),
        (RFC_SERVER_FIRST.replace(b",s=", b",t="), "malformed"),
        (RFC_SERVER_FIRST.replace(b"gQ==", b"gQ="), "malformed"),
        (b"m=x," + RFC_SERVER_FIRST, "malformed"),
        (RFC_SERVER_FIRST + b",bad", "malformed"),
        (RFC_SERVER_FIRST + b"\xff", "malformed"),
        (b"", "malformed"),
    ],
)
def test_the_client_refuses_a_bad_server_first(server_first: bytes, problem: str) -> None:
    assert problem in refusal(lambda: _client().final_message(server_first))


@pytest.mark.parametrize(
    ("server_final", "problem"),
    [
        (RFC_SERVER_FINAL.replace(b"v=6", b"v=7"), "signature is wrong"),
        (b"v=" + base64.b64encode(b"x" * 32), "signature is wrong"),
        (b"e=invalid-proof", "the server refused: invalid-proof"),
        (b"v=6rr", "malformed"),
        (b"x=1", "malformed"),
        (b"", "malformed"),
        (b"\xff", "malformed"),
    ],
)
def test_the_client_refuses_a_bad_server_final(server_final: bytes, problem: str) -> None:
    client = _client()
    client.final_message(RFC_SERVER_FIRST)
    assert problem in refusal(lambda: client.verify_server_final(server_final))
    assert not client.complete


def test_the_client_keeps_its_order() -> None:
    client = _client()
    assert "out of order" in refusal(lambda: client.verify_server_final(RFC_SERVER_FINAL))
    client.final_message(RFC_SERVER_FIRST)
    assert "twice" in refusal(lambda: client.final_message(RFC_SERVER_FIRST))
    client.verify_server_final(RFC_SERVER_FINAL)
    assert "out of order" in refusal(lambda: client.verify_server_final(RFC_SERVER_FINAL))


def test_bad_arguments_are_refused_up_front() -> None:
    for nonce in ("", "a,b", "a b", "é"):
        with pytest.raises(ValueError, match="nonce"):
            ScramServer(SHA_256, _CREDENTIALS[SHA_256], nonce, FAKE_SALT_KEY)
        with pytest.raises(ValueError, match="nonce"):
            ScramClient(SHA_256, "alice", "x", nonce)
    with pytest.raises(ValueError, match="16 bytes"):
        ScramServer(SHA_256, _CREDENTIALS[SHA_256], SERVER_NONCE, b"short")
    for name in ("", "a\0b"):
        with pytest.raises(ValueError, match="name"):
            ScramClient(SHA_256, name, "x", CLIENT_NONCE)
    with pytest.raises(ValueError, match="extension"):
        ScramClient(SHA_256, "alice", "x", CLIENT_NONCE, extensions={"a1": "b"})
    with pytest.raises(ValueError):
        ScramClient(SHA_256, "\ud800", "x", CLIENT_NONCE)


# --- properties ---------------------------------------------------------------------------------

_NAMES = st.text(st.characters(codec="utf-8", exclude_characters="\0"), min_size=1, max_size=20)
_PASSWORD_TEXT = st.text(st.characters(codec="utf-8"), max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    mechanism=st.sampled_from(MECHANISMS),
    username=st.one_of(_NAMES, st.sampled_from([",", "=", "a,b=c", "=2C", "==", ",,"])),
    password=_PASSWORD_TEXT,
    nonce=st.from_regex(r"[\x21-\x2b\x2d-\x7e]{1,32}", fullmatch=True),
)
def test_any_name_and_password_authenticate(
    mechanism: ScramMechanism, username: str, password: str, nonce: str
) -> None:
    stored = credential_from_password(mechanism, password, b"salt", 4096)
    broker = ScramServer(mechanism, {username: stored}.get, nonce, FAKE_SALT_KEY)
    client = ScramClient(mechanism, username, password, nonce + "c")
    first = broker.step(client.first_message())
    final = broker.step(client.final_message(first.challenge))
    assert final.complete and final.principal_name == username
    client.verify_server_final(final.challenge)


def _near_misses(valid: bytes) -> st.SearchStrategy[bytes]:
    """`valid` with a slice removed, replaced or inserted: mostly almost right."""
    return st.tuples(st.integers(0, len(valid)), st.integers(0, 8), st.binary(max_size=8)).map(
        lambda t: valid[: t[0]] + t[2] + valid[t[0] + t[1] :]
    )


_VALID_FIRST = ScramClient(SHA_256, "alice", "alice-secret", CLIENT_NONCE).first_message()
_TOKENS = st.one_of(
    st.binary(max_size=100),
    st.text(max_size=60).map(str.encode),
    _near_misses(_VALID_FIRST),
    _near_misses(_final()[1].encode()),
)


@settings(max_examples=300, deadline=None)
@given(token=_TOKENS)
def test_any_first_message_is_answered_or_refused(token: bytes) -> None:
    broker = server(SHA_256)
    try:
        step = broker.step(token)
    except SaslAuthenticationFailed:
        assert refusal(lambda: broker.step(_VALID_FIRST)) == ALREADY_FAILED
    else:
        assert not step.complete and step.challenge.startswith(b"r=")


@settings(max_examples=300, deadline=None)
@given(token=_TOKENS)
def test_any_final_message_but_the_right_one_is_refused(token: bytes) -> None:
    broker, final = _final()
    if token == final.encode():
        assert broker.step(token).complete
    else:
        refusal(lambda: broker.step(token))


@settings(max_examples=200, deadline=None)
@given(token=st.one_of(st.binary(max_size=100), _near_misses(RFC_SERVER_FIRST)))
def test_any_server_first_is_answered_or_refused_by_the_client(token: bytes) -> None:
    try:
        final = _client().final_message(token)
    except SaslAuthenticationFailed:
        return
    assert final.startswith(b"c=biws,r=rOprNGfwEbeRWgbNEkqO")


@settings(max_examples=200, deadline=None)
@given(token=st.one_of(st.binary(max_size=100), _near_misses(RFC_SERVER_FINAL)))
def test_any_server_final_but_the_right_one_is_refused_by_the_client(token: bytes) -> None:
    client = _client()
    client.final_message(RFC_SERVER_FIRST)
    try:
        client.verify_server_final(token)
    except SaslAuthenticationFailed:
        assert not client.complete
    else:
        assert token.split(b",")[0] == RFC_SERVER_FINAL


# --- purity -----------------------------------------------------------------------------------


def test_the_module_imports_no_io_clock_thread_or_randomness() -> None:
    forbidden = {"asyncio", "socket", "time", "random", "secrets", "threading", "os", "ssl"}
    tree = ast.parse(Path(scram_module.__file__).read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert not imported & forbidden
