"""strom's private APIs (handlers/private.py) as a node-to-node connection's PrivateSession
answers them, with its context around nodes on the in-memory metadata store: no socket,
no sleep."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from quorum_harness import QUORUM, DescribedQuorum, cluster, describe_quorum, quorum_context
from server_harness import produce_request, run, turns

from strom.metadata.records import TopicRecord
from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, decode_response, encode_request
from strom.server.broker import Broker
from strom.server.handlers.ports import PrivateContext
from strom.server.handlers.private import PrivateSession
from strom.server.handlers.quorum import controller_describe_quorum
from strom.server.private import (
    FORWARD_NOT_CONTROLLER,
    FORWARDED_LISTENER,
    ForwardedRequest,
    MetadataFetchRequest,
    PrivateApi,
    PrivatePayloadError,
    decode_fetch_response,
    decode_forward_response,
    encode_fetch_request,
    encode_forward_request,
)


def session_of(node: Broker, dispatched: list[Request] | None = None) -> PrivateSession:
    """A session at `node`; a forwarded request runs DescribeQuorum's controller handler
    over a store that describes QUORUM, and is recorded in `dispatched`."""
    at_node = quorum_context(node, store=DescribedQuorum(QUORUM))

    async def dispatch_controller(request: Request) -> Any:
        if dispatched is not None:
            dispatched.append(request)
        return await controller_describe_quorum(at_node, request)

    return PrivateSession(
        PrivateContext(
            node_id=node.node_id,
            metadata=node.metadata,
            store=lambda: node.store,
            channel=node.channel,
            dispatch_controller=dispatch_controller,
        )
    )


def fetch_payload(from_index: int, max_wait_ms: int = 0) -> bytes:
    return encode_fetch_request(MetadataFetchRequest(9, from_index, max_wait_ms))


def forward_payload(request: Request) -> bytes:
    return encode_request(
        request.api_key, request.api_version, request.correlation_id, request.body
    )[4:]


def test_metadata_fetch_hands_out_the_committed_entries_and_the_leader(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = MemoryLog()
        _one, two = await cluster(log, tmp_path, 1, 2)
        payload = await session_of(two).handle(PrivateApi.METADATA_FETCH, 0, fetch_payload(1))
        assert payload is not None
        fetched = decode_fetch_response(payload)
        assert (fetched.leader_id, fetched.term) == (1, log.term)
        assert fetched.commit_index == two.metadata.applied_index
        assert fetched.snapshot is None
        assert [e.index for e in fetched.entries] == list(range(1, fetched.commit_index + 1))
        assert [e.data for e in fetched.entries] == [e.data for e in log.entries]

    run(scenario())


def test_metadata_fetch_past_the_end_waits_for_the_next_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        after = one.metadata.applied_index + 1
        waiting = asyncio.create_task(
            session_of(one).handle(PrivateApi.METADATA_FETCH, 0, fetch_payload(after, 5_000))
        )
        await turns()
        assert not waiting.done()
        assert one.controller is not None
        await one.controller.commit([])  # no records: nothing committed, still waiting
        await turns()
        assert not waiting.done()
        await one.controller.commit([TopicRecord("orders", uuid.UUID(int=5))])  # at `after`
        payload = await asyncio.wait_for(waiting, 5)
        assert payload is not None
        fetched = decode_fetch_response(payload)
        assert fetched.entries and fetched.entries[0].index == after

    run(scenario())


def test_raft_frames_at_a_store_that_takes_none_close_the_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        session = session_of(one)
        with pytest.raises(PrivatePayloadError, match="node 1 is not a controller"):
            await session.handle(PrivateApi.RAFT_HELLO, 0, b"{}")
        with pytest.raises(PrivatePayloadError, match="unknown private API 32999"):
            await session.handle(32999, 0, b"")

    run(scenario())


def test_a_forward_runs_at_the_active_controller_and_names_its_metadata_offset(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        dispatched: list[Request] = []
        asked = describe_quorum()
        payload = await session_of(one, dispatched).handle(
            PrivateApi.FORWARD, 0, forward_payload(asked)
        )
        assert payload is not None
        offset, frame = decode_forward_response(payload)
        assert offset == one.metadata.applied_index
        correlation_id, body = decode_response(ApiKey.DESCRIBE_QUORUM, 2, frame)
        assert correlation_id == asked.correlation_id
        assert body.error_code == ErrorCode.none
        assert body.topics[0].partitions[0].high_watermark == QUORUM.high_watermark
        assert [(r.api_key, r.client_host) for r in dispatched] == [
            (ApiKey.DESCRIBE_QUORUM, "forwarded")
        ]

    run(scenario())


def test_a_forward_at_a_node_that_is_not_the_controller_asks_the_sender_to_retry(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        _one, two = await cluster(MemoryLog(), tmp_path, 1, 2)
        dispatched: list[Request] = []
        payload = await session_of(two, dispatched).handle(
            PrivateApi.FORWARD, 0, forward_payload(describe_quorum())
        )
        assert payload is not None
        assert decode_forward_response(payload) == (FORWARD_NOT_CONTROLLER, b"")
        assert dispatched == []

    run(scenario())


def test_a_forward_of_anything_but_a_controller_request_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        dispatched: list[Request] = []
        session = session_of(one, dispatched)
        produce = produce_request(b"", acks=1)
        with pytest.raises(PrivatePayloadError, match="PRODUCE cannot be forwarded"):
            await session.handle(PrivateApi.FORWARD, 0, forward_payload(produce))
        with pytest.raises(PrivatePayloadError, match="bad forwarded request"):
            await session.handle(PrivateApi.FORWARD, 0, b"\x00\x37\x00")
        assert dispatched == []
        # The session still answers what it may.
        payload = await session.handle(PrivateApi.FORWARD, 0, forward_payload(describe_quorum()))
        assert payload is not None
        _offset, frame = decode_forward_response(payload)
        _correlation_id, body = decode_response(ApiKey.DESCRIBE_QUORUM, 2, frame)
        assert body.error_code == ErrorCode.none
        assert len(dispatched) == 1

    run(scenario())


def test_a_clients_forward_is_dispatched_as_its_principal_from_its_host(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        dispatched: list[Request] = []
        carried = ForwardedRequest(forward_payload(describe_quorum()), "User:alice", "/10.0.0.1")
        payload = await session_of(one, dispatched).handle(
            PrivateApi.FORWARD, carried.version, encode_forward_request(carried)
        )
        assert payload is not None and decode_forward_response(payload)[1]
        (request,) = dispatched
        assert (request.principal, request.client_host, request.listener) == (
            "User:alice",
            "/10.0.0.1",
            FORWARDED_LISTENER,
        )
        # A node's own request (version 0) carries no principal and no listener.
        await session_of(one, dispatched).handle(
            PrivateApi.FORWARD, 0, forward_payload(describe_quorum())
        )
        assert (dispatched[1].principal, dispatched[1].listener) == ("User:ANONYMOUS", "")

    run(scenario())


def test_a_forward_of_an_unknown_version_closes_the_connection(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        dispatched: list[Request] = []
        with pytest.raises(PrivatePayloadError, match="unknown FORWARD version 2"):
            await session_of(one, dispatched).handle(PrivateApi.FORWARD, 2, b"")
        assert dispatched == []

    run(scenario())
