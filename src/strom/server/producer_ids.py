"""Producer ids for idempotent producers, unique across the cluster and across restarts.

The active controller hands out blocks of ids (AllocateProducerIds, a ProducerIdsRecord in
the metadata, so no id is ever handed out twice, whichever controller leads); a broker
uses its block up, then asks for the next. A restarted broker asks for a new block and
never reuses the rest of its old one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.server.controller import NotController

if TYPE_CHECKING:
    from strom.server.broker import Broker

log = logging.getLogger(__name__)

RETRY_S = 0.1
ALLOCATE_TIMEOUT_S = 15.0


class ProducerIdsUnavailable(Exception):
    """No block could be had from the controller in time."""


class ProducerIdBlocks:
    """next_id() -> an id of the current block, fetching a new block when it is used up."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._next = 0
        self._end = 0
        self._lock = asyncio.Lock()

    async def next_id(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                self._next, self._end = await self._allocate()
            producer_id = self._next
            self._next += 1
            return producer_id

    async def _allocate(self) -> tuple[int, int]:
        broker = self._broker
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ALLOCATE_TIMEOUT_S
        while True:
            lifecycle = broker.lifecycle
            epoch = lifecycle.epoch if lifecycle is not None else None
            try:
                if epoch is None:
                    raise NotController(None)
                first, count = await self._ask(epoch)
                if count > 0:
                    log.info(
                        "[node %d] producer ids %d..%d from the controller",
                        broker.node_id,
                        first,
                        first + count - 1,
                    )
                    return first, first + count
            except NotController:
                pass
            if loop.time() >= deadline:
                raise ProducerIdsUnavailable("no producer id block from the controller")
            await asyncio.sleep(RETRY_S)

    async def _ask(self, epoch: int) -> tuple[int, int]:
        broker = self._broker
        if broker.channel.local_controller_active:
            controller = broker.channel.local_controller()
            result = await controller.allocate_producer_ids(broker.node_id, epoch)
            error, first, count = result.error_code, result.first_id, result.count
        else:
            response = await broker.channel.request(
                ApiKey.ALLOCATE_PRODUCER_IDS,
                0,
                {"broker_id": broker.node_id, "broker_epoch": epoch},
                timeout_s=5.0,
            )
            error = ErrorCode(response.error_code)
            first, count = int(response.producer_id_start), int(response.producer_id_len)
        if error == ErrorCode.not_controller:
            raise NotController(broker.channel.leader_id)
        if error != ErrorCode.none:
            log.info("[node %d] producer id block refused: %s", broker.node_id, error.name)
            return -1, 0
        return first, count
