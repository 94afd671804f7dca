"""Producer ids for idempotent producers, unique across the cluster and across restarts.

The active controller hands out blocks of ids (AllocateProducerIds, a ProducerIdsRecord in
the metadata, so no id is ever handed out twice, whichever controller leads); a broker
uses its block up, then asks for the next. A restarted broker asks for a new block and
never reuses the rest of its old one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.metadata.brokers import ProducerIdsResult
from strom.protocol.apis import ApiKey
from strom.server.controller import NotController
from strom.server.controller_link import ActiveController, ControllerCall, LocalController

log = logging.getLogger(__name__)

RETRY_S = 0.1
ALLOCATE_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_S = 5.0


class ProducerIdsUnavailable(Exception):
    """No block could be had from the controller in time."""


class ProducerIdBlocks:
    """next_id() -> an id of the current block, fetching a new block when it is used up.

    Ports: `broker_epoch`, this broker's epoch from its registration (None before), read
    at each request; `controller`, the active controller that hands out the blocks."""

    def __init__(
        self,
        *,
        node_id: int,
        broker_epoch: Callable[[], int | None],
        controller: ActiveController,
    ) -> None:
        self._node_id = node_id
        self._broker_epoch = broker_epoch
        self._controller = controller
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
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ALLOCATE_TIMEOUT_S
        while True:
            epoch = self._broker_epoch()
            try:
                if epoch is None:
                    raise NotController(None)
                first, count = await self._ask(epoch)
                if count > 0:
                    log.info(
                        "[node %d] producer ids %d..%d from the controller",
                        self._node_id,
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
        node_id = self._node_id

        async def here(controller: LocalController) -> ProducerIdsResult:
            return await controller.allocate_producer_ids(node_id, epoch)

        def read(response: Any) -> ProducerIdsResult:
            return ProducerIdsResult(
                ErrorCode(response.error_code),
                int(response.producer_id_start),
                int(response.producer_id_len),
            )

        result = await self._controller.call(
            ControllerCall(
                ApiKey.ALLOCATE_PRODUCER_IDS,
                0,
                {"broker_id": node_id, "broker_epoch": epoch},
                timeout_s=REQUEST_TIMEOUT_S,
                read=read,
                here=here,
            )
        )
        if result.error_code != ErrorCode.none:
            log.info("[node %d] producer id block refused: %s", node_id, result.error_code.name)
            return -1, 0
        return result.first_id, result.count
