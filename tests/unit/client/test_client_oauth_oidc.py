"""The client credentials request strom's client sends a token endpoint, and what it
makes of the answer: the token and its expiry, or one sentence that never holds the
secret."""

from __future__ import annotations

import base64
import json
import urllib.parse
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.client.oauth_oidc import (
    OidcLogin,
    TokenEndpointError,
    read_token_answer,
    shown_url,
    token_request,
)

NOW_MS = 1_800_000_000_000
SECRET = "s3cr3t-Value"
LOGIN = OidcLogin(
    "https://idp.example:8443/realms/kafka/token?tenant=x",
    "orders",
    SECRET,
    scope="kafka read",
    extensions=(("traceId", "42"),),
)


def jwt(claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256', 'kid': 'k1'})}.{part(claims)}.c2lnbmF0dXJl"


def answer(status: int = 200, **body: Any) -> tuple[int, str, bytes]:
    return status, "application/json", json.dumps(body).encode()


def error_of(status: int, content_type: str, body: bytes, login: OidcLogin = LOGIN) -> str:
    with pytest.raises(TokenEndpointError) as caught:
        read_token_answer(login, status, content_type, body, NOW_MS)
    return str(caught.value)


def test_the_request_is_librdkafkas() -> None:
    request = token_request(LOGIN)
    assert request.url == LOGIN.token_endpoint_url
    headers = dict(request.headers)
    assert headers["Accept"] == "application/json"
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert (
        headers["Authorization"]
        == "Basic " + base64.b64encode(b"orders:" + SECRET.encode()).decode()
    )
    assert urllib.parse.parse_qs(request.body.decode()) == {
        "grant_type": ["client_credentials"],
        "scope": ["kafka read"],
    }
    without_scope = token_request(OidcLogin(LOGIN.token_endpoint_url, "orders", SECRET))
    assert without_scope.body == b"grant_type=client_credentials"
    assert SECRET not in repr(LOGIN) + repr(request)
    assert base64.b64encode(SECRET.encode()).decode()[:8] not in repr(request)


def test_a_jwt_expires_at_its_exp_and_names_its_subject() -> None:
    token = jwt({"sub": "svc-orders", "exp": NOW_MS // 1000 + 300, "iat": NOW_MS // 1000})
    got = read_token_answer(LOGIN, *answer(access_token=token, expires_in=3600), NOW_MS)
    assert (got.value, got.principal) == (token, "svc-orders")
    assert (got.obtained_at_ms, got.expires_at_ms) == (NOW_MS, NOW_MS + 300_000)
    assert dict(got.extensions) == {"traceId": "42"}


@pytest.mark.parametrize("expires_in", [120, 120.0, "120", " 120 "])
def test_an_opaque_token_expires_after_expires_in(expires_in: object) -> None:
    got = read_token_answer(
        LOGIN,
        *answer(access_token="opaque-123", token_type="Bearer", expires_in=expires_in),
        NOW_MS,
    )
    assert (got.principal, got.expires_at_ms) == ("orders", NOW_MS + 120_000)


def test_a_jwt_without_exp_falls_back_on_expires_in() -> None:
    token = jwt({"sub": "svc"})
    got = read_token_answer(LOGIN, *answer(access_token=token, expires_in=60), NOW_MS)
    assert got.expires_at_ms == NOW_MS + 60_000


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (
            401,
            {"error": "invalid_client", "error_description": "Invalid client credentials"},
            "refused the request: HTTP 401, invalid_client (Invalid client credentials); "
            "check sasl.oauthbearer.client.id and sasl.oauthbearer.client.secret",
        ),
        (
            400,
            {"error": "invalid_scope"},
            "refused the request: HTTP 400, invalid_scope; check sasl.oauthbearer.scope",
        ),
        (500, {}, "refused the request: HTTP 500"),
        (
            302,
            {},
            "HTTP 302, a redirect, which strom's client does not follow; set "
            "sasl.oauthbearer.token.endpoint.url to where it points",
        ),
        (200, {"token_type": "Bearer"}, "answered without an access_token"),
        (200, {"access_token": 17}, "answered without an access_token"),
        (200, {"access_token": "a b"}, "an access_token that is not an OAuth bearer token"),
        (
            200,
            {"access_token": "opaque"},
            "a token whose expiry is unknown: it is not a JWT with an exp claim, and the "
            "answer has no expires_in",
        ),
        (200, {"access_token": "opaque", "expires_in": 0}, "whose expiry is unknown"),
        (200, {"access_token": "opaque", "expires_in": True}, "whose expiry is unknown"),
        (
            200,
            {"access_token": jwt({"sub": "a", "exp": NOW_MS // 1000 - 1})},
            "a token that has already expired",
        ),
    ],
)
def test_answers_that_give_no_usable_token(status: int, body: dict[str, Any], problem: str) -> None:
    message = error_of(status, "application/json", json.dumps(body).encode())
    assert message.startswith("the token endpoint https://idp.example:8443/realms/kafka/token ")
    assert problem in message


def test_an_answer_that_is_not_json_says_what_it_was() -> None:
    message = error_of(200, "text/html; charset=utf-8", b"<html>login</html>")
    assert message == (
        "the token endpoint https://idp.example:8443/realms/kafka/token answered HTTP 200 "
        "with something that is not a JSON object (text/html; charset=utf-8); is "
        "sasl.oauthbearer.token.endpoint.url the token endpoint itself?"
    )
    assert "not a JSON object (no Content-Type)" in error_of(200, "", b"[1, 2]")
    assert error_of(404, "text/html", b"<h1>Not Found</h1>").endswith(
        "refused the request: HTTP 404"
    )


def test_the_url_is_shown_without_credentials_or_query() -> None:
    assert shown_url("https://user:pw@idp.example/token?secret=1#x") == "https://idp.example/token"
    assert shown_url("http://[::1]:8080/t") == "http://[::1]:8080/t"
    assert shown_url("https://idp.example:notaport/t") == "the configured URL"


@given(
    status=st.integers(100, 599),
    content_type=st.text(max_size=30),
    body=st.one_of(
        st.binary(max_size=200),
        st.dictionaries(
            st.sampled_from(["error", "error_description", "access_token", "expires_in"]),
            st.one_of(
                st.text(max_size=40).map(lambda text: text.replace("S", SECRET)),
                st.integers(),
                st.floats(),
                st.none(),
            ),
        ).map(lambda body: json.dumps(body).encode()),
    ),
)
def test_any_answer_gives_a_token_or_a_sentence_without_the_secret(
    status: int, content_type: str, body: bytes
) -> None:
    try:
        token = read_token_answer(LOGIN, status, content_type + SECRET, body, NOW_MS)
    except TokenEndpointError as exc:
        assert SECRET not in str(exc)
        assert str(exc).isprintable()
        return
    assert 200 <= status < 300 and token.expires_at_ms > NOW_MS
