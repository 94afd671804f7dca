"""The transaction coordinator's shell without a broker or a socket: a real TxnService
(and its real TxnCoordinator core) on partitions opened in tmp_path from a replayed
metadata image, fsynced inline, producer ids counted from 1000, and the markers of each
transaction taken by `Markers` (which the tests answer) instead of sent."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from server_harness import NODE_ID, FixedProducerIds, InlineDurability, MetadataHolder, image_of

from strom.config import load_config
from strom.metadata.controller import NewTopic, TopicResult
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    TopicRecord,
)
from strom.protocol.records import decode_batch, iter_batches
from strom.server.partition import ReplicaPorts
from strom.server.partitions import PartitionManager
from strom.server.transactions import TxnService
from strom.server.txn_markers import MarkerAppender, TxnMarkerSender
from strom.server.txn_ports import CreateTopics, MarkerWriter
from strom.txn.coordinator import MarkerJob
from strom.txn.placement import TRANSACTION_STATE_TOPIC
from strom.txn.records import TxnLogValue, decode_key, decode_value

TXN_TOPIC_ID = uuid.UUID(int=0x7A57A7E)
TXN_EPOCH = 4


def txn_image(
    *, leader: int = NODE_ID, isr: Sequence[int] | None = None, min_isr: int | None = None
) -> MetadataImage:
    """server_harness's cluster with a one-partition `__transaction_state` led by
    `leader` at TXN_EPOCH, on replicas (leader,) or `isr`."""
    replicas = tuple(isr) if isr is not None else (leader,)
    records: list[MetadataRecord] = [
        TopicRecord(TRANSACTION_STATE_TOPIC, TXN_TOPIC_ID),
        PartitionRecord(TXN_TOPIC_ID, 0, replicas, replicas, leader, TXN_EPOCH, 0),
    ]
    if min_isr is not None:
        records.append(
            ConfigRecord(
                ConfigResourceType.TOPIC,
                TRANSACTION_STATE_TOPIC,
                "min.insync.replicas",
                str(min_isr),
            )
        )
    return image_of().replay(records)


def txn_leader_moved(
    image: MetadataImage, leader: int, isr: Sequence[int] | None = None
) -> MetadataImage:
    """`__transaction_state`-0 led by `leader` (ISR `isr`, or the leader alone), one
    leader epoch later."""
    state = image.topics_by_name[TRANSACTION_STATE_TOPIC].partitions[0]
    return image.replay(
        [
            PartitionChangeRecord(
                TXN_TOPIC_ID,
                0,
                leader,
                tuple(isr) if isr is not None else (leader,),
                state.leader_epoch + 1,
                state.partition_epoch + 1,
            )
        ]
    )


@dataclass(slots=True)
class Markers:
    """Takes each transaction's markers; `answer` says whether they were written (the
    test sets it; a transaction waits for `release` while `hold` is set)."""

    jobs: list[tuple[MarkerJob, int]] = field(default_factory=list)
    answer: bool = True
    hold: asyncio.Event | None = None

    async def write(
        self, job: MarkerJob, coordinator_epoch: int, current: Callable[[], bool]
    ) -> bool:
        self.jobs.append((job, coordinator_epoch))
        if self.hold is not None:
            await self.hold.wait()
        return self.answer and current()

    def close(self) -> None:
        pass


@dataclass(slots=True)
class Groups:
    """The group coordinator as markers reach it: which transactions it completed."""

    completed: list[tuple[int, int, bool]] = field(default_factory=list)

    def complete_txn(self, index: int, producer_id: int, *, commit: bool) -> None:
        self.completed.append((index, producer_id, commit))


@dataclass(slots=True)
class TxnNode:
    metadata: MetadataHolder
    partitions: PartitionManager
    producer_ids: FixedProducerIds
    markers: Markers
    service: TxnService
    groups: Groups

    def follow(self, image: MetadataImage) -> None:
        self.metadata.image = image
        self.partitions.sync(image, now_ms=0)
        self.service.follow(image)

    def records(self) -> list[tuple[str, TxnLogValue | None]]:
        """Every record of `__transaction_state`-0, decoded."""
        partition = self.partitions.get(TRANSACTION_STATE_TOPIC, 0)
        assert partition is not None
        data = memoryview(partition.log.read(0, 1 << 20).read_bytes())
        found: list[tuple[str, TxnLogValue | None]] = []
        for position, header in iter_batches(data):
            _, records = decode_batch(data[position : position + header.size_bytes])
            for record in records:
                assert record.key is not None
                value = None if record.value is None else decode_value(record.value)
                found.append((decode_key(record.key), value))
        return found


async def _no_topic_creation(topics: list[NewTopic]) -> list[TopicResult]:
    raise AssertionError(f"the tests' images hold {TRANSACTION_STATE_TOPIC}; asked for {topics}")


def txn_node(
    tmp_path: Path,
    image: MetadataImage,
    *,
    markers: Markers | None = None,
    partitions: PartitionManager | None = None,
    overrides: Sequence[str] = (),
    real_markers: bool = False,
    create_topics: CreateTopics = _no_topic_creation,
) -> TxnNode:
    """Node NODE_ID on `image`, its partitions opened in tmp_path (or `partitions`, to
    start again on the same logs) and its TxnService following `image`; with
    `real_markers`, the markers are written by the real appender and sender (to the
    partitions led here; `Groups` stands in for the group coordinator)."""
    config = load_config(overrides=[f"node.id={NODE_ID}", f"log.dirs={tmp_path}", *overrides])
    if partitions is None:
        partitions = PartitionManager(
            config,
            ports=ReplicaPorts(
                propose_isr=lambda _partition, _change: None,
                on_role=lambda _partition: None,
                durability=InlineDurability(),
            ),
        )
    metadata = MetadataHolder(image)
    producer_ids = FixedProducerIds()
    markers = markers or Markers()
    groups = Groups()
    writer: MarkerWriter = markers
    if real_markers:
        appender = MarkerAppender(
            image=lambda: metadata.image,
            partitions=partitions,
            groups=lambda: groups,
        )
        writer = TxnMarkerSender(
            node_id=NODE_ID, image=lambda: metadata.image, here=appender, retry_s=0
        )
    service = TxnService(
        node_id=NODE_ID,
        config=lambda: config,
        image=lambda: metadata.image,
        partitions=partitions,
        create_topics=create_topics,
        producer_ids=producer_ids,
        markers=writer,
    )
    node = TxnNode(metadata, partitions, producer_ids, markers, service, groups)
    node.follow(image)
    return node
