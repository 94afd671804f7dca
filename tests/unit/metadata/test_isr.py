"""AlterPartition at the controller: every refusal in Kafka's order, and ISR changes."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from cluster_harness import cluster, commit, create_topic, fence, heartbeat, partition, register
from kio.schema.errors import ErrorCode

from strom.metadata import brokers, isr
from strom.metadata.image import MetadataImage
from strom.metadata.isr import IsrChange, IsrMember
from strom.metadata.records import PartitionChangeRecord
from strom.protocol.apis import ApiKey
from strom.protocol.codec import build, decode_request, encode_request, encode_response
from strom.protocol.codec import request_class as kio_request_class
from strom.server.handlers.quorum import handle_alter_partition


def one_topic() -> MetadataImage:
    """Brokers 1-3 live; t-0 on (1, 2, 3), led by 1, all in sync, both epochs 0."""
    return create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3)})


def topic_id(image: MetadataImage, name: str = "t") -> uuid.UUID:
    return image.topics_by_name[name].topic_id


def ask(
    image: MetadataImage,
    new_isr: Sequence[int | IsrMember],
    *,
    broker_id: int | None = None,
    broker_epoch: int | None = None,
    topic: uuid.UUID | None = None,
    index: int = 0,
    leader_epoch: int | None = None,
    partition_epoch: int | None = None,
) -> tuple[list[Any], isr.PartitionIsrResult]:
    """AlterPartition for t-`index`, by default from its leader with the current epochs."""
    p = partition(image, "t", index) if index in image.topics_by_name["t"].partitions else None
    requester = broker_id if broker_id is not None else (p.leader if p else 1)
    return isr.alter_partition(
        image,
        broker_id=requester,
        broker_epoch=broker_epoch if broker_epoch is not None else image.brokers[requester].epoch,
        topic_id=topic or topic_id(image),
        partition=index,
        leader_epoch=leader_epoch if leader_epoch is not None else (p.leader_epoch if p else 0),
        partition_epoch=partition_epoch
        if partition_epoch is not None
        else (p.partition_epoch if p else 0),
        new_isr=new_isr,
        is_live=image.is_live,
    )


def refused(image: MetadataImage, code: ErrorCode, new_isr: Sequence[int], **kw: Any) -> None:
    records, result = ask(image, new_isr, **kw)
    assert records == [], result
    assert result.error_code == code, result
    assert result.message, result


# ---------------------------------------------------------------- successes


def test_a_shrink_writes_one_change_bumping_only_the_partition_epoch() -> None:
    image = one_topic()
    records, result = ask(image, (1, 2))
    assert records == [PartitionChangeRecord(topic_id(image), 0, 1, (1, 2), 0, 1)]
    image = commit(image, records)
    p = partition(image, "t")
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (1, (1, 2), 0, 1)
    assert (result.error_code, result.leader, result.leader_epoch) == (ErrorCode.none, 1, 0)
    assert (result.isr, result.partition_epoch, result.changed) == ((1, 2), 1, True)


def test_a_caught_up_follower_is_added_back() -> None:
    image = fence(one_topic(), 3)
    image, _ = heartbeat(image, 3)
    assert partition(image, "t").isr == (1, 2)  # unfenced, not in sync yet
    records, result = ask(image, (1, 2, IsrMember(3, image.brokers[3].epoch)))
    image = commit(image, records)
    assert partition(image, "t").isr == (1, 2, 3) and result.isr == (1, 2, 3)
    assert partition(image, "t").leader_epoch == 0


def test_the_same_isr_writes_nothing_and_answers_the_current_state() -> None:
    image = fence(one_topic(), 3)
    records, result = ask(image, (1, 2))
    p = partition(image, "t")
    assert records == []
    assert result == isr.PartitionIsrResult(
        topic_id(image), 0, ErrorCode.none, 1, p.leader_epoch, (1, 2), p.partition_epoch
    )


def test_a_v2_member_without_a_broker_epoch_is_not_checked() -> None:
    image = one_topic()
    records, result = ask(image, (IsrMember(1), IsrMember(2, -1)))
    assert result.error_code == ErrorCode.none and len(records) == 1


def test_a_request_decides_its_partitions_in_order_in_one_decision() -> None:
    image = create_topic(cluster(1, 2, 3), "t", {0: (1, 2, 3), 1: (1, 3, 2)})
    tid = topic_id(image)
    changes = [
        IsrChange(tid, 0, 0, 0, isr.members((1, 2))),
        IsrChange(tid, 1, 0, 0, isr.members((1, 3))),
        IsrChange(tid, 0, 0, 0, isr.members((1,))),  # based on the epoch the first moved
        IsrChange(tid, 7, 0, 0, isr.members((1,))),
    ]
    records, result = isr.alter_partitions(
        image,
        broker_id=1,
        broker_epoch=image.brokers[1].epoch,
        changes=changes,
        is_live=image.is_live,
    )
    assert result.error_code == ErrorCode.none
    assert [r.error_code for r in result.partitions] == [
        ErrorCode.none,
        ErrorCode.none,
        ErrorCode.invalid_update_version,
        ErrorCode.unknown_topic_or_partition,
    ]
    assert len(records) == 2
    image = commit(image, records)
    assert partition(image, "t", 0).isr == (1, 2) and partition(image, "t", 1).isr == (1, 3)


# ---------------------------------------------------------------- refusals


def test_a_stale_or_unknown_broker_epoch_refuses_the_whole_request() -> None:
    image = one_topic()
    change = IsrChange(topic_id(image), 0, 0, 0, isr.members((1, 2)))
    for broker_id, epoch in ((1, image.brokers[1].epoch - 1), (9, 0)):
        records, result = isr.alter_partitions(
            image, broker_id=broker_id, broker_epoch=epoch, changes=[change], is_live=image.is_live
        )
        assert records == [] and result.partitions == ()
        assert result.error_code == ErrorCode.stale_broker_epoch and result.message
    refused(image, ErrorCode.stale_broker_epoch, (1, 2), broker_epoch=999)


def test_an_old_broker_process_is_refused_after_its_restart() -> None:
    image = one_topic()
    old_epoch = image.brokers[1].epoch
    image = register(image, 1, generation=1)  # a new incarnation, a new epoch
    refused(image, ErrorCode.stale_broker_epoch, (2, 3), broker_id=1, broker_epoch=old_epoch)


def test_unknown_topics_and_partitions() -> None:
    image = one_topic()
    refused(image, ErrorCode.unknown_topic_id, (1, 2), topic=uuid.UUID(int=12345))
    refused(image, ErrorCode.unknown_topic_id, (1, 2), topic=uuid.UUID(int=0))
    refused(image, ErrorCode.unknown_topic_or_partition, (1, 2), index=3, broker_id=1)


def test_epochs_newer_than_the_controllers_mean_it_is_not_the_controller() -> None:
    image = one_topic()
    refused(image, ErrorCode.not_controller, (1, 2), leader_epoch=1)
    refused(image, ErrorCode.not_controller, (1, 2), partition_epoch=1)


def test_a_deposed_leader_is_fenced_by_its_leader_epoch() -> None:
    image = one_topic()
    image = fence(image, 1)  # 2 leads at leader epoch 1
    image, _ = heartbeat(image, 1)
    assert partition(image, "t").leader == 2
    refused(image, ErrorCode.fenced_leader_epoch, (1, 2), broker_id=1, leader_epoch=0)


def test_only_the_leader_may_change_the_isr() -> None:
    refused(one_topic(), ErrorCode.invalid_request, (1, 2), broker_id=2)


def test_a_change_based_on_an_old_partition_epoch_is_refused() -> None:
    image = one_topic()
    records, _ = ask(image, (1, 2))  # the leader drops 3 ...
    image = commit(image, records)
    # ... and a second change based on the same partition epoch 0 loses.
    refused(image, ErrorCode.invalid_update_version, (1, 3), partition_epoch=0)
    # So does one based on the state before a fence moved the partition epoch on.
    image = fence(image, 2)
    refused(image, ErrorCode.invalid_update_version, (1,), partition_epoch=1)


def test_checks_come_in_kafkas_order() -> None:
    image = commit(one_topic(), ask(one_topic(), (1, 2))[0])  # partition epoch 1
    # not the leader, and an old partition epoch: the leader is checked first
    refused(image, ErrorCode.invalid_request, (1, 2), broker_id=2, partition_epoch=0)
    # an old leader epoch, not the leader, an invalid ISR: the leader epoch comes first
    image = fence(image, 1)
    refused(image, ErrorCode.fenced_leader_epoch, (9,), broker_id=3, leader_epoch=0)
    # a newer epoch comes before everything else
    refused(image, ErrorCode.not_controller, (9,), broker_id=3, leader_epoch=5)
    # an invalid ISR comes before an ineligible member
    image = fence(image, 3)
    refused(image, ErrorCode.invalid_request, (3,), broker_id=2)


@pytest.mark.parametrize(
    "new_isr",
    [(1, 2, 4), (1, 1, 2), (2, 3), (), (1, -1)],
    ids=["not-a-replica", "repeated", "without-the-leader", "empty", "negative"],
)
def test_an_invalid_new_isr_is_an_invalid_request(new_isr: tuple[int, ...]) -> None:
    image = create_topic(cluster(1, 2, 3, 4), "t", {0: (1, 2, 3)})
    refused(image, ErrorCode.invalid_request, new_isr)


def test_fenced_unregistered_or_reincarnated_members_are_ineligible() -> None:
    image = one_topic()
    image = fence(image, 3)
    refused(image, ErrorCode.ineligible_replica, (1, 2, 3))
    image, _ = heartbeat(image, 3)
    old_epoch = image.brokers[3].epoch
    records, result = ask(image, (1, 2, IsrMember(3, old_epoch)))
    assert result.error_code == ErrorCode.none
    image = commit(image, records)
    image = fence(image, 2)
    image = commit(image, brokers.unregister_broker(image, 2)[0])
    refused(image, ErrorCode.ineligible_replica, (1, 2, 3))  # 2 is gone
    image = fence(image, 3)
    image = register(image, 3, generation=1)
    image, _ = heartbeat(image, 3)
    # 3 caught up in its earlier life: its new process has to catch up again
    refused(image, ErrorCode.ineligible_replica, (1, IsrMember(3, old_epoch)))
    records, result = ask(image, (1, IsrMember(3, image.brokers[3].epoch)))
    assert result.error_code == ErrorCode.none


def test_liveness_is_the_callers_view() -> None:
    image = one_topic()
    records, result = isr.alter_partition(
        image,
        broker_id=1,
        broker_epoch=image.brokers[1].epoch,
        topic_id=topic_id(image),
        partition=0,
        leader_epoch=0,
        partition_epoch=0,
        new_isr=(1, 2, 3),
        is_live=lambda b: b != 3,
    )
    assert records == [] and result.error_code == ErrorCode.ineligible_replica


# ---------------------------------------------------------------- the handler


class _Controller:
    """The parts of ControllerService the AlterPartition handler uses, over an image."""

    def __init__(self, image: MetadataImage, *, active: bool = True) -> None:
        self.image = image
        self.active = active

    async def alter_partition(
        self, *, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> isr.AlterPartitionResult:
        records, result = isr.alter_partitions(
            self.image,
            broker_id=broker_id,
            broker_epoch=broker_epoch,
            changes=changes,
            is_live=self.image.is_live,
        )
        self.image = commit(self.image, records)
        return result


def _context(controller: _Controller | None) -> Any:
    """The handler's context: only its controller port is read."""
    return SimpleNamespace(controller=lambda: controller)


def _alter_partition_request(version: int, fields: dict[str, Any]) -> Any:
    body = build(kio_request_class(ApiKey.ALTER_PARTITION, version), fields)
    return decode_request(encode_request(ApiKey.ALTER_PARTITION, version, 7, body)[4:])


@pytest.mark.parametrize("version", [2, 3])
def test_the_handler_answers_per_partition_and_refuses_when_not_the_controller(
    version: int,
) -> None:
    image = one_topic()
    tid = topic_id(image)
    fields = {
        "broker_id": 1,
        "broker_epoch": image.brokers[1].epoch,
        "topics": [
            {
                "topic_id": tid,
                "partitions": [
                    {
                        "partition_index": 0,
                        "leader_epoch": 0,
                        "new_isr": [1, 2],
                        "new_isr_with_epochs": [
                            {"broker_id": 1, "broker_epoch": image.brokers[1].epoch},
                            {"broker_id": 2, "broker_epoch": -1},
                        ],
                        "leader_recovery_state": 0,
                        "partition_epoch": 0,
                    },
                    {
                        "partition_index": 5,
                        "leader_epoch": 0,
                        "new_isr": [1],
                        "new_isr_with_epochs": [{"broker_id": 1, "broker_epoch": -1}],
                        "leader_recovery_state": 0,
                        "partition_epoch": 0,
                    },
                ],
            }
        ],
    }
    request = _alter_partition_request(version, fields)
    controller = _Controller(image)
    response = asyncio.run(handle_alter_partition(_context(controller), request))
    encode_response(7, response)
    assert response.error_code == ErrorCode.none
    [topic] = response.topics
    assert topic.topic_id == tid
    first, second = topic.partitions
    assert (first.error_code, tuple(first.isr), first.partition_epoch) == (
        ErrorCode.none,
        (1, 2),
        1,
    )
    assert second.error_code == ErrorCode.unknown_topic_or_partition
    assert partition(controller.image, "t").isr == (1, 2)

    stale = _alter_partition_request(version, {**fields, "broker_epoch": 999})
    response = asyncio.run(handle_alter_partition(_context(controller), stale))
    assert response.error_code == ErrorCode.stale_broker_epoch and response.topics == ()

    for context in (_context(None), _context(_Controller(image, active=False))):
        response = asyncio.run(handle_alter_partition(context, request))
        encode_response(7, response)
        assert response.error_code == ErrorCode.not_controller
