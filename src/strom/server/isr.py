"""Leaders propose ISR changes to the controller with AlterPartition.

A leader checks its partitions every half `replica.lag.time.max.ms` (for members to drop)
and after each follower fetch (for a follower that has caught up). A change goes to the
controller with the partition epoch it was based on; the controller refuses a change
based on a stale epoch, so two leaders (an old and a new one) cannot both move the ISR.
One request carries every change waiting at the time it is sent, and at most one
request is in flight: when a broker dies, the leaders of all its partitions' ISRs shrink
in a few requests, not one per partition.

The proposed ISR counts for the high watermark while it is in flight (see
replication.leader). The answer carries the committed ISR and partition epoch, which
the leader takes at once; the metadata image confirms them shortly after. A refused
change is proposed again at the next check, no sooner than `RETRY_S` later.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from strom.client import ClientError, build_request
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.clock import now_ms
from strom.server.controller import NotController
from strom.server.handlers.quorum import handle_alter_partition
from strom.server.partitions import Partition
from strom.server.tasks import TaskSet

if TYPE_CHECKING:
    from strom.server.broker import Broker

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 3
RETRY_S = 0.5
REQUEST_TIMEOUT_S = 10.0


class IsrManager:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._waiting: dict[tuple[str, int], tuple[Partition, tuple[int, ...]]] = {}
        self._not_before: dict[tuple[str, int], float] = {}
        self._wake = asyncio.Event()
        self._tasks = TaskSet(f"[node {broker.node_id}] isr")

    def start(self) -> None:
        self._tasks.spawn(self._check_loop(), "isr-check")
        self._tasks.spawn(self._send_loop(), "isr-send")

    async def stop(self) -> None:
        await self._tasks.stop()

    # --- deciding -----------------------------------------------------------------------

    def check(self, partition: Partition) -> None:
        """Propose the ISR change `partition` needs now, if any."""
        leader = partition.leader
        if leader is None or partition.log.closed:
            return
        loop = asyncio.get_running_loop()
        if self._not_before.get(partition.key, 0.0) > loop.time():
            return
        isr = leader.next_isr(
            now_ms(), self._broker.config.replica_lag_time_max_ms, partition.high_watermark
        )
        if isr is None or not isr:
            return
        leader.propose(isr)
        self._waiting[partition.key] = (partition, isr)
        self._wake.set()
        dropped = [b for b in partition.isr if b not in isr]
        added = [b for b in isr if b not in partition.isr]
        log.info(
            "[node %d] %s-%d: proposing ISR %s (%s)",
            self._broker.node_id,
            partition.topic,
            partition.index,
            list(isr),
            ", ".join([f"{b} lagging" for b in dropped] + [f"{b} caught up" for b in added]),
        )

    async def _check_loop(self) -> None:
        while True:
            interval_s = max(0.05, self._broker.config.replica_lag_time_max_ms / 2000)
            await asyncio.sleep(interval_s)
            for partition in self._broker.partitions:
                if partition.leader is not None:
                    self.check(partition)

    # --- sending ------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._waiting = self._waiting, {}
            batch = {
                key: (partition, isr)
                for key, (partition, isr) in batch.items()
                if partition.leader is not None and partition.leader.pending_isr == isr
            }
            if not batch:
                continue
            try:
                response = await self._send(list(batch.values()))
            except (NotController, ClientError, OSError, TimeoutError) as exc:
                log.info("[node %d] AlterPartition not sent: %s", self._broker.node_id, exc)
                self._refuse_all(batch.values())
                await asyncio.sleep(RETRY_S / 5)
                continue
            self._apply(batch, response)

    async def _send(self, items: list[tuple[Partition, tuple[int, ...]]]) -> Any:
        broker = self._broker
        lifecycle = broker.lifecycle
        epoch = lifecycle.epoch if lifecycle is not None else None
        if epoch is None:
            raise NotController(None)
        brokers = broker.image.brokers
        topics: dict[Any, list[dict[str, Any]]] = {}
        for partition, isr in items:
            assert partition.leader is not None
            topics.setdefault(partition.topic_id, []).append(
                {
                    "partition_index": partition.index,
                    "leader_epoch": partition.leader_epoch,
                    "new_isr_with_epochs": [
                        {
                            "broker_id": member,
                            "broker_epoch": brokers[member].epoch if member in brokers else -1,
                        }
                        for member in isr
                    ],
                    "leader_recovery_state": 0,
                    "partition_epoch": partition.leader.partition_epoch,
                }
            )
        fields = {
            "broker_id": broker.node_id,
            "broker_epoch": epoch,
            "topics": [
                {"topic_id": topic_id, "partitions": partitions}
                for topic_id, partitions in topics.items()
            ],
        }
        body = build_request(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, fields)
        if broker.channel.local_controller_active:  # the same handler, without the socket
            request = Request(
                ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, 0, f"strom-{broker.node_id}", body
            )
            return await handle_alter_partition(broker, request)
        return await broker.channel.request(
            ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, body, timeout_s=REQUEST_TIMEOUT_S
        )

    def _apply(
        self, batch: dict[tuple[str, int], tuple[Partition, tuple[int, ...]]], response: Any
    ) -> None:
        top = ErrorCode(response.error_code)
        if top != ErrorCode.none:
            log.info("[node %d] AlterPartition refused: %s", self._broker.node_id, top.name)
            self._refuse_all(batch.values())
            return
        by_id = {
            (partition.topic_id, partition.index): (partition, isr)
            for partition, isr in batch.values()
        }
        answered = set()
        current = now_ms()
        for topic in response.topics:
            for result in topic.partitions:
                found = by_id.get((topic.topic_id, int(result.partition_index)))
                if found is None:
                    continue
                partition, isr = found
                answered.add(partition.key)
                leader = partition.leader
                if leader is None or leader.pending_isr != isr:
                    continue
                error = ErrorCode(result.error_code)
                if error != ErrorCode.none:
                    log.info(
                        "[node %d] %s-%d: ISR change to %s refused: %s",
                        self._broker.node_id,
                        partition.topic,
                        partition.index,
                        list(isr),
                        error.name,
                    )
                    self._refuse(partition)
                    continue
                new_isr = tuple(int(b) for b in result.isr)
                partition_epoch = int(result.partition_epoch)
                if partition_epoch >= partition.partition_epoch:
                    partition.isr = new_isr
                    partition.partition_epoch = partition_epoch
                leader.pending_isr = None
                leader.update(
                    replicas=partition.replicas,
                    isr=new_isr,
                    partition_epoch=partition_epoch,
                    now_ms=current,
                )
                partition.advance_high_watermark()
        self._refuse_all(p for key, p in batch.items() if key not in answered)

    def _refuse(self, partition: Partition) -> None:
        if partition.leader is not None:
            partition.leader.refused()
        self._not_before[partition.key] = asyncio.get_running_loop().time() + RETRY_S

    def _refuse_all(self, items: Any) -> None:
        for partition, _isr in items:
            self._refuse(partition)
