"""A broker's requests to the active controller, in process or over the channel.

The broker's services that ask the controller something (lifecycle.py: registration and
heartbeats, producer_ids.py: producer id blocks, isr.py: AlterPartition) each describe
their request once, as a `ControllerCall`, and hand it to the `ActiveController` port.
When this node is the active controller, the call runs in process: its `here` function
with this node's controller service, or, without one, this node's controller listener
answers the request itself (the same handler, without the socket). Otherwise the request
goes over the controller channel (controller_channel.py) and `read` turns the response
into the same answer. An answer of NOT_CONTROLLER raises NotController with the active
controller the channel knows, so the caller waits for, or looks for, the one that is.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.metadata.brokers import HeartbeatResult, ProducerIdsResult
from strom.metadata.records import BrokerEndpoint
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.controller import NotController


class Answer(Protocol):
    """What every answer from the controller carries."""

    @property
    def error_code(self) -> ErrorCode: ...


A = TypeVar("A", bound=Answer)


class LocalController(Protocol):
    """This node's controller service (server/controller.py), as the calls made in
    process use it; each raises NotController when its leadership is lost."""

    async def register_broker(
        self,
        *,
        broker_id: int,
        cluster_id: str,
        incarnation_id: uuid.UUID,
        host: str,
        port: int,
        rack: str | None,
        endpoints: tuple[BrokerEndpoint, ...] = (),
    ) -> tuple[ErrorCode, str | None, int]: ...

    async def broker_heartbeat(
        self,
        *,
        broker_id: int,
        broker_epoch: int,
        current_metadata_offset: int,
        want_fence: bool,
        want_shutdown: bool,
    ) -> HeartbeatResult: ...

    async def allocate_producer_ids(
        self, broker_id: int, broker_epoch: int
    ) -> ProducerIdsResult: ...


class ControllerChannelPort(Protocol):
    """Who the active controller is and the socket to it (server/controller_channel.py).
    Who that is changes with every election: each is asked at each call."""

    @property
    def leader_id(self) -> int | None: ...

    @property
    def local_controller_active(self) -> bool: ...

    def local_controller(self) -> LocalController:
        """This node's controller while it is the active one; NotController otherwise."""
        ...

    async def request(self, api_key: int, api_version: int, body: Any, timeout_s: float) -> Any:
        """The active controller's response over the socket; NotController when none
        can be reached."""
        ...


@dataclass(frozen=True, slots=True)
class ControllerCall(Generic[A]):
    """One request for the active controller, both ways it can travel."""

    api_key: ApiKey
    api_version: int
    body: Any
    """The request: a kio request (which `here=None` needs), or a mapping of its fields."""
    timeout_s: float
    """How long the channel waits for the response of a remote controller."""
    read: Callable[[Any], A]
    """The response (from the channel, or from this node's handler) as the answer."""
    here: Callable[[LocalController], Awaitable[A]] | None = None
    """The same call made of this node's controller service while it is the active one;
    None: this node's controller listener answers `body` itself, in process."""
    not_controller_raises: bool = True
    """NOT_CONTROLLER in the answer raises NotController; False for a caller that reads
    the answer's errors itself (AlterPartition refused as a whole)."""


class ActiveController(Protocol):
    """The port the services take: a call made of the active controller."""

    async def call(self, call: ControllerCall[A]) -> A:
        """`call`'s answer; NotController when no active controller answers it (or one
        answers NOT_CONTROLLER and the call says that raises)."""
        ...


class ControllerCaller:
    """ActiveController over this node's controller channel and controller listener."""

    def __init__(
        self,
        *,
        node_id: int,
        channel: ControllerChannelPort,
        dispatch_controller: Callable[[Request], Awaitable[Any]],
    ) -> None:
        self._channel = channel
        self._dispatch_controller = dispatch_controller
        """The controller listener's dispatch: answers `here=None` calls in process."""
        self._client_id = f"strom-{node_id}"

    async def call(self, call: ControllerCall[A]) -> A:
        channel = self._channel
        if channel.local_controller_active:
            if call.here is not None:
                answer = await call.here(channel.local_controller())
            else:  # the same handler, without the socket
                request = Request(call.api_key, call.api_version, 0, self._client_id, call.body)
                answer = call.read(await self._dispatch_controller(request))
        else:
            response = await channel.request(
                call.api_key, call.api_version, call.body, timeout_s=call.timeout_s
            )
            answer = call.read(response)
        if call.not_controller_raises and answer.error_code == ErrorCode.not_controller:
            raise NotController(channel.leader_id)
        return answer
