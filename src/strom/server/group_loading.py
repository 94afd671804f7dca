"""Loading a `__consumer_offsets` partition into the group coordinator's core: every
batch from the log start, in log order, as `GroupService.follow` does when this broker
becomes the partition's leader.

A record of a plain batch is replayed as it is; a record of a transactional batch (a
TxnOffsetCommit's) becomes a pending offset of the batch's producer; a control batch
(a COMMIT or ABORT marker, protocol/markers.py) ends that producer's pending offsets in
the groups of this partition. So the load ends in the state the live path reached:
there, the same records were replayed as their writes became durable, and the same
markers applied as `GroupService.complete_txn` was told of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from strom.group import txn_offsets
from strom.group.consumer.coordinator import ConsumerCoordinator
from strom.group.consumer.records import (
    ConsumerRecordError,
    decode_consumer_key,
    decode_consumer_value,
    is_consumer_key,
)
from strom.group.coordinator import GroupCoordinator
from strom.group.placement import OFFSETS_TOPIC
from strom.group.records import RecordFormatError, decode_key, decode_value
from strom.group.share.coordinator import ShareCoordinator
from strom.group.share.records import (
    ShareRecordError,
    decode_share_key,
    decode_share_value,
    is_share_key,
)
from strom.protocol.batch_header import BatchHeader
from strom.protocol.markers import MarkerError, marker_of
from strom.protocol.records import Record
from strom.server.log_replay import replay_batches

if TYPE_CHECKING:
    from strom.server.partition import Partition

__all__ = ["load_partition"]

log = logging.getLogger(__name__)


def load_partition(
    core: GroupCoordinator,
    partition: Partition,
    current_ms: int,
    belongs: Callable[[str], bool],
    consumer: ConsumerCoordinator | None = None,
    share: ShareCoordinator | None = None,
) -> int:
    """Replay the partition's log into `core`'s committed groups; returns how many group
    records were replayed. `belongs` selects the groups this partition holds (those a
    marker read here may end). The records of KIP-848 groups (key versions 3-8) go to
    `consumer`, those of KIP-932 share groups (10-15) to `share`."""
    count = 0
    for header, records in replay_batches(partition):
        if header.is_control:
            _end_transaction(core, header, records, belongs)
        else:
            producer_id = header.producer_id if header.is_transactional else -1
            for record in records:
                if consumer is not None and record.key is not None and is_consumer_key(record.key):
                    count += _replay_consumer(consumer, record, current_ms)
                elif share is not None and record.key is not None and is_share_key(record.key):
                    count += _replay_share(share, record, current_ms)
                else:
                    count += _replay(core, record, current_ms, producer_id)
    return count


def _end_transaction(
    core: GroupCoordinator,
    header: BatchHeader,
    records: list[Record],
    belongs: Callable[[str], bool],
) -> None:
    for record in records:
        try:
            marker = marker_of(record.key, record.value)
        except MarkerError as exc:
            log.warning("skipping a control record of %s: %s", OFFSETS_TOPIC, exc)
            continue
        txn_offsets.end_transaction(core, header.producer_id, commit=marker.commit, belongs=belongs)


def _replay(core: GroupCoordinator, record: Record, current_ms: int, producer_id: int) -> int:
    if record.key is None:
        return 0
    try:
        key = decode_key(record.key)
        value = decode_value(key, record.value) if record.value is not None else None
    except RecordFormatError as exc:
        log.warning("skipping a record of %s that does not parse: %s", OFFSETS_TOPIC, exc)
        return 0
    core.load(key, value, current_ms, producer_id)
    return 1


def _replay_consumer(core: ConsumerCoordinator, record: Record, current_ms: int) -> int:
    assert record.key is not None
    try:
        key = decode_consumer_key(record.key)
        value = decode_consumer_value(key, record.value) if record.value is not None else None
    except ConsumerRecordError as exc:
        log.warning("skipping a consumer group record of %s: %s", OFFSETS_TOPIC, exc)
        return 0
    core.load(key, value, current_ms)
    return 1


def _replay_share(core: ShareCoordinator, record: Record, current_ms: int) -> int:
    assert record.key is not None
    try:
        key = decode_share_key(record.key)
        value = decode_share_value(key, record.value) if record.value is not None else None
    except ShareRecordError as exc:
        log.warning("skipping a share group record of %s: %s", OFFSETS_TOPIC, exc)
        return 0
    core.load(key, value, current_ms)
    return 1
