"""A broker's registration and heartbeats with the active controller.

    unregistered -> (BrokerRegistration) -> fenced -> (heartbeats until caught up) ->
    unfenced -> (session lost: the controller fenced it) -> fenced -> ...
             -> controlled shutdown (leadership moved away) -> stopped

Every start registers a new incarnation id; the broker epoch the controller returns (the
metadata offset of the registration) goes with every heartbeat, so the controller can
tell a restarted process from its predecessor. A fenced broker heartbeats quickly until
the controller unfences it (it has replayed the metadata up to its own registration);
after that, every `broker.heartbeat.interval.ms`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from strom.config import BrokerConfig
from strom.metadata.brokers import HeartbeatResult
from strom.metadata.image import MetadataImage
from strom.metadata.records import BrokerEndpoint
from strom.protocol.apis import ApiKey
from strom.protocol.codec import build, request_class
from strom.server.controller import NotController
from strom.server.controller_link import ActiveController, ControllerCall, LocalController

log = logging.getLogger(__name__)

FAST_HEARTBEAT_S = 0.05
CALL_TIMEOUT_S = 6.0
"""The longest one registration or heartbeat may take (a remote one times out at 5 s)."""
REQUEST_TIMEOUT_S = 5.0
RETRY_S = 0.1
REGISTRATION_VERSION = 4
HEARTBEAT_VERSION = 1


class LifecycleMetadata(Protocol):
    """The committed metadata this broker has applied (server/metadata_state.py)."""

    @property
    def image(self) -> MetadataImage: ...

    @property
    def applied_index(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Registration:
    """A BrokerRegistration's answer; `message` comes only from this node's controller."""

    error_code: ErrorCode
    message: str | None
    broker_epoch: int


class BrokerLifecycle:
    """Ports, each read when it is used: `config`, the broker's config now (heartbeat
    interval, rack); `advertised`, the client listeners this broker advertises, the
    inter-broker one first; `metadata`, the cluster id to register in and the offset the
    heartbeats report; `controller`, the active controller."""

    def __init__(
        self,
        *,
        node_id: int,
        incarnation_id: uuid.UUID,
        config: Callable[[], BrokerConfig],
        advertised: Callable[[], tuple[BrokerEndpoint, ...]],
        metadata: LifecycleMetadata,
        controller: ActiveController,
    ) -> None:
        self._node_id = node_id
        self._config = config
        self._advertised = advertised
        self._metadata = metadata
        self._controller = controller
        self.incarnation_id = incarnation_id
        self.epoch: int | None = None
        self.fenced = True
        self.unfenced = asyncio.Event()
        self._shutting_down = False
        self._last_error: str | None = None

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        interval_s = self._config().broker_heartbeat_interval_ms / 1000
        while True:
            try:
                # Bounded, also when this node's own controller answers: a call left
                # waiting on a controller that lost its role must not stop the heartbeats
                # for good (the broker would stay fenced, out of every ISR).
                async with asyncio.timeout(CALL_TIMEOUT_S):
                    if self.epoch is None:
                        await self._register()
                    else:
                        await self._heartbeat(want_shutdown=False)
            except NotController as exc:
                self._note(f"waiting for an active controller ({exc.leader_id})")
                await asyncio.sleep(RETRY_S)
                continue
            except TimeoutError:
                self._note(f"no answer from the controller within {CALL_TIMEOUT_S:g} s")
                await asyncio.sleep(RETRY_S)
                continue
            await asyncio.sleep(FAST_HEARTBEAT_S if self.fenced else interval_s)

    def _note(self, problem: str) -> None:
        """Say why a registration or heartbeat did not go through, once per new reason: a
        broker left fenced must say why in its log."""
        if problem != self._last_error:
            log.info("[node %d] heartbeat: %s", self._node_id, problem)
            self._last_error = problem

    async def _register(self) -> None:
        node_id = self._node_id
        image = self._metadata.image
        if not image.cluster_id:
            raise NotController(None)  # the quorum has not formed the cluster yet
        cluster_id = image.cluster_id
        endpoints = self._advertised()
        host, port = endpoints[0].host, endpoints[0].port
        rack = self._config().broker_rack
        incarnation_id = self.incarnation_id

        async def here(controller: LocalController) -> Registration:
            return Registration(
                *await controller.register_broker(
                    broker_id=node_id,
                    cluster_id=cluster_id,
                    incarnation_id=incarnation_id,
                    host=host,
                    port=port,
                    rack=rack,
                    endpoints=endpoints,
                )
            )

        def read(response: Any) -> Registration:
            return Registration(ErrorCode(response.error_code), None, int(response.broker_epoch))

        request = build(
            request_class(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION),
            {
                "broker_id": node_id,
                "cluster_id": cluster_id,
                "incarnation_id": incarnation_id,
                "listeners": [
                    {
                        "name": e.name,
                        "host": e.host,
                        "port": e.port,
                        "security_protocol": int(e.security_protocol),
                    }
                    for e in endpoints
                ],
                "features": [],
                "rack": rack,
            },
        )
        answer = await self._controller.call(
            ControllerCall(
                ApiKey.BROKER_REGISTRATION,
                REGISTRATION_VERSION,
                request,
                timeout_s=REQUEST_TIMEOUT_S,
                read=read,
                here=here,
            )
        )
        if answer.error_code != ErrorCode.none:
            self._note(f"registration refused: {answer.error_code.name} {answer.message or ''}")
            await asyncio.sleep(RETRY_S * 5)
            return
        self.epoch = answer.broker_epoch
        log.info(
            "[node %d] registered with the controller as broker %d (epoch %d, incarnation %s)",
            node_id,
            node_id,
            self.epoch,
            incarnation_id,
        )

    async def _heartbeat(self, *, want_shutdown: bool) -> bool:
        """One heartbeat; True when the controller says this broker may shut down."""
        node_id = self._node_id
        epoch = self.epoch
        assert epoch is not None
        offset = self._metadata.applied_index

        async def here(controller: LocalController) -> HeartbeatResult:
            return await controller.broker_heartbeat(
                broker_id=node_id,
                broker_epoch=epoch,
                current_metadata_offset=offset,
                want_fence=False,
                want_shutdown=want_shutdown,
            )

        def read(response: Any) -> HeartbeatResult:
            return HeartbeatResult(
                ErrorCode(response.error_code),
                bool(response.is_caught_up),
                bool(response.is_fenced),
                bool(response.should_shut_down),
            )

        request = build(
            request_class(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION),
            {
                "broker_id": node_id,
                "broker_epoch": epoch,
                "current_metadata_offset": offset,
                "want_fence": False,
                "want_shut_down": want_shutdown,
            },
        )
        result = await self._controller.call(
            ControllerCall(
                ApiKey.BROKER_HEARTBEAT,
                HEARTBEAT_VERSION,
                request,
                timeout_s=REQUEST_TIMEOUT_S,
                read=read,
                here=here,
            )
        )
        error = result.error_code
        if error in (ErrorCode.stale_broker_epoch, ErrorCode.broker_id_not_registered):
            log.info(
                "[node %d] the controller no longer knows epoch %d (%s); registering again",
                node_id,
                epoch,
                error.name,
            )
            self.epoch = None
            self._set_fenced(True)
            return False
        if error != ErrorCode.none:
            self._note(f"heartbeat refused: {error.name}")
            return False
        self._last_error = None
        self._set_fenced(result.is_fenced)
        return bool(result.should_shutdown)

    def _set_fenced(self, fenced: bool) -> None:
        if fenced == self.fenced:
            return
        self.fenced = fenced
        if fenced:
            self.unfenced.clear()
            log.info("[node %d] fenced by the controller", self._node_id)
        else:
            self.unfenced.set()
            log.info("[node %d] unfenced: serving as a live broker", self._node_id)

    # --- controlled shutdown ----------------------------------------------------------

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move leadership away before this broker stops."""
        if self.epoch is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                # Bounded as a whole: a heartbeat this node's own controller answers has
                # no channel timeout around it.
                async with asyncio.timeout_at(deadline):
                    if await self._heartbeat(want_shutdown=True):
                        log.info(
                            "[node %d] controlled shutdown: leadership moved away", self._node_id
                        )
                        return
            except NotController:
                pass
            except TimeoutError:
                continue
            await asyncio.sleep(FAST_HEARTBEAT_S)
        log.info("[node %d] controlled shutdown timed out; stopping anyway", self._node_id)
