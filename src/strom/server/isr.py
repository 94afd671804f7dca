"""Leaders' ISR changes go to the controller with AlterPartition.

The decisions are the replication core's (replication.replica): it proposes a change
after a follower fetch (a follower caught up) and at the check every half
`replica.lag.time.max.ms` (members lagging); this module only carries the proposals to
the controller and the answers back. A change goes to the
controller with the partition epoch it was based on; the controller refuses a change
based on a stale epoch, so two leaders (an old and a new one) cannot both move the ISR.
One request carries every change waiting at the time it is sent, and at most one
request is in flight: when a broker dies, the leaders of all its partitions' ISRs shrink
in a few requests, not one per partition.

The proposed ISR counts for the high watermark while it is in flight (see
replication.leader). The answer carries the committed ISR and partition epoch, which
the leader takes at once; the metadata image confirms them shortly after. A refused
change is proposed again at the next check, no sooner than `ISR_RETRY_MS` later.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from strom.client import ClientError, build_request
from strom.config import BrokerConfig
from strom.metadata.image import MetadataImage
from strom.protocol.apis import ApiKey
from strom.replication.replica import ProposeIsr
from strom.server.clock import now_ms
from strom.server.controller import NotController
from strom.server.controller_link import ActiveController, ControllerCall
from strom.server.partition import Partition
from strom.server.tasks import TaskSet

log = logging.getLogger(__name__)

ALTER_PARTITION_VERSION = 3
RETRY_S = 0.1  # after a failed send, before the next one
REQUEST_TIMEOUT_S = 10.0


class IsrManager:
    """Carries the partitions' proposed ISR changes to the controller (see the module
    docstring). Ports, each read when it is used:

    - `config`: the broker's config now (`replica.lag.time.max.ms` paces the checks);
    - `image`: the committed metadata image, whose broker epochs go with the proposed
      members;
    - `broker_epoch`: this broker's epoch from its registration, None before;
    - `partitions`: the partitions this broker holds, for the checks;
    - `controller`: the active controller, who gets the AlterPartition requests.
    """

    def __init__(
        self,
        *,
        node_id: int,
        config: Callable[[], BrokerConfig],
        image: Callable[[], MetadataImage],
        broker_epoch: Callable[[], int | None],
        partitions: Callable[[], Iterable[Partition]],
        controller: ActiveController,
    ) -> None:
        self._node_id = node_id
        self._config = config
        self._image = image
        self._broker_epoch = broker_epoch
        self._partitions = partitions
        self._controller = controller
        self._waiting: dict[tuple[str, int], tuple[Partition, ProposeIsr]] = {}
        self._wake = asyncio.Event()
        self._tasks = TaskSet(f"[node {node_id}] isr")
        self._logged: dict[tuple[str, int], ProposeIsr] = {}
        """The last change logged per partition: a change sent again is not logged again."""
        self._send_problem: str | None = None

    def start(self) -> None:
        self._tasks.spawn(self._check_loop(), "isr-check")
        self._tasks.spawn(self._send_loop(), "isr-send")

    async def stop(self) -> None:
        await self._tasks.stop()

    def propose(self, partition: Partition, change: ProposeIsr) -> None:
        """A partition's core proposes `change` (a ReplicaPorts port)."""
        self._waiting[partition.key] = (partition, change)
        self._wake.set()
        if self._logged.get(partition.key) == change:
            return  # the same change again, after no answer: said once
        self._logged[partition.key] = change
        log.info(
            "[node %d] %s-%d: proposing ISR %s (%s)",
            self._node_id,
            partition.topic,
            partition.index,
            list(change.isr),
            ", ".join(
                [f"{b} lagging" for b in change.leaving]
                + [f"{b} caught up" for b in change.joining]
            ),
        )

    async def _check_loop(self) -> None:
        while True:
            interval_s = max(0.05, self._config().replica_lag_time_max_ms / 2000)
            await asyncio.sleep(interval_s)
            current = now_ms()
            for partition in self._partitions():
                if partition.is_leader and not partition.log.closed:
                    partition.isr_tick(current)

    # --- sending ------------------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            batch, self._waiting = self._waiting, {}
            batch = {
                key: (partition, change)
                for key, (partition, change) in batch.items()
                if partition.leader is not None and partition.leader.pending_isr == change.isr
            }
            if not batch:
                continue
            try:
                response = await self._send(list(batch.values()))
            except (NotController, ClientError, OSError, TimeoutError) as exc:
                problem = str(exc) or type(exc).__name__
                if problem != self._send_problem:  # each new reason once, not every retry
                    log.info("[node %d] AlterPartition not sent: %s", self._node_id, problem)
                    self._send_problem = problem
                self._unanswered(batch.values())
                await asyncio.sleep(RETRY_S)
                continue
            self._send_problem = None
            self._apply(batch, response)

    async def _send(self, items: list[tuple[Partition, ProposeIsr]]) -> Any:
        epoch = self._broker_epoch()
        if epoch is None:
            raise NotController(None)
        brokers = self._image().brokers
        topics: dict[Any, list[dict[str, Any]]] = {}
        for partition, change in items:
            topics.setdefault(partition.topic_id, []).append(
                {
                    "partition_index": partition.index,
                    "leader_epoch": change.leader_epoch,
                    "new_isr_with_epochs": [
                        {
                            "broker_id": member,
                            "broker_epoch": brokers[member].epoch if member in brokers else -1,
                        }
                        for member in change.isr
                    ],
                    "leader_recovery_state": 0,
                    "partition_epoch": change.partition_epoch,
                }
            )
        fields = {
            "broker_id": self._node_id,
            "broker_epoch": epoch,
            "topics": [
                {"topic_id": topic_id, "partitions": partitions}
                for topic_id, partitions in topics.items()
            ],
        }
        body = build_request(ApiKey.ALTER_PARTITION, ALTER_PARTITION_VERSION, fields)
        # This node's controller answers through its own handler (here=None), and a
        # refusal as a whole, NOT_CONTROLLER too, is read in _apply.
        call: ControllerCall[Any] = ControllerCall(
            ApiKey.ALTER_PARTITION,
            ALTER_PARTITION_VERSION,
            body,
            timeout_s=REQUEST_TIMEOUT_S,
            read=lambda response: response,
            not_controller_raises=False,
        )
        return await self._controller.call(call)

    def _apply(
        self, batch: dict[tuple[str, int], tuple[Partition, ProposeIsr]], response: Any
    ) -> None:
        top = ErrorCode(response.error_code)
        if top != ErrorCode.none:
            log.info("[node %d] AlterPartition refused: %s", self._node_id, top.name)
            self._unanswered(batch.values())  # not looked at: sent again later
            return
        by_id = {
            (partition.topic_id, partition.index): (partition, change)
            for partition, change in batch.values()
        }
        answered = set()
        current = now_ms()
        for topic in response.topics:
            for result in topic.partitions:
                found = by_id.get((topic.topic_id, int(result.partition_index)))
                if found is None:
                    continue
                partition, change = found
                answered.add(partition.key)
                self._logged.pop(partition.key, None)
                leader = partition.leader
                if leader is None or leader.pending_isr != change.isr:
                    continue
                error = ErrorCode(result.error_code)
                if error != ErrorCode.none:
                    log.info(
                        "[node %d] %s-%d: ISR change to %s refused: %s",
                        self._node_id,
                        partition.topic,
                        partition.index,
                        list(change.isr),
                        error.name,
                    )
                    partition.isr_refused(error, current)
                    continue
                partition.isr_answered(
                    tuple(int(b) for b in result.isr), int(result.partition_epoch), current
                )
        self._unanswered(p for key, p in batch.items() if key not in answered)

    @staticmethod
    def _unanswered(items: Any) -> None:
        """No answer says whether these changes were made: they keep counting for the
        high watermark and go again (replication.replica.NOT_APPLIED)."""
        current = now_ms()
        for partition, _change in items:
            partition.isr_unanswered(current)
