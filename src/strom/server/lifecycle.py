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
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.protocol.codec import build, request_class
from strom.server.controller import NotController

if TYPE_CHECKING:
    from strom.server.broker import Broker

log = logging.getLogger(__name__)

FAST_HEARTBEAT_S = 0.05
CALL_TIMEOUT_S = 6.0
"""The longest one registration or heartbeat may take (a remote one times out at 5 s)."""
RETRY_S = 0.1
REGISTRATION_VERSION = 4
HEARTBEAT_VERSION = 1


class BrokerLifecycle:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self.incarnation_id = broker.incarnation_id
        self.epoch: int | None = None
        self.fenced = True
        self.unfenced = asyncio.Event()
        self._shutting_down = False
        self._last_error: str | None = None

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> None:
        broker = self._broker
        interval_s = broker.config.broker_heartbeat_interval_ms / 1000
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
            log.info("[node %d] heartbeat: %s", self._broker.node_id, problem)
            self._last_error = problem

    async def _register(self) -> None:
        broker = self._broker
        image = broker.metadata.image
        if not image.cluster_id:
            raise NotController(None)  # the quorum has not formed the cluster yet
        host, port = broker.advertised_listener
        listener = broker.config.advertised_listeners[0]
        if broker.channel.local_controller_active:
            assert broker.controller is not None
            error, message, epoch = await broker.controller.register_broker(
                broker_id=broker.node_id,
                cluster_id=image.cluster_id,
                incarnation_id=self.incarnation_id,
                host=host,
                port=port,
                rack=broker.config.broker_rack,
            )
        else:
            request = build(
                request_class(ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION),
                {
                    "broker_id": broker.node_id,
                    "cluster_id": image.cluster_id,
                    "incarnation_id": self.incarnation_id,
                    "listeners": [
                        {
                            "name": listener.name,
                            "host": host,
                            "port": port,
                            "security_protocol": 0,
                        }
                    ],
                    "features": [],
                    "rack": broker.config.broker_rack,
                },
            )
            response = await broker.channel.request(
                ApiKey.BROKER_REGISTRATION, REGISTRATION_VERSION, request, timeout_s=5.0
            )
            error, message, epoch = ErrorCode(response.error_code), None, int(response.broker_epoch)
        if error == ErrorCode.not_controller:
            raise NotController(broker.channel.leader_id)
        if error != ErrorCode.none:
            self._note(f"registration refused: {error.name} {message or ''}")
            await asyncio.sleep(RETRY_S * 5)
            return
        self.epoch = epoch
        log.info(
            "[node %d] registered with the controller as broker %d (epoch %d, incarnation %s)",
            broker.node_id,
            broker.node_id,
            epoch,
            self.incarnation_id,
        )

    async def _heartbeat(self, *, want_shutdown: bool) -> bool:
        """One heartbeat; True when the controller says this broker may shut down."""
        broker = self._broker
        assert self.epoch is not None
        offset = broker.metadata.applied_index
        if broker.channel.local_controller_active:
            assert broker.controller is not None
            result = await broker.controller.broker_heartbeat(
                broker_id=broker.node_id,
                broker_epoch=self.epoch,
                current_metadata_offset=offset,
                want_fence=False,
                want_shutdown=want_shutdown,
            )
            error, is_fenced, should_shutdown = (
                result.error_code,
                result.is_fenced,
                result.should_shutdown,
            )
        else:
            request = build(
                request_class(ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION),
                {
                    "broker_id": broker.node_id,
                    "broker_epoch": self.epoch,
                    "current_metadata_offset": offset,
                    "want_fence": False,
                    "want_shut_down": want_shutdown,
                },
            )
            response = await broker.channel.request(
                ApiKey.BROKER_HEARTBEAT, HEARTBEAT_VERSION, request, timeout_s=5.0
            )
            error = ErrorCode(response.error_code)
            is_fenced, should_shutdown = bool(response.is_fenced), bool(response.should_shut_down)
        if error == ErrorCode.not_controller:
            raise NotController(broker.channel.leader_id)
        if error in (ErrorCode.stale_broker_epoch, ErrorCode.broker_id_not_registered):
            log.info(
                "[node %d] the controller no longer knows epoch %d (%s); registering again",
                broker.node_id,
                self.epoch,
                error.name,
            )
            self.epoch = None
            self._set_fenced(True)
            return False
        if error != ErrorCode.none:
            self._note(f"heartbeat refused: {error.name}")
            return False
        self._last_error = None
        self._set_fenced(is_fenced)
        return bool(should_shutdown)

    def _set_fenced(self, fenced: bool) -> None:
        if fenced == self.fenced:
            return
        self.fenced = fenced
        if fenced:
            self.unfenced.clear()
            log.info("[node %d] fenced by the controller", self._broker.node_id)
        else:
            self.unfenced.set()
            log.info("[node %d] unfenced: serving as a live broker", self._broker.node_id)

    # --- controlled shutdown ----------------------------------------------------------

    async def controlled_shutdown(self, timeout_s: float) -> None:
        """Ask the controller to move leadership away before this broker stops."""
        if self.epoch is None:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            try:
                if await self._heartbeat(want_shutdown=True):
                    log.info(
                        "[node %d] controlled shutdown: leadership moved away", self._broker.node_id
                    )
                    return
            except NotController:
                pass
            await asyncio.sleep(FAST_HEARTBEAT_S)
        log.info("[node %d] controlled shutdown timed out; stopping anyway", self._broker.node_id)
