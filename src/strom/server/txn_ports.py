"""What the transaction coordinator's shell (server/transactions.py: TxnService) is given
by the broker: its ports, and the topic configs of `__transaction_state`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from strom.config import BrokerConfig
from strom.metadata import controller
from strom.txn.coordinator import MarkerJob

if TYPE_CHECKING:
    from strom.server.partition import Partition

__all__ = [
    "CreateTopics",
    "MarkerWriter",
    "ProducerIdSource",
    "TxnStatePartitions",
    "transaction_state_configs",
]


class TxnStatePartitions(Protocol):
    """The partitions this broker holds (server/partitions.py)."""

    def get(self, topic: str, index: int) -> Partition | None: ...


class ProducerIdSource(Protocol):
    async def next_id(self) -> int:
        """A new producer id; ProducerIdsUnavailable when none can be had now."""
        ...


class MarkerWriter(Protocol):
    """server/txn_markers.py: TxnMarkerSender."""

    async def write(
        self, job: MarkerJob, coordinator_epoch: int, current: Callable[[], bool]
    ) -> bool: ...

    def close(self) -> None: ...


CreateTopics = Callable[[list[controller.NewTopic]], Awaitable[list[controller.TopicResult]]]


def transaction_state_configs(config: BrokerConfig, replication_factor: int) -> dict[str, str]:
    """The topic configs Kafka gives `__transaction_state` (TransactionLog's)."""
    return {
        "unclean.leader.election.enable": "false",
        "cleanup.policy": "compact",
        "segment.bytes": str(config.transaction_state_log_segment_bytes),
        "compression.type": "uncompressed",
        "min.insync.replicas": str(
            max(1, min(config.transaction_state_log_min_isr, replication_factor))
        ),
    }
