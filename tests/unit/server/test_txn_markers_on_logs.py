"""A transaction's markers on real partition logs: TxnService with the real marker
appender and sender (every partition led here, so no socket), the COMMIT or ABORT
control batch in the partition's log, then the completion record."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, TOPIC, run, turns
from txn_service_harness import txn_image, txn_node

from strom.group.placement import OFFSETS_TOPIC
from strom.metadata.records import PartitionRecord, TopicRecord
from strom.protocol.markers import marker_of
from strom.protocol.records import decode_batch, iter_batches, parse_batch_header
from strom.txn.state import TxnState

TX = "payments"
OFFSETS_ID = uuid.UUID(int=0x0FF5E7)


@pytest.mark.parametrize("commit", [True, False])
def test_the_markers_land_in_the_partitions_log(tmp_path: Path, commit: bool) -> None:
    node = txn_node(tmp_path, txn_image(), real_markers=True)

    async def scenario() -> None:
        init = await node.service.init_producer_id(TX, 60_000, None)
        assert init.error is ErrorCode.none
        await node.service.add_partitions(
            TX, init.producer_id, init.producer_epoch, [(TOPIC, 0)], transaction_version=0
        )
        ended = await node.service.end_txn(
            TX, init.producer_id, init.producer_epoch, commit, transaction_version=0
        )
        assert ended.error is ErrorCode.none
        for _ in range(50):
            await turns(2)
            entry = node.service.entry(TX)
            if entry is not None and entry.value.state in (
                TxnState.COMPLETE_COMMIT,
                TxnState.COMPLETE_ABORT,
            ):
                break
        entry = node.service.entry(TX)
        assert entry is not None
        assert entry.value.state is (
            TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        )

    run(scenario())
    partition = node.partitions.get(TOPIC, 0)
    assert partition is not None
    data = memoryview(partition.log.read(0, 1 << 20).read_bytes())
    found = []
    for position, header in iter_batches(data):
        view = data[position : position + header.size_bytes]
        assert parse_batch_header(view).is_control
        _, records = decode_batch(view)
        found += [marker_of(record.key, record.value) for record in records]
    assert [(m.commit, m.coordinator_epoch) for m in found] == [(commit, 4)]


def test_a_marker_on_consumer_offsets_completes_the_groups_offsets(tmp_path: Path) -> None:
    image = txn_image().replay(
        [
            TopicRecord(OFFSETS_TOPIC, OFFSETS_ID),
            PartitionRecord(OFFSETS_ID, 0, (NODE_ID,), (NODE_ID,), NODE_ID, 0, 0),
        ]
    )
    node = txn_node(tmp_path, image, real_markers=True)

    async def scenario() -> None:
        init = await node.service.init_producer_id(TX, 60_000, None)
        pid, epoch = init.producer_id, init.producer_epoch
        await node.service.add_partitions(
            TX, pid, epoch, [(OFFSETS_TOPIC, 0)], transaction_version=0
        )
        await node.service.end_txn(TX, pid, epoch, True, transaction_version=0)
        for _ in range(50):
            await turns(2)
            if node.groups.completed:
                break
        assert node.groups.completed == [(0, pid, True)]

    run(scenario())
