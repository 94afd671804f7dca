"""The transactional handlers without a broker: `CoreTxns` is the TxnCoordination port
over the real pure coordinator core (strom/txn/coordinator.py), its writes durable at
once, so the core decides every answer; the rest is server_harness's real partition
logs and replayed metadata image."""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, TOPIC, Node, image_of, node, request

from strom.group.placement import OFFSETS_TOPIC
from strom.metadata.image import MetadataImage
from strom.metadata.records import PartitionRecord, TopicRecord
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers.ports import ProduceContext, TxnContext
from strom.server.transactions import TxnUnavailable
from strom.server.txn_verifier import TxnVerifier, VerifierPorts
from strom.txn.coordinator import MarkerJob, TxnConfig, TxnCoordinator, TxnResult
from strom.txn.metadata import TxnEntry
from strom.txn.placement import TRANSACTION_STATE_TOPIC

TXN_PARTITIONS = 3
OFFSETS_PARTITIONS = 5


@dataclass(slots=True)
class CoreTxns:
    """TxnCoordination over a real TxnCoordinator. Every write is durable at once and,
    while `complete_markers`, the markers of an ended transaction are written at once
    too (else the transaction stays PrepareCommit/PrepareAbort)."""

    core: TxnCoordinator = field(default_factory=lambda: TxnCoordinator(TxnConfig()))
    leader: int = NODE_ID
    """The leader of every `__transaction_state` partition."""
    num_partitions: int = TXN_PARTITIONS
    unavailable: ErrorCode | None = None
    """Raise TxnUnavailable with this code instead of deciding."""
    complete_markers: bool = True
    now_ms: int = 1_000_000
    ids: Any = field(default_factory=lambda: itertools.count(1000))
    markers: list[MarkerJob] = field(default_factory=list)
    asked: list[tuple[str, Any]] = field(default_factory=list)
    """Each request method called, with its main arguments."""

    def _check(self) -> None:
        if self.unavailable is not None:
            raise TxnUnavailable(self.unavailable, f"not now: {self.unavailable.name}")

    def _allocate(self) -> int:
        return int(next(self.ids))

    def _carried(self, result: TxnResult) -> TxnResult:
        if result.write is None:
            return result
        answer = self.core.durable(result.write.write_id, self.now_ms)
        assert answer is not None
        if answer.markers is not None:
            self.markers.append(answer.markers)
            if self.complete_markers:
                self.finish_markers(answer.markers.txn_id)
        return answer

    def finish_markers(self, txn_id: str) -> None:
        completion = self.core.markers_written(txn_id)
        if completion is not None:
            self.core.durable(completion.write_id, self.now_ms)

    async def ensure_topic(self) -> None:
        self._check()

    def leader_of(self, index: int) -> int:
        return self.leader

    async def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected: tuple[int, int] | None
    ) -> TxnResult:
        self._check()
        self.asked.append(("init", (txn_id, timeout_ms, expected)))
        return self._carried(
            self.core.init_producer_id(txn_id, timeout_ms, expected, self.now_ms, self._allocate)
        )

    async def add_partitions(
        self,
        txn_id: str,
        producer_id: int,
        epoch: int,
        partitions: list[tuple[str, int]],
        *,
        transaction_version: int,
    ) -> TxnResult:
        self._check()
        self.asked.append(("add", (txn_id, sorted(partitions), transaction_version)))
        return self._carried(
            self.core.add_partitions(
                txn_id,
                producer_id,
                epoch,
                partitions,
                self.now_ms,
                transaction_version=transaction_version,
            )
        )

    async def verify_partitions(
        self, txn_id: str, producer_id: int, epoch: int, partitions: list[tuple[str, int]]
    ) -> TxnResult:
        self._check()
        self.asked.append(("verify", (txn_id, sorted(partitions))))
        return self.core.verify_partitions(txn_id, producer_id, epoch, partitions)

    async def end_txn(
        self, txn_id: str, producer_id: int, epoch: int, commit: bool, *, transaction_version: int
    ) -> TxnResult:
        self._check()
        self.asked.append(("end", (txn_id, commit, transaction_version)))
        return self._carried(
            self.core.end_txn(
                txn_id,
                producer_id,
                epoch,
                commit,
                self.now_ms,
                self._allocate,
                transaction_version=transaction_version,
            )
        )

    def entry(self, txn_id: str) -> TxnEntry | None:
        self._check()
        return self.core.entries.get(txn_id)

    def entries(self) -> list[TxnEntry]:
        self._check()
        return list(self.core.entries.values())

    # --- a producer's steps, as a test sets them up -----------------------------------

    async def begin(
        self, txn_id: str, *partitions: tuple[str, int], transaction_version: int = 0
    ) -> tuple[int, int]:
        """InitProducerId (again after it fenced an open transaction), then the
        partitions added: (producer id, epoch)."""
        started = await self.init_producer_id(txn_id, 60_000, None)
        if started.error == ErrorCode.concurrent_transactions:
            started = await self.init_producer_id(txn_id, 60_000, None)
        assert started.error == ErrorCode.none, started
        if partitions:
            added = await self.add_partitions(
                txn_id,
                started.producer_id,
                started.producer_epoch,
                list(partitions),
                transaction_version=transaction_version,
            )
            assert added.error == ErrorCode.none, added
        return started.producer_id, started.producer_epoch


@dataclass(slots=True)
class FakeGroups:
    """The part of GroupCoordination that FindCoordinator and AddOffsetsToTxn use."""

    num_partitions: int = OFFSETS_PARTITIONS
    leader: int = NODE_ID

    async def ensure_topic(self) -> None:
        return None

    def leader_of(self, index: int) -> int:
        return self.leader


def txn_image(*, leader: int = NODE_ID, offsets: bool = True, **kwargs: Any) -> MetadataImage:
    """server_harness's image plus `__transaction_state` (and `__consumer_offsets`)."""
    image = image_of(**kwargs)
    records: list[Any] = []
    internal = [(TRANSACTION_STATE_TOPIC, TXN_PARTITIONS, 0xE1)]
    if offsets:
        internal.append((OFFSETS_TOPIC, OFFSETS_PARTITIONS, 0xE2))
    for name, count, tag in internal:
        topic_id = uuid.UUID(int=tag)
        records.append(TopicRecord(name, topic_id))
        records += [
            PartitionRecord(topic_id, i, (leader,), (leader,), leader, 1, 1) for i in range(count)
        ]
    return image.replay(records)


@dataclass(slots=True)
class TxnNode:
    """One broker's transactional side: the server_harness node, the core behind
    CoreTxns, the groups' placement, and a TxnVerifier asking this node's core."""

    at: Node
    txns: CoreTxns
    groups: FakeGroups
    verifier: TxnVerifier

    @property
    def context(self) -> TxnContext:
        return TxnContext(NODE_ID, self.at.metadata, self.at.partitions, self.groups, self.txns)

    @property
    def produce(self) -> ProduceContext:
        return ProduceContext(
            NODE_ID,
            self.at.metadata,
            self.at.partitions,
            self.at.producer_ids,
            self.txns,
            self.verifier,
        )

    def close(self) -> None:
        self.at.close()


@dataclass(slots=True)
class Setting:
    """A broker setting a test changes while the node runs."""

    on: bool = True


def txn_node(
    tmp_path: Path,
    image: MetadataImage | None = None,
    *,
    verification: Setting | None = None,
    **txns: Any,
) -> TxnNode:
    """`verification`: `transaction.partition.verification.enable` (on if not given)."""
    at = node(tmp_path, image if image is not None else txn_image())
    core = CoreTxns(**txns)
    enabled = verification if verification is not None else Setting()
    ports = VerifierPorts(NODE_ID, lambda: at.metadata.image, core, lambda: enabled.on)
    return TxnNode(at, core, FakeGroups(), TxnVerifier(ports))


# --- requests -------------------------------------------------------------------------


def add_partitions(
    txn_id: str,
    producer_id: int,
    epoch: int,
    partitions: list[tuple[str, int]],
    *,
    version: int = 3,
) -> Request:
    topics: dict[str, list[int]] = {}
    for topic, index in partitions:
        topics.setdefault(topic, []).append(index)
    listed = [{"name": name, "partitions": indexes} for name, indexes in topics.items()]
    return request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        version,
        {
            "v3_and_below_transactional_id": txn_id,
            "v3_and_below_producer_id": producer_id,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": listed,
        },
    )


def broker_add_partitions(
    transactions: list[tuple[str, int, int, list[tuple[str, int]], bool]], *, version: int = 5
) -> Request:
    """v4+: (txn id, producer id, epoch, partitions, verify_only) per transaction."""
    listed = []
    for txn_id, producer_id, epoch, partitions, verify_only in transactions:
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        listed.append(
            {
                "transactional_id": txn_id,
                "producer_id": producer_id,
                "producer_epoch": epoch,
                "verify_only": verify_only,
                "topics": [{"name": n, "partitions": i} for n, i in topics.items()],
            }
        )
    return request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {"transactions": listed})


def add_offsets(
    txn_id: str, producer_id: int, epoch: int, group_id: str, *, version: int = 3
) -> Request:
    return request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        version,
        {
            "transactional_id": txn_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "group_id": group_id,
        },
    )


def end_txn(
    txn_id: str, producer_id: int, epoch: int, *, commit: bool = True, version: int = 3
) -> Request:
    return request(
        ApiKey.END_TXN,
        version,
        {
            "transactional_id": txn_id,
            "producer_id": producer_id,
            "producer_epoch": epoch,
            "committed": commit,
        },
    )


def init_producer_id(
    txn_id: str | None,
    *,
    timeout_ms: int = 60_000,
    producer_id: int = -1,
    epoch: int = -1,
    version: int = 4,
) -> Request:
    return request(
        ApiKey.INIT_PRODUCER_ID,
        version,
        {
            "transactional_id": txn_id,
            "transaction_timeout": timeout_ms,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        },
    )


def transactional_produce(
    records: bytes,
    *,
    txn_id: str | None,
    partitions: tuple[int, ...] = (0,),
    topic: str = TOPIC,
    acks: int = -1,
    version: int = 9,
) -> Request:
    return request(
        ApiKey.PRODUCE,
        version,
        {
            "transactional_id": txn_id,
            "acks": acks,
            "timeout": 1_000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [{"index": i, "records": records} for i in partitions],
                }
            ],
        },
    )
