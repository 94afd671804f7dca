"""Where strom's client gets its OAUTHBEARER tokens: made here (unsecured) or asked of a
token endpoint (client credentials), one token shared by every connection.

`OAuthBearerTokens.token()` is what a login awaits. It hands out the token it holds
until 80% of the token's life has passed, then gets a new one, so a command that opens
many connections asks the endpoint once. One lock (a thread's, as the same source serves
the event loops of Spark's tasks and of `asyncio.run` after `asyncio.run`) lets only one
caller ask at a time; the others wait and take its token. A failure is not remembered:
the next login asks again; meanwhile a token that has not expired yet is still used.

`tokens_for(login)` gives the one source of a process for each login, so that Spark's
tasks, each building its client from the same options, share a token too.

The HTTP exchange (urllib, in a worker thread) lives here; what is sent and what the
answer means is strom.client.oauth_oidc's. An https endpoint is checked against
`https.ca.location` or `https.ca.pem` (the system's CAs without them, or with `probe`),
with its host name. Redirects are not followed: the Authorization header would go with
them. Proxies are taken from the environment (`https_proxy`), as curl does for
librdkafka. A failure raises TokenUnavailable, a ClientAuthenticationError that names the
endpoint and the setting to look at, never the secret.
"""

from __future__ import annotations

import asyncio
import http.client
import logging
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from strom.client.oauth_oidc import (
    TOKEN_ENDPOINT_KEY,
    OidcLogin,
    TokenEndpointError,
    TokenRequest,
    read_token_answer,
    shown_url,
    token_request,
)
from strom.client.oauth_settings import OAuthBearerLogin, OAuthBearerSettingError
from strom.client.oauth_tokens import BearerToken, UnsecuredLogin, unsecured_token
from strom.client.security import ClientAuthenticationError

__all__ = ["HttpAnswer", "OAuthBearerTokens", "TokenUnavailable", "https_context", "tokens_for"]

log = logging.getLogger(__name__)

_MAX_ANSWER_BYTES = 1024 * 1024


class TokenUnavailable(ClientAuthenticationError):
    """No OAUTHBEARER token could be had; the message says why."""


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    content_type: str
    body: bytes


Post = Callable[[TokenRequest, ssl.SSLContext | None, float], HttpAnswer]
"""(request, TLS context for https, timeout in seconds) -> the answer, whatever its
status; OSError (urllib.error.URLError among them) or http.client.HTTPException when
there is none."""


def https_context(login: OidcLogin) -> ssl.SSLContext:
    """The context that checks the token endpoint's certificate; OAuthBearerSettingError
    for a CA setting it cannot use."""
    context = ssl.create_default_context()
    location = login.https_ca_location
    key = "https.ca.location"
    try:
        if location and location != "probe" and Path(location).is_dir():
            context.load_verify_locations(capath=location)
        elif location and location != "probe":
            context.load_verify_locations(cafile=location)
        if login.https_ca_pem:
            key = "https.ca.pem"
            context.load_verify_locations(cadata=login.https_ca_pem)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise OAuthBearerSettingError(key, f"cannot use {key}: {exc}") from None
    return context


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises HTTPError with the 3xx status


def post(request: TokenRequest, context: ssl.SSLContext | None, timeout_s: float) -> HttpAnswer:
    """POST `request` with urllib (blocking)."""
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirects)
    http_request = urllib.request.Request(
        request.url, data=request.body, headers=dict(request.headers), method="POST"
    )
    try:
        with opener.open(http_request, timeout=timeout_s) as answer:
            body = answer.read(_MAX_ANSWER_BYTES)
            return HttpAnswer(answer.status, answer.headers.get("Content-Type", ""), body)
    except urllib.error.HTTPError as refusal:
        try:
            body = refusal.read(_MAX_ANSWER_BYTES)
        finally:
            refusal.close()
        content_type = refusal.headers.get("Content-Type", "") if refusal.headers else ""
        return HttpAnswer(refusal.code, content_type, body)


def _unreachable_reason(error: OSError | http.client.HTTPException, timeout_s: float) -> str:
    reason: object = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = getattr(reason, "verify_message", None) or str(reason)
        return f"its certificate is not trusted ({why}); set https.ca.location to its CA"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, socket.gaierror):
        return "host name not found"
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout_s:g} s"
    if isinstance(reason, ssl.SSLError):
        return f"TLS failed ({getattr(reason, 'reason', None) or reason})"
    if isinstance(reason, http.client.HTTPException):
        return f"its answer is not HTTP ({type(reason).__name__})"
    return str(reason)


class OAuthBearerTokens:
    """No token -> a token -> (80% of its life gone) a new token ...; an attempt that
    fails while the token held has not expired yet hands that one out again (logged as a
    warning), as librdkafka keeps using it."""

    def __init__(
        self,
        login: OAuthBearerLogin,
        *,
        clock: Callable[[], float] = time.time,
        post: Post = post,
    ) -> None:
        """`clock`: seconds since the epoch; `post`: the HTTP exchange (tests pass
        their own). OAuthBearerSettingError for an https CA setting that cannot be used."""
        self._login = login
        self._clock = clock
        self._post = post
        self._context = (
            https_context(login)
            if isinstance(login, OidcLogin) and login.token_endpoint_url.lower().startswith("https")
            else None
        )
        self._lock = threading.Lock()
        self._token: BearerToken | None = None
        self.fetches = 0
        """Requests made to the token endpoint so far."""

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _fresh(self) -> BearerToken | None:
        token = self._token
        return token if token is not None and not token.refresh_due(self._now_ms()) else None

    async def token(self, timeout_s: float) -> BearerToken:
        """A token to log in with; TokenUnavailable if none can be had within
        `timeout_s`."""
        fresh = self._fresh()
        if fresh is not None:
            return fresh
        if isinstance(self._login, UnsecuredLogin):
            return self._renew(timeout_s)
        return await asyncio.to_thread(self._renew, timeout_s)

    def _renew(self, timeout_s: float) -> BearerToken:
        with self._lock:
            fresh = self._fresh()
            if fresh is not None:
                return fresh
            login = self._login
            if isinstance(login, UnsecuredLogin):
                token = unsecured_token(login, self._now_ms())
            else:
                self.fetches += 1
                try:
                    token = self._ask(login, timeout_s)
                except TokenUnavailable as exc:
                    held = self._token
                    if held is None or held.expires_at_ms <= self._now_ms():
                        raise
                    log.warning("%s; the token held is used until it expires", exc)
                    return held
            self._token = token
            return token

    def _ask(self, login: OidcLogin, timeout_s: float) -> BearerToken:
        endpoint = shown_url(login.token_endpoint_url)
        try:
            answer = self._post(token_request(login), self._context, timeout_s)
        except (OSError, http.client.HTTPException) as exc:
            reason = _unreachable_reason(exc, timeout_s)
            raise TokenUnavailable(
                f"cannot get an OAUTHBEARER token from {endpoint} ({TOKEN_ENDPOINT_KEY}): {reason}"
            ) from None
        try:
            token = read_token_answer(
                login, answer.status, answer.content_type, answer.body, self._now_ms()
            )
        except TokenEndpointError as exc:
            raise TokenUnavailable(f"cannot get an OAUTHBEARER token: {exc}") from None
        log.debug(
            "got an OAUTHBEARER token for %s from %s, valid for %d s",
            token.principal,
            endpoint,
            (token.expires_at_ms - token.obtained_at_ms) // 1000,
        )
        return token


_SOURCES: dict[OAuthBearerLogin, OAuthBearerTokens] = {}
_SOURCES_LOCK = threading.Lock()


def tokens_for(login: OAuthBearerLogin) -> OAuthBearerTokens:
    """This process's token source for `login`, made on first use;
    OAuthBearerSettingError for an https CA setting that cannot be used."""
    with _SOURCES_LOCK:
        source = _SOURCES.get(login)
        if source is None:
            source = _SOURCES[login] = OAuthBearerTokens(login)
        return source
