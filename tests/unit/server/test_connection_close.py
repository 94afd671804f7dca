"""A connection's id and its end (server/connection_gate.py, server/connection.py): the
broker names each connection, every request read on it carries that name whatever its
bytes say, and the listeners of closed connections hear it once the connection's
requests are answered; a closed connection ends the share sessions it opened and gives
back their members' records (handlers/share_fetch.share_connection_closed)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from server_harness import RecordingWriter, request, run

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, encode_request
from strom.security.connection_quotas import ConnectionLimits
from strom.server.connection import Connection, api_versions_body
from strom.server.connection_gate import OpenConnections
from strom.server.handlers.share_fetch import ShareContext, share_connection_closed
from strom.share.sessions import ShareSessionCache

T = uuid.UUID(int=7)


def _api_versions(correlation_id: int) -> bytes:
    asked = request(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    return encode_request(ApiKey.API_VERSIONS, 3, correlation_id, asked.body)


def test_each_request_carries_its_connections_id_and_the_close_is_heard_after_it() -> None:
    events: list[tuple[str, str]] = []

    async def dispatch(asked: Request) -> Any:
        events.append(("request", asked.connection_id))
        return api_versions_body(asked.api_version)

    async def scenario() -> None:
        connections = OpenConnections(1, ConnectionLimits())
        connections.on_closed.append(lambda name: events.append(("closed", name)))
        served = []
        for _ in range(2):
            reader = asyncio.StreamReader()
            connection = Connection(
                reader,
                RecordingWriter(),  # type: ignore[arg-type]
                dispatch,
                max_request_bytes=1 << 20,
                idle_timeout_s=30,
                node_id=1,
                listener="PLAINTEXT",
                connection_id=connections.new_id("PLAINTEXT"),
            )
            served.append(asyncio.ensure_future(connections.serve("PLAINTEXT", connection, None)))
            reader.feed_data(_api_versions(1))
            reader.feed_eof()
        async with asyncio.timeout(5):
            await asyncio.gather(*served)

    run(scenario())
    first, second = "PLAINTEXT-0", "PLAINTEXT-1"
    assert sorted(events) == sorted(
        [("request", first), ("closed", first), ("request", second), ("closed", second)]
    )
    for name in (first, second):
        assert events.index(("request", name)) < events.index(("closed", name))


def test_a_listener_that_fails_does_not_keep_the_others_from_hearing() -> None:
    heard: list[str] = []

    def broken(name: str) -> None:
        raise RuntimeError("bug")

    async def scenario() -> None:
        connections = OpenConnections(1, ConnectionLimits())
        connections.on_closed += [broken, heard.append]
        reader = asyncio.StreamReader()

        async def dispatch(asked: Request) -> Any:
            return None

        connection = Connection(
            reader,
            RecordingWriter(),  # type: ignore[arg-type]
            dispatch,
            max_request_bytes=1 << 20,
            idle_timeout_s=30,
            node_id=1,
            connection_id="c",
        )
        reader.feed_eof()
        async with asyncio.timeout(5):
            await connections.serve("PLAINTEXT", connection, None)

    run(scenario())
    assert heard == ["c"]


class _Shares:
    def __init__(self) -> None:
        self.left: list[tuple[str, str]] = []

    def member_left(self, group_id: str, member_id: str) -> None:
        self.left.append((group_id, member_id))


def _share_context(shares: _Shares, sessions: ShareSessionCache, stopping: bool) -> ShareContext:
    return ShareContext(
        metadata=None,
        partitions=None,  # type: ignore[arg-type]
        shares=shares,  # type: ignore[arg-type]
        sessions=sessions,
        stopping=lambda: stopping,
    )


def _open(sessions: ShareSessionCache, member: str, connection_id: str) -> None:
    sessions.fetch(
        "g",
        member,
        0,
        [(T, 0)],
        [],
        has_acknowledgements=False,
        connection_id=connection_id,
        now_ms=0,
    )


def test_a_closed_connection_gives_back_the_records_of_the_sessions_it_opened() -> None:
    shares, sessions = _Shares(), ShareSessionCache(10)
    _open(sessions, "a", "c1")
    _open(sessions, "b", "c2")
    share_connection_closed(_share_context(shares, sessions, stopping=False), "c1")
    assert shares.left == [("g", "a")]
    assert sessions.get("g", "a") is None and sessions.get("g", "b") is not None
    share_connection_closed(_share_context(shares, sessions, stopping=False), "c3")
    assert shares.left == [("g", "a")]


def test_while_the_broker_stops_the_sessions_end_without_releasing() -> None:
    shares, sessions = _Shares(), ShareSessionCache(10)
    _open(sessions, "a", "c1")
    share_connection_closed(_share_context(shares, sessions, stopping=True), "c1")
    assert shares.left == [] and len(sessions) == 0
