"""Requests run at the active controller (handlers/forward.py): in place on it, forwarded
from any other node to its PrivateSession, refused with NOT_CONTROLLER when none answers.
Nodes on the in-memory metadata store; the "network" is a Loopback; no sleep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from quorum_harness import (
    QUORUM,
    DescribedQuorum,
    Loopback,
    cluster,
    describe_quorum,
    quorum_context,
    wire,
)
from server_harness import run

from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.server.handlers import forward
from strom.server.handlers.ports import ForwardPort, PrivateContext, QuorumContext
from strom.server.handlers.private import PrivateSession
from strom.server.handlers.quorum import controller_describe_quorum, handle_describe_quorum
from strom.server.private import FORWARD_NOT_CONTROLLER, PrivateApi, encode_forward_response


@dataclass(slots=True)
class Recorded:
    """A request's own work: records the contexts it ran with."""

    ran_with: list[Any] = field(default_factory=list)

    async def handle(self, context: QuorumContext, request: Request) -> Any:
        self.ran_with.append(context)
        return _describe_answer(request, ErrorCode.none, "ran here")


def _describe_answer(request: Request, code: ErrorCode, message: str) -> Any:
    return build_response(
        ApiKey.DESCRIBE_QUORUM,
        request.api_version,
        {"error_code": code, "error_message": message, "topics": [], "nodes": []},
    )


def test_on_the_active_controller_the_request_runs_in_place(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        link = Loopback(leader_id=1, session=None, local_controller_active=True)
        context = quorum_context(one, channel=link)
        work = Recorded()
        answer = await forward.at_controller(
            context, describe_quorum(), work.handle, _describe_answer
        )
        assert answer.error_message == "ran here"
        assert work.ran_with == [context] and link.sent == []

    run(scenario())


def test_another_node_forwards_to_the_controller_and_relays_its_answer(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await cluster(MemoryLog(), tmp_path, 1, 2)
        at_one = quorum_context(one, store=DescribedQuorum(QUORUM))

        async def dispatch_at_one(request: Request) -> Any:
            assert request.api_key == ApiKey.DESCRIBE_QUORUM
            return await controller_describe_quorum(at_one, request)

        session = PrivateSession(
            PrivateContext(
                node_id=1,
                metadata=one.metadata,
                store=lambda: one.store,
                channel=one.channel,
                dispatch_controller=dispatch_at_one,
            )
        )
        link = Loopback(leader_id=1, session=session)
        at_two = quorum_context(two, store=DescribedQuorum(None), channel=link)
        answer = wire(
            ApiKey.DESCRIBE_QUORUM, 2, await handle_describe_quorum(at_two, describe_quorum())
        )
        assert [(api_key, version) for api_key, version, _ in link.sent] == [
            (PrivateApi.FORWARD, 0)
        ]
        assert answer.error_code == ErrorCode.none
        (partition,) = answer.topics[0].partitions
        assert (partition.leader_id, partition.leader_epoch, partition.high_watermark) == (
            1,
            4,
            17,
        )
        assert [n.node_id for n in answer.nodes] == [1, 2]

    run(scenario())


def test_with_no_controller_to_answer_the_client_gets_not_controller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forward, "FORWARD_TIMEOUT_S", 0.0)  # give up at the first refusal

    async def scenario() -> None:
        log = MemoryLog()
        _one, two = await cluster(log, tmp_path, 1, 2)
        work = Recorded()

        # The node it believes active says it is not (yet).
        refusing = Loopback(
            leader_id=1, session=None, reply=encode_forward_response(FORWARD_NOT_CONTROLLER, b"")
        )
        context = quorum_context(two, channel=refusing)
        answer = await forward.at_controller(
            context, describe_quorum(), work.handle, _describe_answer
        )
        assert answer.error_code == ErrorCode.not_controller
        assert answer.error_message.startswith("no active controller answered within 0 s")
        assert len(refusing.sent) == 1

        # No controller at all: the real channel knows no leader to connect to.
        log.resign()
        context = quorum_context(two)
        answer = await forward.at_controller(
            context, describe_quorum(), work.handle, _describe_answer
        )
        assert answer.error_code == ErrorCode.not_controller
        assert "the active controller is None" in answer.error_message
        assert work.ran_with == []

    run(scenario())


def test_a_forwarded_request_at_a_node_that_is_not_the_controller_is_refused(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        _one, two = await cluster(MemoryLog(), tmp_path, 1, 2)
        work = Recorded()
        context = quorum_context(two)
        answer = await forward.on_this_controller(
            context, describe_quorum(), work.handle, _describe_answer
        )
        assert answer.error_code == ErrorCode.not_controller
        assert answer.error_message == "not the active controller (the active controller is 1)"
        assert work.ran_with == []

    run(scenario())


def test_a_clients_request_on_a_controller_listener_is_that_controllers_own(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        _one, two = await cluster(MemoryLog(), tmp_path, 1, 2)
        work = Recorded()
        link = Loopback(leader_id=1, session=None)
        context = dataclasses.replace(
            quorum_context(two, channel=link),
            forward=ForwardPort(2, link, two.metadata, frozenset({"CONTROLLER"})),
        )
        on_listener = dataclasses.replace(describe_quorum(), listener="CONTROLLER")
        answer = await forward.at_controller(context, on_listener, work.handle, _describe_answer)
        assert answer.error_code == ErrorCode.not_controller  # not forwarded to node 1
        assert link.sent == [] and work.ran_with == []

        active = Loopback(leader_id=2, session=None, local_controller_active=True)
        context = dataclasses.replace(
            context, forward=ForwardPort(2, active, two.metadata, frozenset({"CONTROLLER"}))
        )
        answer = await forward.at_controller(context, on_listener, work.handle, _describe_answer)
        assert answer.error_message == "ran here"

    run(scenario())
