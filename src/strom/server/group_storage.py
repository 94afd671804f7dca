"""How a group coordinator's write to `__consumer_offsets` fails, for both kinds of group
(server/groups.py and server/consumer_groups.py): the one function that appends their
records (`append_group_records`), the storage error, the error a client sees instead
(Kafka's mapping), and the producer epoch check of a transactional batch."""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, get_args

from kio.schema.errors import ErrorCode

from strom.group.consumer.records import encode_record
from strom.group.placement import OFFSETS_TOPIC, partition_for
from strom.group.share.records import ShareKey, ShareValue, encode_share_key, encode_share_value
from strom.protocol.records import RecordsError, encode_batch, parse_batch_header
from strom.server.clock import now_ms
from strom.server.flusher import PartitionGone
from strom.server.partition import LeadershipMoved

if TYPE_CHECKING:
    from strom.config import BrokerConfig
    from strom.server.partition import Partition

__all__ = [
    "COORDINATOR_ERRORS",
    "StorageError",
    "append_group_records",
    "check_producer_epoch",
    "encode_group_record",
    "offsets_topic_configs",
    "storage_errors",
]

_SHARE_KEYS = get_args(ShareKey)
_SHARE_VALUES = get_args(ShareValue)

# What the client sees when the group's records cannot be written: Kafka's mapping of
# storage errors (GroupMetadataManager.storeGroup / GroupCoordinatorService
# .normalizeException); errors not listed pass through.
COORDINATOR_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
}


class StorageError(Exception):
    """A write to `__consumer_offsets` failed; `error_code` is the storage error."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def check_producer_epoch(partition: Partition, producer_id: int, producer_epoch: int) -> None:
    """A coordinator's transactional batch has no sequence, so the log's producer check
    passes it; its epoch must still not be older than the producer's on the partition
    (Kafka's ProducerAppendInfo checks it for the coordinator's appends too)."""
    entry = partition.log.producers.get(producer_id)
    if entry is not None and producer_epoch < entry.epoch:
        raise StorageError(
            ErrorCode.invalid_producer_epoch,
            f"producer {producer_id} epoch {producer_epoch} is older than {entry.epoch}",
        )


def encode_group_record(key: object, value: object) -> tuple[bytes, bytes | None]:
    """Key and value bytes of any `__consumer_offsets` record: a classic group's, a
    consumer group's (KIP-848) or a share group's (KIP-932)."""
    if isinstance(key, _SHARE_KEYS):
        assert value is None or isinstance(value, _SHARE_VALUES)
        return encode_share_key(key), None if value is None else encode_share_value(value)
    return encode_record(key, value)


def offsets_topic_configs(config: BrokerConfig) -> dict[str, str]:
    """The topic configs `__consumer_offsets` is created with."""
    return {
        "cleanup.policy": "compact",
        "segment.bytes": str(config.offsets_topic_segment_bytes),
        "compression.type": "producer",
    }


async def append_group_records(
    partition_of: Callable[[str, int], Partition | None],
    num_partitions: int,
    records: Sequence[tuple[Any, Any]],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    timeout_s: float,
) -> None:
    """Append group records to their groups' partitions of `__consumer_offsets` (one batch
    per partition, so a decision's records land together) and wait until they are
    durable; with a `producer_id`, as a transactional batch of that producer (a
    TxnOffsetCommit: INVALID_PRODUCER_EPOCH if the partition has seen a newer epoch of
    it, as Kafka's log checks a coordinator's batch). Raises StorageError."""
    by_partition: dict[int, list[tuple[Any, Any]]] = defaultdict(list)
    for key, value in records:
        by_partition[partition_for(key.group_id, num_partitions)].append((key, value))
    waits: list[tuple[Partition, int]] = []
    current = now_ms()
    with storage_errors():
        for index, items in by_partition.items():
            partition = partition_of(OFFSETS_TOPIC, index)
            if partition is None:
                raise StorageError(ErrorCode.unknown_topic_or_partition, f"no {index} here")
            if producer_id >= 0:
                check_producer_epoch(partition, producer_id, producer_epoch)
            batch = encode_batch(
                [(*encode_group_record(key, value), ()) for key, value in items],
                base_timestamp_ms=current,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                is_transactional=producer_id >= 0,
            )
            view = memoryview(batch)
            result = partition.append(
                [(view, parse_batch_header(view))], now_ms=current, producer_check=False
            )
            waits.append((partition, result.last_offset + 1))
        await asyncio.gather(*(p.committed(end, timeout_s) for p, end in waits))


@contextlib.contextmanager
def storage_errors() -> Iterator[None]:
    """What a coordinator's append and wait raise, as the StorageError of Kafka's code:
    leadership moved, not committed in time, the partition gone, a batch too large or
    malformed, the disk failing."""
    try:
        yield
    except LeadershipMoved as exc:
        raise StorageError(ErrorCode.not_leader_or_follower, str(exc)) from exc
    except TimeoutError as exc:
        raise StorageError(ErrorCode.request_timed_out, "not committed in time") from exc
    except PartitionGone as exc:
        raise StorageError(ErrorCode.unknown_topic_or_partition, str(exc)) from exc
    except (RecordsError, ValueError) as exc:
        raise StorageError(ErrorCode.message_too_large, str(exc)) from exc
    except OSError as exc:
        raise StorageError(ErrorCode.kafka_storage_error, str(exc)) from exc
