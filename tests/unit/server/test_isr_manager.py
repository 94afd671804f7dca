"""The ISR manager (server/isr.py) between real partition leaders and a scripted
controller: the AlterPartition a shrink proposes, and what the leader does with each
kind of answer.

Partition 0 of TOPIC has replicas 1 (the leader, this node), 2, 3 and 4, all in the ISR.
Broker 3 is fenced, broker 4 was never registered. At LAG_MS + 1 ms, broker 2 has not
fetched since the partition opened (it lags) while 3 and 4 fetched the leader's end at
HALF_LAG_MS: the leader proposes the ISR [1, 3, 4]. The partitions' clock is manual;
the send loop runs by turns of the event loop."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from controller_fakes import ScriptedController
from kio.schema.errors import ErrorCode
from server_harness import TOPIC, TOPIC_ID, InlineDurability, image_of, run, turns

from strom.config import load_config
from strom.metadata.image import MetadataImage
from strom.metadata.records import FenceBrokerRecord
from strom.protocol.apis import ApiKey
from strom.server.controller import NotController
from strom.server.isr import IsrManager
from strom.server.partition import Partition, ReplicaPorts
from strom.server.partitions import PartitionManager

NODE_ID = 1
BROKER_EPOCH = 42
LAG_MS = 30_000  # replica.lag.time.max.ms, its default
HALF_LAG_MS = LAG_MS // 2
SHRUNK = (1, 3, 4)


def fenced_image() -> MetadataImage:
    image = image_of(replicas=(1, 2, 3, 4))
    return image.replay([FenceBrokerRecord(3, image.brokers[3].epoch)])


class Leader:
    """Node 1 leading partition 0, its ISR proposals going to an IsrManager."""

    def __init__(
        self,
        tmp_path: Path,
        controller: ScriptedController,
        *,
        broker_epoch: int | None = BROKER_EPOCH,
    ) -> None:
        config = load_config(overrides=[f"node.id={NODE_ID}", f"log.dirs={tmp_path}"])
        self.image = fenced_image()
        self.controller = controller
        self.isr = IsrManager(
            node_id=NODE_ID,
            config=lambda: config,
            image=lambda: self.image,
            broker_epoch=lambda: broker_epoch,
            partitions=lambda: self.partitions,
            controller=controller,
        )
        self.partitions = PartitionManager(
            config,
            ports=ReplicaPorts(
                propose_isr=self.isr.propose,
                on_role=lambda _partition: None,
                durability=InlineDurability(),
            ),
        )
        self.partitions.sync(self.image, now_ms=0)

    @property
    def partition(self) -> Partition:
        found = self.partitions.get(TOPIC, 0)
        assert found is not None
        return found

    async def shrink(self) -> None:
        """Brokers 3 and 4 fetch, 2 does not; the check after LAG_MS proposes SHRUNK,
        and the send loop sends it."""
        self.isr.start()
        for follower in (3, 4):
            assert self.partition.follower_fetch(follower, 0, HALF_LAG_MS) == ErrorCode.none
        self.partition.isr_tick(LAG_MS + 1)
        await turns(3)

    async def stop(self) -> None:
        await self.isr.stop()
        self.partitions.close()


def answer(
    *, error: ErrorCode = ErrorCode.none, partition_error: ErrorCode = ErrorCode.none
) -> Mapping[str, Any]:
    """The controller's AlterPartition response for partition 0: the ISR SHRUNK at
    partition epoch 2 (the image's is 1), or `partition_error` for it."""
    refused = partition_error != ErrorCode.none
    return {
        "throttle_time": 0,
        "error_code": error,
        "topics": [
            {
                "topic_id": TOPIC_ID,
                "partitions": [
                    {
                        "partition_index": 0,
                        "error_code": partition_error,
                        "leader_id": 1,
                        "leader_epoch": 3,
                        "isr": [] if refused else list(SHRUNK),
                        "leader_recovery_state": 0,
                        "partition_epoch": -1 if refused else 2,
                    }
                ],
            }
        ]
        if error == ErrorCode.none
        else [],
    }


def test_a_shrink_proposes_the_isr_with_each_members_broker_epoch(tmp_path: Path) -> None:
    """The fenced broker goes with the epoch it registered in, the unregistered one with
    -1: the controller, not the leader, decides whether they may stay (KIP-841)."""
    leader = Leader(tmp_path, ScriptedController([answer()]))

    async def scenario() -> None:
        await leader.shrink()
        await leader.stop()

    run(scenario())
    [call] = leader.controller.calls
    assert (call.api_key, call.api_version, call.timeout_s) == (ApiKey.ALTER_PARTITION, 3, 10.0)
    assert call.here is None, "this node's controller answers through its own handler"
    assert not call.not_controller_raises, "a refusal as a whole is read by the manager"
    body = call.body
    assert (body.broker_id, body.broker_epoch) == (NODE_ID, BROKER_EPOCH)
    [topic] = body.topics
    assert topic.topic_id == TOPIC_ID
    [proposed] = topic.partitions
    brokers = leader.image.brokers
    assert brokers[3].fenced and 4 not in brokers
    assert (proposed.partition_index, proposed.leader_epoch, proposed.partition_epoch) == (0, 3, 1)
    assert [(int(m.broker_id), int(m.broker_epoch)) for m in proposed.new_isr_with_epochs] == [
        (1, brokers[1].epoch),
        (3, brokers[3].epoch),
        (4, -1),
    ]


def test_the_committed_isr_is_taken_at_once(tmp_path: Path) -> None:
    leader = Leader(tmp_path, ScriptedController([answer()]))

    async def scenario() -> None:
        await leader.shrink()
        assert leader.partition.isr == SHRUNK
        assert leader.partition.replica.partition_epoch == 2
        leader.partition.isr_tick(LAG_MS + 2)  # nothing lags any more: nothing to send
        await turns(3)
        await leader.stop()

    run(scenario())
    assert len(leader.controller.calls) == 1


def test_a_refused_member_leaves_the_isr_as_it_was(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """INELIGIBLE_REPLICA (the fenced broker 3) says the change was not made: the leader
    forgets it, keeps its ISR, and proposes again later."""
    leader = Leader(
        tmp_path, ScriptedController([answer(partition_error=ErrorCode.ineligible_replica)])
    )

    async def scenario() -> None:
        with caplog.at_level(logging.INFO, logger="strom.server.isr"):
            await leader.shrink()
        partition = leader.partition
        assert partition.isr == (1, 2, 3, 4)
        assert partition.leader is not None and partition.leader.pending_isr is None
        await leader.stop()

    run(scenario())
    assert [r.getMessage() for r in caplog.records] == [
        "[node 1] orders-0: proposing ISR [1, 3, 4] (2 lagging)",
        "[node 1] orders-0: ISR change to [1, 3, 4] refused: ineligible_replica",
    ]


def test_a_request_refused_as_a_whole_keeps_the_change_pending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """NOT_CONTROLLER for the whole request says nothing of the change: the proposed ISR
    keeps counting for the high watermark, and goes again at a later check."""
    leader = Leader(tmp_path, ScriptedController([answer(error=ErrorCode.not_controller)]))

    async def scenario() -> None:
        with caplog.at_level(logging.INFO, logger="strom.server.isr"):
            await leader.shrink()
        partition = leader.partition
        assert partition.isr == (1, 2, 3, 4)
        assert partition.leader is not None and partition.leader.pending_isr == SHRUNK
        await leader.stop()

    run(scenario())
    assert caplog.records[-1].getMessage() == "[node 1] AlterPartition refused: not_controller"


def test_no_controller_is_said_once_and_the_change_stays_pending(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    leader = Leader(tmp_path, ScriptedController([NotController(7)]))

    async def scenario() -> None:
        with caplog.at_level(logging.INFO, logger="strom.server.isr"):
            await leader.shrink()
        partition = leader.partition
        assert partition.leader is not None and partition.leader.pending_isr == SHRUNK
        await leader.stop()

    run(scenario())
    assert caplog.records[-1].getMessage() == (
        "[node 1] AlterPartition not sent: not the active controller (the active controller is 7)"
    )


def test_an_unregistered_broker_sends_nothing(tmp_path: Path) -> None:
    """Without a broker epoch the controller would refuse the request: it is not sent."""
    leader = Leader(tmp_path, ScriptedController(), broker_epoch=None)

    async def scenario() -> None:
        await leader.shrink()
        partition = leader.partition
        assert partition.leader is not None and partition.leader.pending_isr == SHRUNK
        await leader.stop()

    run(scenario())
    assert leader.controller.calls == []
