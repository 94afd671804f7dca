"""BrokerRegistration, BrokerHeartbeat, AllocateProducerIds, AlterPartition and
DescribeQuorum, called with their context around a real ControllerService on the
in-memory metadata store: no broker started, no socket, no sleep."""

from __future__ import annotations

import uuid
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

from kio.schema.errors import ErrorCode
from quorum_harness import (
    LISTENER,
    QUORUM,
    DescribedQuorum,
    allocation,
    alter_partition,
    answered,
    cluster,
    describe_quorum,
    heartbeat,
    quorum_context,
    registration,
    until,
    wire,
)
from server_harness import run

from strom.metadata.records import PartitionRecord, TopicRecord
from strom.metadata.stores.memory import MemoryLog
from strom.protocol.apis import ApiKey
from strom.server.broker import Broker
from strom.server.handlers.quorum import (
    controller_describe_quorum,
    handle_allocate_producer_ids,
    handle_alter_partition,
    handle_broker_heartbeat,
    handle_broker_registration,
    handle_describe_quorum,
)

TOPIC_ID = uuid.UUID(int=0x7AB1E)


async def registered(controller: Broker, broker_id: int) -> int:
    """Register `broker_id` through the handler at `controller`; its broker epoch."""
    answer = await answered(
        handle_broker_registration,
        quorum_context(controller),
        registration(broker_id, controller.metadata.image.cluster_id),
    )
    assert answer.error_code == ErrorCode.none
    return int(answer.broker_epoch)


async def unfenced(controller: Broker, broker_id: int) -> int:
    """Register `broker_id` and heartbeat it as caught up; its broker epoch."""
    epoch = await registered(controller, broker_id)
    answer = await answered(
        handle_broker_heartbeat,
        quorum_context(controller),
        heartbeat(broker_id, epoch, controller.metadata.applied_index),
    )
    assert (answer.error_code, answer.is_fenced) == (ErrorCode.none, False)
    return epoch


def test_registration_with_another_cluster_s_id_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        answer = await answered(
            handle_broker_registration, quorum_context(one), registration(2, "another-cluster")
        )
        assert answer.error_code == ErrorCode.inconsistent_cluster_id
        assert answer.broker_epoch == -1
        assert 2 not in one.metadata.image.brokers

    run(scenario())


def test_registration_without_a_listener_is_an_invalid_request(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        cluster_id = one.metadata.image.cluster_id
        answer = await answered(
            handle_broker_registration,
            quorum_context(one),
            registration(2, cluster_id, listeners=False),
        )
        assert (answer.error_code, answer.broker_epoch) == (ErrorCode.invalid_request, -1)

    run(scenario())


def test_a_registered_broker_is_unfenced_by_its_first_caught_up_heartbeat(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        one, two = await cluster(MemoryLog(), tmp_path, 1, 2)
        context = quorum_context(one)
        epoch = await registered(one, 2)
        assert epoch > 0
        await until(two, lambda image: 2 in image.brokers)
        assert two.metadata.image.brokers[2].fenced  # registered brokers start fenced

        # Not yet caught up with its own registration (the broker epoch is its offset).
        behind = await answered(handle_broker_heartbeat, context, heartbeat(2, epoch, epoch - 1))
        assert behind.error_code == ErrorCode.none
        assert (behind.is_caught_up, behind.is_fenced, behind.should_shut_down) == (
            False,
            True,
            False,
        )

        caught_up = await answered(handle_broker_heartbeat, context, heartbeat(2, epoch, epoch))
        assert caught_up.error_code == ErrorCode.none
        assert (caught_up.is_caught_up, caught_up.is_fenced, caught_up.should_shut_down) == (
            True,
            False,
            False,
        )
        await until(two, lambda image: not image.brokers[2].fenced)

    run(scenario())


def test_a_heartbeat_with_a_stale_epoch_is_refused_and_stays_fenced(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        context = quorum_context(one)
        epoch = await registered(one, 2)
        offset = one.metadata.applied_index
        stale = await answered(handle_broker_heartbeat, context, heartbeat(2, epoch - 1, offset))
        assert stale.error_code == ErrorCode.stale_broker_epoch
        assert (stale.is_caught_up, stale.is_fenced) == (False, True)
        unknown = await answered(handle_broker_heartbeat, context, heartbeat(9, epoch, offset))
        assert unknown.error_code == ErrorCode.broker_id_not_registered
        assert one.metadata.image.brokers[2].fenced

    run(scenario())


def test_only_the_active_controller_answers_and_it_is_asked_at_each_request(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        log = MemoryLog()
        one, two = await cluster(log, tmp_path, 1, 2)
        cluster_id = one.metadata.image.cluster_id
        epoch = await registered(one, 3)
        topic = uuid.UUID(int=1)
        at_two = quorum_context(two)  # built once, like the broker's
        for handler, asked in [
            (handle_broker_registration, registration(4, cluster_id)),
            (handle_broker_heartbeat, heartbeat(3, epoch, epoch)),
            (handle_allocate_producer_ids, allocation(3, epoch)),
            (
                handle_alter_partition,
                alter_partition(3, epoch, topic, leader_epoch=0, partition_epoch=0, isr=[]),
            ),
        ]:
            answer = await answered(handler, at_two, asked)
            assert answer.error_code == ErrorCode.not_controller, asked.api_key
        refused = await answered(handle_broker_registration, at_two, registration(4, cluster_id))
        assert refused.broker_epoch == -1

        no_controller = replace(at_two, controller=lambda: None)  # a broker-only node
        answer = await answered(handle_broker_heartbeat, no_controller, heartbeat(3, epoch, 0))
        assert (answer.error_code, answer.is_fenced) == (ErrorCode.not_controller, True)

        log.elect(2)  # the same context now reaches an active controller
        await until(two, lambda _image: two.controller is not None and two.controller.active)
        answer = await answered(handle_broker_registration, at_two, registration(4, cluster_id))
        assert answer.error_code == ErrorCode.none and answer.broker_epoch > epoch
        answer = await answered(
            handle_broker_registration, quorum_context(one), registration(5, cluster_id)
        )
        assert answer.error_code == ErrorCode.not_controller

    run(scenario())


def test_producer_id_blocks_follow_each_other_without_overlap(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        context = quorum_context(one)
        two, three = await registered(one, 2), await registered(one, 3)
        blocks = [
            await answered(handle_allocate_producer_ids, context, allocation(broker, epoch))
            for broker, epoch in [(2, two), (3, three), (2, two)]
        ]
        assert [b.error_code for b in blocks] == [ErrorCode.none] * 3
        assert all(b.producer_id_len > 0 for b in blocks)
        for earlier, later in pairwise(blocks):
            assert later.producer_id_start == earlier.producer_id_start + earlier.producer_id_len
        assert one.metadata.image.next_producer_id == (
            blocks[-1].producer_id_start + blocks[-1].producer_id_len
        )

        stale = await answered(handle_allocate_producer_ids, context, allocation(2, two + 100))
        assert stale.error_code == ErrorCode.stale_broker_epoch
        assert (stale.producer_id_start, stale.producer_id_len) == (-1, 0)

    run(scenario())


def test_alter_partition_changes_the_isr_and_refuses_a_stale_partition_epoch(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        context = quorum_context(one)
        two, three = await unfenced(one, 2), await unfenced(one, 3)
        assert one.controller is not None
        await one.controller.commit(
            [
                TopicRecord("orders", TOPIC_ID),
                PartitionRecord(TOPIC_ID, 0, (2, 3), (2, 3), 2, 0, 0),
            ]
        )
        shrink = alter_partition(
            2, two, TOPIC_ID, leader_epoch=0, partition_epoch=0, isr=[(2, two)]
        )
        answer = await answered(handle_alter_partition, context, shrink)
        assert answer.error_code == ErrorCode.none
        ((topic_id, (partition,)),) = [(t.topic_id, t.partitions) for t in answer.topics]
        assert topic_id == TOPIC_ID
        assert partition.error_code == ErrorCode.none
        assert (partition.leader_id, partition.leader_epoch, tuple(partition.isr)) == (2, 0, (2,))
        assert partition.partition_epoch == 1
        assert one.metadata.image.topics_by_id[TOPIC_ID].partitions[0].isr == (2,)

        # The same leader, based on the partition epoch it had before that change.
        grow = alter_partition(
            2, two, TOPIC_ID, leader_epoch=0, partition_epoch=0, isr=[(2, two), (3, three)]
        )
        answer = await answered(handle_alter_partition, context, grow)
        assert answer.error_code == ErrorCode.none
        (partition,) = answer.topics[0].partitions
        assert partition.error_code == ErrorCode.invalid_update_version
        assert one.metadata.image.topics_by_id[TOPIC_ID].partitions[0].isr == (2,)

    run(scenario())


def test_describe_quorum_on_a_store_without_a_quorum_is_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = MemoryLog()
        (one,) = await cluster(log, tmp_path, 1)
        answer = await answered(handle_describe_quorum, quorum_context(one), describe_quorum())
        assert answer.error_code == ErrorCode.invalid_request
        assert answer.error_message == log.capabilities.quorum_refusal
        assert (answer.topics, answer.nodes) == ((), ())

    run(scenario())


def test_describe_quorum_at_the_active_controller_describes_the_metadata_log(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await cluster(MemoryLog(), tmp_path, 1)
        context = quorum_context(one, store=DescribedQuorum(QUORUM))
        for handler in (handle_describe_quorum, controller_describe_quorum):
            answer = await answered(handler, context, describe_quorum(version=2))
            assert (answer.error_code, answer.error_message) == (ErrorCode.none, None)
            ((name, (partition,)),) = [(t.topic_name, t.partitions) for t in answer.topics]
            assert name == "__cluster_metadata"
            assert (partition.partition_index, partition.error_code) == (0, ErrorCode.none)
            assert (partition.leader_id, partition.leader_epoch) == (1, 4)
            assert partition.high_watermark == 17
            voters = [
                (v.replica_id, v.log_end_offset, v.last_fetch_timestamp, v.last_caught_up_timestamp)
                for v in partition.current_voters
            ]
            assert voters == [(1, 17, 1_000, 1_000), (2, 12, 900, -1)]
            assert partition.observers == ()
            nodes = [
                (n.node_id, [(x.name, x.host, x.port) for x in n.listeners]) for n in answer.nodes
            ]
            assert nodes == [
                (1, [(LISTENER, "c1.example", 9093)]),
                (2, [(LISTENER, "c2.example", 9093)]),
            ]

    run(scenario())


def test_describe_quorum_forwarded_to_a_node_that_does_not_lead_is_not_controller(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        one, two = await cluster(MemoryLog(), tmp_path, 1, 2)
        at_two = quorum_context(two, store=DescribedQuorum(None))
        answer = await answered(controller_describe_quorum, at_two, describe_quorum())
        assert answer.error_code == ErrorCode.not_controller
        assert answer.error_message == "not the active controller (the active controller is 1)"
        assert (answer.topics, answer.nodes) == ((), ())

        # Active, but its store no longer leads the quorum (an election under way).
        at_one = quorum_context(one, store=DescribedQuorum(None))
        answer = await answered(controller_describe_quorum, at_one, describe_quorum())
        assert answer.error_code == ErrorCode.not_controller

    run(scenario())


def test_the_broker_binds_these_handlers_into_its_dispatch_tables(tmp_path: Path) -> None:
    async def scenario() -> None:
        log = MemoryLog()
        one, two = await cluster(log, tmp_path, 1, 2)
        cluster_id = one.metadata.image.cluster_id
        body = await one.dispatch_controller(registration(2, cluster_id))
        answer = wire(ApiKey.BROKER_REGISTRATION, 4, body)
        assert answer.error_code == ErrorCode.none and answer.broker_epoch > 0
        body = await two.dispatch_controller(registration(3, cluster_id))
        assert wire(ApiKey.BROKER_REGISTRATION, 4, body).error_code == ErrorCode.not_controller
        body = await one.dispatch(describe_quorum())
        answer = wire(ApiKey.DESCRIBE_QUORUM, 2, body)
        assert (answer.error_code, answer.error_message) == (
            ErrorCode.invalid_request,
            log.capabilities.quorum_refusal,
        )

    run(scenario())
