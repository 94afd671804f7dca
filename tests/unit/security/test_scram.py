"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) with Kafka's rules: credentials,
their ZooKeeper text, the broker's side of an authentication and the client's."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from scram_helpers import (
    CLIENT_NONCE,
    FAKE_SALT_KEY,
    MALFORMED,
    MECHANISMS,
    OTHER_AUTHZID,
    PASSWORDS,
    RFC_CLIENT_FINAL,
    RFC_CLIENT_FIRST,
    RFC_SALT,
    RFC_SERVER_FINAL,
    RFC_SERVER_FIRST,
    SERVER_NONCE,
    SHA_256,
    SHA_512,
    credentials,
    exchange,
    hand_made,
    hand_made_final,
    refusal,
    server,
)

from strom.security.sasl import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    MechanismStep,
    SaslAuthenticationFailed,
    SaslServer,
    SaslState,
)
from strom.security.scram import (
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_password,
    credential_from_salted_password,
    decode_saslname,
    encode_saslname,
    format_scram_config,
    invalid_credentials_message,
    parse_scram_config,
    salted_password,
    validate_iterations,
)

# --- mechanisms and credentials -------------------------------------------------------


def test_mechanisms_as_kafka_names_and_numbers_them() -> None:
    assert [m.mechanism_name for m in MECHANISMS] == [SCRAM_SHA_256, SCRAM_SHA_512]
    assert [m.hash_name for m in MECHANISMS] == ["sha256", "sha512"]
    assert [m.kafka_type for m in MECHANISMS] == [1, 2]
    assert all((m.min_iterations, m.max_iterations) == (4096, 16384) for m in MECHANISMS)
    assert ScramMechanism.from_name("SCRAM-SHA-512") is SHA_512
    assert ScramMechanism.from_kafka_type(1) is SHA_256
    assert ScramMechanism.from_name("PLAIN") is None
    assert ScramMechanism.from_name("scram-sha-256") is None
    assert [ScramMechanism.from_kafka_type(t) for t in (0, 3, -1)] == [None, None, None]


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_credential_is_rfc_5802_s_keys(mechanism: ScramMechanism) -> None:
    name = mechanism.hash_name
    salted = hashlib.pbkdf2_hmac(name, "pässword".encode(), b"salt", 4096)
    assert salted_password(mechanism, "pässword", b"salt", 4096) == salted
    expected = ScramCredential(
        b"salt",
        hashlib.new(name, hmac.new(salted, b"Client Key", name).digest()).digest(),
        hmac.new(salted, b"Server Key", name).digest(),
        4096,
    )
    assert credential_from_salted_password(mechanism, salted, b"salt", 4096) == expected
    assert credential_from_password(mechanism, "pässword", b"salt", 4096) == expected
    assert len(expected.stored_key) == hashlib.new(name).digest_size


def test_no_saslprep_as_in_kafka() -> None:
    # SASLprep would map the no-break space to a space; Kafka hashes the UTF-8 bytes as given.
    assert salted_password(SHA_256, "a\u00a0b", b"s", 4096) != salted_password(
        SHA_256, "a b", b"s", 4096
    )


def test_a_credential_s_repr_shows_no_key() -> None:
    credential = credential_from_password(SHA_256, "secret", b"pepper-salt", 4096)
    text = repr(credential)
    assert text == (
        "ScramCredential(salt=<11 bytes>, stored_key=<32 bytes>, server_key=<32 bytes>, "
        "iterations=4096)"
    )
    for secret in (credential.salt, credential.stored_key, credential.server_key):
        assert base64.b64encode(secret).decode() not in text
        assert repr(secret) not in text
    with pytest.raises(ValueError, match="positive"):
        ScramCredential(b"s", b"k", b"k", 0)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_iterations_are_bounded_as_kafka_s_controller_does(mechanism: ScramMechanism) -> None:
    assert validate_iterations(mechanism, 4095) == "Too few iterations"
    assert validate_iterations(mechanism, 0) == "Too few iterations"
    assert validate_iterations(mechanism, 4096) is None
    assert validate_iterations(mechanism, 8192) is None
    assert validate_iterations(mechanism, 16384) is None
    assert validate_iterations(mechanism, 16385) == "Too many iterations"


# --- ZooKeeper's text ---------------------------------------------------------------------


def test_the_zookeeper_text_is_kafka_s() -> None:
    credential = ScramCredential(b"\x00\x01salt", b"\xff" * 32, b"\x10" * 32, 4096)
    text = format_scram_config(credential)
    assert text == (
        "salt=AAFzYWx0,stored_key=//////////////////////////////////////////8=,"
        "server_key=EBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBA=,iterations=4096"
    )
    assert parse_scram_config(text) == credential


def test_the_zookeeper_text_parses_in_any_order_and_without_padding() -> None:
    credential = parse_scram_config("iterations=8192,server_key=AAE,stored_key=AgM,salt=YWJj")
    assert credential == ScramCredential(b"abc", b"\x02\x03", b"\x00\x01", 8192)


@given(
    salt=st.binary(max_size=64),
    stored=st.binary(min_size=1, max_size=64),
    server=st.binary(min_size=1, max_size=64),
    iterations=st.integers(1, 2**31 - 1),
)
def test_the_zookeeper_text_round_trips(
    salt: bytes, stored: bytes, server: bytes, iterations: int
) -> None:
    credential = ScramCredential(salt, stored, server, iterations)
    assert parse_scram_config(format_scram_config(credential)) == credential


_GOOD = "salt=c2FsdA==,stored_key=c2VjcmV0LXN0b3JlZA==,server_key=c2VjcmV0LXNlcnZlcg==,"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "key=value"),
        (_GOOD + "iterations=4096,", "key=value"),
        (_GOOD + "iterations", "key=value"),
        (_GOOD + "=4096", "key=value"),
        (_GOOD.replace("salt=c2FsdA==,", "") + "iterations=1", "missing salt"),
        (_GOOD + "iterations=4096,salt=c2FsdA==", "salt given twice"),
        (_GOOD + "iterations=4096,SECRET=x", "unknown key"),
        (_GOOD + "iterations=0", "iterations"),
        (_GOOD + "iterations=-4096", "iterations"),
        (_GOOD + "iterations=+4096", "iterations"),
        (_GOOD + "iterations=four", "iterations"),
        (_GOOD + "iterations=2147483648", "iterations"),
        (_GOOD + "iterations=" + "9" * 5000, "iterations"),
        (_GOOD + "iterations=٤٠٩٦", "iterations"),
        (_GOOD.replace("LXN0b3JlZA==", "LXN0b3JlZA!=") + "iterations=1", "stored_key"),
        (_GOOD.replace("c2VjcmV0LXN0b3JlZA==", "") + "iterations=1", "stored_key"),
        (_GOOD.replace("LXNlcnZlcg==", "LXNlcnZlc") + "iterations=1", "server_key"),
    ],
)
def test_malformed_zookeeper_texts_are_refused_naming_no_secret(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)) as caught:
        parse_scram_config(text)
    message = str(caught.value)
    assert message.startswith("SCRAM credential: ")
    assert "c2Vjc" not in message and "SECRET" not in message


# --- RFC 7677's example ---------------------------------------------------------------------


def test_rfc_7677_s_example_on_the_server_side() -> None:
    credential = credential_from_password(SHA_256, "pencil", RFC_SALT, 4096)
    broker = ScramServer(
        SHA_256, {"user": credential}.get, "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0", FAKE_SALT_KEY
    )
    assert broker.step(RFC_CLIENT_FIRST) == MechanismStep(RFC_SERVER_FIRST, complete=False)
    assert broker.step(RFC_CLIENT_FINAL) == MechanismStep(
        RFC_SERVER_FINAL, complete=True, principal_name="user"
    )


def test_rfc_7677_s_example_on_the_client_side() -> None:
    client = ScramClient(SHA_256, "user", "pencil", "rOprNGfwEbeRWgbNEkqO")
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert not client.complete
    client.verify_server_final(RFC_SERVER_FINAL)
    assert client.complete


# --- the exchange ---------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("username", sorted(PASSWORDS))
def test_the_right_password_completes(mechanism: ScramMechanism, username: str) -> None:
    final = exchange(mechanism, username, PASSWORDS[username])
    assert final.complete and final.principal_name == username
    assert final.challenge.startswith(b"v=")


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize(
    ("username", "password"),
    [
        ("alice", "alice-secret "),
        ("alice", "Alice-secret"),
        ("alice", ""),
        ("alice", "comma=and,equals"),
    ],
)
def test_a_wrong_password_is_refused_at_the_final_step(
    mechanism: ScramMechanism, username: str, password: str
) -> None:
    message = refusal(lambda: exchange(mechanism, username, password))
    assert message == invalid_credentials_message(mechanism)
    assert message == (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism.mechanism_name}"
    )


def _server_first(mechanism: ScramMechanism, username: str, key: bytes = FAKE_SALT_KEY) -> str:
    client = ScramClient(mechanism, username, "any", CLIENT_NONCE)
    return server(mechanism, key).step(client.first_message()).challenge.decode()


_SERVER_FIRST = re.compile(
    rf"r={re.escape(CLIENT_NONCE + SERVER_NONCE)},s=([A-Za-z0-9+/=]+),i=4096"
)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_unknown_user_looks_like_a_known_one_until_the_end(mechanism: ScramMechanism) -> None:
    known = _SERVER_FIRST.fullmatch(_server_first(mechanism, "alice"))
    unknown = _SERVER_FIRST.fullmatch(_server_first(mechanism, "mallory"))
    assert known is not None and unknown is not None
    # The same salt on every attempt, another for another name, mechanism or key.
    assert _server_first(mechanism, "mallory") == unknown[0]
    others = {
        _server_first(mechanism, "mallorz"),
        _server_first(mechanism, "Mallory"),
        _server_first(mechanism, "mallory", key=b"another secret of 32 bytes......"),
        _server_first(SHA_512 if mechanism is SHA_256 else SHA_256, "mallory"),
    }
    assert unknown[0] not in others and len(others) == 4
    # Shaped like a salt Kafka's tools make: 130 random bits in base 36.
    assert re.fullmatch(rb"[0-9a-z]{1,26}", base64.b64decode(unknown[1]))
    for password in ("alice-secret", "", "anything"):
        message = refusal(lambda: exchange(mechanism, "mallory", password))  # noqa: B023
        assert message == invalid_credentials_message(mechanism)


def test_a_credential_with_too_few_iterations_is_treated_as_no_user() -> None:
    weak = credentials(SHA_256, {"alice": "alice-secret"}, iterations=1024)
    broker = ScramServer(SHA_256, weak, SERVER_NONCE, FAKE_SALT_KEY)
    nobody = ScramServer(SHA_256, dict[str, ScramCredential]().get, SERVER_NONCE, FAKE_SALT_KEY)
    client = ScramClient(SHA_256, "alice", "alice-secret", CLIENT_NONCE)
    first = broker.step(client.first_message())
    assert first == nobody.step(client.first_message())
    assert first.challenge.endswith(b",i=4096")
    message = refusal(lambda: broker.step(client.final_message(first.challenge)))
    assert message == invalid_credentials_message(SHA_256)


def test_scram_through_a_connection_s_sasl_server() -> None:
    sasl = SaslServer({SCRAM_SHA_512: lambda: server(SHA_512)})
    assert sasl.handshake(SCRAM_SHA_512).error_code is ErrorCode.none
    client = ScramClient(SHA_512, "alice", "alice-secret", CLIENT_NONCE)
    first = sasl.authenticate(client.first_message(), now_ms=0)
    assert (first.error_code, first.complete, sasl.state) == (
        ErrorCode.none,
        False,
        SaslState.AWAITING_AUTHENTICATE,
    )
    final = sasl.authenticate(client.final_message(first.auth_bytes), now_ms=0)
    assert final.complete and sasl.principal == "User:alice"
    client.verify_server_final(final.auth_bytes)


# --- names, authorization ids and extensions --------------------------------------------------


@pytest.mark.parametrize(
    ("name", "saslname"),
    [
        ("alice", "alice"),
        ("a,b", "a=2Cb"),
        ("a=b", "a=3Db"),
        ("=,=", "=3D=2C=3D"),
        ("=2C", "=3D2C"),
    ],
)
def test_saslnames_escape_commas_and_equals(name: str, saslname: str) -> None:
    assert encode_saslname(name) == saslname
    assert decode_saslname(saslname) == name


@pytest.mark.parametrize(
    "saslname", ["", "a=", "a=2", "a=2c", "a=3d", "=41", "a==3D", "a\0b", "=2"]
)
def test_malformed_saslnames_are_refused(saslname: str) -> None:
    assert decode_saslname(saslname) is None
    message = refusal(lambda: server(SHA_256).step(f"n,,n={saslname},r=abc".encode()))
    assert message.startswith(MALFORMED)
    message = refusal(lambda: server(SHA_256).step(f"n,a={saslname},n=alice,r=abc".encode()))
    assert message.startswith(MALFORMED)


@given(st.text())
def test_saslnames_round_trip(name: str) -> None:
    encoded = encode_saslname(name)
    assert "," not in encoded
    if name and "\0" not in name:
        assert decode_saslname(encoded) == name


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_an_authorization_id_must_be_the_name(mechanism: ScramMechanism) -> None:
    assert exchange(mechanism, "alice", "alice-secret", authorization_id="alice").complete
    assert exchange(mechanism, "a,b=c", "comma=and,equals", authorization_id="a,b=c").complete
    other = refusal(lambda: exchange(mechanism, "alice", "alice-secret", authorization_id="admin"))
    assert other == OTHER_AUTHZID
    # Told only to a client that knows the password: otherwise the usual refusal.
    wrong = refusal(lambda: exchange(mechanism, "alice", "wrong", authorization_id="admin"))
    assert wrong == invalid_credentials_message(mechanism)
    unknown = refusal(lambda: exchange(mechanism, "mallory", "x", authorization_id="admin"))
    assert unknown == invalid_credentials_message(mechanism)


def test_the_flag_y_and_extensions_are_accepted_and_signed() -> None:
    bare = f"n=alice,r={CLIENT_NONCE}"
    assert hand_made(SHA_256, "alice-secret", "y,,", bare).principal_name == "alice"
    assert hand_made(SHA_256, "alice-secret", "n,,", bare + ",ext=1,tokenauth=false").complete
    # Extensions of the final message are part of the AuthMessage, as RFC 5802 has it.
    assert hand_made(SHA_256, "alice-secret", "n,,", bare, ext=",x=1").complete
    assert exchange(SHA_512, "alice", "alice-secret", extensions={"foo": "bar"}).complete


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_librdkafkas_doubled_client_nonce_is_accepted_and_nothing_else(
    mechanism: ScramMechanism,
) -> None:
    """librdkafka before 2.6.1 sends its own nonce once more in front of the combined
    one (Kafka accepts it since 3.8.1); Debian's kcat is built on such a librdkafka."""
    gs2, bare = "n,,", f"n=alice,r={CLIENT_NONCE}"
    for prefix, accepted in [(CLIENT_NONCE, True), ("x" + CLIENT_NONCE, False), ("x", False)]:
        broker = server(mechanism)
        first = broker.step((gs2 + bare).encode())
        final = hand_made_final(
            mechanism, "alice-secret", gs2, bare, first.challenge, nonce_prefix=prefix
        )
        if accepted:
            assert broker.step(final).principal_name == "alice"
        else:
            with pytest.raises(SaslAuthenticationFailed, match="the nonce is not the one"):
                broker.step(final)
