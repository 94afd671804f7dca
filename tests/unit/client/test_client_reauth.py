"""strom's client renews a SASL session before the broker's lifetime for it ends (KIP-368).

A fake broker on a socketpair answers the login with a session lifetime; a manual clock
says when calls are made. The renewal begins at a random point between 85 % and 95 % of
the lifetime, so the tests ask before 85 % (never renewed) and after 95 % (always).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import pytest
from client_fake_peer import FakePeer, connected_pair, response, run
from kio.schema.errors import ErrorCode

from strom.client import KafkaConnection
from strom.client.security import ClientAuthenticationError, SaslLogin, authenticate

METADATA, SASL_HANDSHAKE, SASL_AUTHENTICATE = 3, 17, 36
ALL_TOPICS = {
    "topics": None,
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}
LOGIN = SaslLogin("PLAIN", "alice", "alice-secret")
LIFETIME_MS = 10_000


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


async def answer_login(
    peer: FakePeer,
    *,
    lifetime_ms: int = LIFETIME_MS,
    error: ErrorCode = ErrorCode.none,
) -> None:
    """Read a PLAIN login (SaslHandshake v1, SaslAuthenticate v2) and answer it."""
    handshake = await peer.read_request()
    assert (handshake.api_key, handshake.body.mechanism) == (SASL_HANDSHAKE, "PLAIN")
    peer.respond(
        handshake.correlation_id,
        response(SASL_HANDSHAKE, 1, error_code=ErrorCode.none, mechanisms=("PLAIN",)),
    )
    login = await peer.read_request()
    assert login.api_key == SASL_AUTHENTICATE
    assert bytes(login.body.auth_bytes) == b"\0alice\0alice-secret"
    peer.respond(
        login.correlation_id,
        response(
            SASL_AUTHENTICATE,
            2,
            error_code=error,
            error_message="Authentication failed: bad password" if error else None,
            auth_bytes=b"",
            session_lifetime=datetime.timedelta(milliseconds=0 if error else lifetime_ms),
        ),
    )


def metadata_response() -> Any:
    return response(
        METADATA,
        12,
        throttle_time=datetime.timedelta(0),
        brokers=(),
        cluster_id="c1",
        controller_id=1,
        topics=(),
    )


async def logged_in(lifetime_ms: int = LIFETIME_MS) -> tuple[KafkaConnection, FakePeer, Clock]:
    clock = Clock()
    connection, peer = await connected_pair(clock=clock)
    await asyncio.gather(
        authenticate(connection, LOGIN, 5.0), answer_login(peer, lifetime_ms=lifetime_ms)
    )
    return connection, peer, clock


async def metadata_answered(connection: KafkaConnection, peer: FakePeer) -> None:
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    request = await peer.read_request()
    assert request.api_key == METADATA
    peer.respond(request.correlation_id, metadata_response())
    assert (await call).cluster_id == "c1"


async def finish(connection: KafkaConnection, peer: FakePeer) -> None:
    connection.close()
    await connection.wait_closed()
    peer.close()


@run
async def test_no_renewal_before_85_percent_of_the_lifetime() -> None:
    connection, peer, clock = await logged_in()
    clock.now_s += 8.4  # 84 %
    await metadata_answered(connection, peer)  # the next frame is the request itself
    await finish(connection, peer)


@run
async def test_the_session_is_renewed_once_95_percent_of_it_passed() -> None:
    connection, peer, clock = await logged_in()
    clock.now_s += 9.6
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    await answer_login(peer, lifetime_ms=20_000)
    request = await peer.read_request()
    assert request.api_key == METADATA
    peer.respond(request.correlation_id, metadata_response())
    assert (await call).cluster_id == "c1"
    # The new session's lifetime counts from the renewal.
    clock.now_s += 16.9
    await metadata_answered(connection, peer)
    clock.now_s += 2.2  # 19.1 s after the renewal
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    await answer_login(peer)
    request = await peer.read_request()
    peer.respond(request.correlation_id, metadata_response())
    await call
    await finish(connection, peer)


@run
async def test_a_session_without_a_lifetime_is_never_renewed() -> None:
    connection, peer, clock = await logged_in(lifetime_ms=0)
    clock.now_s += 10 * 365 * 86_400.0
    await metadata_answered(connection, peer)
    await finish(connection, peer)


@run
async def test_renewal_waits_for_the_answers_in_flight_and_holds_later_calls() -> None:
    connection, peer, clock = await logged_in()
    first = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    in_flight = await peer.read_request()
    clock.now_s += 9.6
    second = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    third = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    for _ in range(20):  # let both calls run as far as they can
        await asyncio.sleep(0)
    assert connection.in_flight == 1, "nothing is sent while an answer is awaited"
    peer.respond(in_flight.correlation_id, metadata_response())
    await first
    await answer_login(peer)
    later = [await peer.read_request(), await peer.read_request()]
    assert [r.api_key for r in later] == [METADATA, METADATA]
    for request in later:
        peer.respond(request.correlation_id, metadata_response())
    await asyncio.gather(second, third)
    await finish(connection, peer)


@run
async def test_a_refused_renewal_closes_the_connection() -> None:
    connection, peer, clock = await logged_in()
    clock.now_s += 9.6
    call = asyncio.create_task(connection.request(METADATA, 12, ALL_TOPICS))
    await answer_login(peer, error=ErrorCode.sasl_authentication_failed)
    with pytest.raises(ClientAuthenticationError, match="re-authenticating with fake-peer"):
        await call
    assert connection.is_closed
    await finish(connection, peer)
