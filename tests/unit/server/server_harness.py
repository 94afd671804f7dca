"""Handlers without a broker or a socket: real partition logs in tmp_path, a metadata image
built by replaying records, and the handlers' contexts (server/handlers/ports.py)."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from strom.config import load_config
from strom.fetch.sessions import FetchSessionCache
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    ClusterRecord,
    ConfigRecord,
    ConfigResourceType,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build, request_class
from strom.protocol.records import NewRecord, encode_batch
from strom.replication.replica import ProposeIsr
from strom.server.handlers.ports import FetchContext, ProduceContext
from strom.server.partition import Partition, ReplicaPorts
from strom.server.partitions import PartitionManager
from strom.server.transactions import TxnUnavailable
from strom.server.txn_verifier import TxnVerifier, VerifierPorts

TOPIC = "orders"
TOPIC_ID = uuid.UUID(int=0x0D0E)
NODE_ID = 1
LEADER_EPOCH = 3


async def turns(count: int = 2) -> None:
    """Let the event loop run `count` turns (tasks start, appends happen); no clock."""
    loop = asyncio.get_running_loop()
    for _ in range(count):
        turn: asyncio.Future[None] = loop.create_future()
        loop.call_soon(turn.set_result, None)
        await turn


def run(scenario: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(scenario)


def image_of(
    *,
    replicas: Sequence[int] = (NODE_ID,),
    isr: Sequence[int] | None = None,
    leader: int = NODE_ID,
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
) -> MetadataImage:
    """A cluster of brokers 1..3 (unfenced) and one topic, TOPIC, with `partitions`
    partitions on `replicas`, led by `leader` at LEADER_EPOCH."""
    records: list[MetadataRecord] = [ClusterRecord("test-cluster", "test")]
    records += [
        RegisterBrokerRecord(b, uuid.UUID(int=b), "localhost", 9000 + b, None, fenced=False)
        for b in (1, 2, 3)
    ]
    records.append(TopicRecord(TOPIC, TOPIC_ID))
    records += [
        PartitionRecord(
            TOPIC_ID,
            index,
            tuple(replicas),
            tuple(replicas if isr is None else isr),
            leader,
            LEADER_EPOCH,
            1,
        )
        for index in range(partitions)
    ]
    records += [
        ConfigRecord(ConfigResourceType.TOPIC, TOPIC, name, value)
        for name, value in (configs or {}).items()
    ]
    return MetadataImage.empty().replay(records)


def change_partition(
    image: MetadataImage,
    *,
    isr: Sequence[int] | None = None,
    leader: int | None = None,
    index: int = 0,
) -> MetadataImage:
    """A new ISR (same leader epoch), or a new leader (the next leader epoch)."""
    state = image.topics_by_name[TOPIC].partitions[index]
    return image.replay(
        [
            PartitionChangeRecord(
                TOPIC_ID,
                index,
                state.leader if leader is None else leader,
                tuple(state.isr if isr is None else isr),
                state.leader_epoch + (0 if leader is None else 1),
                state.partition_epoch + 1,
            )
        ]
    )


class InlineDurability:
    """fsyncs at once: the flush a broker's group commit would run, on the loop's next
    turn (request) or when awaited (flushed)."""

    def request(self, partition: Partition) -> None:
        try:
            asyncio.get_running_loop().call_soon(self._flush, partition)
        except RuntimeError:
            self._flush(partition)

    async def flushed(self, partition: Partition, offset: int) -> None:
        self._flush(partition)

    def _flush(self, partition: Partition) -> None:
        partition.log.flush()
        partition.on_flushed()


@dataclass(slots=True)
class MetadataHolder:
    image: MetadataImage


@dataclass(slots=True)
class FixedProducerIds:
    next: int = 1000
    handed_out: list[int] = field(default_factory=list)

    async def next_id(self) -> int:
        self.handed_out.append(self.next)
        self.next += 1
        return self.handed_out[-1]


class NoTxnCoordinator:
    """No transactional id is coordinated here, nor anywhere."""

    num_partitions = 1

    def leader_of(self, index: int) -> int:
        return -1

    def __getattr__(self, name: str) -> Any:
        raise TxnUnavailable(ErrorCode.coordinator_not_available, "no coordinator in this test")


@dataclass(slots=True)
class Node:
    """One broker's handler-facing side: its partitions and its metadata."""

    metadata: MetadataHolder
    partitions: PartitionManager
    producer_ids: FixedProducerIds
    isr_proposals: list[ProposeIsr]
    stopping: bool = False
    fetch_sessions: FetchSessionCache = field(
        default_factory=lambda: FetchSessionCache(1000, random.Random(7))
    )

    @property
    def produce(self) -> ProduceContext:
        """Without a transaction coordinator (txn_harness has one)."""
        txns = NoTxnCoordinator()
        verifier = TxnVerifier(VerifierPorts(NODE_ID, lambda: self.metadata.image, txns))
        return ProduceContext(
            NODE_ID, self.metadata, self.partitions, self.producer_ids, txns, verifier
        )

    @property
    def fetch(self) -> FetchContext:
        return FetchContext(
            self.metadata, self.partitions, lambda: self.stopping, self.fetch_sessions
        )

    def apply(self, image: MetadataImage, now_ms: int = 0) -> None:
        self.metadata.image = image
        self.partitions.sync(image, now_ms=now_ms)

    def partition(self, index: int = 0) -> Partition:
        found = self.partitions.get(TOPIC, index)
        assert found is not None
        return found

    def close(self) -> None:
        self.partitions.close()


def node(tmp_path: Path, image: MetadataImage, *overrides: str) -> Node:
    """Node NODE_ID with logs under tmp_path, synced to `image`."""
    config = load_config(overrides=[f"node.id={NODE_ID}", f"log.dirs={tmp_path}", *overrides])
    proposals: list[ProposeIsr] = []
    partitions = PartitionManager(
        config,
        ports=ReplicaPorts(
            propose_isr=lambda _partition, change: proposals.append(change),
            on_role=lambda _partition: None,
            durability=InlineDurability(),
        ),
    )
    built = Node(MetadataHolder(image), partitions, FixedProducerIds(), proposals)
    built.apply(image)
    return built


def request(api_key: ApiKey, version: int, body: Mapping[str, Any]) -> Request:
    return Request(api_key, version, 1, "test", build(request_class(api_key, version), body))


def batch(
    *values: bytes, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1
) -> bytes:
    return encode_batch(
        [NewRecord(key=None, value=v) for v in values],
        base_timestamp_ms=1_000,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def produce_request(
    records: bytes | None,
    *,
    acks: int = 1,
    topic: str = TOPIC,
    index: int = 0,
    timeout_ms: int = 1_000,
    version: int = 9,
) -> Request:
    return request(
        ApiKey.PRODUCE,
        version,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": timeout_ms,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": index, "records": records}]}
            ],
        },
    )


def fetch_request(
    fetch_offset: int,
    *,
    replica_id: int = -1,
    last_fetched_epoch: int = -1,
    current_leader_epoch: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    version: int = 12,
    isolation_level: int = 0,
    log_start_offset: int = -1,
) -> Request:
    return request(
        ApiKey.FETCH,
        version,
        {
            "cluster_id": None,
            "replica_id": replica_id,
            "replica_state": {"replica_id": replica_id, "replica_epoch": -1},
            "max_wait": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": 1 << 20,
            "isolation_level": isolation_level,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": TOPIC,
                    "topic_id": TOPIC_ID,
                    "partitions": [
                        {
                            "partition": 0,
                            "current_leader_epoch": current_leader_epoch,
                            "fetch_offset": fetch_offset,
                            "last_fetched_epoch": last_fetched_epoch,
                            "log_start_offset": log_start_offset,
                            "partition_max_bytes": 1 << 20,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


class FakeTransport:
    """What a Connection uses of an asyncio transport."""

    def __init__(self) -> None:
        self.closing = False

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def abort(self) -> None:
        self.closing = True


class RecordingWriter:
    """What a Connection uses of an asyncio.StreamWriter, for a peer at `host`; keeps
    what was written."""

    def __init__(self, host: str = "10.0.0.1") -> None:
        self.host = host
        self.written = bytearray()
        self.closed = False
        self.transport = FakeTransport()

    def get_extra_info(self, name: str) -> Any:
        return (self.host, 40_000) if name == "peername" else None

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.written += data

    async def drain(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True
