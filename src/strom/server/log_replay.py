"""Reading a partition's whole log back, batch by batch: how a coordinator (groups,
transactions) rebuilds its state when it becomes the leader of one of its partitions."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from strom.protocol.records import BatchHeader, Record, RecordsError, decode_batch, iter_batches

if TYPE_CHECKING:
    from strom.server.partition import Partition

log = logging.getLogger(__name__)

_READ_BYTES = 1 << 20


def replay_batches(partition: Partition) -> Iterator[tuple[BatchHeader, list[Record]]]:
    """Each batch of the log from its start to its end, with its records; a batch that
    does not decode is logged and given with no records. Stops where nothing more is
    readable rather than spin."""
    log_ = partition.log
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        view = memoryview(log_.read(offset, _READ_BYTES).read_bytes())
        start = offset
        for position, header in iter_batches(view):
            try:
                _, records = decode_batch(view[position : position + header.size_bytes])
            except RecordsError as exc:
                log.warning("skipping a bad batch of %s: %s", partition.topic, exc)
                records = []
            yield header, records
            offset = header.next_offset
        if offset == start:
            break
