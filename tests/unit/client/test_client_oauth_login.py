"""strom's client logging in with OAUTHBEARER: the token source (one token for many
connections, a new one at 80% of its life, failures as one sentence) with a scripted
token endpoint and a manual clock, and the SASL exchange against the broker's own
OAuthBearerServer at the other end of a socketpair."""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import ssl
import urllib.error
from typing import Any

import pytest
from client_fake_peer import FakePeer, connected_pair, response, run
from kio.schema.errors import ErrorCode

from strom.client.oauth_login import (
    HttpAnswer,
    OAuthBearerTokens,
    TokenUnavailable,
    tokens_for,
)
from strom.client.oauth_oidc import OidcLogin, TokenRequest
from strom.client.oauth_settings import OAuthBearerSettingError
from strom.client.oauth_tokens import BearerToken, UnsecuredLogin
from strom.client.security import ClientAuthenticationError, SaslLogin, authenticate
from strom.security.jwt_validation import (
    TokenRefused,
    UnsecuredJwtSettings,
    ValidToken,
    validate_unsecured,
)
from strom.security.oauthbearer import OAuthBearerServer, parse_client_initial_response

SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
SECRET = "orders-s3cret"
LOGIN = OidcLogin("https://idp.example/token", "orders", SECRET, extensions=(("traceId", "7"),))


class Clock:
    def __init__(self, now_s: float = 1_800_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


class Endpoint:
    """A scripted token endpoint: each request gets the next answer (or raises it)."""

    def __init__(self, *answers: HttpAnswer | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[TokenRequest] = []

    def __call__(
        self, request: TokenRequest, context: ssl.SSLContext | None, timeout_s: float
    ) -> HttpAnswer:
        assert context is not None  # an https endpoint is checked
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def issued(token: str, expires_in: int = 100) -> HttpAnswer:
    body = {"access_token": token, "expires_in": expires_in, "token_type": "Bearer"}
    return HttpAnswer(200, "application/json", json.dumps(body).encode())


def unavailable(tokens: OAuthBearerTokens) -> str:
    with pytest.raises(TokenUnavailable) as caught:
        asyncio.run(tokens.token(5.0))
    assert SECRET not in str(caught.value)
    return str(caught.value)


def test_one_token_serves_every_connection_until_80_percent_of_its_life() -> None:
    clock, endpoint = Clock(), Endpoint(issued("first"), issued("second"))
    tokens = OAuthBearerTokens(LOGIN, clock=clock, post=endpoint)

    async def logins(count: int) -> list[BearerToken]:
        return list(await asyncio.gather(*(tokens.token(5.0) for _ in range(count))))

    assert {token.value for token in asyncio.run(logins(8))} == {"first"}
    assert tokens.fetches == 1
    clock.now_s += 79
    assert asyncio.run(tokens.token(5.0)).value == "first"
    clock.now_s += 1
    second = asyncio.run(tokens.token(5.0))
    assert (second.value, dict(second.extensions), tokens.fetches) == (
        "second",
        {"traceId": "7"},
        2,
    )
    assert endpoint.requests[0].body == b"grant_type=client_credentials"


def test_unsecured_tokens_are_made_once_per_life_too() -> None:
    clock = Clock(1_800_000_000.5)
    tokens = OAuthBearerTokens(UnsecuredLogin("alice", life_seconds=10), clock=clock)
    first = asyncio.run(tokens.token(5.0))
    assert first.obtained_at_ms == 1_800_000_000_500
    assert asyncio.run(tokens.token(5.0)) is first
    clock.now_s += 8
    assert asyncio.run(tokens.token(5.0)).obtained_at_ms == 1_800_000_008_500


def test_a_failed_renewal_keeps_the_token_held_while_it_lasts() -> None:
    refused = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    clock = Clock()
    tokens = OAuthBearerTokens(LOGIN, clock=clock, post=Endpoint(issued("t"), refused, refused))
    asyncio.run(tokens.token(5.0))
    clock.now_s += 90
    assert asyncio.run(tokens.token(5.0)).value == "t"  # logged as a warning
    clock.now_s += 10
    assert "connection refused" in unavailable(tokens)


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (
            urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
            "cannot get an OAUTHBEARER token from https://idp.example/token "
            "(sasl.oauthbearer.token.endpoint.url): connection refused",
        ),
        (
            urllib.error.URLError(socket.gaierror(-2, "Name or service not known")),
            "host name not found",
        ),
        (TimeoutError("timed out"), "no answer within 5 s"),
        (urllib.error.URLError(TimeoutError("timed out")), "no answer within 5 s"),
        (
            urllib.error.URLError(ssl.SSLCertVerificationError(1, "certificate verify failed")),
            "its certificate is not trusted (",
        ),
        (
            HttpAnswer(401, "application/json", b'{"error":"invalid_client"}'),
            "cannot get an OAUTHBEARER token: the token endpoint https://idp.example/token "
            "refused the request: HTTP 401, invalid_client; check sasl.oauthbearer.client.id "
            "and sasl.oauthbearer.client.secret",
        ),
        (HttpAnswer(200, "text/html", b"<html>"), "with something that is not a JSON object"),
    ],
)
def test_a_token_that_cannot_be_had_is_one_sentence(failure: Any, reason: str) -> None:
    tokens = OAuthBearerTokens(LOGIN, clock=Clock(), post=Endpoint(failure))
    assert reason in unavailable(tokens)


def test_the_endpoints_ca_settings_are_checked_when_the_source_is_made(tmp_path: Any) -> None:
    missing = OidcLogin(
        LOGIN.token_endpoint_url, "o", SECRET, https_ca_location=str(tmp_path / "x")
    )
    with pytest.raises(OAuthBearerSettingError, match=r"^cannot use https\.ca\.location: "):
        OAuthBearerTokens(missing)
    garbled = OidcLogin(LOGIN.token_endpoint_url, "o", SECRET, https_ca_pem="not a certificate")
    with pytest.raises(OAuthBearerSettingError) as caught:
        OAuthBearerTokens(garbled)
    assert caught.value.key == "https.ca.pem"
    OAuthBearerTokens(OidcLogin(LOGIN.token_endpoint_url, "o", SECRET, https_ca_location="probe"))


def test_a_process_has_one_source_per_login() -> None:
    login = UnsecuredLogin("shared-" + __name__)
    assert tokens_for(login) is tokens_for(UnsecuredLogin("shared-" + __name__))
    assert tokens_for(login) is not tokens_for(UnsecuredLogin("other-" + __name__))


# --- the SASL exchange ------------------------------------------------------------------


class FixedTokens:
    def __init__(self, token: BearerToken | Exception) -> None:
        self.token_or_error = token

    async def token(self, timeout_s: float) -> BearerToken:
        if isinstance(self.token_or_error, Exception):
            raise self.token_or_error
        return self.token_or_error


def unsecured_validator(now_ms: int) -> Any:
    def validate(token: str) -> ValidToken:
        return validate_unsecured(token, UnsecuredJwtSettings(), now_ms)

    return validate


async def serve_oauthbearer(peer: FakePeer, server: OAuthBearerServer, seen: list[Any]) -> None:
    """Answer the client's handshake and SaslAuthenticate requests as a broker does."""
    handshake = await peer.read_request()
    assert (handshake.api_key, handshake.body.mechanism) == (SASL_HANDSHAKE, "OAUTHBEARER")
    peer.respond(
        handshake.correlation_id,
        response(SASL_HANDSHAKE, 1, error_code=ErrorCode.none, mechanisms=("OAUTHBEARER",)),
    )
    from strom.security.sasl import SaslAuthenticationFailed

    while True:
        request = await peer.read_request()
        assert request.api_key == SASL_AUTHENTICATE
        message = bytes(request.body.auth_bytes)
        seen.append(message)
        fields: dict[str, Any] = {"session_lifetime": datetime.timedelta(0)}
        try:
            step = server.step(message)
        except SaslAuthenticationFailed as exc:
            fields |= {"error_code": ErrorCode.sasl_authentication_failed}
            fields |= {"error_message": str(exc), "auth_bytes": b""}
            peer.respond(request.correlation_id, response(SASL_AUTHENTICATE, 2, **fields))
            return
        fields |= {
            "error_code": ErrorCode.none,
            "error_message": None,
            "auth_bytes": step.challenge,
        }
        peer.respond(request.correlation_id, response(SASL_AUTHENTICATE, 2, **fields))
        if step.complete:
            return


@run
async def test_the_token_and_its_extensions_are_the_initial_response() -> None:
    tokens = OAuthBearerTokens(
        UnsecuredLogin("alice", extensions=(("traceId", "123"),)), clock=Clock()
    )
    connection, peer = await connected_pair()
    seen: list[bytes] = []
    server = OAuthBearerServer(unsecured_validator(1_800_000_000_000))
    broker = asyncio.create_task(serve_oauthbearer(peer, server, seen))
    await authenticate(connection, SaslLogin("OAUTHBEARER", tokens=tokens), 5.0)
    await broker
    parsed = parse_client_initial_response(seen[0])
    assert dict(parsed.extensions) == {"traceId": "123"} and parsed.authorization_id == ""
    assert not connection.is_closed
    connection.close()
    peer.close()


@run
async def test_a_refused_token_is_acknowledged_and_reported_with_the_brokers_json() -> None:
    expired = BearerToken("eyJhbGciOiJub25lIn0.e30.", "bob", 2, 1)

    def refuse(token: str) -> ValidToken:
        raise TokenRefused("expired")

    connection, peer = await connected_pair()
    seen: list[bytes] = []
    broker = asyncio.create_task(serve_oauthbearer(peer, OAuthBearerServer(refuse), seen))
    with pytest.raises(ClientAuthenticationError) as caught:
        await authenticate(connection, SaslLogin("OAUTHBEARER", tokens=FixedTokens(expired)), 5.0)
    await broker
    assert str(caught.value) == (
        'the broker refused the OAUTHBEARER token of bob: {"status":"invalid_token"} '
        "(its log says why)"
    )
    assert seen[1] == b"\x01"  # RFC 7628's acknowledgement of the error
    assert connection.is_closed
    peer.close()


@run
async def test_no_token_no_login_and_the_connection_is_closed() -> None:
    connection, peer = await connected_pair()
    server = OAuthBearerServer(unsecured_validator(0))
    broker = asyncio.create_task(serve_oauthbearer(peer, server, []))
    failure = TokenUnavailable("cannot get an OAUTHBEARER token from https://idp.example/t")
    with pytest.raises(TokenUnavailable, match="cannot get an OAUTHBEARER token"):
        await authenticate(connection, SaslLogin("OAUTHBEARER", tokens=FixedTokens(failure)), 5.0)
    assert connection.is_closed
    broker.cancel()
    peer.close()


def test_a_token_source_goes_with_oauthbearer_only() -> None:
    with pytest.raises(ValueError, match="a token source goes with SASL mechanism OAUTHBEARER"):
        SaslLogin("OAUTHBEARER")
    with pytest.raises(ValueError, match="a token source goes with SASL mechanism OAUTHBEARER"):
        SaslLogin("PLAIN", "u", "p", tokens=FixedTokens(TokenUnavailable("x")))
