"""The `ShareStatePort` of a broker (Kafka's persister): each call goes to the share
coordinator of its key, this broker's own (`ShareCoordinatorService`) when it leads the
key's `__share_group_state` partition, else the leader's over the wire (the five RPCs,
on the connection the broker's inter-broker link security says, as transaction markers
go).

NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS and a lost
connection are tried again after `backoff_s`, at the leader the image names then, until
`deadline_s` has passed; then the last error is the answer. Every call makes sure
`__share_group_state` exists first (as Kafka's FindCoordinator does for a share key).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from strom.client import ClientError, NodeClient
from strom.client.security import ClientSecurity
from strom.protocol.apis import ApiKey
from strom.server.share_coordinator import ShareCoordinatorUnavailable
from strom.share.records import StateBatch
from strom.share.state_port import (
    ShareStateKey,
    ShareStateRead,
    ShareStateSummary,
    ShareStateWrite,
)

__all__ = ["ShareStateClient"]

log = logging.getLogger(__name__)

DEADLINE_S = 30.0
BACKOFF_S = 0.1
REQUEST_TIMEOUT_S = 10.0
RETRIABLE = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    }
)
# The versions sent: Kafka 4.1+'s newest (Write and the summary v1 carry KIP-1226's
# DeliveryCompleteCount).
VERSIONS = {
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE: 0,
    ApiKey.WRITE_SHARE_GROUP_STATE: 1,
    ApiKey.DELETE_SHARE_GROUP_STATE: 0,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: 1,
}

Answer = tuple[ErrorCode, str | None]
T = TypeVar("T")


class LocalCoordinator(Protocol):
    """This broker's share coordinator (server/share_coordinator.py): where keys live,
    the five calls for the keys it leads (raising ShareCoordinatorUnavailable), and its
    pruning of `__share_group_state` (a task the broker runs)."""

    @property
    def num_partitions(self) -> int: ...
    def partition_of(self, key: ShareStateKey) -> int: ...
    def leader_of(self, index: int) -> int: ...
    async def ensure_topic(self) -> None: ...
    async def initialize(
        self, key: ShareStateKey, state_epoch: int, start_offset: int
    ) -> Answer: ...
    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareStateRead: ...
    async def write(self, key: ShareStateKey, write: ShareStateWrite) -> Answer: ...
    async def delete(self, key: ShareStateKey) -> Answer: ...
    async def summary(self, key: ShareStateKey) -> ShareStateSummary: ...
    def follow(self, image: Any) -> None: ...
    async def run_pruning(self) -> None: ...
    def close(self) -> None: ...


class ShareStateClient:
    """Ports: the local coordinator, where a broker listens now (None: unknown or
    fenced), the inter-broker security of now."""

    def __init__(
        self,
        *,
        node_id: int,
        coordinator: LocalCoordinator,
        address: Callable[[int], tuple[str, int] | None],
        security: Callable[[], ClientSecurity | None] = lambda: None,
        deadline_s: float = DEADLINE_S,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self._node_id = node_id
        self.coordinator = coordinator
        self._address = address
        self._security = security
        self._deadline_s = deadline_s
        self._backoff_s = backoff_s
        self._clients: dict[int, NodeClient] = {}

    # --- the port ---------------------------------------------------------------------

    async def initialize(
        self, key: ShareStateKey, state_epoch: int, start_offset: int
    ) -> tuple[ErrorCode, str | None]:
        partition = {
            "partition": key.partition,
            "state_epoch": state_epoch,
            "start_offset": start_offset,
        }
        return await self._call(
            key,
            lambda: self.coordinator.initialize(key, state_epoch, start_offset),
            ApiKey.INITIALIZE_SHARE_GROUP_STATE,
            partition,
            _answer,
            lambda error, message: (error, message),
        )

    async def read(self, key: ShareStateKey, leader_epoch: int) -> ShareStateRead:
        return await self._call(
            key,
            lambda: self.coordinator.read(key, leader_epoch),
            ApiKey.READ_SHARE_GROUP_STATE,
            {"partition": key.partition, "leader_epoch": leader_epoch},
            _read,
            ShareStateRead,
        )

    async def write(
        self, key: ShareStateKey, write: ShareStateWrite
    ) -> tuple[ErrorCode, str | None]:
        partition = {
            "partition": key.partition,
            "state_epoch": write.state_epoch,
            "leader_epoch": write.leader_epoch,
            "start_offset": write.start_offset,
            "delivery_complete_count": write.delivery_complete_count,
            "state_batches": [
                {
                    "first_offset": b.first_offset,
                    "last_offset": b.last_offset,
                    "delivery_state": b.delivery_state,
                    "delivery_count": b.delivery_count,
                }
                for b in write.state_batches
            ],
        }
        return await self._call(
            key,
            lambda: self.coordinator.write(key, write),
            ApiKey.WRITE_SHARE_GROUP_STATE,
            partition,
            _answer,
            lambda error, message: (error, message),
        )

    async def delete(self, key: ShareStateKey) -> tuple[ErrorCode, str | None]:
        return await self._call(
            key,
            lambda: self.coordinator.delete(key),
            ApiKey.DELETE_SHARE_GROUP_STATE,
            {"partition": key.partition},
            _answer,
            lambda error, message: (error, message),
        )

    async def summary(self, key: ShareStateKey, leader_epoch: int) -> ShareStateSummary:
        return await self._call(
            key,
            lambda: self.coordinator.summary(key),
            ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
            {"partition": key.partition, "leader_epoch": leader_epoch},
            _summary,
            ShareStateSummary,
        )

    # --- routing ----------------------------------------------------------------------

    async def _call(
        self,
        key: ShareStateKey,
        local: Callable[[], Awaitable[T]],
        api_key: ApiKey,
        partition: dict[str, Any],
        parse: Callable[[Any], T],
        failure: Callable[[ErrorCode, str | None], T],
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._deadline_s
        while True:
            answer = await self._once(key, local, api_key, partition, parse, failure)
            error = answer[0] if isinstance(answer, tuple) else getattr(answer, "error")  # noqa: B009
            if error not in RETRIABLE or loop.time() + self._backoff_s >= deadline:
                return answer
            await asyncio.sleep(self._backoff_s)

    async def _once(
        self,
        key: ShareStateKey,
        local: Callable[[], Awaitable[T]],
        api_key: ApiKey,
        partition: dict[str, Any],
        parse: Callable[[Any], T],
        failure: Callable[[ErrorCode, str | None], T],
    ) -> T:
        coordinator = self.coordinator
        try:
            await coordinator.ensure_topic()
            leader = coordinator.leader_of(coordinator.partition_of(key))
            if leader < 0:
                return failure(ErrorCode.coordinator_not_available, "no leader now")
            if leader == self._node_id:
                return await local()
        except ShareCoordinatorUnavailable as exc:
            return failure(exc.error_code, str(exc))
        client = self._client(leader)
        if client is None:
            return failure(ErrorCode.coordinator_not_available, "no live coordinator")
        body = {
            "group_id": key.group_id,
            "topics": [{"topic_id": key.topic_id, "partitions": [partition]}],
        }
        try:
            response = await client.request(
                int(api_key), body, api_version=VERSIONS[api_key], timeout_s=REQUEST_TIMEOUT_S
            )
        except (ClientError, OSError, TimeoutError) as exc:
            log.info("[node %d] %s to broker %d: %s", self._node_id, api_key.name, leader, exc)
            return failure(ErrorCode.coordinator_not_available, str(exc))
        for topic in response.results:
            for result in topic.partitions:
                if int(result.partition) == key.partition:
                    return parse(result)
        return failure(ErrorCode.unknown_server_error, "the coordinator left the key out")

    def _client(self, broker_id: int) -> NodeClient | None:
        """A client of `broker_id` where it listens now, with the inter-broker security of
        now; None while it is unknown, unregistered or fenced."""
        address = self._address(broker_id)
        if address is None:
            return None
        client = self._clients.get(broker_id)
        security = self._security()
        same = client is not None and (client.host, client.port) == address
        if client is not None and same and client.security is security:
            return client
        if client is not None:
            client.close()
        client = self._clients[broker_id] = NodeClient(
            address[0],
            address[1],
            client_id=f"strom-share-state-{self._node_id}",
            node_id=broker_id,
            security=security,
        )
        return client

    def close(self) -> None:
        self.coordinator.close()
        for client in self._clients.values():
            client.close()
        self._clients.clear()


def _answer(result: Any) -> Answer:
    message = result.error_message
    return ErrorCode(result.error_code), None if message is None else str(message)


def _read(result: Any) -> ShareStateRead:
    error, message = _answer(result)
    return ShareStateRead(
        error,
        message,
        state_epoch=int(result.state_epoch),
        start_offset=int(result.start_offset),
        state_batches=tuple(
            StateBatch(
                int(b.first_offset),
                int(b.last_offset),
                int(b.delivery_state),
                int(b.delivery_count),
            )
            for b in result.state_batches
        ),
    )


def _summary(result: Any) -> ShareStateSummary:
    error, message = _answer(result)
    return ShareStateSummary(
        error,
        message,
        state_epoch=int(result.state_epoch),
        leader_epoch=int(result.leader_epoch),
        start_offset=int(result.start_offset),
        delivery_complete_count=int(getattr(result, "delivery_complete_count", -1)),
    )
