"""The one way the broker's services reach the active controller (server/controller_link.py):
in process when this node is the active controller, otherwise over the channel, and
NOT_CONTROLLER in an answer raised as NotController naming who the channel says leads."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from server_harness import run

from strom.metadata.brokers import ProducerIdsResult
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.controller import NotController
from strom.server.controller_link import ControllerCall, ControllerCaller, LocalController

LOCAL = ProducerIdsResult(ErrorCode.none, 100, 10)
REMOTE = ProducerIdsResult(ErrorCode.none, 500, 10)


@dataclass(slots=True)
class Channel:
    """The controller channel: who leads, and the socket, recorded."""

    local_controller_active: bool = False
    leader_id: int | None = 2
    sent: list[tuple[int, int, Any, float]] = field(default_factory=list)

    def local_controller(self) -> LocalController:
        assert self.local_controller_active
        return "this node's controller"  # type: ignore[return-value]

    async def request(self, api_key: int, api_version: int, body: Any, timeout_s: float) -> Any:
        self.sent.append((api_key, api_version, body, timeout_s))
        return "the remote response"


def caller(channel: Channel, dispatched: list[Request] | None = None) -> ControllerCaller:
    async def dispatch(request: Request) -> Any:
        assert dispatched is not None
        dispatched.append(request)
        return "the local handler's response"

    return ControllerCaller(node_id=1, channel=channel, dispatch_controller=dispatch)


def call(answer: ProducerIdsResult | None = None, **fields: Any) -> ControllerCall[Any]:
    async def here(controller: LocalController) -> ProducerIdsResult:
        assert controller == "this node's controller"
        return LOCAL if answer is None else answer

    def read(response: Any) -> ProducerIdsResult:
        assert response in ("the remote response", "the local handler's response")
        return REMOTE if answer is None else answer

    default = ControllerCall(
        ApiKey.ALLOCATE_PRODUCER_IDS, 0, {"broker_id": 1}, timeout_s=5.0, read=read, here=here
    )
    return replace(default, **fields)


def test_a_remote_controller_is_asked_over_the_channel() -> None:
    channel = Channel()
    assert run(caller(channel).call(call())) == REMOTE
    assert channel.sent == [(ApiKey.ALLOCATE_PRODUCER_IDS, 0, {"broker_id": 1}, 5.0)]


def test_this_nodes_active_controller_is_asked_in_process() -> None:
    channel = Channel(local_controller_active=True)
    assert run(caller(channel).call(call())) == LOCAL
    assert channel.sent == []


def test_without_here_this_nodes_controller_listener_answers_the_request() -> None:
    channel, dispatched = Channel(local_controller_active=True), []
    assert run(caller(channel, dispatched).call(call(here=None))) == REMOTE
    [request] = dispatched
    assert (request.api_key, request.api_version, request.correlation_id) == (
        ApiKey.ALLOCATE_PRODUCER_IDS,
        0,
        0,
    )
    assert (request.client_id, request.body) == ("strom-1", {"broker_id": 1})
    assert channel.sent == []


@pytest.mark.parametrize("local", [True, False])
def test_not_controller_in_an_answer_names_who_the_channel_says_leads(local: bool) -> None:
    channel = Channel(local_controller_active=local, leader_id=3)
    refused = ProducerIdsResult(ErrorCode.not_controller, -1, 0)
    with pytest.raises(NotController) as raised:
        run(caller(channel).call(call(refused)))
    assert raised.value.leader_id == 3


def test_a_caller_may_read_not_controller_itself() -> None:
    refused = ProducerIdsResult(ErrorCode.not_controller, -1, 0)
    assert run(caller(Channel()).call(call(refused, not_controller_raises=False))) == refused
